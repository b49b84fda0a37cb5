"""`sapiens2_hf.pipeline`: transformers' `pipeline` that also takes what its factory cannot read.

transformers' factory starts from a config.json, so it cannot open an official `sapiens2_<size>_<task>.safetensors`
file or a folder holding only one. This wrapper loads such checkpoints with our classes (architecture from the
tensors) and hands the model object to `transformers.pipeline`; everything else passes through unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

from .modeling import model_class_for_task
from .modeling.loading_sapiens2_hf import resolve_checkpoint
from .pipelines import PIPELINE_TASKS


def pipeline(task: str, model=None, **kwargs):
    """Like `transformers.pipeline(task, model=..., ...)`; `model` may also be an official .safetensors file or a
    local folder without config.json. `model_kwargs` are passed to `from_pretrained` for those."""
    from transformers import pipeline as transformers_pipeline

    is_local = isinstance(model, (str, os.PathLike)) and Path(model).exists()
    # A LoRA adapter folder is transformers' own business (its factory finds adapter_config.json).
    if is_local and task in PIPELINE_TASKS and not (Path(model) / "adapter_config.json").is_file():
        resolved = resolve_checkpoint(model)
        if resolved.kind == "official" and resolved.config_folder is None:
            model = model_class_for_task(PIPELINE_TASKS[task]).from_pretrained(
                resolved.location, **(kwargs.pop("model_kwargs", None) or {})
            )
    return transformers_pipeline(task, model=model, **kwargs)
