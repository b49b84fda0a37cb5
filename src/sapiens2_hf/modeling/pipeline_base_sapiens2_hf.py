# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""What every Sapiens2 pipeline shares: the device and dtype checks, the default image processor, the base classes
`_Sapiens2PipelineBase` (parameters split by stage, transformers' call path) and `_Sapiens2DensePipeline`."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from transformers import Pipeline

from .sapiens2_tasks import TASK_SPECS


class _PipelineTasks(Mapping):
    """Pipeline name -> task, read from the task registry at each use (a task registered after import included)."""

    def _table(self) -> dict[str, str]:
        return {spec.pipeline_name: spec.name for spec in TASK_SPECS.values()}

    def __getitem__(self, pipeline_name: str) -> str:
        return self._table()[pipeline_name]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(TASK_SPECS)


PIPELINE_TASKS: Mapping[str, str] = _PipelineTasks()


def _is_sapiens2_hf_processor(processor) -> bool:
    """Duck-typed: our processors carry a task policy and the albedo post-processing transformers' stock one lacks."""
    return hasattr(processor, "post_process_albedo_estimation") and hasattr(processor, "task")


def _default_image_processor(model, task: str, like=None):
    """The registered Sapiens2 image processor class for the model's config, for `task`, keeping the settings of
    `like` (typically transformers' stock processor of an official repo; see `from_image_processor`), else the
    model's configured input size."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

    try:
        entry = IMAGE_PROCESSOR_MAPPING[type(model.config)]
    except KeyError:
        entry = None
    candidates = list(entry.values()) if isinstance(entry, dict) else list(entry or [])
    candidates = [c for c in candidates if c is not None and hasattr(c, "from_image_processor")]
    if not candidates:
        raise ValueError(
            f"no Sapiens2 image processor is registered for {type(model.config).__name__}; pass "
            "image_processor=Sapiens2HFImageProcessor(task=...) or `import sapiens2_hf` first."
        )
    overrides = {}
    size = getattr(model.config, "image_size", None)
    if like is None and isinstance(size, (list, tuple)) and len(size) == 2:
        overrides["size"] = {"height": int(size[0]), "width": int(size[1])}
    return candidates[0].from_image_processor(like, task, **overrides)


def _refuse_a_model_of_another_type(model, pipeline_name: str) -> None:
    """Refuses a model whose class read a config.json of another model type, with the reason the class registered for
    `pipeline_name` gives for that checkpoint.

    When the registered class refuses a checkpoint, transformers' pipeline factory tries the classes named by
    config.json's `architectures` in its own namespace: ours bear the names of transformers' Sapiens2 classes, so
    the refused folder comes back as transformers' class reading our config.json (it only warns). Such a model keeps
    the config.json's model type; the registered class loads the checkpoint again to raise its own one-line error.
    """
    config = getattr(model, "config", None)
    declared, own = getattr(config, "model_type", None), getattr(type(config), "model_type", None)
    source = getattr(model, "name_or_path", None)
    if config is None or declared == own or not source:  # a model built in memory was not refused by anyone
        return
    from transformers.pipelines import PIPELINE_REGISTRY

    registered = tuple(PIPELINE_REGISTRY.supported_tasks.get(pipeline_name, {}).get("pt") or ())
    for model_class in registered:
        model_class.from_pretrained(source, _from_pipeline=pipeline_name)  # raises the reason it was refused
    names = " or ".join(f"{model_class.__name__}.from_pretrained" for model_class in registered) or "its own class"
    raise ValueError(
        f"the {pipeline_name} pipeline got a {type(model).__name__} of model type `{own}` built from {source}'s "
        f"config.json of model type `{declared}`, which transformers' pipeline factory builds only after the class "
        f"registered for the task refused the checkpoint; load it with {names} to see why."
    )


def _positive_int(name: str, value: Any, default: int | None, minimum: int = 1) -> int | None:
    """`value` as an int >= `minimum` (`None` gives `default`); smaller ones, fractions and booleans are errors."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


#: dtypes a Sapiens2 pipeline runs in (names or torch dtypes), and "auto" (the checkpoint's).
PIPELINE_DTYPES = ("float32", "float16", "bfloat16")


def _no_cuda_reason() -> str:
    build = torch.version.cuda
    return (f"this torch build has CUDA {build} but sees no GPU (driver, CUDA_VISIBLE_DEVICES?)" if build
            else "this torch build has no CUDA support")


def _accelerator_type() -> str | None:
    """The device type of an int device (transformers' order, of the types checked here), None on a CPU machine."""
    if torch.cuda.is_available():
        return "cuda"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return "mps" if torch.backends.mps.is_available() else None


def check_device(device: Any) -> None:
    """Refuses a pipeline `device` this machine does not have, in one line naming it and the fix.

    Without it torch fails deep inside `.to()` with its own words ("Found no NVIDIA driver", "not linked with support
    for mps devices"), and transformers runs an int device (an accelerator index) quietly on the CPU when there is no
    accelerator. `None`, the CPU and -1 (transformers' index of the CPU) always pass.
    """
    if device is None or (type(device) is int and device == -1):
        return
    if isinstance(device, bool) or (isinstance(device, int) and device < -1):
        raise ValueError(f"device={device!r} is not a device; pass 'cpu' (or -1), 'cuda', 'cuda:N', 'mps' or an "
                         "accelerator index N >= 0.")
    if isinstance(device, int):
        kind, index = _accelerator_type(), device
        if kind is None:
            raise ValueError(f"device={device!r} (an accelerator index) is not available here: {_no_cuda_reason()}, "
                             "nor any other accelerator; pass device='cpu' (or -1).")
    else:
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            raise ValueError(f"device={device!r} is not a device; pass 'cpu', 'cuda', 'cuda:N' or 'mps'.") from None
        kind, index = parsed.type, parsed.index
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} is not available here: {_no_cuda_reason()}; pass device='cpu', or run "
                         "on a machine with an NVIDIA GPU and a CUDA build of torch.")
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r} is not available here: this machine has {torch.cuda.device_count()} "
                         "CUDA device(s), numbered from 0; pass one of them, or device='cpu'.")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r} is not available here: this machine or torch build has no MPS (the GPU "
                         "of Apple silicon Macs); pass device='cpu'.")
    module = getattr(torch, kind, None) if kind not in ("cpu", "cuda", "mps", "meta") else None
    if module is not None and callable(getattr(module, "is_available", None)) and not module.is_available():
        raise ValueError(f"device={device!r} is not available here (torch.{kind}.is_available() is False); pass "
                         "device='cpu'.")


def check_dtype(dtype: Any) -> None:
    """Refuses a pipeline `dtype` other than `PIPELINE_DTYPES` (a name or torch dtype) and "auto": transformers loads
    an unknown name in float32 with only a log note."""
    if dtype is None or dtype == "auto":
        return
    if not isinstance(dtype, (str, torch.dtype)) or str(dtype).removeprefix("torch.") not in PIPELINE_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one a Sapiens2 pipeline runs in; pass one of "
                         f"{', '.join(PIPELINE_DTYPES)} or auto (a name or the torch dtype).")


class _Sapiens2PipelineBase(Pipeline):
    """The parts every Sapiens2 pipeline shares; the call path is transformers' own: `__call__` checks its arguments
    and hands over to `Pipeline.__call__` (a list runs through a `DataLoader`, a generator or dataset is streamed).
    Model outputs are split again per image (`PipelineIterator`), so `postprocess` always sees one image and results
    do not depend on batching, except through the model's own arithmetic on a larger batch.
    """

    _load_processor = False
    _load_image_processor = None
    _load_feature_extractor = False
    _load_tokenizer = False
    _load_video_processor = False
    task_name: str = ""

    def __init__(self, *args, **kwargs):
        dtype = kwargs.get("dtype")
        check_device(kwargs.get("device"))  # before `Pipeline.__init__` moves the model there
        check_dtype(dtype)
        _refuse_a_model_of_another_type(kwargs["model"] if "model" in kwargs else args[0] if args else None,
                                        TASK_SPECS[self.task_name].pipeline_name)
        super().__init__(*args, **kwargs)
        if isinstance(dtype, str) and dtype != "auto" and hasattr(torch, dtype):
            dtype = getattr(torch, dtype)
        if isinstance(dtype, torch.dtype) and self.model.dtype != dtype:
            self.model.to(dtype)
        self.model.eval()
        if self.image_processor is None or not _is_sapiens2_hf_processor(self.image_processor):
            # No processor, or transformers' stock one (an official repo's preprocessor_config.json): ours, with the
            # task's official policy and the stock one's size and normalisation.
            self.image_processor = _default_image_processor(self.model, self.task_name, like=self.image_processor)
        processor_task = getattr(self.image_processor, "task", None)
        if processor_task != self.task_name:
            raise ValueError(f"the image processor is for task {processor_task!r} but this pipeline runs "
                             f"{self.task_name!r}; pass an image processor with task={self.task_name!r}.")

    # -- parameters ------------------------------------------------------------------------------------------------

    def _call_parameters(self) -> dict[str, str]:
        """Call argument -> the stage that takes it (`"preprocess"`, `"forward"` or `"postprocess"`)."""
        return {}

    def _sanitize_parameters(self, **kwargs):
        stages = self._call_parameters()
        unknown = set(kwargs) - set(stages)
        if unknown:
            raise ValueError(f"unknown argument(s) {sorted(unknown)} for {type(self).__name__}; valid: "
                             f"{sorted(['batch_size', 'num_workers', *stages])}.")
        split = {"preprocess": {}, "forward": {}, "postprocess": {}}
        for name, value in kwargs.items():
            split[stages[name]][name] = value
        return split["preprocess"], split["forward"], split["postprocess"]

    # -- call ------------------------------------------------------------------------------------------------------

    def __call__(self, inputs, *args, batch_size: int | None = None, num_workers: int | None = None, **kwargs):
        """Run on one image (a path, URL, PIL image or `(H, W, 3)` uint8 RGB array), a list of images, a generator or
        a `torch.utils.data.Dataset` of images (e.g. `KeyDataset(dataset, "image")`): one result, a list, or a lazy
        iterator. `batch_size` (>= 1): images per model call (default: the pipeline's, else 1); `num_workers` (>= 0):
        `DataLoader` worker processes for `preprocess` (default 0).
        """
        if args:
            raise TypeError(f"{type(self).__name__} takes the inputs as its only positional argument; pass the "
                            "options by name.")
        batch_size = _positive_int("batch_size", batch_size if batch_size is not None else self._batch_size, None)
        num_workers = _positive_int("num_workers", num_workers if num_workers is not None else self._num_workers, None,
                                    minimum=0)
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list) and not inputs:
            return []  # transformers' `Pipeline.__call__` reads `inputs[0]`
        return super().__call__(inputs, batch_size=batch_size, num_workers=num_workers, **kwargs)

    # -- stages ----------------------------------------------------------------------------------------------------

    def forward(self, model_inputs, **forward_params):
        # transformers' `forward` moves the outputs to the CPU; they stay on the model's device, where decoding runs
        with self.device_placement(), torch.inference_mode():
            model_inputs = self._ensure_tensor_on_device(model_inputs, device=self.device)
            return self._forward(model_inputs, **forward_params)


class _Sapiens2DensePipeline(_Sapiens2PipelineBase):
    """One model row per image: `preprocess` gives the processor's `pixel_values` `(1, 3, height, width)` with the
    image's `original_sizes` `(1, 2)` and letterbox `padding` `(1, 4)`, which transformers' collate function
    concatenates into batches; `_forward` returns the model's prediction fields (float32) beside them."""

    #: Model-output fields this task's post-processing reads, first the one always present.
    output_fields: tuple[str, ...] = ()

    def preprocess(self, image, input_data_format=None, **params):
        # `input_data_format`: set by a pipeline that hands over an array it decoded (its layout is known)
        return self.image_processor(image, task=self.task_name, input_data_format=input_data_format)

    def _forward(self, model_inputs, **params):
        pixel_values = model_inputs["pixel_values"].to(self.device, self.model.dtype)
        outputs = self.model(pixel_values=pixel_values)
        # the prediction first: transformers' `PipelineIterator` reads the batch size from the first entry
        result = {}
        for name in self.output_fields:
            value = getattr(outputs, name, None)
            if value is not None:
                result[name] = value.float()
        result["original_sizes"] = model_inputs["original_sizes"]
        result["padding"] = model_inputs["padding"]
        return result

    @staticmethod
    def _namespace(model_outputs, **names):
        """The post-processor's `outputs` argument: `names` maps its attribute names to `model_outputs` keys."""
        return types.SimpleNamespace(**{attribute: model_outputs.get(key) for attribute, key in names.items()})
