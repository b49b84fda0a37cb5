# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""transformers pipelines for the six Sapiens2 tasks (layer 0, Hub-shippable).

| pipeline task | result per image |
|---|---|
| `sapiens2-pose` | list of people: `{"bbox", "bbox_score", "keypoints", "scores", "labels"}` |
| `sapiens2-segmentation` | `{"segmentation"}`: `(height, width)` int64 class ids |
| `sapiens2-normal` | `{"normals"}`: `(height, width, 3)` float32 unit normals (camera frame) |
| `sapiens2-pointmap` | `{"pointmap", "depth", "scale"}`: `(height, width, 3)` metric XYZ, `(height, width)` Z |
| `sapiens2-albedo` | `{"albedo"}`: `(height, width, 3)` float32 RGB in [0, 1] |
| `sapiens2-matting` | `{"alpha", "foreground"}`: `(height, width)` float32 in [0, 1], `(height, width, 3)` RGB |

Normal, pointmap and albedo results keep only the person with `foreground_mask=` (a given mask) or `segmenter=` (a
`sapiens2-segmentation` pipeline, model or model id; foreground = label > 0): they gain `"mask"` and their
background becomes 0 (normals, albedo) or NaN (pointmap, depth). The pointmap pipeline takes the camera as
`focal_length=` or `intrinsics=` (original-image pixels) for metric results in that camera.

All arrays are numpy, at the original image size, indexed `[y, x]` (`sapiens2_hf.serialization.to_json_compatible`
makes any result `json.dumps`-able). The pipelines are thin: the image processor owns all the geometry and decoding
(duck-typed: any processor with the `Sapiens2HFImageProcessor` API); the pipeline runs the model and turns tensors into
numpy. Decoding runs on the model's device.

The call path is transformers' own (`Pipeline.__call__`): `preprocess` / `_forward` / `postprocess` per image, a
`DataLoader` with transformers' collate function for `batch_size` and `num_workers`, lazy iteration over generators
and datasets (`KeyDataset`). The pose pipeline is a transformers `ChunkPipeline`: one model row per person crop,
batched across images, regrouped per image for decoding.

This module imports no other part of sapiens2_hf (Hub rule); the default image processor is found through transformers'
`AutoImageProcessor` registry for the model's config class.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import Pipeline

# transformers' pipeline for one input -> many model rows (its mask-generation and zero-shot detection pipelines use
# it); not re-exported at the top level, so imported from where `Pipeline` itself lives.
from transformers.pipelines.base import ChunkPipeline

from .lifting_sapiens2_hf import joint_depths_for, lift_keypoints
from .sapiens2_label_data import NUM_POSE_KEYPOINTS
from .sapiens2_tasks import TASK_SPECS


#: Boxes the pose pipeline crops at once (`preprocess` yields their rows before cropping the next ones): about 12 MB
#: per box at 1024x768, so the crops of an image with 1,000 boxes take 190 MB, not 12 GB. Crops are independent: the
#: results do not depend on it.
POSE_CROP_CHUNK_SIZE = 16

#: Default person detector for the pose pipeline (COCO-trained RT-DETR; transformers-native, Apache-2.0).
DEFAULT_DETECTOR = "PekingU/rtdetr_r50vd"

#: `pipeline(...)` task name -> Sapiens2 task, from the task registry (sapiens2_tasks.py).
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
    """The registered Sapiens2 image processor class for the model's config, adopting `like` for `task`.

    Args:
        like: an image processor whose settings to keep, typically transformers' stock `Sapiens2ImageProcessor`
            loaded from an official repo's preprocessor_config.json (see `from_image_processor`). Without it the
            input size is the model's configured one.
    """
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

    When the registered class refuses a checkpoint (NaN weights, another task, a `bert` config.json), transformers'
    pipeline factory tries the classes config.json's `architectures` names in transformers' own namespace
    (pipelines/base.py, `load_model`). Ours bear the names of transformers' Sapiens2 classes, so the folder we refused
    came back as transformers' class reading our config.json, which it only warns about. Such a model keeps the
    config.json's model type on its config, unlike its class's; the registered class loads the checkpoint again so
    that its own one-line error is the one raised.
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


def _positive_int(name: str, value: Any, default: int | None) -> int | None:
    """`value` as an int >= 1 (`None` gives `default`); 0, negatives, fractions and booleans are errors."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    return int(value)


def _num_workers(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"num_workers must be an integer >= 0, got {value!r}.")
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
    """The parts every Sapiens2 pipeline shares; the call path is transformers' own.

    `__call__` only checks its arguments and hands over to `Pipeline.__call__`, so inputs go through transformers'
    machinery: a list is run through a `DataLoader` (`batch_size` images per model call, `num_workers` processes for
    `preprocess`), a generator or a `torch.utils.data.Dataset` (e.g. `KeyDataset(dataset, "image")`) is streamed
    and answered with a lazy iterator, and a single image runs `preprocess -> forward -> postprocess` once. Model
    outputs are split again per image (transformers' `PipelineIterator`), so `postprocess` always sees one image:
    results do not depend on how the images were grouped, except through the model's own arithmetic on a larger
    batch.
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
        """Run on one image, a list of images, a generator of images or a `torch.utils.data.Dataset` of images
        (e.g. transformers' `KeyDataset(dataset, "image")`). An image is a path, URL, PIL image or `(H, W, 3)` uint8
        RGB array.

        Args:
            batch_size (`int` >= 1, *optional*): images per model call (default: the pipeline's, else 1).
            num_workers (`int` >= 0, *optional*): `DataLoader` worker processes for `preprocess` (default 0).

        Returns one result for one image, a list for a list (or tuple), and a lazy iterator of results for a
        generator or dataset.
        """
        if args:
            raise TypeError(f"{type(self).__name__} takes the inputs as its only positional argument; pass the "
                            "options by name.")
        batch_size = _positive_int("batch_size", batch_size if batch_size is not None else self._batch_size, None)
        num_workers = _num_workers(num_workers if num_workers is not None else self._num_workers)
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


class Sapiens2SegmentationPipeline(_Sapiens2DensePipeline):
    """`pipeline("sapiens2-segmentation")`: 29-class body-part segmentation at the original image size.

    Result per image: `{"segmentation": np.ndarray (height, width) int64}` with class ids in `[0, num_labels)`
    (names in `model.config.id2label`; 0 is background).
    """

    task_name = "seg"
    output_fields = ("logits",)

    def postprocess(self, model_outputs, **params):
        (segmentation,) = self.image_processor.post_process_semantic_segmentation(
            self._namespace(model_outputs, logits="logits"), target_sizes=model_outputs["original_sizes"].tolist())
        return {"segmentation": segmentation.cpu().numpy()}


# Prefix of the segmenter's own model inputs and outputs inside the dense pipelines' rows.
_SEGMENTER = "segmenter."


def _segmenter_part(row: dict) -> dict:
    """The segmenter's entries of a dense pipeline's row, under their own names."""
    return {key[len(_SEGMENTER):]: value for key, value in row.items() if key.startswith(_SEGMENTER)}


@dataclass
class _DenseInput:
    """One image of a normal / pointmap / albedo call with its own options, numbered by its position in the call."""

    number: int
    image: Any
    foreground_mask: Any = None
    focal_length: Any = None
    intrinsics: Any = None


_DENSE_OPTIONS = ("foreground_mask", "focal_length", "intrinsics")


def _dense_input(number: int, item: Any, defaults: dict[str, Any] | None = None) -> _DenseInput:
    """An image, or an `{"image", "foreground_mask", "focal_length", "intrinsics"}` dict (other keys, e.g. a
    dataset row's, are ignored), with the call's `defaults` for what the item does not give."""
    if isinstance(item, _DenseInput):
        return item
    options = dict(defaults or {})
    if isinstance(item, dict):
        if "image" not in item:
            raise ValueError(f"input {number} is a dict without an 'image' key (keys: {sorted(item)}); pass "
                             "{'image': ..., 'foreground_mask': ..., 'focal_length': ..., 'intrinsics': ...} (all "
                             "but 'image' optional).")
        own = {key: item[key] for key in _DENSE_OPTIONS if item.get(key) is not None}
        if "focal_length" in own or "intrinsics" in own:  # the item's camera replaces the call's whole camera
            options.pop("focal_length", None)
            options.pop("intrinsics", None)
        options.update(own)
        item = item["image"]
    return _DenseInput(number, item, **options)


class _NumberedDenseDataset(Dataset):
    """A map-style dataset of dense inputs (images or dicts with an `image` column), numbered by index."""

    def __init__(self, dataset, defaults: dict[str, Any]):
        self.dataset, self.defaults = dataset, defaults

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return _dense_input(index, self.dataset[index], self.defaults)


class _ImageOptions:
    """One image's mask and camera, carried beside its model row. Neither a tensor nor an array, so transformers'
    collate function and batch splitting hand it through untouched (masks have their image's size, which differs
    between the images of a batch)."""

    __slots__ = ("number", "mask", "camera")

    def __init__(self, number: int, mask: np.ndarray | None, camera: dict[str, Any]):
        self.number, self.mask, self.camera = number, mask, camera


class _Sapiens2MaskableDensePipeline(_Sapiens2DensePipeline):
    """Normal, pointmap and albedo: results can keep only the person, as the official demos do.

    Call arguments (besides `batch_size`, `num_workers`):
        foreground_mask: the person foreground of the image, `(height, width)` at the image's size: a bool (or 0 / 1)
            numpy array or tensor, a PIL image (non-zero = foreground) or its path. For a list of images a list with
            one mask (or `None`) per image; generators and datasets carry theirs in dict inputs.
        segmenter: computes the foreground as the segmentation's non-background labels (label > 0): a
            `sapiens2-segmentation` pipeline, a Sapiens2 segmentation model, or a model folder / Hub id (loaded once
            per pipeline). It runs on the same batches as this model. Also an argument of the pipeline itself
            (`pipeline(..., segmenter=...)`); `segmenter=False` in a call switches that off. Not together with
            given masks.

    Instead of an image, a dict `{"image": ..., "foreground_mask": ...}` (pointmap also `"focal_length"`,
    `"intrinsics"`) carries the image's own options; they win over the call's.

    A masked result gains `"mask"` (`(height, width)` bool, True = person) and has its background set to
    the task's `foreground_fill` (the registry): normals 0 (the zero vector), albedo 0, pointmap and depth NaN.
    A mask of another size than its image is a `ValueError` naming both sizes.
    """

    #: Result fields the foreground mask applies to.
    masked_fields: tuple[str, ...] = ()
    #: Per-image call arguments (a list input: one per image).
    per_image_options: tuple[str, ...] = ("foreground_mask",)

    def __init__(self, *args, segmenter=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._loaded_segmenters: dict[Any, Any] = {}
        self._segmenter = self._get_segmenter(segmenter)

    def _sanitize_parameters(self, segmenter=None, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        if segmenter is False:
            resolved = None
        elif segmenter is None:
            resolved = getattr(self, "_segmenter", None)
        else:
            resolved = self._get_segmenter(segmenter)
        if resolved is not None or segmenter is False:
            # every stage takes part: its inputs in preprocess, its model in _forward, its decoding in postprocess
            preprocess["segmenter"] = forward["segmenter"] = postprocess["segmenter"] = resolved
        return preprocess, forward, postprocess

    def _get_segmenter(self, segmenter):
        """A `sapiens2-segmentation` pipeline for `segmenter` (a pipeline, a model, or a folder / Hub id)."""
        if segmenter is None or segmenter is False:
            return None
        if isinstance(segmenter, Sapiens2SegmentationPipeline):
            return segmenter
        key = str(segmenter) if isinstance(segmenter, str) or hasattr(segmenter, "__fspath__") else id(segmenter)
        if key in self._loaded_segmenters:
            return self._loaded_segmenters[key][1]
        if isinstance(key, str):
            from transformers import pipeline as make_pipeline
            from transformers.pipelines import PIPELINE_REGISTRY

            if "sapiens2-segmentation" not in PIPELINE_REGISTRY.supported_tasks:
                register_pipelines()
            try:
                loaded = make_pipeline("sapiens2-segmentation", model=key, device=self.device)
            except (OSError, ValueError) as error:
                kind = OSError if isinstance(error, OSError) else ValueError
                raise kind(f"could not load the segmenter {key!r} as a sapiens2-segmentation model "
                           f"({type(error).__name__}: {error}); pass a Sapiens2 segmentation folder or Hub id, "
                           "model or pipeline.") from error
        elif isinstance(segmenter, torch.nn.Module) and hasattr(segmenter, "config"):
            loaded = Sapiens2SegmentationPipeline(model=segmenter, device=self.device)
        else:
            raise ValueError(f"segmenter of type {type(segmenter).__name__} is not usable; pass a "
                             "sapiens2-segmentation pipeline, a Sapiens2 segmentation model, or its folder / Hub id.")
        if not isinstance(loaded, Sapiens2SegmentationPipeline):
            raise ValueError(f"the segmenter {key!r} loaded as a {type(loaded).__name__}, not a sapiens2-segmentation "
                             "pipeline.")
        self._loaded_segmenters[key] = (segmenter, loaded)  # the reference keeps `id(segmenter)` unique
        return loaded

    # -- call ------------------------------------------------------------------------------------------------------

    def __call__(self, inputs, *args, batch_size: int | None = None, num_workers: int | None = None, **kwargs):
        """As `_Sapiens2PipelineBase.__call__`, with per-image options (see the class docstring)."""
        options = {name: kwargs.pop(name) for name in self.per_image_options if kwargs.get(name) is not None}
        for name in self.per_image_options:
            kwargs.pop(name, None)
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list):
            per_image = {}
            if "foreground_mask" in options:
                masks = options["foreground_mask"]
                if not isinstance(masks, (list, tuple)) or len(masks) != len(inputs):
                    got = f"a list of {len(masks)}" if isinstance(masks, (list, tuple)) else f"a {type(masks).__name__}"
                    raise ValueError(f"foreground_mask is {got} for {len(inputs)} images; for a list of images pass a "
                                     "list with one mask (or None) per image.")
                per_image["foreground_mask"] = list(masks)
            for name in ("focal_length", "intrinsics"):
                if name in options:
                    per_image[name] = self.image_processor.camera_per_image(options[name], name, len(inputs))
            inputs = [_dense_input(i, item, {name: values[i] for name, values in per_image.items()})
                      for i, item in enumerate(inputs)]
        elif isinstance(inputs, (types.GeneratorType, Dataset)):
            if "foreground_mask" in options:
                raise ValueError("foreground_mask= needs an image or a list of images; a generator or dataset carries "
                                 "its masks in dict inputs {'image': ..., 'foreground_mask': ...}.")
            for name in ("focal_length", "intrinsics"):
                if name in options:
                    value = options[name]
                    if name == "focal_length" and (isinstance(value, (list, tuple)) or getattr(value, "ndim", 0)):
                        raise ValueError("for a generator or dataset pass one focal_length for all images, or one per "
                                         "image in dict inputs {'image': ..., 'focal_length': ...}.")
                    self.image_processor.validate_camera(**{name: value})
            if isinstance(inputs, Dataset):
                inputs = _NumberedDenseDataset(inputs, options)
            else:
                inputs = (_dense_input(i, item, options) for i, item in enumerate(inputs))
        else:
            inputs = _dense_input(0, inputs, options)
        return super().__call__(inputs, *args, batch_size=batch_size, num_workers=num_workers, **kwargs)

    # -- stages ----------------------------------------------------------------------------------------------------

    def preprocess(self, item, segmenter=None, **params):
        item = _dense_input(0, item)
        image = item.image
        segmenter_inputs, layout = {}, None
        if segmenter is not None:
            if item.foreground_mask is not None:
                raise ValueError(f"input {item.number} has a foreground_mask and a segmenter is set; pass one of them "
                                 "(segmenter=False uses the given masks).")
            image, layout = self.image_processor.load_image_rgb(image), "channels_last"  # read once, for both models
            segmenter_inputs = segmenter.preprocess(image, input_data_format=layout)
        model_inputs = self.image_processor(image, task=self.task_name, input_data_format=layout)
        size = model_inputs["original_sizes"][0].tolist()
        mask = None
        if item.foreground_mask is not None:
            mask = self.image_processor.validate_foreground_mask(item.foreground_mask, size,
                                                                 name=f"the foreground_mask of input {item.number}")
        camera = {}
        if item.focal_length is not None or item.intrinsics is not None:
            camera = self.image_processor.validate_camera(item.focal_length, item.intrinsics)
        model_inputs["image_options"] = _ImageOptions(item.number, mask, camera)
        for key, value in segmenter_inputs.items():
            model_inputs[_SEGMENTER + key] = value
        return model_inputs

    def _forward(self, model_inputs, segmenter=None, **params):
        result = super()._forward(model_inputs)
        result["image_options"] = model_inputs["image_options"]
        if segmenter is not None:
            for key, value in segmenter.forward(_segmenter_part(model_inputs)).items():
                result[_SEGMENTER + key] = value
        return result

    def _mask(self, result: dict, model_outputs, segmenter=None) -> dict:
        """`result` with the background of `masked_fields` filled and `"mask"` added, when the image has a mask."""
        options = model_outputs.get("image_options")
        mask = getattr(options, "mask", None)
        if segmenter is not None:
            segmentation = segmenter.postprocess(_segmenter_part(model_outputs))["segmentation"]
            mask = np.asarray(self.image_processor.foreground_mask_from_segmentation(segmentation))
        if mask is None:
            return result
        for key in self.masked_fields:
            result[key] = self.image_processor.apply_foreground_mask(result[key], mask, channels_last=True)
        result["mask"] = mask
        return result


class Sapiens2NormalPipeline(_Sapiens2MaskableDensePipeline):
    """`pipeline("sapiens2-normal")`: surface normals at the original image size.

    Result per image: `{"normals": np.ndarray (height, width, 3) float32}`, camera frame `(x, y, z)`, unit length
    before the final resize (officially not re-normalised afterwards). With `foreground_mask=` or `segmenter=`
    (see `_Sapiens2MaskableDensePipeline`) also `"mask"` `(height, width)` bool, and the background normals are 0.
    """

    task_name = "normal"
    output_fields = ("normals",)
    masked_fields = ("normals",)

    def postprocess(self, model_outputs, segmenter=None, **params):
        (result,) = self.image_processor.post_process_normal_estimation(
            self._namespace(model_outputs, normals="normals"), source_sizes=model_outputs["original_sizes"].tolist(),
            paddings=model_outputs["padding"])
        return self._mask({"normals": result["normals"].permute(1, 2, 0).cpu().numpy()}, model_outputs, segmenter)


class Sapiens2PointmapPipeline(_Sapiens2MaskableDensePipeline):
    """`pipeline("sapiens2-pointmap")`: metric pointmap and depth at the original image size.

    Result per image: `{"pointmap": np.ndarray (height, width, 3) float32 XYZ (X right, Y down, Z forward),
    "depth": np.ndarray (height, width) float32 (= Z), "scale": float}` (units of the training depth, metres;
    `scale` is the one the canonical pointmap was divided by). transformers' `pipeline("depth-estimation")` gives the
    same depth in its own format (`predicted_depth`).

    Call arguments, besides the foreground masking of `_Sapiens2MaskableDensePipeline` (background: NaN, which the
    .ply writer skips):
        focal_length (`float`): the camera's horizontal focal length in pixels of the original image; it replaces
            the predicted scale (image processor's `post_process_pointmap_estimation(focal_length=...)`), so the
            pointmap and depth are metric for that camera.
        intrinsics: the camera in original-image pixels, `(fx, fy, cx, cy)` or a 3x3 matrix: Z metric from `fx`,
            then X and Y re-projected from Z through it, `X = (u - cx) Z / fx`, `Y = (v - cy) Z / fy`.
    Either is one value for all images or, for a list of images, one per image (`None` for the predicted camera);
    dict inputs carry their own. With either, the result also holds `"focal_length"` (`float`, the one used).
    """

    task_name = "pointmap"
    output_fields = ("pointmaps", "scales")
    masked_fields = ("pointmap", "depth")
    per_image_options = ("foreground_mask", "focal_length", "intrinsics")

    def postprocess(self, model_outputs, segmenter=None, **params):
        options = model_outputs.get("image_options")
        camera = getattr(options, "camera", None) or {}
        (result,) = self.image_processor.post_process_pointmap_estimation(
            self._namespace(model_outputs, pointmaps="pointmaps", scales="scales"),
            source_sizes=model_outputs["original_sizes"].tolist(), paddings=model_outputs["padding"], **camera)
        output = {"pointmap": result["pointmap"].permute(1, 2, 0).cpu().numpy(),
                  "depth": result["depth"].cpu().numpy(),
                  "scale": None if result["scale"] is None else float(result["scale"])}
        if any(value is not None for value in camera.values()):
            output["focal_length"] = float(result["focal_length"])
        return self._mask(output, model_outputs, segmenter)


class Sapiens2AlbedoPipeline(_Sapiens2MaskableDensePipeline):
    """`pipeline("sapiens2-albedo")`: RGB albedo at the original image size.

    Result per image: `{"albedo": np.ndarray (height, width, 3) float32 RGB in [0, 1]}`. With `foreground_mask=` or
    `segmenter=` (see `_Sapiens2MaskableDensePipeline`) also `"mask"` `(height, width)` bool, and the background
    albedo is 0.
    """

    task_name = "albedo"
    output_fields = ("albedos", "albedo")
    masked_fields = ("albedo",)

    def postprocess(self, model_outputs, segmenter=None, **params):
        key = "albedos" if model_outputs.get("albedos") is not None else "albedo"
        (result,) = self.image_processor.post_process_albedo_estimation(
            self._namespace(model_outputs, albedos=key), source_sizes=model_outputs["original_sizes"].tolist(),
            paddings=model_outputs["padding"])
        return self._mask({"albedo": result["albedo"].permute(1, 2, 0).cpu().numpy()}, model_outputs, segmenter)


class Sapiens2DenseMapPipeline(_Sapiens2MaskableDensePipeline):
    """The pipeline of a dense task registered with `sapiens2_hf.register_task` (`dense_map_pipeline_class` makes
    one per task): the task's prediction, post-processed by the processor method its registry entry names
    (`post_process_dense_maps` by default: unpad, resize), at the original image size.

    Result per image: `{key: np.ndarray (height, width, channels) float32}` (`(height, width)` for a one-channel
    map), `key` as the post-processor names it (the task's first `result_maps` entry). With `foreground_mask=` or
    `segmenter=` (see `_Sapiens2MaskableDensePipeline`) also `"mask"`, the background set to the task's
    `foreground_fill`.
    """

    def postprocess(self, model_outputs, segmenter=None, **params):
        spec = TASK_SPECS[self.task_name]
        post_process = getattr(self.image_processor, spec.post_process)
        fields = {name: name for name in self.output_fields}
        (result,) = post_process(self._namespace(model_outputs, **fields),
                                 source_sizes=model_outputs["original_sizes"].tolist(), paddings=model_outputs["padding"])
        output = {}
        for key, value in result.items():
            if isinstance(value, torch.Tensor):
                value = value.permute(1, 2, 0) if value.ndim == 3 else value
                value = value[..., 0] if value.ndim == 3 and value.shape[-1] == 1 else value
                value = value.cpu().numpy()
            output[key] = value
        return self._mask(output, model_outputs, segmenter)


def dense_map_pipeline_class(task: str) -> type[Sapiens2DenseMapPipeline]:
    """A `Sapiens2DenseMapPipeline` subclass for a registered dense task: its prediction fields are the registry
    entry's `output_field` and `extra_output_fields`, and a foreground mask applies to its result maps."""
    spec = TASK_SPECS[task]
    name = spec.model_class.removeprefix("Sapiens2For").removesuffix("Estimation") or spec.name
    return type(f"Sapiens2{name}Pipeline", (Sapiens2DenseMapPipeline,), {
        "task_name": spec.name,
        "output_fields": (spec.output_field, *spec.extra_output_fields),
        "masked_fields": (spec.result_maps or (spec.name,))[:1] if spec.foreground_fill is not None else (),
        "__module__": __name__,
    })


class Sapiens2MattingPipeline(_Sapiens2DensePipeline):
    """`pipeline("sapiens2-matting")`: alpha matte and foreground at the original image size.

    Result per image: `{"alpha": np.ndarray (height, width) float32 in [0, 1], "foreground": np.ndarray
    (height, width, 3) float32 pre-multiplied RGB in [0, 1]}` (`foreground + (1 - alpha) * background` composites
    the person over a new background). With `background=`, also `"composite"`: `(height, width, 3)` uint8 RGB, the
    person over that background: an image (PIL, `(height, width, 3)` uint8 RGB array, or a path; resized to each
    input) or a colour `(red, green, blue)` in `[0, 255]` (`background=(0, 255, 0)`).
    """

    task_name = "matting"
    output_fields = ("alphas", "foregrounds")

    def _call_parameters(self) -> dict[str, str]:
        return {"background": "postprocess"}

    def postprocess(self, model_outputs, background=None, **params):
        (result,) = self.image_processor.post_process_image_matting(
            self._namespace(model_outputs, alphas="alphas", foregrounds="foregrounds"),
            source_sizes=model_outputs["original_sizes"].tolist(), paddings=model_outputs["padding"],
            backgrounds=background)
        # the processor's alpha is (1, height, width), as transformers'; the pipeline's is a (height, width) image
        output = {"alpha": result["alpha"][0].cpu().numpy(),
                  "foreground": result["foreground"].permute(1, 2, 0).cpu().numpy()}
        if result["composite"] is not None:
            output["composite"] = result["composite"].permute(1, 2, 0).cpu().numpy()
        return output


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> list[int]:
    """Greedy non-maximum suppression (highest score first, a box dropped when its IoU with a kept one is above
    `iou_threshold`); returns kept indices in score order, ties in input order.

    torchvision's C++ kernel does the work: about 200x faster than a Python loop at 10 boxes and 10,000x at 300
    (tests/test_library_backends.py). Its own score sort is not documented as stable, so the boxes are handed over
    already in stable score order with strictly decreasing stand-in scores: ties keep the input order everywhere.
    """
    from torchvision.ops import nms

    boxes = boxes.to(torch.float64 if boxes.dtype == torch.float64 else torch.float32)  # IoU in the boxes' precision
    order = torch.argsort(scores, descending=True, stable=True).to(boxes.device)
    rank = torch.arange(len(order), 0, -1, dtype=boxes.dtype, device=boxes.device)
    kept = nms(boxes[order], rank, float(iou_threshold))
    return order[kept].tolist()


_XYXY = "[x_min, y_min, x_max, y_max]"


def _nesting_depth(value: Any) -> int:
    """Depth of nested lists / arrays, following first elements: a number is 0, an empty list 1."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return value.ndim
    if isinstance(value, (list, tuple)):
        return 1 + (_nesting_depth(value[0]) if len(value) else 0)
    return 0


def _is_empty(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray, torch.Tensor)) and _nesting_depth(value) >= 1 \
        and len(value) == 0


def _one_image(value: Any, depth_of_one: int, name: str, example: str) -> list:
    """A single image's `value` -> `[value]`, accepting a list of items `example` or the nesting `[example]`."""
    if not isinstance(value, (list, tuple, np.ndarray, torch.Tensor)) or (
            _nesting_depth(value) < depth_of_one and not _is_empty(value)):
        raise ValueError(f"{name}={value!r} is not nested as expected; for one image pass {example} or the "
                         f"per-image nesting [{example}].")
    depth = _nesting_depth(value)
    # `[[...]]` is one image's entry when its only element is itself a list of items (or empty)
    if len(value) == 1 and (depth > depth_of_one or _is_empty(value[0])):
        return [value[0]]
    if depth > depth_of_one:
        raise ValueError(f"{name} for one image is nested {depth} deep with {len(value)} entries at the top; pass "
                         f"{example} or [{example}] (a single entry: the one image).")
    return [value]


def _boxes_per_image(boxes: Any, box_scores: Any, num_images: int, single: bool,
                     first_number: int = 0) -> tuple[list, list | None]:
    """The pose pipeline's `boxes` / `box_scores` -> one entry per image (nesting rules: `Sapiens2PosePipeline`).

    Only the nesting and the scores are checked here; the boxes' values are checked by the image processor
    (`validate_pose_boxes`) once the images' sizes are known. Errors number the images from `first_number`.
    """
    if single:
        boxes = _one_image(boxes, 2, "boxes", f"[{_XYXY}, ...]")
        if box_scores is not None:
            box_scores = _one_image(box_scores, 1, "box_scores", "[score, ...]")
    else:
        if not isinstance(boxes, (list, tuple, np.ndarray, torch.Tensor)) or len(boxes) != num_images:
            count = len(boxes) if hasattr(boxes, "__len__") else "no"
            raise ValueError(f"boxes has {count} entries for {num_images} images; pass one list of {_XYXY} boxes "
                             "per image (an empty list for an image without people).")
        for i, entry in enumerate(boxes):
            if _nesting_depth(entry) < 2 and not _is_empty(entry):
                raise ValueError(f"boxes[{i}] = {entry!r} is not a list of boxes; with a list of images pass one "
                                 f"list of boxes per image, e.g. [[{_XYXY}], []].")
        if box_scores is not None and (not isinstance(box_scores, (list, tuple, np.ndarray, torch.Tensor))
                                       or len(box_scores) != num_images):
            count = len(box_scores) if hasattr(box_scores, "__len__") else "no"
            raise ValueError(f"box_scores has {count} entries for {num_images} images; pass one list of scores per "
                             "image, nested like boxes.")
    if box_scores is None:
        return list(boxes), None
    scores = []
    for i, (image_boxes, image_scores) in enumerate(zip(boxes, box_scores), start=first_number):
        try:
            values = np.asarray(image_scores.detach().cpu() if isinstance(image_scores, torch.Tensor)
                                else image_scores, dtype=np.float64)
        except (TypeError, ValueError):
            values = None
        if values is None or values.ndim != 1 and values.size:
            raise ValueError(f"box_scores for image {i} is {image_scores!r}; pass one number per box, nested like "
                             "boxes.")
        if values.size != len(image_boxes):
            raise ValueError(f"box_scores for image {i} has {values.size} score(s) for {len(image_boxes)} box(es); "
                             "pass one score per box, nested like boxes.")
        if not np.isfinite(values).all():
            raise ValueError(f"box_scores for image {i} holds non-finite values {values.tolist()}; scores must be "
                             "finite numbers.")
        scores.append(values.reshape(-1).tolist())
    return list(boxes), scores


@dataclass
class _PoseInput:
    """One image of a pose call with its boxes, numbered by its position in the call (errors name that number).

    `boxes` / `box_scores` are `None` (detect), or one image's entry as the caller gave it (`checked=False`: its
    nesting is checked in `preprocess`) or as `_boxes_per_image` returned it (`checked=True`)."""

    number: int
    image: Any
    boxes: Any = None
    box_scores: Any = None
    checked: bool = False


_POSE_INPUT_KEYS = ("image", "boxes", "box_scores")


def _pose_input(number: int, item: Any) -> _PoseInput:
    """An image or an `{"image", "boxes", "box_scores"}` dict (other keys, e.g. a dataset row's, are ignored)."""
    if isinstance(item, _PoseInput):
        return item
    if isinstance(item, dict):
        if "image" not in item:
            raise ValueError(f"input {number} is a dict without an 'image' key (keys: {sorted(item)}); pass "
                             "{'image': ..., 'boxes': [[x_min, y_min, x_max, y_max], ...], 'box_scores': [...]} "
                             "(boxes and box_scores optional).")
        if item.get("box_scores") is not None and item.get("boxes") is None:
            raise ValueError(f"input {number} has box_scores but no boxes; detected boxes come with the detector's "
                             "scores.")
        return _PoseInput(number, item["image"], item.get("boxes"), item.get("box_scores"))
    return _PoseInput(number, item)


class _NumberedPoseDataset(Dataset):
    """A map-style dataset of pose inputs (e.g. `KeyDataset(dataset, "image")`, or rows with `image` / `boxes`
    columns), numbered by index."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return _pose_input(index, self.dataset[index])

    def __iter__(self):  # `ChunkPipeline` iterates its input; the sequence protocol would need an IndexError
        return (self[index] for index in range(len(self)))


class Sapiens2PosePipeline(_Sapiens2PipelineBase, ChunkPipeline):
    """`pipeline("sapiens2-pose")`: top-down 308-keypoint pose estimation.

    Inputs: an image, a list of images, a generator or a `torch.utils.data.Dataset` (e.g. `KeyDataset(dataset,
    "image")`). Instead of an image, a dict `{"image": ..., "boxes": [...], "box_scores": [...]}` carries its own
    boxes (one image's nesting, below; `boxes` and `box_scores` optional, other keys ignored), so a dataset with
    image and box columns, or a generator, streams with its boxes.

    Call arguments:
        boxes: person boxes in image pixels, always `[x_min, y_min, x_max, y_max]` (box_format `"xyxy"`; the image
            processor's own default is COCO xywh, so the pipeline names the format in every processor call). No
            detector is loaded then.
            - one image: a list of boxes `[[x0, y0, x1, y1], ...]`, or the per-image nesting
              `[[[x0, y0, x1, y1], ...]]`; `[]` (or `[[]]`) means no people;
            - a list of images: one list of boxes per image, `[[box, ...], [], ...]`.
            Arrays / tensors of shape `(num_boxes, 4)` (one image) or one such entry per image work the same way.
            Boxes may stick out of the image (as officially), but a box that is NaN or infinite, has zero or
            negative width or height, or lies entirely outside its image raises a `ValueError` naming the image,
            the box, its value and the box format.
        box_scores: optional scores for `boxes` (default 1.0), nested exactly like `boxes`: for one image a list of
            numbers (or `[[...]]`), for a list of images one list per image; one finite score per box.
        detector: used for an image without boxes: a transformers object-detection pipeline, a model id / folder for
            one (default `DEFAULT_DETECTOR`, which needs the Hub or a local copy), or a callable with the same output
            format. If it cannot be loaded, the error names the default detector, `boxes=` and `detector=`. It runs
            in `preprocess`, so with `num_workers` > 0 in the `DataLoader` worker: give it a CPU detector there,
            or boxes.
        detector_threshold (`float`, defaults to 0.3), person_label (`str`, defaults to `"person"`),
            nms_threshold (`float`, defaults to 0.3): the official demo's filtering.
        fallback_to_full_image (`bool`, defaults to `True`): official demo behaviour when no person is detected:
            the whole image becomes one box (its `bbox_score` is 0.0).
        flip_test (`bool`, defaults to `True`): the official flip test (averaged heatmaps); skipped for a model whose
            keypoints have no left/right pairs.
        keypoint_format (`str` or list of `str`, optional): `"coco17"`, `"coco_wholebody133"`, `"body25"` or a list
            of 308 keypoint names: return the keypoints, scores and `labels` (names) in that format instead of the
            model's 308 (image processor's `post_process_pose_estimation(keypoint_format=...)`, which decodes only
            the heatmap channels the format reads; missing points are `(0, 0)` with score 0).
        batch_size (`int` >= 1): person crops per model call. This is transformers' `ChunkPipeline`: `preprocess`
            turns each image into one row per person (cropping `POSE_CROP_CHUNK_SIZE` boxes at a time),
            consecutive images' rows share model calls, each call's heatmaps are decoded as it returns (`_forward`,
            with the image processor), and `postprocess` collects each image's people. Memory is bounded by the
            batch size and chunk, whatever the number of boxes. `crop_batch_size` (`int` >= 1) is the same setting
            under its older name; when given it wins.
        num_workers (`int` >= 0): as in transformers (`ChunkPipeline` runs at most one worker).

    Result per image: a list of people, in box order, each `{"bbox": np.ndarray (4,) float32 xyxy, "bbox_score":
    float, "keypoints": np.ndarray (num_keypoints, 2) float64 (x, y) image pixels, "scores": np.ndarray
    (num_keypoints,) float32 heatmap maxima, "labels": list[str] keypoint names}`.
    """

    task_name = "pose"

    def __init__(self, *args, detector=None, **kwargs):
        super().__init__(*args, **kwargs)
        # The pipeline's own detector, as given (never replaced by a call's `detector=`, which lives only in that
        # call's preprocess parameters, as every per-call argument does in transformers' pipelines).
        self._detector = detector
        # Detectors loaded from a name (the default, the pipeline's own or a call's), by name: a cache, so that a
        # name is loaded once; which one a call uses is decided by that call's arguments alone.
        self._loaded_detectors: dict[str, Any] = {}

    def _call_parameters(self):
        return {
            "detector": "preprocess", "detector_threshold": "preprocess", "person_label": "preprocess",
            "nms_threshold": "preprocess", "fallback_to_full_image": "preprocess", "flip_test": "forward",
            "keypoint_format": "postprocess",
        }

    def __call__(self, inputs, *args, boxes=None, box_scores=None, batch_size: int | None = None,
                 crop_batch_size: int | None = None, num_workers: int | None = None, **kwargs):
        if box_scores is not None and boxes is None:
            raise ValueError("box_scores= needs boxes=; detected boxes come with the detector's scores.")
        batch_size = _positive_int("batch_size", batch_size, None)
        batch_size = _positive_int("crop_batch_size", crop_batch_size, batch_size)
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if boxes is not None:
            if isinstance(inputs, (types.GeneratorType, Dataset)) or not isinstance(inputs, list) and (
                    hasattr(inputs, "__next__") or isinstance(inputs, dict)):
                raise ValueError("boxes= needs an image or a list of images, one list of boxes per image; a "
                                 "generator, dataset or dict input carries its own boxes: {'image': ..., 'boxes': "
                                 "[...], 'box_scores': [...]}.")
            single = not isinstance(inputs, list)
            images = [inputs] if single else inputs
            if any(isinstance(image, dict) for image in images):
                raise ValueError("boxes= is for image inputs; dict inputs carry their own 'boxes'.")
            per_image, scores = _boxes_per_image(boxes, box_scores, len(images), single)
            items = [_PoseInput(i, image, per_image[i], None if scores is None else scores[i], checked=True)
                     for i, image in enumerate(images)]
            inputs = items[0] if single else items
        elif isinstance(inputs, list):
            inputs = [_pose_input(i, item) for i, item in enumerate(inputs)]
        elif isinstance(inputs, Dataset):
            inputs = _NumberedPoseDataset(inputs)
        elif isinstance(inputs, types.GeneratorType):
            inputs = (_pose_input(i, item) for i, item in enumerate(inputs))
        else:
            inputs = _pose_input(0, inputs)
        return super().__call__(inputs, *args, batch_size=batch_size, num_workers=num_workers, **kwargs)

    def _get_detector(self, detector):
        """The detector of one call: its `detector=` when given, else the pipeline's own (else the default)."""
        detector = detector if detector is not None else self._detector
        if detector is not None and not isinstance(detector, str):
            return detector
        name = detector or DEFAULT_DETECTOR
        loaded = self._loaded_detectors.get(name)
        if loaded is None:
            from transformers import pipeline as make_pipeline

            try:
                loaded = make_pipeline("object-detection", model=name, device=self.device)
            except (OSError, ValueError, ImportError) as error:
                # the loader's own words only as far as their first sentence: transformers' offline message runs
                # to several lines and a URL, which buried the fix
                reason = " ".join(str(error).split()).split(". ")[0][:160]
                message = (
                    f"no person boxes were given and the person detector {name!r} could not be loaded "
                    f"({type(error).__name__}: {reason}); pass boxes=[[x_min, y_min, x_max, y_max], ...] (CLI: "
                    "--boxes FILE.json holding {\"photo.jpg\": [[x_min, y_min, x_max, y_max]]}, or --whole-image "
                    "when the image is one person), or a detector available here (detector=<local folder or "
                    "pipeline>; CLI: --detector FOLDER)."
                )
                raise (OSError(message) if isinstance(error, OSError) else ValueError(message)) from error
            # two threads loading the same name at once both load it; either copy serves
            loaded = self._loaded_detectors.setdefault(name, loaded)
        return loaded

    def _detect(self, image: np.ndarray, detector=None, detector_threshold=0.3, person_label="person",
                nms_threshold=0.3, fallback_to_full_image=True) -> tuple[list, list]:
        """One image's person boxes (xyxy) and scores, filtered as the official demo does."""
        from PIL import Image

        detector = self._get_detector(detector)
        threshold = float(detector_threshold)
        person = str(person_label).lower()
        detections = detector(Image.fromarray(image), threshold=threshold)
        kept = [d for d in detections if str(d["label"]).lower() == person and float(d["score"]) > threshold]
        if kept:
            xyxy = torch.tensor([[d["box"]["xmin"], d["box"]["ymin"], d["box"]["xmax"], d["box"]["ymax"]]
                                 for d in kept], dtype=torch.float32)
            score = torch.tensor([float(d["score"]) for d in kept], dtype=torch.float32)
            # a detector may return an empty (zero-width) box; it has no person to crop
            usable = (torch.isfinite(xyxy).all(dim=1) & (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
                      & (xyxy[:, 2] > 0) & (xyxy[:, 3] > 0) & (xyxy[:, 0] < image.shape[1])
                      & (xyxy[:, 1] < image.shape[0]))
            xyxy, score = xyxy[usable], score[usable]
            if len(xyxy):
                keep = _nms(xyxy, score, float(nms_threshold))
                return xyxy[keep].tolist(), score[keep].tolist()
        if fallback_to_full_image:
            return [[0.0, 0.0, float(image.shape[1]), float(image.shape[0])]], [0.0]
        return [], []

    def preprocess(self, item, **detection):
        """One image -> one model row per person (`ChunkPipeline`): each row holds the crop `pixel_values`
        `(1, 3, height, width)`, its box geometry and score, the image size and `is_last`. An image without people
        gives one row with `has_person` False (its zero crop is never run)."""
        item = _pose_input(0, item)
        load = getattr(self.image_processor, "load_image_rgb", None)
        array = load(item.image) if load is not None else item.image
        if item.boxes is None:
            boxes, scores = self._detect(array, **detection)
        else:
            boxes, scores = item.boxes, item.box_scores
            if not item.checked:
                (boxes,), scores = _boxes_per_image(boxes, scores, 1, True, first_number=item.number)
                scores = None if scores is None else scores[0]
            validate = getattr(self.image_processor, "validate_pose_boxes", None)
            if validate is not None:
                # checked before any crop, naming the image's number in the whole call
                validate([boxes], "xyxy", [array.shape[:2]], [item.number])
        if scores is None:
            scores = [1.0] * len(boxes)
        count = len(boxes)
        if count == 0:
            height, width = self.image_processor.input_size
            yield {"has_person": torch.zeros(1, dtype=torch.bool), "pixel_values": torch.zeros(1, 3, height, width),
                   "bbox_center": torch.zeros(1, 2), "bbox_scale": torch.zeros(1, 2), "boxes_xyxy": torch.zeros(1, 4),
                   "box_score": torch.zeros(1, dtype=torch.float64),
                   "original_size": torch.tensor([array.shape[:2]], dtype=torch.long), "is_last": True}
            return
        # Cropped POSE_CROP_CHUNK_SIZE boxes at a time, as the rows are consumed: 1,000 boxes never hold 1,000 crops.
        for start in range(0, count, POSE_CROP_CHUNK_SIZE):
            chunk = list(boxes[start : start + POSE_CROP_CHUNK_SIZE])
            inputs = self.image_processor([array], boxes=[chunk], box_format="xyxy", task="pose",
                                          input_data_format="channels_last" if load is not None else None)
            rows = {key: inputs[key] for key in ("pixel_values", "bbox_center", "bbox_scale", "boxes_xyxy")}
            rows["box_score"] = torch.tensor(scores[start : start + len(chunk)], dtype=torch.float64).reshape(-1)
            for k in range(len(chunk)):
                yield {"has_person": torch.ones(1, dtype=torch.bool),
                       **{key: value[k : k + 1].clone() for key, value in rows.items()},
                       "original_size": inputs["original_sizes"], "is_last": start + k == count - 1}

    def _sanitize_parameters(self, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        if "keypoint_format" in postprocess:
            forward["keypoint_format"] = postprocess["keypoint_format"]  # decoded in `_forward`, named in postprocess
        return preprocess, forward, postprocess

    def _forward(self, model_inputs, flip_test: bool = True, keypoint_format=None):
        """One batch of person rows -> their keypoints, decoded here by the image processor.

        An image's rows wait in transformers' `ChunkPipeline` until its last one has run, so decoding each batch as
        it comes (as transformers' mask-generation pipeline post-processes its masks in `_forward`) keeps
        `(num_keypoints, 2)` keypoints per waiting person instead of its heatmaps (about 120 MB per person at 1024x768
        with the flip test): memory is bounded by the batch size, not by the number of people in an image."""
        has_person = model_inputs["has_person"]
        keypoints = scores = None
        if bool(has_person.any()):
            crops = model_inputs["pixel_values"][has_person].to(self.device, self.model.dtype)
            heatmaps = self.model(pixel_values=crops).heatmaps
            extra = {}
            # a keypoint set without left/right pairs (a single hand) is not mirrored: no flip test for it
            mirrored = bool(getattr(self.model.config, "flip_pairs", None)) or heatmaps.shape[1] == NUM_POSE_KEYPOINTS \
                or self.image_processor.flip_indices is not None
            if flip_test and mirrored:
                extra["outputs_on_flipped_input"] = types.SimpleNamespace(
                    heatmaps=self.model(pixel_values=crops.flip(-1)).heatmaps)
                extra["flip_pairs"] = getattr(self.model.config, "flip_pairs", None)
            boxes = model_inputs["boxes_xyxy"][has_person]
            geometry = {"bbox_center": model_inputs["bbox_center"][has_person], "bbox_scale":
                        model_inputs["bbox_scale"][has_person], "boxes_xyxy": boxes}
            (people,) = self.image_processor.post_process_pose_estimation(
                types.SimpleNamespace(heatmaps=heatmaps), crops=geometry, keypoint_format=keypoint_format, **extra)
            found = torch.stack([person["keypoints"] for person in people])
            found_scores = torch.stack([person["scores"] for person in people])
            # rows of images without people get zeros, never read
            keypoints = found.new_zeros((has_person.shape[0], *found.shape[1:]))
            scores = found_scores.new_zeros((has_person.shape[0], *found_scores.shape[1:]))
            keypoints[has_person.to(found.device)] = found
            scores[has_person.to(found_scores.device)] = found_scores
        # `has_person` first: transformers' iterators read the batch size from the first entry
        return {"has_person": has_person, "keypoints": keypoints, "keypoint_scores": scores,
                **{key: model_inputs[key] for key in ("boxes_xyxy", "box_score", "original_size", "is_last")}}

    def _keypoint_names(self, num_keypoints: int) -> list[str]:
        id2label = getattr(self.model.config, "id2label", None) or {}
        names = [id2label.get(i, id2label.get(str(i))) for i in range(num_keypoints)]
        if len(id2label) == num_keypoints and all(n and not str(n).startswith("LABEL_") for n in names):
            return [str(n) for n in names]
        return list(self.image_processor.keypoint_names(num_keypoints))

    def postprocess(self, model_outputs, keypoint_format=None):
        """One image's rows (as `_forward` returned them, one person each, decoded) -> its list of people."""
        rows = [row for row in model_outputs if bool(row["has_person"].reshape(-1)[0])]
        if not rows:
            return []
        keypoints = torch.cat([row["keypoints"] for row in rows]).cpu().numpy()
        scores = torch.cat([row["keypoint_scores"] for row in rows]).cpu().numpy()
        boxes = torch.cat([row["boxes_xyxy"] for row in rows]).float().cpu().numpy()
        names = self._keypoint_names(keypoints.shape[1]) if keypoint_format is None else list(
            self.image_processor.keypoint_names(keypoints.shape[1], keypoint_format=keypoint_format))
        box_scores = torch.cat([row["box_score"] for row in rows]).tolist()
        return [
            {"bbox": boxes[k].astype(np.float32), "bbox_score": float(box_scores[k]), "keypoints": keypoints[k],
             "scores": scores[k], "labels": names}
            for k in range(len(rows))
        ]


#: The frame and units of `sapiens2-pose-3d` results and of the files written from them.
POSE_3D_FRAME = {"units": "metres", "frame": "camera: X right, Y down, Z forward (the pointmap's frame)",
                 "origin": "the camera centre"}


class Sapiens2Pose3DPipeline(Sapiens2PosePipeline):
    """`pipeline("sapiens2-pose-3d", model=POSE, pointmap_model=POINTMAP)`: each person's keypoints in metres, lifted
    with a pointmap of the same image (the rule: `lifting_sapiens2_hf`, `lift_keypoints`).

    Construction: `pointmap_model` is a `sapiens2-pointmap` pipeline or a pointmap model (`sapiens2_hf.pipeline`
    also takes a folder, Hub id or official file); `segmenter=` (as the pointmap pipeline takes it) masks the
    pointmap to the people, so keypoints off the person are flagged. Without a segmenter or a `foreground_mask`,
    nothing is flagged `"outside_mask"` (every pixel has a point).

    Call arguments: those of `sapiens2-pose` (`boxes=`, `detector=`, `keypoint_format=`, ...), the pointmap's camera
    (`focal_length=`, `intrinsics=`, `foreground_mask=`: one for all images or one per image), and the lifting's
    `score_threshold` (0.3), `window_radius` (pixels; default 2 % of the person box's larger side), `depth_jump`
    (0.1 m), `min_person_fraction` (0.25), `joint_depths` (`"auto"`: `JOINT_DEPTHS_M` by keypoint name; a number
    or one value per keypoint in metres; 0 keeps every keypoint on the skin). Inputs: an image, a list of images or
    of dicts (`{"image", "boxes", "box_scores", "foreground_mask", "focal_length", "intrinsics"}`); a generator or a
    dataset is read into a list first.

    Result per image: `{"people": [...], "pointmap": (height, width, 3) float32, "mask": (height, width) bool or
    None, "focal_length": float or None, **POSE_3D_FRAME}`; each person is the `sapiens2-pose` person plus
    `"keypoints_3d"` `(num_keypoints, 3)` float32 metres (NaN where none), `"keypoint_3d_confidence"`
    `(num_keypoints,)` float32, `"keypoint_3d_valid"` `(num_keypoints,)` bool and `"keypoint_3d_status"` (one of
    `STATUSES` per keypoint).
    """

    def __init__(self, *args, pointmap_model=None, segmenter=None, **kwargs):
        super().__init__(*args, **kwargs)
        if pointmap_model is None:
            raise ValueError("sapiens2-pose-3d lifts keypoints with a pointmap: pass pointmap_model= (a "
                             "sapiens2-pointmap pipeline or model; sapiens2_hf.pipeline also takes a folder, Hub id "
                             "or official file).")
        if isinstance(pointmap_model, Sapiens2PointmapPipeline):
            if segmenter is not None:
                raise ValueError("pass segmenter= to the pointmap pipeline you give (pointmap_model=), not to "
                                 "sapiens2-pose-3d.")
            self.pointmap_pipeline = pointmap_model
        elif isinstance(pointmap_model, torch.nn.Module) and hasattr(pointmap_model, "config"):
            self.pointmap_pipeline = Sapiens2PointmapPipeline(model=pointmap_model, device=self.device,
                                                              segmenter=segmenter)
        else:
            raise ValueError(f"pointmap_model of type {type(pointmap_model).__name__} is not usable here; pass a "
                             "sapiens2-pointmap pipeline or model (sapiens2_hf.pipeline loads names and files).")

    def __call__(self, inputs, *args, boxes=None, box_scores=None, focal_length=None, intrinsics=None,
                 foreground_mask=None, batch_size: int | None = None, crop_batch_size: int | None = None,
                 num_workers: int | None = None, score_threshold: float = 0.3, window_radius: int | None = None,
                 depth_jump: float = 0.1, min_person_fraction: float = 0.25, joint_depths="auto", **kwargs):
        if args:
            raise TypeError(f"{type(self).__name__} takes the inputs as its only positional argument; pass the "
                            "options by name.")
        single = not isinstance(inputs, (list, tuple, types.GeneratorType, Dataset)) and not hasattr(inputs, "__next__")
        items = [inputs] if single else list(inputs)
        if not items:
            return []
        people = super().__call__(items[0] if single else items, boxes=boxes, box_scores=box_scores,
                                  batch_size=batch_size, crop_batch_size=crop_batch_size, num_workers=num_workers,
                                  **kwargs)
        people = [people] if single else people
        camera = {"focal_length": focal_length, "intrinsics": intrinsics, "foreground_mask": foreground_mask}
        maps = self.pointmap_pipeline(
            [self._pointmap_input(item) for item in items],
            **{key: value for key, value in camera.items() if value is not None}, batch_size=batch_size)
        lifting = {"score_threshold": float(score_threshold), "window_radius": window_radius,
                   "depth_jump": float(depth_jump), "min_person_fraction": float(min_person_fraction)}
        results = [self._lift(image_people, image_map, joint_depths, lifting)
                   for image_people, image_map in zip(people, maps)]
        return results[0] if single else results

    @staticmethod
    def _pointmap_input(item):
        if isinstance(item, dict):
            return {key: item[key] for key in ("image", "foreground_mask", "focal_length", "intrinsics") if key in item}
        return item

    def _lift(self, people: list, pointmap_result: dict, joint_depths, lifting: dict) -> dict:
        pointmap, mask = pointmap_result["pointmap"], pointmap_result.get("mask")
        lifted_people = []
        for person in people:
            names = person["labels"]
            depths = joint_depths_for(names) if isinstance(joint_depths, str) and joint_depths == "auto" \
                else joint_depths
            lifted = lift_keypoints(person["keypoints"], person["scores"], pointmap, mask, joint_depths=depths,
                                    box=person["bbox"], **lifting)
            lifted_people.append({**person, "keypoints_3d": lifted.keypoints_3d,
                                  "keypoint_3d_confidence": lifted.confidence, "keypoint_3d_valid": lifted.valid,
                                  "keypoint_3d_status": lifted.status})
        return {"people": lifted_people, "pointmap": pointmap, "mask": mask,
                "focal_length": pointmap_result.get("focal_length"), **POSE_3D_FRAME}


#: Pipelines composed of several task models: pipeline name -> (the task of its `model=`, its class).
COMPOSED_PIPELINES = {"sapiens2-pose-3d": ("pose", Sapiens2Pose3DPipeline)}


PIPELINE_CLASSES = {
    "sapiens2-pose": Sapiens2PosePipeline,
    "sapiens2-segmentation": Sapiens2SegmentationPipeline,
    "sapiens2-normal": Sapiens2NormalPipeline,
    "sapiens2-pointmap": Sapiens2PointmapPipeline,
    "sapiens2-albedo": Sapiens2AlbedoPipeline,
    "sapiens2-matting": Sapiens2MattingPipeline,
}


def register_pipelines(model_classes: dict[str, Any] | None = None) -> None:
    """Register the pipeline of every task in the registry with transformers' pipeline registry (idempotent).

    Args:
        model_classes: model class (or tuple of classes) used to load a model from a folder / Hub id, keyed by short
            task (`"pose"`, `"seg"`, ...) or pipeline task. Defaults to transformers' Auto class of the task (our
            config must be registered with it); a task transformers has none for (albedo, a registered task) has no
            default, so pass it (e.g. `{"albedo": AutoModelForAlbedoEstimation}`).
    """
    import transformers

    model_classes = dict(model_classes or {})
    for spec in TASK_SPECS.values():
        default = None if spec.auto_class == "AutoModel" else getattr(transformers, spec.auto_class, None)
        register_pipeline(spec.name, model_classes.get(spec.name, model_classes.get(spec.pipeline_name, default)))


def register_pipeline(task: str, model_class: Any = None) -> None:
    """Register `task`'s pipeline (`PIPELINE_CLASSES`) under its pipeline name with transformers (idempotent);
    `model_class` (a class or tuple of classes) loads a model given by name."""
    from transformers.pipelines import PIPELINE_REGISTRY

    pipeline_task = TASK_SPECS[task].pipeline_name
    wanted_models = () if model_class is None else (model_class if isinstance(model_class, tuple) else (model_class,))
    # the task's own pipeline, then those composed on its model (`COMPOSED_PIPELINES`), which load it alike
    wanted = [(pipeline_task, PIPELINE_CLASSES[pipeline_task])]
    wanted += [(name, pipeline_class) for name, (base, pipeline_class) in COMPOSED_PIPELINES.items() if base == task]
    for name, pipeline_class in wanted:
        current = PIPELINE_REGISTRY.supported_tasks.get(name)
        if current is not None and current.get("impl") is pipeline_class \
                and tuple(current.get("pt", ())) == wanted_models:
            continue
        PIPELINE_REGISTRY.register_pipeline(name, pipeline_class=pipeline_class, pt_model=wanted_models or None,
                                            type="image")


def unregister_pipeline(task: str) -> None:
    """Remove `task`'s pipeline from transformers' pipeline registry and `PIPELINE_CLASSES`."""
    from transformers.pipelines import PIPELINE_REGISTRY

    pipeline_task = TASK_SPECS[task].pipeline_name
    PIPELINE_REGISTRY.supported_tasks.pop(pipeline_task, None)
    PIPELINE_CLASSES.pop(pipeline_task, None)


__all__ = [
    "COMPOSED_PIPELINES",
    "DEFAULT_DETECTOR",
    "PIPELINE_CLASSES",
    "POSE_3D_FRAME",
    "Sapiens2Pose3DPipeline",
    "PIPELINE_TASKS",
    "Sapiens2AlbedoPipeline",
    "Sapiens2DenseMapPipeline",
    "dense_map_pipeline_class",
    "Sapiens2MattingPipeline",
    "Sapiens2NormalPipeline",
    "Sapiens2PointmapPipeline",
    "Sapiens2PosePipeline",
    "Sapiens2SegmentationPipeline",
    "register_pipeline",
    "register_pipelines",
    "unregister_pipeline",
]
