"""What every training entry point does before it builds anything: seed the RNGs and read `--resume_from_checkpoint`."""

from __future__ import annotations

import os

from transformers import TrainingArguments, enable_full_determinism, set_seed
from transformers.trainer_utils import get_last_checkpoint


def seed_run(training_args: TrainingArguments) -> None:
    """Seed python, numpy and torch from `--seed` (with `--full_determinism`, also force deterministic kernels).

    Call it first: the Trainer seeds only in its own constructor, after the model (random heads, a tiny preset, the
    pretraining projection heads) and the data were built from whatever the global RNG held, so two runs with the
    same seed would differ from the first step.
    """
    if training_args.full_determinism:
        enable_full_determinism(training_args.seed)
    else:
        set_seed(training_args.seed)


_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0", "")


def resolve_resume_checkpoint(value: str | bool | None, output_dir: str) -> str | None:
    """`--resume_from_checkpoint` as a checkpoint folder, or `None` to start fresh.

    `True` (the command line gives the string `"True"`) means the latest `checkpoint-<step>` folder in `output_dir`,
    as in transformers' example scripts (`get_last_checkpoint`); `False` or nothing starts fresh; anything else is
    the folder itself.
    """
    if value is None or value is False:
        return None
    text = str(value).strip()
    if text.lower() in _FALSE:
        return None
    if value is True or text.lower() in _TRUE:
        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise ValueError(
                f"--resume_from_checkpoint True resumes from the latest checkpoint-<step> folder in --output_dir, but "
                f"{output_dir} has none; pass a checkpoint folder, or drop the flag to start fresh."
            )
        return last
    return text
