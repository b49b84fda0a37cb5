# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The checks of what a Sapiens2 image processor is given (tasks, sizes, normalisation, pose boxes, person-foreground
masks, cameras), each a one-line `ValueError` naming the parameter and the fix; shared by processor and pipelines."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from .configuration_sapiens2_hf import check_image_size
from .sapiens2_tasks import PRETRAIN_TASK, TASK_NAMES, TASK_SPECS

def processor_tasks() -> tuple[str, ...]:
    """The tasks a processor takes: every registered task (read at call time), then pretraining."""
    return (*TASK_NAMES, PRETRAIN_TASK)


def _check_processor_task(task: str) -> None:
    if task not in processor_tasks():
        raise ValueError(f"task={task!r} is not a Sapiens2 task; use one of {processor_tasks()}.")


def _letterboxed(task: str) -> bool:
    """Whether `task` keeps the aspect ratio and pads (the registry's `resize == "letterbox"`)."""
    spec = TASK_SPECS.get(task)
    return spec is not None and spec.resize == "letterbox"


def foreground_fill_value(task: str) -> float | None:
    """The background value of `task`'s maps once masked by a person foreground (the registry's `foreground_fill`:
    normals 0, albedo 0, pointmap and depth NaN); `None` for a task whose output is not masked."""
    spec = TASK_SPECS.get(task)
    return None if spec is None else spec.foreground_fill

BOX_FORMATS = ("xyxy", "xywh")

_BOX_LAYOUT = {"xyxy": "[x_min, y_min, x_max, y_max]", "xywh": "[x_min, y_min, width, height] (COCO)"}


def validate_pose_boxes(
    boxes: Any, box_format: str, image_sizes: Sequence[tuple[int, int]] | None = None,
    image_numbers: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Per image, its `(num_boxes, 4)` person boxes (list, array or tensor, image pixels; empty: no person) in
    `box_format` (`"xywh"`, COCO, or `"xyxy"`) -> a float32 xyxy array (xywh converted in float32, as officially).

    A `ValueError` names the image (numbered by `image_numbers`, default `0, 1, ...`), the box, its value and
    `box_format` when a box is not a 4-number row, is not finite, has zero or negative width or height, or (with
    `image_sizes`, `(height, width)` per image) lies entirely outside its image: it may stick out, as in the
    official demo, but a box entirely outside crops only padding.
    """
    if box_format not in BOX_FORMATS:
        raise ValueError(f"box_format={box_format!r}; use one of {BOX_FORMATS}.")
    numbers = list(image_numbers) if image_numbers is not None else list(range(len(boxes)))
    result = []
    for position, image_boxes in enumerate(boxes):
        given = _boxes_array(image_boxes, numbers[position], box_format)
        if given.size == 0:
            result.append(np.zeros((0, 4), np.float32))
            continue
        array = given.astype(np.float32)
        if box_format == "xywh":
            array = np.concatenate([array[:, :2], array[:, :2] + array[:, 2:]], axis=1)
        size = image_sizes[position] if image_sizes is not None else None
        for k in range(len(array)):
            _check_box(given[k], array[k], f"box {k} of image {numbers[position]}", box_format, size)
        result.append(array)
    return result


def _boxes_array(image_boxes: Any, image: int, box_format: str) -> np.ndarray:
    """One image's boxes as a float64 `(num_boxes, 4)` array (or an empty one), or a `ValueError` naming the image."""
    layout = _BOX_LAYOUT[box_format]
    if isinstance(image_boxes, torch.Tensor):
        image_boxes = image_boxes.detach().cpu().numpy()
    try:
        given = np.asarray(image_boxes, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the boxes of image {image} are not a list of 4-number boxes ({error}); pass "
                         f"[{layout}, ...] per image (box_format={box_format!r}).") from None
    if given.size and (given.ndim != 2 or given.shape[1] != 4):
        raise ValueError(f"the boxes of image {image} have shape {tuple(given.shape)}; pass a list of boxes "
                         f"[{layout}, ...] per image, i.e. shape (num_boxes, 4) (box_format={box_format!r}).")
    return given


def _check_box(given: np.ndarray, xyxy: np.ndarray, name: str, box_format: str, image_size) -> None:
    """One box (as given, and as float32 xyxy) finite, with a positive size, overlapping its `(height, width)`
    image when known; else a `ValueError` naming it, its value and `box_format`."""
    layout = _BOX_LAYOUT[box_format]
    other = "xyxy" if box_format == "xywh" else "xywh"  # named in errors: the usual cause of an inverted box
    where = f"{name}, {[float(v) for v in given]} (box_format={box_format!r}, {layout})"
    x0, y0, x1, y1 = (float(v) for v in xyxy)
    if not np.isfinite(given).all() or not np.isfinite(xyxy).all():
        raise ValueError(f"{where} is not finite; boxes must be finite pixel coordinates.")
    if x1 <= x0 or y1 <= y0:
        rule = ("x_max must exceed x_min and y_max exceed y_min" if box_format == "xyxy"
                else "width and height must be > 0")
        raise ValueError(f"{where} has zero or negative width or height ({rule}); fix or drop the box "
                         f"(boxes are read as box_format={box_format!r}; {_BOX_LAYOUT[other]} boxes are "
                         f"box_format={other!r}).")
    if image_size is not None:
        height, width = image_size
        if x1 <= 0 or y1 <= 0 or x0 >= width or y0 >= height:
            raise ValueError(f"{where} lies entirely outside the {width}x{height} (width x height) image; a "
                             "box may stick out of the image but must overlap it. Check that the box "
                             f"belongs to this image and is written as {layout}.")


def _as_size_tuple(size: Any) -> tuple[int, int]:
    if isinstance(size, dict):
        return int(size["height"]), int(size["width"])
    if hasattr(size, "height") and hasattr(size, "width"):
        return int(size.height), int(size.width)
    height, width = size
    return int(height), int(width)


def _model_input_size(size: Any, name: str = "size") -> tuple[int, int]:
    """A processor `size` (`{"height": h, "width": w}`, `[h, w]` or a `SizeDict`) as `(height, width)`, each side in
    `[1, MAX_IMAGE_SIDE]` (the bound of the model's `image_size`): a one-line `ValueError` otherwise, before anything
    is allocated at that size."""
    try:
        height_width = size if isinstance(size, int) else _as_size_tuple(size)
    except (TypeError, ValueError, KeyError):
        raise ValueError(f"`{name}` must be {{'height': h, 'width': w}} or [height, width], got {size!r}.") from None
    return check_image_size(height_width, name=name)


def _normalization_values(name: str, value: Any) -> list[float]:
    """`image_mean` / `image_std` (one number, or one per RGB channel) as 3 floats, or a one-line `ValueError`: every
    value finite, and a std positive (pixels are divided by it: 0 gives inf, a negative one flips the image)."""
    try:
        values = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number or a list of numbers; pass one number, or one per RGB "
                         "channel.") from None
    if values.size not in (1, 3):
        raise ValueError(f"{name} has {values.size} values; pass one number, or one per RGB channel.")
    if not np.isfinite(values).all() or (name == "image_std" and not (values > 0).all()):
        need = "positive and finite" if name == "image_std" else "finite"
        raise ValueError(f"{name}={value!r}: every value must be {need} (the ImageNet {name} is "
                         f"{list(IMAGENET_DEFAULT_MEAN if name == 'image_mean' else IMAGENET_DEFAULT_STD)}).")
    return np.broadcast_to(values, (3,)).tolist()


def _check_rescale_factor(value: Any) -> float:
    """`rescale_factor` as a positive finite float (the 0-255 mean and std are divided by it), or a one-line
    `ValueError`."""
    try:
        factor = float(value)
    except (TypeError, ValueError):
        factor = float("nan")
    if not (np.isfinite(factor) and factor > 0):
        raise ValueError(f"rescale_factor={value!r} must be a positive finite number (1/255 for 8-bit images).")
    return factor


def _sizes_list(sizes: Any, count: int, name: str) -> list[tuple[int, int]] | None:
    if sizes is None:
        return None
    if isinstance(sizes, torch.Tensor):
        sizes = sizes.tolist()
    sizes = [_as_size_tuple(s) for s in sizes]
    if len(sizes) != count:
        raise ValueError(f"{name} has {len(sizes)} entries but the outputs hold {count} images; pass one "
                         "(height, width) per image.")
    return sizes


# Focal length (pixels of the model input) of the canonical camera the pointmap models predict in: their `scales` are
# `CANONICAL_FOCAL_LENGTH / f_x` (the official training targets' canonicalisation).
CANONICAL_FOCAL_LENGTH = 768.0


def _mask_image_to_bool(pil: Image.Image) -> np.ndarray:
    if pil.mode == "1":
        return np.asarray(pil, dtype=bool).copy()
    # a mask saved as an image is 0 / 255 (or 0 / 1) grey: anything above 0 is foreground
    return np.asarray(pil.convert("L")) > 0


def foreground_mask_array(mask: Any, image_size: Any = None, name: str = "foreground_mask") -> np.ndarray:
    """A person-foreground mask as a `(height, width)` bool numpy array of `image_size` (when given), or a
    `ValueError` naming it (`name`) for another shape or size, NaN / inf, or values that are not 0 / 1 (a soft
    matte: threshold it first). `mask`: a bool array / tensor, a numeric one of 0 and 1 (uint8: also 0 and 255), a
    PIL image (mode `"1"`, or converted to grey: above 0 is foreground) or its path; `(height, width, 1)` and
    `(1, height, width)` are squeezed.
    """
    array = _mask_as_array(mask, name)
    if array.ndim == 3 and 1 in (array.shape[0], array.shape[-1]):
        array = array.reshape(array.shape[1:] if array.shape[0] == 1 else array.shape[:2])
    if array.ndim != 2:
        raise ValueError(f"{name} has shape {tuple(array.shape)}; pass one (height, width) mask per image.")
    if array.dtype != bool:
        if not np.issubdtype(array.dtype, np.number):
            raise ValueError(f"{name} has dtype {array.dtype}; pass a bool or 0 / 1 mask.")
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            raise ValueError(f"{name} holds NaN or inf; pass a bool or 0 / 1 mask.")
        binary = (array == 0) | (array == 1)
        if not binary.all():
            if not (array.dtype == np.uint8 and ((array == 0) | (array == 255)).all()):
                raise ValueError(f"{name} holds values other than 0 and 1 (range [{array.min()}, {array.max()}]); "
                                 "pass a bool mask (threshold a soft matte or probabilities first, e.g. "
                                 "alpha > 0.5).")
        array = array != 0
    if image_size is not None:
        height, width = _as_size_tuple(image_size)
        if tuple(array.shape) != (height, width):
            raise ValueError(f"{name} is {array.shape[0]}x{array.shape[1]} (height x width) but the image is "
                             f"{height}x{width}; pass a mask of the image's size (resize it with nearest-neighbour "
                             "interpolation).")
    return np.ascontiguousarray(array)


def _mask_as_array(mask: Any, name: str) -> np.ndarray:
    """A mask given as an image path, a PIL image, a tensor or an array, as a numpy array (not yet checked)."""
    if isinstance(mask, str) or hasattr(mask, "__fspath__"):
        try:
            with Image.open(str(mask)) as pil:
                array = _mask_image_to_bool(pil)
        except (OSError, SyntaxError) as error:
            raise ValueError(f"could not read {name} from the image file {str(mask)!r}: {error}") from error
    elif isinstance(mask, Image.Image):
        array = _mask_image_to_bool(mask)
    else:
        if isinstance(mask, torch.Tensor):
            mask = mask.detach().cpu()
            mask = (mask.float() if mask.dtype == torch.bfloat16 else mask).numpy()
        try:
            array = np.asarray(mask)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{name} of type {type(mask).__name__} is not a mask; pass a (height, width) bool "
                             "array, tensor or PIL image.") from error
    return array


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _camera_entry(value: Any, kind: str) -> tuple[float, float, float, float] | float | None:
    """One image's `focal_length` (a number) or `intrinsics` (`(fx, fy, cx, cy)` or a 3x3 K), checked."""
    if value is None:
        return None
    if kind == "focal_length":
        if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
            value = value.item()
        if not _is_number(value) or not np.isfinite(value) or value <= 0:
            raise ValueError(f"focal_length {value!r} is not a positive finite number of pixels.")
        return float(value)
    array = value.detach().cpu().double().numpy() if isinstance(value, torch.Tensor) else value
    try:
        array = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"intrinsics {value!r} is neither (fx, fy, cx, cy) nor a 3x3 camera matrix.") from error
    if array.shape == (3, 3):
        if not np.isfinite(array).all():
            raise ValueError(f"intrinsics {array.tolist()} holds NaN or inf.")
        if array[0, 1] != 0 or array[1, 0] != 0 or array[2].tolist() != [0.0, 0.0, 1.0]:
            raise ValueError(f"intrinsics {array.tolist()} is not a pinhole matrix [[fx, 0, cx], [0, fy, cy], "
                             "[0, 0, 1]] (skew and a last row other than [0, 0, 1] are not supported).")
        fx, fy, cx, cy = array[0, 0], array[1, 1], array[0, 2], array[1, 2]
    elif array.shape == (4,):
        fx, fy, cx, cy = array
    else:
        raise ValueError(f"intrinsics of shape {tuple(array.shape)} is neither (fx, fy, cx, cy) nor a 3x3 camera "
                         "matrix (per image: one of those per image).")
    if not all(np.isfinite(v) for v in (fx, fy, cx, cy)) or fx <= 0 or fy <= 0:
        raise ValueError(f"intrinsics (fx, fy, cx, cy) = {(float(fx), float(fy), float(cx), float(cy))}: the focal "
                         "lengths must be positive and all four finite numbers (pixels of the original image).")
    return float(fx), float(fy), float(cx), float(cy)


def _check_one_camera_kind(focal_length: Any, intrinsics: Any) -> None:
    if focal_length is not None and intrinsics is not None:
        raise ValueError("pass focal_length or intrinsics, not both (intrinsics carry the focal length fx).")


def _camera_per_image(value: Any, kind: str, count: int) -> list | None:
    """`focal_length` / `intrinsics` for `count` images: one for all, or one per image (entries may be `None`)."""
    if value is None:
        return None
    if isinstance(value, (torch.Tensor, np.ndarray)):
        value = value.tolist()
    if kind == "focal_length":
        single = not isinstance(value, (list, tuple))
    else:
        # one camera is 4 numbers or a 3x3 matrix (rows of 3), so the nesting tells one from one per image
        single = isinstance(value, (list, tuple)) and (
            all(_is_number(v) for v in value)  # flat numbers: one camera (its length is checked below)
            or (len(value) == 3 and all(isinstance(row, (list, tuple)) and len(row) == 3
                                        and all(_is_number(v) for v in row) for row in value)))
    if single:
        return [_camera_entry(value, kind)] * count
    if not isinstance(value, (list, tuple)) or len(value) != count:
        got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
        example = "one number" if kind == "focal_length" else "one (fx, fy, cx, cy) or 3x3 matrix"
        raise ValueError(f"{kind} has {got} entries for {count} images; pass {example} for all images, or one per "
                         "image.")
    return [_camera_entry(entry, kind) for entry in value]


def validate_camera(focal_length: Any = None, intrinsics: Any = None) -> dict[str, Any]:
    """One image's `focal_length` / `intrinsics` checked as `post_process_pointmap_estimation` will read them
    (so that callers can fail before running a model): `{"focal_length": float or None, "intrinsics": (fx,
    fy, cx, cy) or None}`."""
    _check_one_camera_kind(focal_length, intrinsics)
    return {"focal_length": _camera_entry(focal_length, "focal_length"),
            "intrinsics": _camera_entry(intrinsics, "intrinsics")}
