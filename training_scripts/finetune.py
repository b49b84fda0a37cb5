"""Fine-tune a Sapiens2 model on one task with the official recipe (or LoRA).

    python training_scripts/finetune.py --task pose --preset tiny --output_dir runs/pose --max_steps 50
    python training_scripts/finetune.py --task seg --backbone_name_or_path sapiens2_0.4b_pretrain.safetensors \
        --dataset folder --train_images data/img --train_targets data/seg --output_dir runs/seg --bf16
    accelerate launch --config_file training_scripts/accelerate_configs/fsdp.yaml training_scripts/finetune.py ...

    # LoRA: the adapter folder records its base and loads with from_pretrained / pipeline; merge it for plain use
    python training_scripts/finetune.py --task pose --backbone_name_or_path runs/pretrain/backbone --use_lora \
        --output_dir runs/pose_lora
    sapiens2-hf merge runs/pose_lora/adapter --out runs/pose_merged

`--seed` is applied before the model and data are built; `--resume_from_checkpoint True` resumes from the latest
checkpoint in --output_dir; bad records are skipped and listed in <output_dir>/skipped_samples.json (`--strict`
stops at the first one). Every option: `python training_scripts/finetune.py --help` (ours plus all of
transformers.TrainingArguments).
"""

import sys

from transformers import HfArgumentParser, TrainingArguments

from sapiens2_hf.training.arguments import DataArguments, ModelArguments
from sapiens2_hf.training.finetune import run_finetune


def main(argv=None):
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    _, metrics = run_finetune(model_args, data_args, training_args)
    for name, value in sorted(metrics.items()):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main(sys.argv[1:])
