"""Tiny random-weight models, saved as complete offline folders (weights, config, image processor, model card): what
`sapiens2-hf tiny TASK --out DIR` writes and what the web app's `demo` model is.

Real output formats, random (seeded) values: the pipelines, commands and README examples run on a fresh machine
without weights or a network, never giving meaningful predictions.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..modeling import model_class_for_task, tiny_config
from ..processing import image_processor_for_task
from .sharing import save_for_hub

TINY_MODEL_SEED = 0


def save_tiny_model(task: str, folder: str | os.PathLike, *, seed: int = TINY_MODEL_SEED,
                    overwrite: bool = False) -> Path:
    """Builds the tiny `task` model (`tiny_config(task)`, weights seeded with `seed`, the caller's RNG untouched),
    saves it into `folder` with `save_for_hub` (its processor at the model's input size) and returns `folder`."""
    config = tiny_config(task)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class_for_task(task)(config).eval()
    height, width = config.image_size_hw
    processor = image_processor_for_task(task, size={"height": height, "width": width})
    return save_for_hub(model, folder, image_processor=processor, overwrite=overwrite, card_kwargs={
        "repo_id": f"local/sapiens2-tiny-{task}", "source": f"sapiens2_hf: tiny random weights (seed {seed})",
        "limitations": "Random weights: real output formats, meaningless values; for trying the library offline.",
    })
