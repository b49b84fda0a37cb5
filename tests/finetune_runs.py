"""The fine-tuning script as tests run it (`training_scripts/finetune.py` with an argv) and the tiny synthetic pose run
several test modules start from. A helper module, not a test module."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "training_scripts" / "finetune.py"
COMMON = ["--per_device_train_batch_size", "2", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
          "--warmup_steps", "1", "--optim", "adamw_torch", "--dataloader_num_workers", "0", "--logging_steps", "1",
          "--do_train", "true"]
POSE = ["--task", "pose", "--preset", "tiny", "--dataset", "synthetic", "--synthetic_train_samples", "4",
        "--synthetic_image_size", "64", *COMMON]


def finetune(argv):
    """`training_scripts/finetune.py` with `argv` (the command line users type)."""
    spec = importlib.util.spec_from_file_location("finetune_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(argv)
