"""`sapiens2_hf.pipeline`: transformers' `pipeline` that also takes what its factory cannot read, and the fast path.

transformers' factory starts from a config.json, so it cannot open an official `sapiens2_<size>_<task>.safetensors`
file or a folder holding only one. This wrapper loads such checkpoints with our classes (architecture from the
tensors) and hands the model object to `transformers.pipeline`; everything else passes through unchanged.

`fast=True` applies the inference recipe (`inference_recipe.prepare_for_inference`: bf16 weights on CUDA, SDPA
attention, `torch.compile`) to the pipeline's model; `compile=` alone compiles it in the dtype and on the device
the pipeline already uses. Whatever the dtype, the RoPE keeps its official precision (`config.rope_dtype`).
"""

from __future__ import annotations

import os
from pathlib import Path

from .inference_recipe import prepare_for_inference, resolve_dtype
from .modeling import model_class_for_task
from .modeling.loading_sapiens2_hf import resolve_checkpoint
from .pipelines import PIPELINE_TASKS


def pipeline(task: str, model=None, *, fast: bool = False, compile=None, **kwargs):
    """Like `transformers.pipeline(task, model=..., ...)`; `model` may also be an official .safetensors file or a
    local folder without config.json. `model_kwargs` are passed to `from_pretrained` for those.

    Args:
        fast (`bool`): the GPU recipe (`prepare_for_inference`): on `device` (default: `"cuda"` when available, else
            `"cpu"`), in `dtype` (default: bfloat16 on CUDA, float32 on CPU, where bfloat16 is slower), with SDPA
            attention and `torch.compile` (unless `compile=False`).
        compile (`bool` or `dict`, *optional*): compile the model (`fast` defaults it to `True`); a dict is passed to
            `prepare_for_inference` as its compile keywords, e.g. `{"mode": "reduce-overhead"}` for CUDA graphs.
        torch_dtype: accepted as the older name of `dtype`.
    """
    import torch
    from transformers import pipeline as transformers_pipeline

    if "torch_dtype" in kwargs:
        if kwargs.get("dtype") is not None:
            raise ValueError("pass either dtype= or its older name torch_dtype=, not both.")
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    compile_options = {}
    if isinstance(compile, dict):
        compile_options, compile = dict(compile), True
    elif compile is not None and not isinstance(compile, bool):
        raise ValueError(f"compile must be True, False, None or a dict of prepare_for_inference keywords, got "
                         f"{compile!r}.")
    if fast:
        if kwargs.get("device") is None and kwargs.get("device_map") is None:
            kwargs["device"] = "cuda" if torch.cuda.is_available() else "cpu"
        if kwargs.get("dtype") in (None, "auto"):
            on_cuda = kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cuda"
            kwargs["dtype"] = torch.bfloat16 if on_cuda else torch.float32
        if compile is None:
            compile = True
    if isinstance(kwargs.get("dtype"), str) and kwargs["dtype"] != "auto":
        kwargs["dtype"] = resolve_dtype(kwargs["dtype"])

    is_local = isinstance(model, (str, os.PathLike)) and Path(model).exists()
    # A LoRA adapter folder is transformers' own business (its factory finds adapter_config.json).
    if is_local and task in PIPELINE_TASKS and not (Path(model) / "adapter_config.json").is_file():
        resolved = resolve_checkpoint(model)
        if resolved.kind == "official" and resolved.config_folder is None:
            model = model_class_for_task(PIPELINE_TASKS[task]).from_pretrained(
                resolved.location, **(kwargs.pop("model_kwargs", None) or {})
            )
    pipe = transformers_pipeline(task, model=model, **kwargs)
    if fast or compile:
        prepare_for_inference(pipe.model, device=pipe.device, dtype=pipe.model.dtype, compile=bool(compile),
                              attention="sdpa" if fast else None, **compile_options)
    return pipe
