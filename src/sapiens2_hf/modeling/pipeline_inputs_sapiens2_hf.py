# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""What a Sapiens2 pipeline call is given, normalised once before transformers' `Pipeline.__call__`.

A list or tuple is a batch of images (the results: a list), a generator or a `torch.utils.data.Dataset` a stream (a
lazy iterator), anything else one image. Each item is an image or a dict `{"image": ..., <that image's options>}`; a
call's per-image option (`foreground_mask=`, `boxes=`, ...) gives one value per image for a batch. Each item becomes
one numbered record (`_DenseInput`, `_PoseInput`), so that errors name the image's position in the call.

Values are read by their array shape, never by how deep a list's first element is nested: one image's pose boxes
are a `(num_boxes, 4)` array-like (`[]`: none) or that wrapped once, its scores `(num_boxes,)` likewise; a batch's
boxes hold one `(num_boxes, 4)` entry per image.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


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


class _ImageOptions:
    """One image's mask and camera, carried beside its model row. Neither a tensor nor an array, so transformers'
    collate function and batch splitting hand it through untouched (masks have their image's size, which differs
    between the images of a batch)."""

    __slots__ = ("number", "mask", "camera")

    def __init__(self, number: int, mask: np.ndarray | None, camera: dict[str, Any]):
        self.number, self.mask, self.camera = number, mask, camera


_XYXY = "[x_min, y_min, x_max, y_max]"


def _shape(value: Any) -> tuple[int, ...] | None:
    """The array shape of a list / array / tensor of numbers (`()` for one number); `None` when it has none (ragged
    lists, non-numbers), which is then left to the value checks (`validate_pose_boxes`) to name."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    try:
        return np.asarray(value, dtype=np.float64).shape
    except (TypeError, ValueError):
        return None


def _one_image(value: Any, item_ndim: int, name: str, example: str) -> list:
    """A single image's `value` -> `[value]`, read by its shape: the image's entry has `item_ndim` dimensions
    (`(num_boxes, 4)` boxes, `(num_boxes,)` scores; `[]`: none), or comes wrapped once (`[[...]]`, `[[]]`: the
    per-image nesting of one image)."""
    shape = _shape(value)
    if shape is None and isinstance(value, (list, tuple)):
        return [value]  # ragged: the boxes' own checks name what is wrong
    shape = () if shape is None else shape
    if shape == (1, 0) or (len(shape) == item_ndim + 1 and shape[0] == 1):
        return [value[0]]
    if shape == (0,) or len(shape) == item_ndim:
        return [value]
    if len(shape) > item_ndim:
        raise ValueError(f"{name} for one image is nested {len(shape)} deep with {shape[0]} entries at the top; "
                         f"pass {example} or [{example}] (a single entry: the one image).")
    raise ValueError(f"{name}={value!r} is not nested as expected; for one image pass {example} or the "
                     f"per-image nesting [{example}].")


def _boxes_per_image(boxes: Any, box_scores: Any, num_images: int, single: bool,
                     first_number: int = 0) -> tuple[list, list | None]:
    """The pose pipeline's `boxes` / `box_scores` -> one entry per image, read by shape (one image: `_one_image`).
    Only the nesting and the scores are checked here (images numbered from `first_number`); the image processor
    checks the boxes' values once the images' sizes are known (`validate_pose_boxes`)."""
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
            shape = _shape(entry)
            if shape is not None and len(shape) < 2 and shape != (0,):
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
    """One image of a pose call, numbered by its position in the call, with its `boxes` / `box_scores`: `None`
    (detect), as the caller gave them (nesting checked in `preprocess`) or already `checked` (`_boxes_per_image`)."""

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


class _NumberedDataset(Dataset):
    """A map-style dataset of pipeline inputs (e.g. `KeyDataset(dataset, "image")`, or rows with an `image` column and
    that image's options), each row made a record numbered by its index with `make_input(index, row)`."""

    def __init__(self, dataset, make_input):
        self.dataset, self.make_input = dataset, make_input

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return self.make_input(index, self.dataset[index])

    def __iter__(self):  # `ChunkPipeline` iterates its input; the sequence protocol would need an IndexError
        return (self[index] for index in range(len(self)))


def dense_call_inputs(inputs: Any, options: dict[str, Any], processor) -> Any:
    """A dense (normal / pointmap / albedo) call's inputs as `_DenseInput` records, with the call's per-image
    `options` (`foreground_mask`, `focal_length`, `intrinsics`) spread over them; `processor` checks the cameras."""
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
                per_image[name] = processor.camera_per_image(options[name], name, len(inputs))
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
                processor.validate_camera(**{name: value})
        if isinstance(inputs, Dataset):
            inputs = _NumberedDataset(inputs, partial(_dense_input, defaults=options))
        else:
            inputs = (_dense_input(i, item, options) for i, item in enumerate(inputs))
    else:
        inputs = _dense_input(0, inputs, options)
    return inputs


def pose_call_inputs(inputs: Any, boxes: Any = None, box_scores: Any = None) -> Any:
    """A pose call's inputs as `_PoseInput` records, with the call's `boxes` / `box_scores` (nested as
    `Sapiens2PosePipeline` documents) spread over them."""
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
        inputs = _NumberedDataset(inputs, _pose_input)
    elif isinstance(inputs, types.GeneratorType):
        inputs = (_pose_input(i, item) for i, item in enumerate(inputs))
    else:
        inputs = _pose_input(0, inputs)
    return inputs
