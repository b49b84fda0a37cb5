# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Image processor for every Sapiens2 task with the official pre- and post-processing (layer 0, Hub-shippable).

`Sapiens2HFImageProcessor` stands on transformers' public processing API (`TorchvisionBackend`, `ImagesKwargs`,
`BatchFeature`) and imports nothing of transformers' own Sapiens2 port. It keeps that port's config fields, so
preprocessor_config.json files read both ways, but uses the official geometry, so that `pixel_values` equal the
official ones (exactly with OpenCV; see `sapiens2_processing_ops` for the torch fallback), and the official UDP / DARK
decoder, batched in torch on the outputs' device. One `task` field selects the policy:

| task | pre-processing | post-processing |
|---|---|---|
| `pose` | per-box top-down UDP crop (padding 1.25, aspect fix) | DARK-UDP decode, optional flip test, image pixels |
| `seg` | stretch resize (area when the width shrinks, else cubic) | bilinear logits to the original size, argmax |
| `normal` | letterbox (linear, centred zero padding) | unit length, unpad, bilinear |
| `pointmap` | letterbox | divide by scale, unpad, 4x 3x3 blur when enlarging, bilinear; depth = Z |
| `albedo` | letterbox | clamp [0, 1], unpad, bilinear |
| `matting` | stretch resize (area when the width shrinks, else linear) | bilinear to the original size, clamp [0, 1] |
| `pretrain` | stretch resize, as `seg` (feature extraction) | - |
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image
from transformers import BatchFeature, ImagesKwargs, TorchvisionBackend
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling

try:
    from transformers.image_processing_outputs import SemanticSegmentationPostProcessorOutput
except ImportError:  # transformers < 5.24 has no such class

    class SemanticSegmentationPostProcessorOutput(BatchFeature):
        """One image's semantic segmentation: `segmentation` (`(height, width)` int64 class ids) and
        `segmentation_scores` (`(num_labels, height, width)`), read as keys or attributes (transformers' class of
        that name from 5.24 on)."""

from .configuration_sapiens2_hf import check_image_size
from .image_loading_sapiens2_hf import load_image_rgb
from .sapiens2_label_data import NUM_POSE_KEYPOINTS, POSE_FLIP_PAIRS, POSE_KEYPOINT_NAMES
from .sapiens2_keypoint_formats import (
    KEYPOINT_FORMATS,
    convert_keypoints,
    format_keypoint_names,
    source_keypoint_indices,
)
from .sapiens2_processing_ops import (
    boxes_to_center_scale,
    crop_to_image,
    decode_udp_heatmaps,
    flip_pairs_to_indices,
    flip_test_average,
    keypoint_subset_maps,
    letterbox,
    letterbox_geometry,
    normalize_uint8,
    remove_padding,
    resize_logits_argmax,
    resize_maps_bilinear,
    resize_uint8,
    resolve_backend,
    smooth_and_resize_pointmap,
    stretch_resize,
    udp_gaussian_heatmaps,
    udp_warp_matrices,
    warp_crops,
)
from .sapiens2_tasks import PRETRAIN_TASK, TASK_NAMES, TASK_SPECS, task_spec


# The registry's tasks plus the processor-only pretraining / feature-extraction policy; the letterbox tasks keep the
# aspect ratio and pad (the others crop or stretch).


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
#: Crops whose heatmaps `post_process_pose_estimation` flip-averages and decodes at once: the DARK refinement works
#: on whole heatmaps (a few copies of 308x256x192 float32, about 60 MB each, per crop at 1024x768), so its memory is
#: bounded by this many crops whatever the number of boxes. Each crop decodes independently: the results do not
#: depend on it.
POSE_DECODE_CHUNK_SIZE = 16


class Sapiens2HFImageProcessorKwargs(ImagesKwargs, total=False):
    """
    do_reduce_labels (`bool`, *optional*, defaults to `False`):
        Kept for config compatibility with transformers' `Sapiens2ImageProcessor` (saved in
        preprocessor_config.json); the official Sapiens2 label maps need no reduction and this processor ignores it.
    keypoint_heatmap_downscale_factor (`int`, *optional*, defaults to 4):
        Model input size / size of the pose training heatmaps made from `keypoints`.
    keypoint_heatmap_sigma (`float`, *optional*, defaults to 6.0):
        Standard deviation, in heatmap pixels, of the Gaussians of those heatmaps.
    task (`str`, *optional*, defaults to `"pose"`):
        Which official policy to apply: `"pose"`, `"seg"`, `"normal"`, `"pointmap"`, `"albedo"` or `"matting"`.
    box_format (`str`, *optional*, defaults to `"xywh"`):
        Format of the pose `boxes` given to `preprocess` / `__call__`: `"xywh"` (COCO `[x_min, y_min, width,
        height]`, transformers' convention) or `"xyxy"` (`[x_min, y_min, x_max, y_max]`). Not used by
        `post_process_pose_estimation`, which needs the format named in each call that passes `boxes`.
    bbox_padding (`float`, *optional*, defaults to 1.25):
        Context padding of pose boxes.
    blur_kernel_size (`int`, *optional*, defaults to 11):
        Gaussian kernel of the DARK refinement.
    geometry_backend (`str`, *optional*, defaults to `"auto"`):
        `"auto"` (OpenCV when importable), `"cv2"` or `"torch"`.
    flip_indices (`list[int]`, *optional*):
        Keypoint permutation under a horizontal flip. Defaults to the official 308-keypoint table.
    pointmap_num_blurs (`int`, *optional*, defaults to 4):
        Number of 3x3 Gaussian passes (sigma `pointmap_blur_sigma`) before enlarging a pointmap.
    pointmap_blur_sigma (`float`, *optional*, defaults to 0.8):
        Sigma of those passes.
    """

    do_reduce_labels: bool
    keypoint_heatmap_downscale_factor: int
    keypoint_heatmap_sigma: float
    task: str
    box_format: str
    bbox_padding: float
    blur_kernel_size: int
    geometry_backend: str
    flip_indices: list[int] | None
    pointmap_num_blurs: int
    pointmap_blur_sigma: float


_BOX_LAYOUT = {"xyxy": "[x_min, y_min, x_max, y_max]", "xywh": "[x_min, y_min, width, height] (COCO)"}


def validate_pose_boxes(
    boxes: Any, box_format: str, image_sizes: Sequence[tuple[int, int]] | None = None,
    image_numbers: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Check person boxes and convert them to `(x_min, y_min, x_max, y_max)`.

    Args:
        boxes: one entry per image, each a list (or `(num_boxes, 4)` array / tensor) of boxes in `box_format`, image
            pixels; an empty entry means no person in that image.
        box_format (`str`): `"xywh"` (COCO `[x_min, y_min, width, height]`) or `"xyxy"`
            (`[x_min, y_min, x_max, y_max]`).
        image_sizes: per image `(height, width)`; when given, a box must overlap its image (it may stick out of it,
            as in the official demo, but a box entirely outside crops only padding).
        image_numbers: the image numbers to name in errors (default `0, 1, ...`; pipelines pass their global ones).

    Returns:
        Per image a float32 `(num_boxes, 4)` xyxy array (xywh is converted in float32 as the official code does).

    Raises:
        ValueError naming the image, the box, its value and `box_format` when a box is not a 4-number row, is NaN or
        infinite, has zero or negative width or height (an inverted box), or lies entirely outside its image.
    """
    if box_format not in BOX_FORMATS:
        raise ValueError(f"box_format={box_format!r}; use one of {BOX_FORMATS}.")
    layout = _BOX_LAYOUT[box_format]
    other = "xyxy" if box_format == "xywh" else "xywh"  # named in errors: the usual cause of an inverted box
    numbers = list(image_numbers) if image_numbers is not None else list(range(len(boxes)))
    result = []
    for position, image_boxes in enumerate(boxes):
        image = numbers[position]
        if isinstance(image_boxes, torch.Tensor):
            image_boxes = image_boxes.detach().cpu().numpy()
        try:
            given = np.asarray(image_boxes, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"the boxes of image {image} are not a list of 4-number boxes ({error}); pass "
                             f"[{layout}, ...] per image (box_format={box_format!r}).") from None
        if given.size == 0:
            result.append(np.zeros((0, 4), np.float32))
            continue
        if given.ndim != 2 or given.shape[1] != 4:
            raise ValueError(f"the boxes of image {image} have shape {tuple(given.shape)}; pass a list of boxes "
                             f"[{layout}, ...] per image, i.e. shape (num_boxes, 4) (box_format={box_format!r}).")
        array = given.astype(np.float32)
        if box_format == "xywh":
            array = np.concatenate([array[:, :2], array[:, :2] + array[:, 2:]], axis=1)
        for k in range(len(array)):
            value = [float(v) for v in given[k]]
            where = f"box {k} of image {image}, {value} (box_format={box_format!r}, {layout})"
            x0, y0, x1, y1 = (float(v) for v in array[k])
            if not np.isfinite(given[k]).all() or not np.isfinite(array[k]).all():
                raise ValueError(f"{where} is not finite; boxes must be finite pixel coordinates.")
            if x1 <= x0 or y1 <= y0:
                rule = ("x_max must exceed x_min and y_max exceed y_min" if box_format == "xyxy"
                        else "width and height must be > 0")
                raise ValueError(f"{where} has zero or negative width or height ({rule}); fix or drop the box "
                                 f"(boxes are read as box_format={box_format!r}; {_BOX_LAYOUT[other]} boxes are "
                                 f"box_format={other!r}).")
            if image_sizes is not None:
                height, width = image_sizes[position]
                if x1 <= 0 or y1 <= 0 or x0 >= width or y0 >= height:
                    raise ValueError(f"{where} lies entirely outside the {width}x{height} (width x height) image; a "
                                     "box may stick out of the image but must overlap it. Check that the box "
                                     f"belongs to this image and is written as {layout}.")
        result.append(array)
    return result


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
    """A person-foreground mask as a `(height, width)` bool numpy array, checked against the image's size.

    Args:
        mask: a bool array / tensor; a numeric one holding only 0 and 1 (or, for uint8, 0 and 255: a mask image read
            as an array); a PIL image (mode `"1"`, or any other mode converted to grey: above 0 is foreground); or
            the path of such an image. `(height, width, 1)` and `(1, height, width)` are squeezed.
        image_size: the image's `(height, width)`; the mask must have that size.
        name: what the mask is called in error messages.

    Raises:
        ValueError: for another shape or size, NaN / inf, or values that are not 0 / 1 (a soft matte or
            probabilities: threshold them first, e.g. `alpha > 0.5`).
    """
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


class Sapiens2HFImageProcessor(TorchvisionBackend):
    r"""
    Image processor reproducing the official Sapiens2 pre- and post-processing for every task.

    Built on transformers' public processing API (`TorchvisionBackend`: config fields, `from_pretrained` /
    `save_pretrained`, `__call__`), with every Sapiens2 step written here and in `sapiens2_processing_ops`. The saved
    fields are those of transformers' own `Sapiens2ImageProcessor` plus ours, so each class reads the other's
    preprocessor_config.json; `from_image_processor` turns either into ours for a task.

    Sizes follow transformers' convention `size={"height": H, "width": W}` (default 1024x768). Normalisation is
    `(x - mean) / std` on the 0-255 scale in float32, with `mean = image_mean / rescale_factor` (ImageNet values),
    which is bit-identical to the official preprocessor. Channel order: the official demos read BGR and flip to RGB;
    this processor takes RGB and never flips (geometry is per channel, so the result is the same).

    Differences from transformers' class: the official OpenCV geometry (there: torch bilinear/bicubic grid sampling),
    the official letterbox truncation and padding split, the official DARK decoder including its quirks, a pose
    `box_format` option, decoded keypoints in float64, an albedo post-processor and a depth output for pointmaps.

    Pose boxes: `preprocess` / `__call__` read `boxes` in `box_format` (default `"xywh"`, COCO, like transformers;
    the pipeline and CLI use `"xyxy"` and say so in each call). `post_process_pose_estimation(boxes=...)` requires
    `box_format=` in the call (or the format-free `bbox_center` / `bbox_scale` / `image_index` from `preprocess`),
    so that the two steps cannot silently read the same numbers in two formats.
    """

    valid_kwargs = Sapiens2HFImageProcessorKwargs
    model_input_names = ["pixel_values"]
    # The fields and defaults of transformers' `Sapiens2ImageProcessor`, so that saved configs read both ways.
    # `resample`, `crop_size`, `do_center_crop` and `do_reduce_labels` are only stored: the geometry is the task's.
    resample = PILImageResampling.BILINEAR
    image_mean = IMAGENET_DEFAULT_MEAN
    image_std = IMAGENET_DEFAULT_STD
    size = {"height": 1024, "width": 768}
    default_to_square = True
    crop_size = {"height": 224, "width": 224}
    do_resize = True
    do_center_crop = False
    do_rescale = True
    do_normalize = True
    do_reduce_labels = False
    do_pad = False
    keypoint_heatmap_downscale_factor = 4
    keypoint_heatmap_sigma = 6.0
    task = "pose"
    box_format = "xywh"
    bbox_padding = 1.25
    blur_kernel_size = 11
    geometry_backend = "auto"
    flip_indices = None
    pointmap_num_blurs = 4
    pointmap_blur_sigma = 0.8

    #: `load_image_rgb` as a method, so that pipelines can read inputs without importing this module.
    load_image_rgb = staticmethod(load_image_rgb)
    #: `validate_pose_boxes` as a method, for the same reason.
    validate_pose_boxes = staticmethod(validate_pose_boxes)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # transformers' class letterboxes when do_pad is set: the saved field follows the task, for that class
        self.do_pad = _letterboxed(self.task)
        _check_processor_task(self.task)
        if self.box_format not in BOX_FORMATS:
            raise ValueError(f"box_format={self.box_format!r}; use one of {BOX_FORMATS}.")
        resolve_backend(self.geometry_backend)
        _model_input_size(self.size)  # refused here, not when the first crop is allocated
        # refused here, whatever do_normalize says (a call may turn it on), not as inf or NaN pixel values
        _normalization_values("image_mean", self.image_mean), _normalization_values("image_std", self.image_std)
        _check_rescale_factor(self.rescale_factor)

    @classmethod
    def from_image_processor(cls, other: Any, task: str | None, **overrides) -> "Sapiens2HFImageProcessor":
        """This class for `task`, keeping the settings of another Sapiens2 image processor.

        The one way a processor is adopted (pipelines, `save_for_hub`, the CLI). An official repo ships transformers'
        stock `Sapiens2ImageProcessor`, which has no task policy (its own resampling, no albedo post-processing);
        ours for the task, with its input size and normalisation, reproduces the official pipeline instead.

        Args:
            other: ours (any task field is then checked), transformers' stock `Sapiens2ImageProcessor`, the dict
                of a preprocessor_config.json of either, or `None` (this class's defaults). Its fields that this
                class has (`size`, `image_mean`, `image_std`, `rescale_factor`, ..., and ours such as
                `bbox_padding`) are kept; anything else (`image_processor_type`, `auto_map`, other processors'
                fields) is dropped.
            task (`str` or `None`): the model's task; `None` (a backbone) means `"pretrain"`.
            overrides: fields that replace `other`'s (e.g. `size=` from the command line).

        Raises:
            ValueError: when `other` is one of ours for another task (a seg processor for a normal model would
                stretch instead of letterbox, silently).
        """
        task = task or PRETRAIN_TASK
        if other is None:
            settings = {}
        elif isinstance(other, dict):
            settings = dict(other)
        elif hasattr(other, "to_dict"):
            settings = other.to_dict()
        else:
            raise TypeError(f"cannot adopt the settings of a {type(other).__name__}; pass an image processor, its "
                            "preprocessor_config.json dict or None.")
        own_task = settings.get("task")
        if own_task is not None and own_task != task:
            raise ValueError(f"the image processor is for task {own_task!r}, not {task!r}; pass one for {task!r} "
                             f"(e.g. Sapiens2HFImageProcessor.from_image_processor(None, {task!r}, size=...)).")
        fields = set(cls.valid_kwargs.__annotations__) - {"task"}
        kept = {key: value for key, value in settings.items() if key in fields and value is not None}
        return cls(**{**kept, **overrides, "task": task})

    # ------------------------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------------------------

    @property
    def input_size(self) -> tuple[int, int]:
        """Model input `(height, width)`, each side in `[1, MAX_IMAGE_SIDE]`."""
        return _model_input_size(self.size)

    def normalization_constants_255(
        self, image_mean: Any = None, image_std: Any = None, do_rescale: bool | None = None,
        rescale_factor: float | None = None, do_normalize: bool | None = None,
    ) -> tuple[list[float], list[float]]:
        """Mean and std on the 0-255 scale (float32-rounded exactly as the official constants).

        Each argument given replaces the processor's field of that name (a `preprocess` call's overrides); a mean or
        std is one number for all channels or one per RGB channel.
        """
        do_rescale = self.do_rescale if do_rescale is None else do_rescale
        rescale_factor = self.rescale_factor if rescale_factor is None else rescale_factor
        rescale = _check_rescale_factor(rescale_factor) if do_rescale else 1.0
        constants = {"image_mean": [0.0] * 3, "image_std": [1.0] * 3}  # without normalisation: rescaling only
        if self.do_normalize if do_normalize is None else do_normalize:
            for name, value in (("image_mean", image_mean), ("image_std", image_std)):
                constants[name] = _normalization_values(name, getattr(self, name) if value is None else value)
        return tuple([float(np.float32(float(v) / rescale)) for v in constants[name]]
                     for name in ("image_mean", "image_std"))

    def get_flip_indices(self, num_keypoints: int, flip_pairs: Sequence[Sequence[int]] | None = None) -> list[int]:
        """Flip permutation: from `flip_pairs` (e.g. a model config's), else this processor's, else official 308."""
        if flip_pairs:
            return flip_pairs_to_indices(flip_pairs, num_keypoints)
        if self.flip_indices is not None:
            if len(self.flip_indices) != num_keypoints:
                raise ValueError(f"processor flip_indices has {len(self.flip_indices)} entries for {num_keypoints} "
                                 "keypoints; set flip_indices or pass the model's flip_pairs.")
            return list(self.flip_indices)
        if num_keypoints == NUM_POSE_KEYPOINTS:
            return flip_pairs_to_indices(POSE_FLIP_PAIRS, num_keypoints)
        raise ValueError(f"no flip pairs known for {num_keypoints} keypoints; pass flip_pairs= (the model config's "
                         "`flip_pairs`) or set the processor's flip_indices.")

    @staticmethod
    def keypoint_names(num_keypoints: int, keypoint_format: Any = None) -> list[str]:
        """Official names for 308 keypoints, else `keypoint_<i>`; with `keypoint_format`, that format's names."""
        if keypoint_format is not None:
            return list(format_keypoint_names(keypoint_format))
        if num_keypoints == NUM_POSE_KEYPOINTS:
            return list(POSE_KEYPOINT_NAMES)
        return [f"keypoint_{i}" for i in range(num_keypoints)]

    # ------------------------------------------------------------------------------------------------------------
    # person foreground (masking dense outputs)
    # ------------------------------------------------------------------------------------------------------------

    #: `foreground_mask_array` as a method, so that pipelines can check masks without importing this module.
    validate_foreground_mask = staticmethod(foreground_mask_array)

    @staticmethod
    def foreground_mask_from_segmentation(segmentation: Any) -> np.ndarray | torch.Tensor:
        """The person foreground of a 29-class body-part segmentation: every pixel whose label is not background
        (label > 0), as the official demos mask normals, pointmaps and albedo.

        Args:
            segmentation: a `(height, width)` class map (numpy or torch; e.g. `pipeline("sapiens2-segmentation")`'s
                `"segmentation"`), or a mapping holding it under `"segmentation"` (that pipeline's result dict,
                `post_process_semantic_segmentation(..., return_segmentation_scores=True)`'s items).

        Returns:
            A `(height, width)` bool mask of the same kind (numpy, or a torch tensor on the same device).
        """
        if isinstance(segmentation, Mapping):  # a result dict, or post_process_semantic_segmentation's BatchFeature
            if "segmentation" not in segmentation:
                raise ValueError(f"a dict without 'segmentation' (keys: {sorted(segmentation)}); pass a class map or "
                                 "a sapiens2-segmentation result.")
            segmentation = segmentation["segmentation"]
        if not isinstance(segmentation, torch.Tensor):
            segmentation = np.asarray(segmentation)
        if segmentation.ndim != 2:
            raise ValueError(f"segmentation has shape {tuple(segmentation.shape)}; pass one (height, width) class "
                             "map.")
        return segmentation > 0

    def apply_foreground_mask(self, values: Any, mask: Any, fill_value: float | None = None,
                              channels_last: bool | None = None) -> np.ndarray | torch.Tensor:
        """A copy of a dense map with the background (outside the person foreground) set to `fill_value`.

        Works on the pipelines' channels-last numpy results and on the `post_process_*` methods' channels-first
        tensors alike, e.g. for `pipeline("depth-estimation")`:
        `processor.apply_foreground_mask(result["predicted_depth"], processor.foreground_mask_from_segmentation(seg))`.

        Args:
            values: `(height, width)`, `(height, width, channels)` or `(channels, height, width)` numpy array or
                torch tensor.
            mask: `(height, width)` person foreground (anything `foreground_mask_array` takes; a bool tensor stays
                on its device).
            fill_value: the background value; default: this processor's task's (`foreground_fill_value`: normal
                and albedo 0, pointmap / depth NaN).
            channels_last: where the channels of 3-D `values` are; default: read from the shapes (an error when
                both readings fit, e.g. a 3x3x3 map with a 3x3 mask).

        Returns:
            The masked copy: the same type, dtype, shape and device as `values`.
        """
        if fill_value is None:
            fill_value = foreground_fill_value(self.task)
            if fill_value is None:
                raise ValueError(f"no default background value for task {self.task!r}; pass fill_value=.")
        is_tensor = isinstance(values, torch.Tensor)
        if not is_tensor:
            values = np.asarray(values)
        if is_tensor and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.ndim == 2:
            mask_shape = tuple(mask.shape)
        else:
            mask = foreground_mask_array(mask)
            mask_shape = mask.shape
        shape = tuple(values.shape)
        fits_last = len(shape) == 3 and shape[:2] == mask_shape
        fits_first = len(shape) == 3 and shape[1:] == mask_shape
        mismatch = ValueError(f"values of shape {shape} do not match the mask {mask_shape[0]}x{mask_shape[1]} "
                              "(height x width); pass a (height, width), (height, width, channels) or (channels, "
                              "height, width) map of the mask's size.")
        if len(shape) == 2 and shape == mask_shape:
            channels_last = True
        elif fits_last or fits_first:
            if channels_last is None:
                if fits_last and fits_first:
                    raise ValueError(f"values {shape} and mask {mask_shape} fit channels first and last; pass "
                                     "channels_last=.")
                channels_last = fits_last
            elif not (fits_last if channels_last else fits_first):
                raise mismatch
        else:
            raise mismatch
        if np.isnan(fill_value) and not (values.is_floating_point() if is_tensor
                                         else np.issubdtype(values.dtype, np.floating)):
            raise ValueError(f"cannot fill {values.dtype} values with NaN; pass fill_value= a number.")
        if is_tensor:
            background = ~torch.as_tensor(mask, device=values.device)
            out = values.clone()
            if channels_last:
                out[background] = fill_value
            else:
                out[:, background] = fill_value
            return out
        out = values.copy()
        if channels_last:
            out[~mask] = fill_value
        else:
            out[:, ~mask] = fill_value
        return out

    #: `focal_length` / `intrinsics` for `count` images (one for all, or one per image), checked; pipelines split a
    #: call's camera per image with it.
    camera_per_image = staticmethod(_camera_per_image)

    @staticmethod
    def validate_camera(focal_length: Any = None, intrinsics: Any = None) -> dict[str, Any]:
        """One image's `focal_length` / `intrinsics` checked as `post_process_pointmap_estimation` will read them
        (so that callers can fail before running a model): `{"focal_length": float or None, "intrinsics": (fx,
        fy, cx, cy) or None}`."""
        _check_one_camera_kind(focal_length, intrinsics)
        return {"focal_length": _camera_entry(focal_length, "focal_length"),
                "intrinsics": _camera_entry(intrinsics, "intrinsics")}

    # ------------------------------------------------------------------------------------------------------------
    # pre-processing
    # ------------------------------------------------------------------------------------------------------------

    def preprocess(
        self,
        images: Any,
        segmentation_maps: Any = None,
        boxes: Any = None,
        keypoints: Any = None,
        *,
        task: str | None = None,
        box_format: str | None = None,
        size: Any = None,
        return_tensors: str | None = "pt",
        device: torch.device | str | None = None,
        geometry_backend: str | None = None,
        return_geometry_images: bool = False,
        image_mean: Any = None,
        image_std: Any = None,
        do_rescale: bool | None = None,
        rescale_factor: float | None = None,
        do_normalize: bool | None = None,
        do_convert_rgb: bool | None = None,
        input_data_format: str | None = None,
        **kwargs,
    ) -> BatchFeature:
        r"""
        Pre-process images for the processor's task.

        Args:
            images: one image or a list of images (path, URL, PIL, numpy `(height, width, 3)` uint8 RGB, tensor).
            segmentation_maps: optional label maps `(height, width)` (seg / letterbox tasks), resized with nearest;
                letterbox padding gets the ignore index 255.
            boxes: pose only. Per image a list of boxes `(num_boxes, 4)` in `box_format` (this call's, else the
                processor's, default `"xywh"`: COCO `[x_min, y_min, width, height]`), image pixels. `None` uses the
                whole image as one box per image (the official demo's fallback). An empty list gives no crop for
                that image. Boxes are checked with `validate_pose_boxes`: NaN / inf, zero or negative width or
                height and boxes entirely outside their image raise a `ValueError` naming the box and `box_format`
                (boxes sticking partly out of the image are fine, as officially).
            keypoints: pose only, for training targets: per image, per person, `[[x, y, visibility], ...]`.
            task, box_format, size, geometry_backend: override the processor's fields for this call.
            image_mean, image_std, do_rescale, rescale_factor, do_normalize: override the processor's normalisation
                for this call, as in transformers' `Sapiens2ImageProcessor` (see `normalization_constants_255`).
            do_convert_rgb (`bool`, *optional*): this call's, else the processor's. `True` composites an image's
                alpha channel over white, as transformers' processors do with `do_convert_rgb=True`; otherwise the
                alpha channel is dropped, as the official OpenCV reading does (see `load_image_rgb`; transformers'
                processor refuses 4-channel images then).
            input_data_format (`str` or `ChannelDimension`, *optional*): the channel layout of array and tensor
                inputs, `"channels_last"` or `"channels_first"`, as in transformers' processors; inferred from the
                shape when not given, and required when both ends of the shape can be the channels (`(3, 100, 3)`).
            return_geometry_images (`bool`): also return the uint8 RGB crops / resized images (`geometry_images`).

        Returns:
            `BatchFeature` with
            - `pixel_values` (`torch.Tensor` of shape `(num_inputs, 3, height, width)`, float32): one row per image,
              or per box for pose (boxes of all images concatenated in order);
            - `original_sizes` (`(num_images, 2)` int64): `(height, width)` of each image;
            - dense tasks: `padding` (`(num_images, 4)` int64): `(left, right, top, bottom)` (zeros for seg);
            - pose: `boxes_xyxy` (`(num_boxes, 4)` float32), `bbox_center`, `bbox_scale` (`(num_boxes, 2)` float32,
              official), `image_index` (`(num_boxes,)` int64), `warp_matrix` (`(num_boxes, 2, 3)` float32);
            - with `segmentation_maps`: `labels` (`(num_images, height, width)` int64); with `keypoints`: `labels`
              (one `(num_keypoints, height/4, width/4)` float32 heatmap tensor per box, see `udp_gaussian_heatmaps`)
              and `label_weights` (one `(num_keypoints,)` tensor per box).
        """
        if kwargs:
            raise ValueError(f"unsupported argument(s) {sorted(kwargs)} for Sapiens2HFImageProcessor.preprocess (its "
                             "geometry is the task's); set other fields on the processor (e.g. "
                             "from_pretrained(..., resample=...)).")
        task = task or self.task
        _check_processor_task(task)
        input_size = _model_input_size(size) if size is not None else self.input_size
        backend = resolve_backend(geometry_backend or self.geometry_backend)
        if not isinstance(images, (list, tuple)):
            images = [images]
        if do_convert_rgb is None:
            do_convert_rgb = getattr(self, "do_convert_rgb", None)
        arrays = [load_image_rgb(image, do_convert_rgb, input_data_format) for image in images]
        original_sizes = torch.tensor([a.shape[:2] for a in arrays], dtype=torch.long).reshape(-1, 2)
        mean, std = self.normalization_constants_255(image_mean, image_std, do_rescale, rescale_factor, do_normalize)
        data: dict[str, Any] = {"original_sizes": original_sizes}
        if task == "pose":
            if segmentation_maps is not None:
                raise ValueError("segmentation_maps are not used by the pose task; use task='seg'.")
            geometry = self._preprocess_pose(arrays, boxes, box_format or self.box_format, input_size, backend)
            crops = geometry.pop("crops")
            data.update(geometry)
            if keypoints is not None:
                xywh = []
                for image_boxes in _split_boxes(geometry["boxes_xyxy"], geometry["image_index"], len(arrays)):
                    xywh.append([[b[0], b[1], b[2] - b[0], b[3] - b[1]] for b in image_boxes.tolist()])
                heatmaps, weights = udp_gaussian_heatmaps(
                    xywh, keypoints, input_size, downscale_factor=self.keypoint_heatmap_downscale_factor,
                    sigma=self.keypoint_heatmap_sigma, padding=self.bbox_padding,
                )
                data["labels"], data["label_weights"] = heatmaps, weights
        else:
            if boxes is not None:
                raise ValueError(f"boxes are only used by the pose task, not by task={task!r}.")
            if keypoints is not None:
                raise ValueError("keypoints are only used by the pose task.")
            crops, paddings = [], []
            for array in arrays:
                if task == "matting":
                    # The official matting test resize: INTER_AREA when the width shrinks, else INTER_LINEAR (the
                    # segmentation stretch enlarges with INTER_CUBIC).
                    interpolation = "area" if input_size[1] < array.shape[1] else "linear"
                    crops.append(resize_uint8(array, input_size, interpolation, backend))
                    paddings.append((0, 0, 0, 0))
                elif not _letterboxed(task):  # the registry's other "stretch" task (seg) and pretraining
                    crops.append(stretch_resize(array, input_size, backend))
                    paddings.append((0, 0, 0, 0))
                else:
                    resized, padding = letterbox(array, input_size, backend)
                    crops.append(resized)
                    paddings.append(padding)
            crops = np.stack(crops) if crops else np.zeros((0, *input_size, 3), np.uint8)
            data["padding"] = torch.tensor(paddings, dtype=torch.long).reshape(-1, 4)
            if segmentation_maps is not None:
                data["labels"] = self._resize_label_maps(segmentation_maps, task, input_size, paddings)
        data["pixel_values"] = normalize_uint8(crops, mean, std, device=device)
        if return_geometry_images:
            data["geometry_images"] = torch.from_numpy(crops)
        return BatchFeature(data=data, tensor_type=None if return_tensors in (None, "pt") else return_tensors)

    def _preprocess_pose(self, arrays, boxes, box_format, input_size, backend) -> dict[str, Any]:
        if boxes is None:
            per_image = [np.array([[0, 0, a.shape[1], a.shape[0]]], dtype=np.float32) for a in arrays]
        else:
            if len(boxes) != len(arrays):
                raise ValueError(f"boxes has {len(boxes)} entries for {len(arrays)} images; pass one list of "
                                 "boxes per image (an empty list for an image without people).")
            per_image = validate_pose_boxes(boxes, box_format, [a.shape[:2] for a in arrays])
        all_boxes, image_index, centers, scales, matrices, crops = [], [], [], [], [], []
        for i, (array, image_boxes) in enumerate(zip(arrays, per_image)):
            if len(image_boxes) == 0:
                continue
            center, scale = boxes_to_center_scale(image_boxes, input_size, self.bbox_padding)
            mats = udp_warp_matrices(center, scale, input_size)
            crops.append(warp_crops(array, mats, input_size, backend))
            all_boxes.append(image_boxes)
            image_index.extend([i] * len(image_boxes))
            centers.append(center)
            scales.append(scale)
            matrices.append(mats)

        def cat(items, shape):
            return np.concatenate(items) if items else np.zeros(shape, np.float32)

        return {
            "crops": cat(crops, (0, *input_size, 3)).astype(np.uint8),
            "boxes_xyxy": torch.from_numpy(cat(all_boxes, (0, 4))),
            "bbox_center": torch.from_numpy(cat(centers, (0, 2))),
            "bbox_scale": torch.from_numpy(cat(scales, (0, 2))),
            "warp_matrix": torch.from_numpy(cat(matrices, (0, 2, 3))),
            "image_index": torch.tensor(image_index, dtype=torch.long),
        }

    def _resize_label_maps(self, maps, task, input_size, paddings) -> torch.Tensor:
        if not isinstance(maps, (list, tuple)):
            maps = [maps]
        out = []
        for label_map, padding in zip(maps, paddings):
            label = torch.as_tensor(np.asarray(label_map)).long()
            if label.ndim == 3:
                label = label[..., 0] if label.shape[-1] in (1, 3) else label[0]
            height, width = label.shape
            if not _letterboxed(task):
                target = input_size
            else:
                (new_h, new_w), _ = letterbox_geometry((height, width), input_size)
                target = (new_h, new_w)
            # nearest, OpenCV convention: source index floor(dst * in / out)
            rows = torch.clamp((torch.arange(target[0]) * (height / target[0])).floor().long(), max=height - 1)
            cols = torch.clamp((torch.arange(target[1]) * (width / target[1])).floor().long(), max=width - 1)
            resized = label[rows][:, cols]
            if _letterboxed(task):
                left, _, top, _ = padding
                canvas = torch.full(input_size, 255, dtype=torch.long)
                canvas[top : top + target[0], left : left + target[1]] = resized
                resized = canvas
            out.append(resized)
        return torch.stack(out)

    # ------------------------------------------------------------------------------------------------------------
    # post-processing: pose
    # ------------------------------------------------------------------------------------------------------------

    def post_process_pose_estimation(
        self,
        outputs,
        boxes: Any = None,
        outputs_flipped=None,
        kernel_size: int | None = None,
        threshold: float | None = None,
        source_sizes: Any = None,
        target_sizes: Any = None,
        *,
        box_format: str | None = None,
        crops: Mapping[str, torch.Tensor] | None = None,
        outputs_on_flipped_input=None,
        flip_pairs: Sequence[Sequence[int]] | None = None,
        input_size: tuple[int, int] | None = None,
        keypoint_format: Any = None,
    ) -> list[list[dict[str, torch.Tensor]]]:
        r"""
        Decode pose heatmaps into keypoints in original-image pixels, batched over `POSE_DECODE_CHUNK_SIZE` crops at a
        time (the memory of the decoding is bounded by that chunk; the results do not depend on it).

        Args:
            outputs: model output with `heatmaps` (`(num_crops, num_keypoints, height/4, width/4)`).
            boxes: per image, a list of the boxes given to `preprocess`, in the `box_format` named in this call
                (required with `boxes`, see below): transformers' convention. Or `crops` instead.
            crops (`Mapping`): what `preprocess` returned (its `BatchFeature`; format-free, recommended): the crop
                geometry is read from its `bbox_center`, `bbox_scale`, `image_index` (default: all crops of one
                image) and `boxes_xyxy` (default: the reported `bbox` is the crop window `center -/+ scale / 2`).
                Given with `boxes`, both must describe the same boxes.
            box_format (`str`): `"xywh"` (COCO `[x_min, y_min, width, height]`, transformers' convention and the
                default of `preprocess`) or `"xyxy"` (`[x_min, y_min, x_max, y_max]`, the pipeline's and CLI's
                convention). Required with `boxes` and never taken from the processor: heatmaps cannot tell which
                format `preprocess` used, and reading the boxes in the other one moves every keypoint silently (by
                half the box's offset and more).
            outputs_flipped: transformers' convention: outputs on flipped crops ALREADY flipped back
                (the model was called with `flip_pairs`); averaged with `outputs`.
            outputs_on_flipped_input: raw outputs on horizontally flipped crops; flipped back here with
                `flip_pairs` (the model config's; default: the processor's `flip_indices`, else the official 308
                table) and averaged (official flip test).
            kernel_size: DARK blur kernel (default `blur_kernel_size`, 11).
            threshold: keep only keypoints with a score above it.
            source_sizes / target_sizes: optionally rescale coordinates from source to target image sizes;
                `source_sizes` also lets `boxes` be checked against their images (see `validate_pose_boxes`).
            input_size: crop `(height, width)`; defaults to the processor size.
            keypoint_format (`str`, optional): `"coco17"`, `"coco_wholebody133"` or `"body25"`: convert the 308
                keypoints to that format (`sapiens2_keypoint_formats.convert_keypoints`, before `threshold`); points
                it has no counterpart for are `(0, 0)` with score 0. `num_keypoints` and `labels` are then the
                format's (names: `keypoint_names(..., keypoint_format)`). Default: the model's own keypoints.
                A list of 308 keypoint names keeps those keypoints, in that order. Only the heatmap channels the
                format reads are decoded (`source_keypoint_indices`: 17 of 308 for coco17), with the same results
                as decoding all 308 and converting.

        Returns:
            Per image, a list (one entry per box, in order) of dicts:
            - `keypoints` (`torch.Tensor` of shape `(num_keypoints, 2)`, float64): `(x, y)` image pixels;
            - `scores` (`(num_keypoints,)` float32): heatmap maxima (not probabilities; can be <= 0);
            - `labels` (`(num_keypoints,)` int64): keypoint indices;
            - `bbox` (`(4,)` float32): the box as `(x_min, y_min, x_max, y_max)`.
        """
        input_size = self.input_size if input_size is None else _model_input_size(input_size, "input_size")
        heatmaps = outputs.heatmaps if hasattr(outputs, "heatmaps") else outputs
        if isinstance(keypoint_format, str) and keypoint_format not in KEYPOINT_FORMATS:
            raise ValueError(f"keypoint_format={keypoint_format!r} is not known; use one of "
                             f"{sorted(KEYPOINT_FORMATS)}, a list of Sapiens2 keypoint names or None (the model's own "
                             "keypoints).")
        channels = None
        if keypoint_format is not None:
            channels = list(source_keypoint_indices(keypoint_format))  # validates a list of names too
        if keypoint_format is not None and heatmaps.shape[1] != NUM_POSE_KEYPOINTS:
            raise ValueError(f"keypoint_format converts the {NUM_POSE_KEYPOINTS} Sapiens2 keypoints, but the heatmaps "
                             f"hold {heatmaps.shape[1]}; use keypoint_format=None for this model.")
        device = heatmaps.device
        other, raw, indices = self._flip_test_inputs(outputs_flipped, outputs_on_flipped_input, flip_pairs,
                                                     heatmaps.shape[1])
        bbox_center, bbox_scale, boxes_xyxy, image_index, num_images = self._pose_crop_geometry(
            boxes, box_format, source_sizes, input_size, crops)
        if len(bbox_center) != heatmaps.shape[0]:
            raise ValueError(f"{heatmaps.shape[0]} heatmaps for {len(bbox_center)} boxes; the outputs must hold one "
                             "row per box, in the order given to preprocess.")
        results: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(num_images)]
        if heatmaps.shape[0] == 0:
            return results
        keypoints_input, scores = _decode_pose_heatmaps(heatmaps, other, raw, indices, channels, input_size,
                                                        kernel_size or self.blur_kernel_size)
        keypoints = crop_to_image(keypoints_input, bbox_center, bbox_scale, input_size)
        boxes_xyxy = boxes_xyxy.to(keypoints.device)
        source_sizes = _sizes_list(source_sizes, num_images, "source_sizes")
        target_sizes = _sizes_list(target_sizes, num_images, "target_sizes")
        if target_sizes is not None:
            if source_sizes is None:
                raise ValueError("source_sizes must be given with target_sizes.")
            factors = torch.tensor([[t[1] / s[1], t[0] / s[0]] for s, t in zip(source_sizes, target_sizes)],
                                   dtype=torch.float64, device=keypoints.device)[image_index.to(keypoints.device)]
            keypoints = keypoints * factors[:, None, :]
            boxes_xyxy = (boxes_xyxy.double() * factors[:, [0, 1, 0, 1]]).float()
        if keypoint_format is not None:
            # before the threshold: a mean needs both of its sources
            keypoints, scores = convert_keypoints(keypoints, scores, keypoint_format, source_indices=channels)
        labels = torch.arange(keypoints.shape[1], device=device)
        for row, image in enumerate(image_index.tolist()):
            person = {"keypoints": keypoints[row], "scores": scores[row], "labels": labels, "bbox": boxes_xyxy[row]}
            if threshold is not None:
                keep = person["scores"] > threshold
                person.update(keypoints=person["keypoints"][keep.to(keypoints.device)], scores=person["scores"][keep],
                              labels=labels[keep])
            results[image].append(person)
        return results

    def _flip_test_inputs(self, outputs_flipped, outputs_on_flipped_input, flip_pairs, num_keypoints: int):
        """`(flipped back, raw flipped, flip indices)` heatmaps of `post_process_pose_estimation`'s two flip-test
        conventions (None where not given)."""
        if outputs_flipped is not None and outputs_on_flipped_input is not None:
            raise ValueError("pass either outputs_flipped (already flipped back) or outputs_on_flipped_input "
                             "(raw), not both.")
        other = raw = indices = None
        if outputs_flipped is not None:
            other = outputs_flipped.heatmaps if hasattr(outputs_flipped, "heatmaps") else outputs_flipped
        if outputs_on_flipped_input is not None:
            raw = outputs_on_flipped_input.heatmaps if hasattr(outputs_on_flipped_input, "heatmaps") \
                else outputs_on_flipped_input
            indices = self.get_flip_indices(num_keypoints, flip_pairs)
        return other, raw, indices

    def _pose_crop_geometry(self, boxes, box_format, source_sizes, input_size, crops):
        """`(bbox_center, bbox_scale, boxes_xyxy, image_index, num_images)` of the crops, from `boxes` in
        `box_format` or from `preprocess`'s geometry outputs `crops` (both given: they must agree)."""
        crops = {} if crops is None else crops
        if not isinstance(crops, Mapping):
            raise TypeError(f"crops must be what preprocess returned (a mapping with bbox_center and bbox_scale), got "
                            f"{type(crops).__name__}.")
        bbox_center, bbox_scale = crops.get("bbox_center"), crops.get("bbox_scale")
        image_index, boxes_xyxy = crops.get("image_index"), crops.get("boxes_xyxy")
        from_boxes = None
        if boxes is not None:
            if box_format is None:
                raise ValueError(
                    "post_process_pose_estimation got boxes= without box_format=. Name the format the boxes were "
                    "given to preprocess in: box_format='xywh' (COCO [x_min, y_min, width, height], preprocess's "
                    "default) or box_format='xyxy' ([x_min, y_min, x_max, y_max], as in the pipeline and README); "
                    "decoding in the other format shifts the keypoints without any error. Or pass crops= (what "
                    "preprocess returned) instead of boxes.")
            sizes = None if source_sizes is None else _sizes_list(source_sizes, len(boxes), "source_sizes")
            per_image = validate_pose_boxes(boxes, box_format, sizes)
            flat = np.concatenate(per_image) if per_image else np.zeros((0, 4), np.float32)
            center, scale = boxes_to_center_scale(flat, input_size, self.bbox_padding)
            from_boxes = (torch.from_numpy(center), torch.from_numpy(scale), torch.from_numpy(flat),
                          torch.tensor([i for i, b in enumerate(per_image) for _ in range(len(b))], dtype=torch.long),
                          len(per_image))
            if bbox_center is not None and bbox_scale is not None and not (
                    bbox_center.shape == from_boxes[0].shape and bbox_scale.shape == from_boxes[1].shape
                    and torch.allclose(bbox_center.cpu().float(), from_boxes[0], rtol=1e-5, atol=1e-3)
                    and torch.allclose(bbox_scale.cpu().float(), from_boxes[1], rtol=1e-5, atol=1e-3)):
                raise ValueError(f"boxes= read with box_format={box_format!r} do not match the crops given (those "
                                 "preprocess cropped); pass the box_format preprocess used, or only one of the two.")
        if bbox_center is None or bbox_scale is None:
            if from_boxes is None:
                raise ValueError("pass the boxes given to preprocess (boxes= with box_format=) or what it returned "
                                 "(crops=, with its bbox_center and bbox_scale).")
            return from_boxes
        if image_index is None:
            image_index = torch.zeros(len(bbox_center), dtype=torch.long)
        num_images = int(image_index.max()) + 1 if len(image_index) else 0
        if source_sizes is not None:
            num_images = max(num_images, len(source_sizes))
        if boxes_xyxy is None:
            boxes_xyxy = torch.cat([bbox_center - bbox_scale / 2, bbox_center + bbox_scale / 2], dim=1)
        return bbox_center, bbox_scale, boxes_xyxy.float(), image_index, num_images

    # ------------------------------------------------------------------------------------------------------------
    # post-processing: dense tasks
    # ------------------------------------------------------------------------------------------------------------

    def _paddings(self, maps: torch.Tensor, source_sizes, paddings, do_remove_padding: bool) -> list:
        if not do_remove_padding:
            return [(0, 0, 0, 0)] * maps.shape[0]
        if paddings is not None:
            paddings = paddings.tolist() if isinstance(paddings, torch.Tensor) else list(paddings)
            if len(paddings) != maps.shape[0]:
                raise ValueError(f"{len(paddings)} paddings for {maps.shape[0]} outputs.")
            paddings = [tuple(int(v) for v in p) for p in paddings]
            input_height, input_width = self.input_size
            map_height, map_width = maps.shape[-2:]
            if (map_height, map_width) != (input_height, input_width):
                # Heads that decode below the input resolution (the 4K models' heads decode to half of it): the
                # padding, recorded in input pixels, is scaled to the map.
                sy, sx = map_height / input_height, map_width / input_width
                paddings = [(round(l * sx), round(r * sx), round(t * sy), round(b * sy)) for l, r, t, b in paddings]
            return paddings
        if source_sizes is None:
            raise ValueError("source_sizes (or the paddings returned by preprocess) are needed to remove the "
                             "letterbox padding.")
        return [letterbox_geometry(size, tuple(maps.shape[-2:]))[1] for size in source_sizes]

    def _finish_maps(self, maps: torch.Tensor, paddings: list, final_sizes: list | None, resize_fn) -> list:
        """Unpad and resize `(batch, channels, height, width)` maps; batched when all items share the geometry."""
        if maps.shape[0] == 0:
            return []
        if all(p == paddings[0] for p in paddings) and (final_sizes is None or all(s == final_sizes[0] for s in final_sizes)):
            cropped = remove_padding(maps, paddings[0])
            out = resize_fn(cropped, final_sizes[0]) if final_sizes is not None else cropped
            return list(out)
        results = []
        for i in range(maps.shape[0]):
            cropped = remove_padding(maps[i : i + 1], paddings[i])
            results.append((resize_fn(cropped, final_sizes[i]) if final_sizes is not None else cropped)[0])
        return results

    def _dense_sizes(self, maps, source_sizes, target_sizes, do_remove_padding):
        count = maps.shape[0]
        source_sizes = _sizes_list(source_sizes, count, "source_sizes")
        target_sizes = _sizes_list(target_sizes, count, "target_sizes")
        if do_remove_padding is None:
            do_remove_padding = source_sizes is not None
        final_sizes = target_sizes if target_sizes is not None else source_sizes
        return source_sizes, final_sizes, do_remove_padding

    def post_process_semantic_segmentation(
        self, outputs, target_sizes: Any = None, return_segmentation_scores: bool = False
    ) -> list[torch.Tensor] | list[SemanticSegmentationPostProcessorOutput]:
        r"""
        Logits -> class maps, the official way: bilinear resize of the logits (align_corners=False), then argmax.

        The arguments and return types are those of transformers' `Sapiens2ImageProcessor` method of this name.

        Memory: the class maps are computed a few channels at a time (`resize_logits_argmax`), so an 8000x6000 photo
        needs well under 2 GB instead of the 5.6 GB of resizing all 29 channels at once; the labels are
        bit-identical. `return_segmentation_scores=True` materialises all resized logits
        (`num_labels * height * width` float32) and so costs that memory again.

        Args:
            outputs: model output with `logits` (`(batch_size, num_labels, height, width)`).
            target_sizes: per image `(height, width)` (the original sizes); `None` keeps the model resolution.
            return_segmentation_scores: also return the resized logits.

        Returns:
            Per image a `(height, width)` int64 class map in `[0, num_labels)`; with `return_segmentation_scores`, per
            image a transformers `SemanticSegmentationPostProcessorOutput` (a `BatchFeature`: read its fields as
            keys, `result["segmentation"]`, or attributes, `result.segmentation`) with `segmentation` (that class
            map) and `segmentation_scores` (the resized logits, `(num_labels, height, width)` float).
        """
        logits = outputs.logits if hasattr(outputs, "logits") else outputs
        sizes = _sizes_list(target_sizes, logits.shape[0], "target_sizes")
        if return_segmentation_scores:
            paddings = [(0, 0, 0, 0)] * logits.shape[0]
            resized = self._finish_maps(logits, paddings, sizes, resize_maps_bilinear)
            # max(dim).indices: the first maximum like argmax, but ~2x faster over the channel axis on CPU
            return [SemanticSegmentationPostProcessorOutput(
                data={"segmentation": scores.max(dim=0).indices, "segmentation_scores": scores}) for scores in resized]
        return [resize_logits_argmax(logits[i], sizes[i] if sizes is not None else tuple(logits.shape[-2:]))
                for i in range(logits.shape[0])]

    def post_process_normal_estimation(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Raw normals -> unit normals at the original size: normalise (eps 1e-8), unpad, bilinear.

        Official quirk kept: vectors are not re-normalised after the resize (slightly shorter than 1 at edges).

        Args:
            outputs: model output with `normals` (`(batch_size, 3, height, width)`).
            source_sizes: per image original `(height, width)`; enables unpadding and is the default final size.
            target_sizes: optional final sizes overriding `source_sizes`.
            paddings: optional `(left, right, top, bottom)` per image from `preprocess` (else recomputed).

        Returns:
            Per image `{"normals": (3, height, width) float32}`, camera frame, values in [-1, 1].
        """
        normals = outputs.normals if hasattr(outputs, "normals") else outputs
        normals = normals / normals.norm(dim=1, keepdim=True).clamp(min=1e-8)
        source_sizes, final_sizes, remove = self._dense_sizes(normals, source_sizes, target_sizes, do_remove_padding)
        pads = self._paddings(normals, source_sizes, paddings, remove)
        return [{"normals": n} for n in self._finish_maps(normals, pads, final_sizes, resize_maps_bilinear)]

    def post_process_pointmap_estimation(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None, do_smooth: bool = True, focal_length: Any = None, intrinsics: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Canonical pointmap -> metric XYZ at the original size.

        Steps (official order): divide by the scale, unpad, when enlarging blur 4x (3x3 Gaussian, sigma 0.8,
        reflection padding), bilinear resize.

        The scale is the predicted one (`768 / f_x`, `f_x` the focal length in model-input pixels) unless the camera
        is known: `focal_length` replaces it by `768 / (focal_length * w_resized / w_original)` (the letterbox resize
        factor turns original-image pixels into model-input pixels), so the pointmap is metric for that camera.
        `intrinsics` does the same with its `fx`, then re-projects X and Y from the metric Z through the given
        camera at the original resolution: `X = (u - cx) * Z / fx`, `Y = (v - cy) * Z / fy`, with `(u, v)` the
        pixel's column and row in the original image (pixel centres at integers; a map of another size is sampled
        at the matching original-image positions).

        Args:
            outputs: model output with `pointmaps` (`(batch_size, 3, height, width)`) and `scales` (`(batch_size, 1)`;
                if `None` the canonical pointmap is returned).
            source_sizes, target_sizes, paddings: as in `post_process_normal_estimation`.
            do_smooth: apply the official smoothing before enlarging.
            focal_length (`float`, or one per image, entries may be `None`, *optional*): the horizontal focal length
                in pixels of the original image (`source_sizes`; of the model input without them).
            intrinsics (*optional*): the camera in pixels of the original image, `(fx, fy, cx, cy)` or a 3x3 matrix
                `[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]`; one for all images, or one per image (entries may be
                `None`). Not together with `focal_length`.

        Returns:
            Per image `{"pointmap": (3, height, width) float32 XYZ (X right, Y down, Z forward, training units
            (metres)), "depth": (height, width) float32 (= Z), "scale": () float32 or None (the one divided by),
            "focal_length": () float32 or None}`: the focal length used, in pixels of the original image: the given
            one (`fx` of `intrinsics`), or the one the predicted scale implies (`None` for a model without a scale
            branch).

        Raises:
            ValueError: for both `focal_length` and `intrinsics`, a focal length that is not a positive finite number,
                intrinsics of another shape or with non-finite values, or a wrong number of entries.
        """
        pointmaps = outputs.pointmaps if hasattr(outputs, "pointmaps") else outputs
        scales = getattr(outputs, "scales", None)
        count = pointmaps.shape[0]
        source_sizes, final_sizes, remove = self._dense_sizes(pointmaps, source_sizes, target_sizes,
                                                              do_remove_padding)
        _check_one_camera_kind(focal_length, intrinsics)
        cameras = _camera_per_image(intrinsics, "intrinsics", count)
        focals = _camera_per_image(focal_length, "focal_length", count)
        if cameras is not None:
            focals = [None if camera is None else camera[0] for camera in cameras]
        # model-input pixels per original pixel along x: the letterbox resize (the scale's f_x is in model-input pixels)
        factors = [1.0] * count if source_sizes is None else [
            letterbox_geometry(size, self.input_size)[0][1] / size[1] for size in source_sizes]
        if focals is not None and any(f is not None for f in focals):
            # computed in float64 and rounded once to float32; an image without a camera keeps its predicted scale
            # (or 1: the canonical camera, for a model without a scale branch)
            scales = torch.tensor(
                [[CANONICAL_FOCAL_LENGTH / (f * r) if f is not None else (1.0 if scales is None else
                                                                          float(scales[i, 0]))]
                 for i, (f, r) in enumerate(zip(focals, factors))], dtype=torch.float32, device=pointmaps.device)
            predicted = [f is None for f in focals] if getattr(outputs, "scales", None) is not None else None
        else:
            focals, predicted = None, ([True] * count if scales is not None else None)
        if scales is not None:
            pointmaps = pointmaps / scales[:, :, None, None]
        pads = self._paddings(pointmaps, source_sizes, paddings, remove)

        def resize(maps, size):
            if do_smooth:
                return smooth_and_resize_pointmap(maps, size, self.pointmap_num_blurs, self.pointmap_blur_sigma)
            return resize_maps_bilinear(maps, size)

        maps = self._finish_maps(pointmaps, pads, final_sizes, resize)
        results = []
        for i, m in enumerate(maps):
            if cameras is not None and cameras[i] is not None:
                reference = source_sizes[i] if source_sizes is not None else self.input_size
                m = _reproject_pointmap(m, cameras[i], reference)
            if focals is not None and focals[i] is not None:
                focal, scale = torch.tensor(focals[i], dtype=torch.float32), scales[i, 0]
            elif predicted is not None and predicted[i]:
                scale = scales[i, 0]
                focal = CANONICAL_FOCAL_LENGTH / (scale * factors[i])
            else:
                focal = scale = None
            results.append({"pointmap": m, "depth": m[2], "scale": scale, "focal_length": focal})
        return results

    def post_process_depth_estimation(
        self, outputs, target_sizes: Any = None, focal_length: Any = None
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Pointmap model output -> metric depth, in the format of transformers' `post_process_depth_estimation` (what
        its `pipeline("depth-estimation")` calls, with each image's original size as `target_sizes`).

        The depth is the Z channel of `post_process_pointmap_estimation`'s metric pointmap, in metres, computed by
        that method (`target_sizes` as its `source_sizes`, the same `focal_length`), so it equals the
        `sapiens2-pointmap` pipeline's `depth` for the same focal length. To keep only the person, mask the result:
        `apply_foreground_mask(result["predicted_depth"], foreground_mask_from_segmentation(seg))` (NaN background).

        Args:
            outputs: a pointmap model's output: `pointmaps` (`(batch_size, 3, height, width)`, canonical camera) and
                `scales` (`(batch_size, 1)`, `768 / f_x` with `f_x` the focal length in model-input pixels).
            target_sizes: per image the original `(height, width)`: the letterbox padding is removed and the depth
                resized to it. `None` keeps the model's output grid, padding included.
            focal_length (`float`, or one per image, *optional*): the camera's horizontal focal length in pixels of
                the image `target_sizes` describes (of the model input when `target_sizes` is `None`). It replaces
                the predicted scale by the camera's, `768 / (focal_length * w_resized / w_original)` (the letterbox
                resize factor), so the depth is metric for that camera.

        Returns:
            Per image `{"predicted_depth": (height, width) float32 metres, "focal_length": () float32}`: the focal
            length used, in pixels of the same image as `focal_length`: the given one, or the one the predicted
            scale implies (`None` for a model without a scale branch; the depth is then the canonical camera's).

        Raises:
            ValueError: for outputs without `pointmaps` (a normal map is no depth: run normal models with
                `pipeline("sapiens2-normal")`), a wrong number of sizes or focal lengths, or a focal length that is
                not a positive finite number.
        """
        from types import SimpleNamespace

        pointmaps = getattr(outputs, "pointmaps", None)
        if pointmaps is None:
            raise ValueError(
                f"post_process_depth_estimation needs a pointmap model's output (`pointmaps`, `scales`), got a "
                f"{type(outputs).__name__} without `pointmaps` (this processor's task is {self.task!r}). Depth comes "
                "from Sapiens2 pointmap models; a normal map is no depth: run normal models with "
                "pipeline('sapiens2-normal')."
            )
        scales = getattr(outputs, "scales", None)
        results = self.post_process_pointmap_estimation(
            SimpleNamespace(pointmaps=pointmaps.float(), scales=None if scales is None else scales.float()),
            source_sizes=_sizes_list(target_sizes, pointmaps.shape[0], "target_sizes"), focal_length=focal_length)
        return [{"predicted_depth": result["depth"], "focal_length": result["focal_length"]} for result in results]

    def post_process_albedo_estimation(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Raw albedo -> RGB albedo in [0, 1] at the original size: clamp, unpad, bilinear.

        Args:
            outputs: model output with `albedos` (`(batch_size, 3, height, width)`, raw).
            source_sizes, target_sizes, paddings: as in `post_process_normal_estimation`.

        Returns:
            Per image `{"albedo": (3, height, width) float32 RGB in [0, 1]}`. The official demo then saves
            `(albedo * 255)` truncated to uint8.
        """
        albedos = getattr(outputs, "albedos", None)
        if albedos is None:
            albedos = getattr(outputs, "albedo", outputs)
        albedos = albedos.clamp(0.0, 1.0)
        source_sizes, final_sizes, remove = self._dense_sizes(albedos, source_sizes, target_sizes, do_remove_padding)
        pads = self._paddings(albedos, source_sizes, paddings, remove)
        return [{"albedo": a} for a in self._finish_maps(albedos, pads, final_sizes, resize_maps_bilinear)]


    def post_process_dense_maps(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Raw maps of this processor's task -> the same maps at the original size: unpad (letterboxed tasks), bilinear;
        no value mapping. The post-processing of a dense task registered with `sapiens2_hf.register_task` whose
        `post_process` names this method.

        Args:
            outputs: the model output (its task's `output_field`, `(batch_size, channels, height, width)`) or that
                tensor.
            source_sizes, target_sizes, paddings: as in `post_process_normal_estimation`.

        Returns:
            Per image `{key: (channels, height, width) float32}`, `key` the task's first `result_maps` entry (else
            its name).
        """
        spec = task_spec(self.task)
        maps = outputs if isinstance(outputs, torch.Tensor) else getattr(outputs, spec.output_field)
        maps = maps.float()
        key = spec.result_maps[0] if spec.result_maps else spec.name
        if do_remove_padding is None and not _letterboxed(self.task):
            do_remove_padding = False
        source_sizes, final_sizes, remove = self._dense_sizes(maps, source_sizes, target_sizes, do_remove_padding)
        pads = self._paddings(maps, source_sizes, paddings, remove)
        return [{key: m} for m in self._finish_maps(maps, pads, final_sizes, resize_maps_bilinear)]

    def post_process_image_matting(
        self, outputs, target_sizes: Any = None, backgrounds: Any = None, source_sizes: Any = None,
        paddings: Any = None, do_remove_padding: bool | None = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Matting output -> alpha matte and pre-multiplied foreground at the original size (the arguments, keys and
        shapes of transformers' `Sapiens2ImageProcessor.post_process_image_matting`, `alpha` included as a
        `(1, height, width)` map; ours adds `source_sizes`, `paddings` and `do_remove_padding`).

        The matting task stretches the whole image to the input size (the official test pipeline: no letterbox), so
        the inverse is a bilinear resize (`align_corners=False`) to the original size; a letterboxed input (a
        processor whose task pads, or `paddings` from `preprocess`) has its padding removed first. Values are
        clamped to `[0, 1]` after the resize.

        Args:
            outputs: model output with `alphas` (`(batch_size, 1, height, width)`) and `foregrounds`
                (`(batch_size, 3, height, width)`, pre-multiplied RGB), or a `(batch_size, 4, height, width)` tensor
                (foreground channels first, as the head predicts them).
            target_sizes: per image the final `(height, width)` (normally the original size); `None` keeps the
                model's resolution (or `source_sizes`).
            backgrounds (*optional*): one background for all, or one per image; each an image (PIL,
                `(height, width, 3)` uint8 RGB array, path) or a colour `(red, green, blue)` of three numbers in
                `[0, 255]`: each result gains `composite`, `foreground + (1 - alpha) * background`, as a
                `(3, height, width)` uint8 tensor (an image background is resized bilinearly to the result's size).
            source_sizes: per image the original `(height, width)`; the default final size, and what the letterbox
                padding is recomputed from when padding is removed.
            paddings: optional `(left, right, top, bottom)` per image from `preprocess` (letterboxed inputs only).
            do_remove_padding: remove letterbox padding; default: when this processor's task letterboxes and sizes
                or paddings are given.

        Returns:
            Per image `{"alpha": (1, height, width) float32 in [0, 1], "foreground": (3, height, width) float32
            pre-multiplied RGB in [0, 1], "composite": (3, height, width) uint8 or None}` (`alpha[0]` is the
            `(height, width)` matte that `pipeline("sapiens2-matting")` returns).
        """
        alphas = getattr(outputs, "alphas", None)
        if alphas is None and isinstance(outputs, torch.Tensor) and outputs.ndim == 4 and outputs.shape[1] == 4:
            maps = outputs
        elif alphas is not None:
            foregrounds = getattr(outputs, "foregrounds", None)
            if foregrounds is None:
                raise ValueError("post_process_image_matting needs `foregrounds` beside `alphas` (a Sapiens2 matting "
                                 "model's output).")
            maps = torch.cat([foregrounds, alphas], dim=1)
        else:
            raise ValueError(f"post_process_image_matting needs a matting model's output (`alphas`, `foregrounds`), "
                             f"got a {type(outputs).__name__}.")
        maps = maps.float()
        count = maps.shape[0]
        source_list = _sizes_list(source_sizes, count, "source_sizes")
        target_list = _sizes_list(target_sizes, count, "target_sizes")
        final_sizes = target_list if target_list is not None else source_list
        if do_remove_padding is None:
            do_remove_padding = paddings is not None or (_letterboxed(self.task) and source_list is not None)
        pads = self._paddings(maps, source_list, paddings, do_remove_padding)
        results = self._finish_maps(maps, pads, final_sizes, resize_maps_bilinear)
        background_list = None
        if backgrounds is not None:
            one = _is_colour(backgrounds) or not isinstance(backgrounds, (list, tuple))
            background_list = [backgrounds] if one else backgrounds
            if len(background_list) not in (1, count):
                raise ValueError(f"{len(background_list)} backgrounds for {count} images; pass one, or one per image.")
        out = []
        for index, item in enumerate(results):
            item = item.clamp(0.0, 1.0)
            foreground, alpha = item[:3], item[3:]
            composite = None
            if background_list is not None:
                background = background_list[0 if len(background_list) == 1 else index]
                if _is_colour(background):
                    if not all(0 <= value <= 255 for value in background):
                        raise ValueError(f"A background colour is (red, green, blue) in [0, 255], got {background}.")
                    rgb = torch.tensor([float(value) / 255.0 for value in background], device=item.device)
                    rgb = rgb[:, None, None].expand(3, *alpha.shape[-2:])
                else:
                    rgb = torch.from_numpy(load_image_rgb(background)).to(item.device).permute(2, 0, 1).float() / 255.0
                    rgb = resize_maps_bilinear(rgb[None], tuple(alpha.shape[-2:]))[0]
                blended = (foreground + (1.0 - alpha) * rgb).clamp(0.0, 1.0)
                composite = (blended * 255.0).round().to(torch.uint8)
            out.append({"alpha": alpha, "foreground": foreground, "composite": composite})
        return out


def _is_colour(value: Any) -> bool:
    """Whether a matting background is a colour: three numbers `(red, green, blue)` (not images, not booleans)."""
    return isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(item, (int, float, np.integer, np.floating)) and not isinstance(item, bool) for item in value)


def _reproject_pointmap(pointmap: torch.Tensor, camera: tuple[float, float, float, float],
                        reference_size: tuple[int, int]) -> torch.Tensor:
    """`(3, height, width)` metric pointmap -> X, Y re-projected from its Z through the pinhole camera `(fx, fy, cx,
    cy)` given in pixels of an image of `reference_size` `(height, width)`: `X = (u - cx) Z / fx`, `Y = (v - cy) Z /
    fy` at each map pixel's position `(u, v)` in that image (its column and row when the sizes agree)."""
    fx, fy, cx, cy = camera
    height, width = pointmap.shape[-2:]
    reference_height, reference_width = reference_size
    # pixel centres matched between the map's grid and the reference grid (align_corners=False, like the resize);
    # the ray slopes in float64, rounded once to the map's dtype
    u = (torch.arange(width, dtype=torch.float64) + 0.5) * (reference_width / width) - 0.5
    v = (torch.arange(height, dtype=torch.float64) + 0.5) * (reference_height / height) - 0.5
    slope_x = ((u - cx) / fx).to(pointmap.device, pointmap.dtype)
    slope_y = ((v - cy) / fy).to(pointmap.device, pointmap.dtype)
    z = pointmap[2]
    return torch.stack([slope_x[None, :] * z, slope_y[:, None] * z, z])


def _decode_pose_heatmaps(heatmaps, flipped_back, flipped_raw, flip_indices, channels, input_size, kernel_size):
    """`(keypoints in crop pixels, scores)` of every crop, decoded `POSE_DECODE_CHUNK_SIZE` crops at a time (memory
    bounded by the chunk; results independent of it), with the flip test of either convention, and only the
    `channels` a keypoint format reads when given."""
    num_channels = heatmaps.shape[1]

    def decode(rows: slice, maps: list[int] | None, previous_map: list[int] | None) -> dict[str, torch.Tensor]:
        """Decode the channels `maps` (all when None) of the crops `rows`."""
        select = (lambda t: t) if maps is None else (
            lambda t: t.index_select(1, torch.tensor(maps, dtype=torch.long, device=t.device)))
        chunk = select(heatmaps[rows]).float()
        if flipped_back is not None:
            chunk = (chunk + select(flipped_back[rows]).float()) * 0.5
        if flipped_raw is not None:
            chunk = flip_test_average(chunk, flipped_raw[rows].float(), flip_indices, channels=maps)
        return decode_udp_heatmaps(chunk, input_size, kernel_size, previous_map=previous_map)

    keypoints_input, scores = [], []
    for start in range(0, heatmaps.shape[0], POSE_DECODE_CHUNK_SIZE):
        rows = slice(start, start + POSE_DECODE_CHUNK_SIZE)
        if channels is None:
            decoded = decode(rows, None, None)
        else:
            # decode only the channels the format reads; a maximum <= 0 makes the official refinement read the
            # previous channel too (refine_keypoints_dark_udp), so then that one is decoded as well
            maps, positions, previous_map = keypoint_subset_maps(channels, num_channels, with_previous=False)
            decoded = decode(rows, maps, previous_map)
            if not bool((decoded["scores"] > 0).all()):
                maps, positions, previous_map = keypoint_subset_maps(channels, num_channels, with_previous=True)
                decoded = decode(rows, maps, previous_map)
            decoded = {key: value[:, positions] for key, value in decoded.items()}
        keypoints_input.append(decoded["keypoints_input"])
        scores.append(decoded["scores"])
    return torch.cat(keypoints_input), torch.cat(scores)


def image_processor_for_task(task: str | None, **kwargs) -> Sapiens2HFImageProcessor:
    """The official-policy processor for a task (`None` means the pretrained backbone: stretch resize)."""
    return Sapiens2HFImageProcessor(task=task or "pretrain", **kwargs)


def _split_boxes(boxes_xyxy: torch.Tensor, image_index: torch.Tensor, num_images: int) -> list[torch.Tensor]:
    return [boxes_xyxy[image_index == i] for i in range(num_images)]


__all__ = [
    "Sapiens2HFImageProcessor", "image_processor_for_task", "validate_pose_boxes", "processor_tasks",
]
