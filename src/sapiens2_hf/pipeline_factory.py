"""`sapiens2_hf.pipeline`: transformers' `pipeline` that also takes what its factory cannot read, and the fast path.

transformers' factory starts from a config.json, so it cannot open an official `sapiens2_<size>_<task>.safetensors`
file or a folder holding only one. This wrapper loads such checkpoints with our classes (architecture from the
tensors) and hands the model object to `transformers.pipeline`; everything else passes through unchanged.

`fast=True` applies the inference recipe (`inference_recipe.prepare_for_inference`: bf16 weights on CUDA, SDPA
attention, `torch.compile`) to the pipeline's model; `compile=` alone compiles it in the dtype and on the device
the pipeline already uses. Whatever the dtype, the RoPE keeps its official precision (`config.rope_dtype`).

`backend=` runs an exported folder instead of the torch model: `"aoti"` (an AOTInductor package, compiled at export),
`"onnxruntime"`, `"onnxruntime-int8"` (`sapiens2_hf.export.RUNTIME_BACKENDS`), with the processor saved beside it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
from transformers import pipeline as transformers_pipeline

from .export import load_backend
from .inference_recipe import prepare_for_inference, resolve_dtype
from .modeling import Sapiens2Config, model_class_for_task
from .modeling.loading_sapiens2_hf import looks_local, resolve_checkpoint
from .modeling.pipeline_sapiens2_hf import check_device, check_dtype
from .pipelines import PIPELINE_TASKS
from .pose3d.pipeline import COMPOSED_PIPELINES
from .processing import Sapiens2HFImageProcessor


def pipeline(task: str, model=None, *, fast: bool = False, compile=None, backend: str = "torch",
             compile_cache_dir=None, **kwargs):
    """Like `transformers.pipeline(task, model=..., ...)`; `model` may also be an official .safetensors file or a
    local folder without config.json. `model_kwargs` are passed to `from_pretrained` for those.

    Args:
        fast (`bool`): the GPU recipe (`prepare_for_inference`): on `device` (default: `"cuda"` when available, else
            `"cpu"`), in `dtype` (default: bfloat16 on CUDA, float32 on CPU, where bfloat16 is slower), with SDPA
            attention and `torch.compile` (unless `compile=False`).
        compile (`bool` or `dict`, *optional*): compile the model (`fast` defaults it to `True`); a dict is passed to
            `prepare_for_inference` as its compile keywords, e.g. `{"mode": "reduce-overhead"}` for CUDA graphs.
        torch_dtype: accepted as the older name of `dtype`.
        device, dtype: checked before anything loads (`check_device`, `check_dtype`): a device this machine lacks
            (`"cuda"` without a GPU, `0` on a CPU-only machine) or a dtype other than float32, float16, bfloat16 (or
            `"bf16"`, `"fp16"`, ...) and `"auto"` is a one-line `ValueError` naming it and the fix.
        backend (`str`): `"torch"` (default), or a `sapiens2_hf.export.RUNTIME_BACKENDS` name (`"aoti"`,
            `"onnxruntime"`, `"onnxruntime-int8"`) with `model` an exported folder of that format; its
            preprocessor_config.json is the default image processor.
        compile_cache_dir (`str`, *optional*): the persistent compile cache of `fast`/`compile` (see
            `prepare_for_inference`; default `~/.cache/sapiens2_hf/compile`, `False` for none).
        image_size (`list[int]`, *optional*): the model's input size `[height, width]`, a loading override (as
            `from_pretrained(..., image_size=...)`; the form the loader's errors suggest): moved into `model_kwargs`.
        pointmap_model (`sapiens2-pose-3d`): anything `model` takes for a pointmap model; with `segmenter=` it
            becomes the `sapiens2-pointmap` pipeline the 3D pipeline samples (on the same device and dtype).
    """
    _check_dtype_and_device(kwargs)
    if backend != "torch":
        return _exported_pipeline(task, model, backend, fast=fast, compile=compile, **kwargs)
    if task in COMPOSED_PIPELINES and isinstance(kwargs.get("pointmap_model"), (str, os.PathLike)):
        companion = {key: kwargs[key] for key in ("device", "dtype") if kwargs.get(key) is not None}
        kwargs["pointmap_model"] = pipeline("sapiens2-pointmap", kwargs["pointmap_model"],
                                            segmenter=kwargs.pop("segmenter", None), fast=fast, compile=compile,
                                            compile_cache_dir=compile_cache_dir, **companion)
    compile, compile_options = _compile_plan(compile, compile_cache_dir, fast, kwargs)
    image_size = _image_size_into_model_kwargs(model, kwargs)
    model = _load_local(task, model, kwargs)
    own_processor = kwargs.get("image_processor") is None
    pipe = transformers_pipeline(task, model=model, **kwargs)
    processor = getattr(pipe, "image_processor", None)
    if image_size is not None and own_processor and hasattr(processor, "input_size"):
        # a folder's preprocessor_config.json keeps the size it was saved with: the processor follows the override
        height, width = pipe.model.config.image_size_hw
        processor.size = {"height": height, "width": width}
    if fast or compile:
        prepare_for_inference(pipe.model, device=pipe.device, dtype=pipe.model.dtype, compile=bool(compile),
                              attention="sdpa" if fast else None, **compile_options)
    return pipe


def _check_dtype_and_device(kwargs: dict) -> None:
    """`torch_dtype` renamed `dtype`, a dtype name resolved; both checked before anything loads."""
    if "torch_dtype" in kwargs:
        if kwargs.get("dtype") is not None:
            raise ValueError("pass either dtype= or its older name torch_dtype=, not both.")
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    dtype = kwargs.get("dtype")
    if isinstance(dtype, str) and dtype != "auto":
        with contextlib.suppress(ValueError):  # an unknown name: check_dtype refuses it, naming the accepted ones
            kwargs["dtype"] = dtype = resolve_dtype(dtype)
    check_dtype(dtype)
    check_device(kwargs.get("device"))


def _compile_plan(compile, compile_cache_dir, fast: bool, kwargs: dict) -> tuple[bool | None, dict]:
    """`(compile, prepare_for_inference keywords)`; with `fast`, the default device and dtype set in `kwargs`."""
    compile_options = {} if compile_cache_dir is None else {"compile_cache_dir": compile_cache_dir}
    if isinstance(compile, dict):
        compile_options, compile = {**compile_options, **compile}, True
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
    return compile, compile_options


def _image_size_into_model_kwargs(model, kwargs: dict):
    """Moves `image_size=`, a config override of loading that transformers' factory would hand to the pipeline
    (which refuses it), into `model_kwargs`; returns it."""
    image_size = kwargs.pop("image_size", None)
    if image_size is None:
        return None
    model_kwargs = dict(kwargs.get("model_kwargs") or {})
    if "image_size" in model_kwargs:
        raise ValueError("pass image_size= or model_kwargs={'image_size': ...}, not both.")
    if not isinstance(model, (str, os.PathLike)):
        raise ValueError("image_size= applies when the pipeline loads the model (a file, folder or Hub id); for "
                         "a model object, load it with from_pretrained(..., image_size=[height, width]).")
    kwargs["model_kwargs"] = {**model_kwargs, "image_size": image_size}
    return image_size


def _load_local(task: str, model, kwargs: dict):
    """An official file (or a folder holding only one) loaded with our class; anything else as it is."""
    is_local = isinstance(model, (str, os.PathLike)) and Path(model).exists()
    if isinstance(model, (str, os.PathLike)) and not is_local and looks_local(os.fspath(model)):
        raise OSError(f"{os.fspath(model)}: no such file or folder.")  # as from_pretrained says, not a Hub lookup
    # A LoRA adapter folder is transformers' own business (its factory finds adapter_config.json).
    model_task = PIPELINE_TASKS[task] if task in PIPELINE_TASKS else COMPOSED_PIPELINES.get(task, (None,))[0]
    if is_local and model_task is not None and not (Path(model) / "adapter_config.json").is_file():
        resolved = resolve_checkpoint(model)
        model_class = model_class_for_task(model_task)
        if resolved.kind == "official" and resolved.config_folder is None:
            return model_class.from_pretrained(resolved.location, **(kwargs.pop("model_kwargs", None) or {}))
        if resolved.kind == "hf" and kwargs.get("config") is None:
            # from_pretrained's first checks (model type, task) before transformers' factory loads anything: after
            # our class refuses, that factory tries transformers' own class, which loads the whole folder before our
            # pipeline refuses the result (pipeline_sapiens2_hf's `_refuse_a_model_of_another_type`)
            model_class._check_task(Sapiens2Config.from_pretrained(resolved.location), str(model))
    return model


def _exported_pipeline(task: str, folder, backend: str, fast: bool, compile, **kwargs):
    """The pipeline of `task` around an exported folder run by `backend` (see `pipeline`)."""
    if fast or compile:
        raise ValueError(f"backend={backend!r} runs a model compiled at export; drop fast=/compile= (they compile the "
                         "torch model).")
    dtype = kwargs.pop("dtype", None)
    if dtype not in (None, "auto") and resolve_dtype(dtype) != torch.float32:
        raise ValueError(f"backend={backend!r} runs in float32; drop dtype={dtype}.")
    if not isinstance(folder, (str, os.PathLike)):
        raise ValueError(f"backend={backend!r} needs model= an exported folder (`sapiens2-hf export`), not a "
                         f"{type(folder).__name__}.")
    runtime = load_backend(folder, backend, task=PIPELINE_TASKS.get(task))
    if kwargs.get("image_processor") is None:
        kwargs["image_processor"] = Sapiens2HFImageProcessor.from_pretrained(folder)
    return transformers_pipeline(task, model=runtime, **kwargs)
