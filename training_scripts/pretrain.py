"""Pretrain (or continue pretraining) a Sapiens2 backbone on unlabelled images: L = L_MAE + lambda * L_CL.

Examples:
    # tiny model on a folder of images (CPU is fine)
    python training_scripts/pretrain.py --image_folder my_images --output_dir runs/tiny --max_steps 200

    # a real size, continuing from the released backbone, bf16 on GPUs (torchrun / accelerate launch)
    torchrun --nproc_per_node 8 training_scripts/pretrain.py --variant 0.4b \
        --init_backbone sapiens2_0.4b_pretrain.safetensors --image_folder humans --output_dir runs/0.4b \
        --per_device_train_batch_size 8 --learning_rate 1e-4 --bf16 --max_steps 10000

The exported backbone (<output_dir>/backbone) loads with `Sapiens2Model.from_pretrained` and every task class'
`from_backbone`. All options: `python training_scripts/pretrain.py --help`; design notes: docs/pretraining.md.
"""

import sys

from sapiens2_hf.runs.errors import run_script
from sapiens2_hf.pretraining.run import main


if __name__ == "__main__":
    # the arguments, data, --init_backbone or --output_dir at fault: one line and exit code 2, as `sapiens2-hf`
    sys.exit(run_script("pretrain.py", main, sys.argv[1:]))
