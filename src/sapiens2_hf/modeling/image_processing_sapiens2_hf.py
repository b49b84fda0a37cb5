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
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from transformers import BatchFeature, ImagesKwargs, TorchvisionBackend
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling

try:
    from transformers.image_processing_outputs import SemanticSegmentationPostProcessorOutput
except ImportError:  # transformers < 5.24 has no such class

    class SemanticSegmentationPostProcessorOutput(BatchFeature):
        """One image's semantic segmentation: `segmentation` (`(height, width)` int64 class ids) and
        `segmentation_scores` (`(num_labels, height, width)`), read as keys or attributes (transformers' class of
        that name from 5.24 on)."""

from .image_loading_sapiens2_hf import load_image_rgb
from .post_processing_sapiens2_hf import (  # noqa: F401 (POSE_DECODE_CHUNK_SIZE: re-exported)
    POSE_DECODE_CHUNK_SIZE,
    DenseLayout,
    FlippedCropOutputs,
    PointmapSmoothing,
    PoseCrops,
    PoseFlipTest,
    _heatmaps,
    alpha_mattes,
    mask_background,
    clamped_albedo,
    decode_pose_keypoints,
    foreground_from_segmentation,
    keypoint_names,
    matting_maps,
    metric_pointmaps,
    segmentation_maps,
    unit_normals,
)
from .processing_checks_sapiens2_hf import (  # noqa: F401 (CANONICAL_FOCAL_LENGTH, processor_tasks: re-exported)
    BOX_FORMATS,
    CANONICAL_FOCAL_LENGTH,
    _camera_per_image,
    _check_processor_task,
    _check_rescale_factor,
    _letterboxed,
    _model_input_size,
    _normalization_values,
    _sizes_list,
    foreground_fill_value,
    foreground_mask_array,
    processor_tasks,
    validate_camera,
    validate_pose_boxes,
)
from .sapiens2_label_data import NUM_POSE_KEYPOINTS, POSE_FLIP_PAIRS
from .sapiens2_processing_ops import (
    boxes_to_center_scale,
    flip_pairs_to_indices,
    letterbox,
    normalize_uint8,
    resize_label_maps,
    resize_uint8,
    resolve_backend,
    stretch_resize,
    udp_gaussian_heatmaps,
    udp_warp_matrices,
    warp_crops,
)
from .sapiens2_tasks import PRETRAIN_TASK, task_spec


#: The processor fields a `preprocess` / `__call__` call may replace for that call (transformers' `__call__` kwargs).
PREPROCESS_OVERRIDES = ("task", "box_format", "size", "geometry_backend", "image_mean", "image_std", "do_rescale",
                        "rescale_factor", "do_normalize", "do_convert_rgb", "input_data_format")


@dataclass(frozen=True)
class PreprocessOptions:
    """One `preprocess` call's settings, read once from the processor's fields and the call's overrides
    (`Sapiens2HFImageProcessor.call_options`): task, pose `box_format`, model input `(height, width)`, geometry
    backend, the 0-255 mean and std, and how images are read: `do_convert_rgb` (`True`: an alpha channel is
    composited over white, as transformers' processors do; otherwise dropped, as the official OpenCV reading does, see
    `load_image_rgb`) and `input_data_format` (`"channels_last"` or `"channels_first"` for arrays and tensors;
    inferred from the shape unless both ends can be the channels, e.g. `(3, 100, 3)`).
    """

    task: str
    box_format: str
    input_size: tuple[int, int]
    backend: str
    mean: list[float]
    std: list[float]
    do_convert_rgb: bool | None = None
    input_data_format: Any = None


class Sapiens2HFImageProcessorKwargs(ImagesKwargs, total=False):
    """
    do_reduce_labels (`bool`, defaults to `False`): stored for transformers' `Sapiens2ImageProcessor`
        (preprocessor_config.json); the official label maps need no reduction, so this processor ignores it.
    keypoint_heatmap_downscale_factor (`int`, defaults to 4), keypoint_heatmap_sigma (`float`, defaults to 6.0):
        model input size / size of the pose training heatmaps made from `keypoints`, and the standard deviation of
        their Gaussians in heatmap pixels.
    task (`str`, defaults to `"pose"`): the official policy to apply: `"pose"`, `"seg"`, `"normal"`, `"pointmap"`,
        `"albedo"` or `"matting"`.
    box_format (`str`, defaults to `"xywh"`): format of the pose `boxes` given to `preprocess` / `__call__`:
        `"xywh"` (COCO `[x_min, y_min, width, height]`, transformers' convention) or `"xyxy"`. Not used by
        `post_process_pose_estimation`, which needs the format named in each call that passes `boxes`.
    bbox_padding (`float`, defaults to 1.25): context padding of pose boxes.
    blur_kernel_size (`int`, defaults to 11): Gaussian kernel of the DARK refinement.
    geometry_backend (`str`, defaults to `"auto"`): `"auto"` (OpenCV when importable), `"cv2"` or `"torch"`.
    flip_indices (`list[int]`, *optional*): keypoint permutation under a horizontal flip; default: the official
        308-keypoint table.
    pointmap_num_blurs (`int`, defaults to 4), pointmap_blur_sigma (`float`, defaults to 0.8): 3x3 Gaussian passes
        before enlarging a pointmap, and their sigma.
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


class Sapiens2HFImageProcessor(TorchvisionBackend):
    r"""
    Image processor reproducing the official Sapiens2 pre- and post-processing for every task (see the module
    docstring); `from_image_processor` turns transformers' `Sapiens2ImageProcessor` (or ours) into ours for a task.

    Sizes follow transformers' convention `size={"height": H, "width": W}` (default 1024x768). Normalisation is
    `(x - mean) / std` on the 0-255 scale in float32, with `mean = image_mean / rescale_factor` (ImageNet values),
    which is bit-identical to the official preprocessor. Channel order: the official demos read BGR and flip to RGB;
    this processor takes RGB and never flips (geometry is per channel, so the result is the same).

    Differences from transformers' class: the official OpenCV geometry (there: torch bilinear/bicubic grid sampling),
    the official letterbox truncation and padding split, the official DARK decoder including its quirks, a pose
    `box_format` option, decoded keypoints in float64, an albedo post-processor and a depth output for pointmaps.

    Pose boxes are read in `box_format` (default `"xywh"`, COCO, like transformers; the pipeline and CLI name
    `"xyxy"` in each call); `post_process_pose_estimation(boxes=...)` requires `box_format=` in the call (or the
    format-free `crops` from `preprocess`), so that the two steps cannot read the same numbers in two formats.

    preprocess outputs (a `BatchFeature`):
    - `pixel_values` (`torch.Tensor` of shape `(num_inputs, 3, height, width)`, float32): one row per image, or per
      box for pose (boxes of all images concatenated in order);
    - `original_sizes` (`(num_images, 2)` int64): `(height, width)` of each image;
    - dense tasks: `padding` (`(num_images, 4)` int64): `(left, right, top, bottom)` (zeros for seg);
    - pose: `boxes_xyxy` (`(num_boxes, 4)` float32), `bbox_center`, `bbox_scale` (`(num_boxes, 2)` float32,
      official), `image_index` (`(num_boxes,)` int64), `warp_matrix` (`(num_boxes, 2, 3)` float32);
    - with `segmentation_maps`: `labels` (`(num_images, height, width)` int64); with `keypoints`: `labels` (one
      `(num_keypoints, height/4, width/4)` float32 heatmap tensor per box, see `udp_gaussian_heatmaps`) and
      `label_weights` (one `(num_keypoints,)` tensor per box);
    - with `return_geometry_images=True`: `geometry_images`, the uint8 RGB crops / resized images.
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
        """This class for `task`, keeping the settings of another Sapiens2 image processor: the one way a processor
        is adopted (pipelines, `save_for_hub`, the CLI). An official repo ships transformers' stock
        `Sapiens2ImageProcessor`, which has no task policy; ours for the task, with its input size and
        normalisation, reproduces the official pipeline instead.

        Args:
            other: ours (its task field is then checked), transformers' `Sapiens2ImageProcessor`, the dict of a
                preprocessor_config.json of either, or `None` (this class's defaults). Its fields that this class has
                are kept; anything else (`image_processor_type`, `auto_map`, other processors' fields) is dropped.
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

    #: `keypoint_names` as a method, for the same reason.
    keypoint_names = staticmethod(keypoint_names)

    # ------------------------------------------------------------------------------------------------------------
    # person foreground (masking dense outputs)
    # ------------------------------------------------------------------------------------------------------------

    #: `foreground_mask_array` as a method, so that pipelines can check masks without importing this module.
    validate_foreground_mask = staticmethod(foreground_mask_array)

    #: `foreground_from_segmentation` as a method (pipelines use the processor's API only).
    foreground_mask_from_segmentation = staticmethod(foreground_from_segmentation)

    def apply_foreground_mask(self, values: Any, mask: Any, fill_value: float | None = None,
                              channels_last: bool | None = None) -> np.ndarray | torch.Tensor:
        """A copy of a dense map with the background (outside the person foreground) set to `fill_value`.

        Works on the pipelines' channels-last numpy results and on the `post_process_*` methods' channels-first
        tensors alike, e.g. `processor.apply_foreground_mask(result["predicted_depth"],
        processor.foreground_mask_from_segmentation(seg))`.

        Args:
            values: `(height, width)`, `(height, width, channels)` or `(channels, height, width)` array or tensor.
            mask: `(height, width)` person foreground (anything `foreground_mask_array` takes; a bool tensor stays
                on its device).
            fill_value: the background value; default: the task's (`foreground_fill_value`: normal and albedo 0,
                pointmap / depth NaN).
            channels_last: where the channels of 3-D `values` are; default: read from the shapes (an error when
                both readings fit, e.g. a 3x3x3 map with a 3x3 mask).

        Returns:
            The masked copy: the same type, dtype, shape and device as `values`.
        """
        if fill_value is None:
            fill_value = foreground_fill_value(self.task)
            if fill_value is None:
                raise ValueError(f"no default background value for task {self.task!r}; pass fill_value=.")
        return mask_background(values, mask, fill_value, channels_last)

    #: `focal_length` / `intrinsics` for `count` images (one for all, or one per image), checked; pipelines split a
    #: call's camera per image with it.
    camera_per_image = staticmethod(_camera_per_image)

    #: `validate_camera` as a method, for the same reason.
    validate_camera = staticmethod(validate_camera)

    # ------------------------------------------------------------------------------------------------------------
    # pre-processing
    # ------------------------------------------------------------------------------------------------------------

    def preprocess(
        self, images: Any, segmentation_maps: Any = None, boxes: Any = None, keypoints: Any = None, *,
        return_tensors: str | None = "pt", device: torch.device | str | None = None,
        return_geometry_images: bool = False, **overrides,
    ) -> BatchFeature:
        r"""
        Pre-process images for the processor's task.

        Args:
            images: one image or a list of images (path, URL, PIL, numpy `(height, width, 3)` uint8 RGB, tensor).
            segmentation_maps: optional label maps `(height, width)` (seg / letterbox tasks), resized with nearest;
                letterbox padding gets the ignore index 255.
            boxes: pose only. Per image a list of boxes `(num_boxes, 4)` in `box_format` (default `"xywh"`, COCO),
                image pixels, checked by `validate_pose_boxes`; `None`: the whole image as one box per image (the
                official demo's fallback); an empty list: no crop for that image.
            keypoints: pose only, for training targets: per image, per person, `[[x, y, visibility], ...]`.
            overrides: this call's values of the processor's fields named in `PREPROCESS_OVERRIDES` (transformers'
                `__call__` kwargs: `task`, `size`, `box_format`, `image_mean`, ...), read once by `call_options`
                into a `PreprocessOptions` (see there).
            return_geometry_images (`bool`): also return the uint8 RGB crops / resized images (`geometry_images`).

        Returns:
            `BatchFeature` with `pixel_values` (`(num_inputs, 3, height, width)` float32: one row per image, or per box
            for pose), `original_sizes` and the task's geometry (the keys: the class docstring, "preprocess outputs").
        """
        options = self.call_options(**overrides)
        if not isinstance(images, (list, tuple)):
            images = [images]
        arrays = [load_image_rgb(image, options.do_convert_rgb, options.input_data_format) for image in images]
        data: dict[str, Any] = {
            "original_sizes": torch.tensor([a.shape[:2] for a in arrays], dtype=torch.long).reshape(-1, 2)}
        if options.task == "pose":
            if segmentation_maps is not None:
                raise ValueError("segmentation_maps are not used by the pose task; use task='seg'.")
            crops = self._preprocess_pose(arrays, boxes, keypoints, options, data)
        else:
            if boxes is not None:
                raise ValueError(f"boxes are only used by the pose task, not by task={options.task!r}.")
            if keypoints is not None:
                raise ValueError("keypoints are only used by the pose task.")
            crops = self._preprocess_dense(arrays, segmentation_maps, options, data)
        data["pixel_values"] = normalize_uint8(crops, options.mean, options.std, device=device)
        if return_geometry_images:
            data["geometry_images"] = torch.from_numpy(crops)
        return BatchFeature(data=data, tensor_type=None if return_tensors in (None, "pt") else return_tensors)

    def call_options(self, **overrides) -> PreprocessOptions:
        """One call's settings: each of `PREPROCESS_OVERRIDES` given (not `None`) replaces the processor's field of
        that name, checked; any other keyword is refused (the geometry is the task's)."""
        unknown = sorted(set(overrides) - set(PREPROCESS_OVERRIDES))
        if unknown:
            raise ValueError(f"unsupported argument(s) {unknown} for Sapiens2HFImageProcessor.preprocess (its "
                             "geometry is the task's); set other fields on the processor (e.g. "
                             "from_pretrained(..., resample=...)).")
        task = overrides.get("task") or self.task
        _check_processor_task(task)
        size = overrides.get("size")
        input_size = _model_input_size(size) if size is not None else self.input_size
        backend = resolve_backend(overrides.get("geometry_backend") or self.geometry_backend)
        normalization = {key: overrides.get(key) for key in
                         ("image_mean", "image_std", "do_rescale", "rescale_factor", "do_normalize")}
        mean, std = self.normalization_constants_255(**normalization)
        do_convert_rgb = overrides.get("do_convert_rgb")
        return PreprocessOptions(
            task=task, box_format=overrides.get("box_format") or self.box_format, input_size=input_size,
            backend=backend, mean=mean, std=std, input_data_format=overrides.get("input_data_format"),
            do_convert_rgb=getattr(self, "do_convert_rgb", None) if do_convert_rgb is None else do_convert_rgb)

    def _preprocess_pose(self, arrays, boxes, keypoints, options: PreprocessOptions, data: dict) -> np.ndarray:
        """Top-down UDP crops of every box (whole images without boxes), their geometry into `data` (and training
        heatmaps for `keypoints`); returns the uint8 crops."""
        input_size = options.input_size
        if boxes is None:
            per_image = [np.array([[0, 0, a.shape[1], a.shape[0]]], dtype=np.float32) for a in arrays]
        else:
            if len(boxes) != len(arrays):
                raise ValueError(f"boxes has {len(boxes)} entries for {len(arrays)} images; pass one list of "
                                 "boxes per image (an empty list for an image without people).")
            per_image = validate_pose_boxes(boxes, options.box_format, [a.shape[:2] for a in arrays])
        parts = {key: [] for key in ("crops", "boxes_xyxy", "bbox_center", "bbox_scale", "warp_matrix")}
        image_index = []
        for i, (array, image_boxes) in enumerate(zip(arrays, per_image)):
            if len(image_boxes) == 0:
                continue
            center, scale = boxes_to_center_scale(image_boxes, input_size, self.bbox_padding)
            matrices = udp_warp_matrices(center, scale, input_size)
            for key, value in zip(parts, (warp_crops(array, matrices, input_size, options.backend), image_boxes,
                                          center, scale, matrices)):
                parts[key].append(value)
            image_index.extend([i] * len(image_boxes))
        shapes = {"crops": (0, *input_size, 3), "boxes_xyxy": (0, 4), "bbox_center": (0, 2), "bbox_scale": (0, 2),
                  "warp_matrix": (0, 2, 3)}
        arrays_out = {key: np.concatenate(items) if items else np.zeros(shapes[key], np.float32)
                      for key, items in parts.items()}
        crops = arrays_out.pop("crops").astype(np.uint8)
        data.update({key: torch.from_numpy(value) for key, value in arrays_out.items()})
        data["image_index"] = torch.tensor(image_index, dtype=torch.long)
        if keypoints is not None:
            data["labels"], data["label_weights"] = self._pose_targets(data, keypoints, len(arrays), input_size)
        return crops

    def _pose_targets(self, data: dict, keypoints: Any, num_images: int, input_size: tuple[int, int]):
        """UDP Gaussian training heatmaps and weights of `keypoints` for the crops in `data`."""
        xywh = []
        for image_boxes in _split_boxes(data["boxes_xyxy"], data["image_index"], num_images):
            xywh.append([[b[0], b[1], b[2] - b[0], b[3] - b[1]] for b in image_boxes.tolist()])
        return udp_gaussian_heatmaps(
            xywh, keypoints, input_size, downscale_factor=self.keypoint_heatmap_downscale_factor,
            sigma=self.keypoint_heatmap_sigma, padding=self.bbox_padding,
        )

    def _preprocess_dense(self, arrays, segmentation_maps, options: PreprocessOptions, data: dict) -> np.ndarray:
        """Each image resized as the task does (matting / stretch / letterbox), its padding (and resized
        `segmentation_maps`) into `data`; returns the uint8 images."""
        input_size, crops, paddings = options.input_size, [], []
        for array in arrays:
            if options.task == "matting":
                # The official matting test resize: INTER_AREA when the width shrinks, else INTER_LINEAR (the
                # segmentation stretch enlarges with INTER_CUBIC).
                interpolation = "area" if input_size[1] < array.shape[1] else "linear"
                crops.append(resize_uint8(array, input_size, interpolation, options.backend))
                paddings.append((0, 0, 0, 0))
            elif not _letterboxed(options.task):  # the registry's other "stretch" task (seg) and pretraining
                crops.append(stretch_resize(array, input_size, options.backend))
                paddings.append((0, 0, 0, 0))
            else:
                resized, padding = letterbox(array, input_size, options.backend)
                crops.append(resized)
                paddings.append(padding)
        data["padding"] = torch.tensor(paddings, dtype=torch.long).reshape(-1, 4)
        if segmentation_maps is not None:
            data["labels"] = resize_label_maps(segmentation_maps, _letterboxed(options.task), input_size, paddings)
        return np.stack(crops) if crops else np.zeros((0, *input_size, 3), np.uint8)

    # ------------------------------------------------------------------------------------------------------------
    # post-processing: pose
    # ------------------------------------------------------------------------------------------------------------

    def pose_crops(self, crops: Mapping[str, torch.Tensor] | None = None, boxes: Any = None,
                   box_format: str | None = None, source_sizes: Any = None) -> PoseCrops:
        """The one geometry input of pose decoding: `crops` (what `preprocess` returned), else `boxes` in
        `box_format` (transformers' convention, converted here); both given, they must describe the same crops."""
        from_boxes = None if boxes is None else PoseCrops.from_boxes(boxes, box_format, self.input_size,
                                                                     self.bbox_padding, source_sizes)
        given = {} if crops is None else crops
        if from_boxes is not None and (not isinstance(given, Mapping) or given.get("bbox_center") is None
                                       or given.get("bbox_scale") is None):
            return from_boxes
        geometry = PoseCrops.from_preprocess(given, source_sizes)
        if from_boxes is not None and not geometry.agrees_with(from_boxes):
            raise ValueError(f"boxes= read with box_format={box_format!r} do not match the crops given (those "
                             "preprocess cropped); pass the box_format preprocess used, or only one of the two.")
        return geometry

    def post_process_pose_estimation(
        self, outputs, boxes: Any = None, outputs_flipped=None, kernel_size: int | None = None,
        threshold: float | None = None, source_sizes: Any = None, target_sizes: Any = None, *,
        crops: Mapping[str, torch.Tensor] | None = None, box_format: str | None = None, keypoint_indices: Any = None,
    ) -> list[list[dict[str, torch.Tensor]]]:
        r"""
        Decode pose heatmaps into keypoints in original-image pixels, `POSE_DECODE_CHUNK_SIZE` crops at a time (the
        memory bound; the results do not depend on it): the edge of `decode_pose_keypoints`, which reads one geometry
        input, `crops` (what `preprocess` returned), or transformers' `boxes=` convention, converted by `pose_crops`.

        Args:
            outputs: model output with `heatmaps` (`(num_crops, num_keypoints, height/4, width/4)`).
            boxes: per image, a list of the boxes given to `preprocess`, in the `box_format` named in this call
                (required with `boxes`, see below): transformers' convention. Or `crops` instead.
            crops (`Mapping`): what `preprocess` returned (format-free, recommended; see `PoseCrops.from_preprocess`).
                Given with `boxes`, both must describe the same boxes.
            box_format (`str`): `"xywh"` (COCO, transformers' convention and the default of `preprocess`) or
                `"xyxy"`. Required with `boxes` and never taken from the processor: heatmaps cannot tell which format
                `preprocess` used, and the other one moves every keypoint silently.
            outputs_flipped: the flip test, averaged with `outputs`. Outputs on flipped crops ALREADY flipped back
                (transformers' convention: the model was called with `flip_pairs`), or the raw outputs on the
                flipped crops wrapped as `FlippedCropOutputs(outputs, flip_pairs)` (the official flip test: flipped
                back here with `flip_pairs`, the model config's; default: the processor's `flip_indices`, else the
                official 308 table).
            kernel_size: DARK blur kernel (default `blur_kernel_size`, 11).
            threshold: keep only keypoints with a score above it.
            source_sizes / target_sizes: optionally rescale coordinates from source to target image sizes;
                `source_sizes` also lets `boxes` be checked against their images (see `validate_pose_boxes`).
            keypoint_indices (sequence of `int`, optional): decode only these keypoints (see `decode_pose_keypoints`;
                a keypoint format: `sapiens2_hf.data.keypoint_formats.post_process_in_format`); default: all.

        Returns:
            Per image, a list (one entry per box, in order) of dicts `keypoints` (`(num_keypoints, 2)` float64 image
            pixels), `scores`, `labels`, `bbox` (see `decode_pose_keypoints`).
        """
        geometry = self.pose_crops(crops, boxes, box_format, source_sizes)
        heatmaps = _heatmaps(outputs)
        return decode_pose_keypoints(heatmaps, geometry, input_size=self.input_size,
                                     flip_test=self._flip_test(heatmaps.shape[1], outputs_flipped),
                                     kernel_size=kernel_size or self.blur_kernel_size, threshold=threshold,
                                     target_sizes=target_sizes, keypoint_indices=keypoint_indices)

    def _flip_test(self, num_keypoints: int, outputs_flipped) -> PoseFlipTest | None:
        """`outputs_flipped` of either convention as one `PoseFlipTest` (raw ones with their flip permutation)."""
        if outputs_flipped is None:
            return None
        if FlippedCropOutputs.wraps(outputs_flipped):
            flip_indices = self.get_flip_indices(num_keypoints, outputs_flipped.flip_pairs)
            return PoseFlipTest(_heatmaps(outputs_flipped.outputs), flip_indices)
        return PoseFlipTest(_heatmaps(outputs_flipped))

    # ------------------------------------------------------------------------------------------------------------
    # post-processing: dense tasks
    # ------------------------------------------------------------------------------------------------------------

    def post_process_semantic_segmentation(
        self, outputs, target_sizes: Any = None, return_segmentation_scores: bool = False
    ) -> list[torch.Tensor] | list[SemanticSegmentationPostProcessorOutput]:
        r"""
        Logits -> class maps, the official way: bilinear resize of the logits (align_corners=False), then argmax, with
        the arguments and return types of transformers' `Sapiens2ImageProcessor` method of this name. The class maps
        are computed a few channels at a time (`resize_logits_argmax`: an 8000x6000 photo needs well under 2 GB, not
        5.6 GB; bit-identical labels); `return_segmentation_scores=True` materialises all resized logits
        (`num_labels * height * width` float32) and so costs that memory again.

        Args:
            outputs: model output with `logits` (`(batch_size, num_labels, height, width)`).
            target_sizes: per image `(height, width)` (the original sizes); `None` keeps the model resolution.
            return_segmentation_scores: also return the resized logits.

        Returns:
            Per image a `(height, width)` int64 class map in `[0, num_labels)`; with `return_segmentation_scores`, per
            image a transformers `SemanticSegmentationPostProcessorOutput` (a `BatchFeature`, fields read as keys or
            attributes) with `segmentation` (that class map) and `segmentation_scores` (`(num_labels, height, width)`).
        """
        logits = outputs.logits if hasattr(outputs, "logits") else outputs
        results = segmentation_maps(logits, target_sizes, return_segmentation_scores)
        if not return_segmentation_scores:
            return results
        return [SemanticSegmentationPostProcessorOutput(data={"segmentation": labels, "segmentation_scores": scores})
                for labels, scores in results]

    def post_process_normal_estimation(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Raw normals -> unit normals at the original size: normalise (eps 1e-8), unpad, bilinear (official quirk kept:
        vectors are not re-normalised after the resize, slightly shorter than 1 at edges).

        Args:
            outputs: model output with `normals` (`(batch_size, 3, height, width)`).
            source_sizes: per image original `(height, width)`; enables unpadding and is the default final size.
            target_sizes: optional final sizes overriding `source_sizes`.
            paddings: optional `(left, right, top, bottom)` per image from `preprocess` (else recomputed).

        Returns:
            Per image `{"normals": (3, height, width) float32}`, camera frame, values in [-1, 1].
        """
        normals = outputs.normals if hasattr(outputs, "normals") else outputs
        layout = DenseLayout.resolve(normals, self.input_size, source_sizes, target_sizes, do_remove_padding, paddings)
        return [{"normals": n} for n in unit_normals(normals, layout)]

    def post_process_pointmap_estimation(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None, do_smooth: bool = True, focal_length: Any = None, intrinsics: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Canonical pointmap -> metric XYZ at the original size. Steps (official order): divide by the scale, unpad,
        when enlarging blur 4x (3x3 Gaussian, sigma 0.8, reflection padding), bilinear resize.

        The scale is the predicted one (`768 / f_x`, `f_x` the focal length in model-input pixels) unless the camera
        is known: `focal_length` replaces it by `768 / (focal_length * w_resized / w_original)` (the letterbox resize
        factor turns original-image pixels into model-input pixels), so the pointmap is metric for that camera.
        `intrinsics` does the same with its `fx`, then re-projects X and Y from the metric Z through the given
        camera at the original resolution: `X = (u - cx) * Z / fx`, `Y = (v - cy) * Z / fy`, `(u, v)` the pixel's
        column and row in the original image (a map of another size is sampled at the matching positions).

        Args:
            outputs: model output with `pointmaps` (`(batch_size, 3, height, width)`) and `scales` (`(batch_size, 1)`;
                if `None` the canonical pointmap is returned).
            source_sizes, target_sizes, paddings: as in `post_process_normal_estimation`.
            do_smooth: apply the official smoothing before enlarging.
            focal_length (`float`, or one per image, entries may be `None`, *optional*): the horizontal focal length
                in pixels of the original image (`source_sizes`; of the model input without them).
            intrinsics (*optional*): the camera in original-image pixels, `(fx, fy, cx, cy)` or a 3x3 matrix; one for
                all images, or one per image (entries may be `None`). Not together with `focal_length`.

        Returns:
            Per image `{"pointmap": (3, height, width) float32 XYZ (X right, Y down, Z forward, metres), "depth":
            (height, width) float32 (= Z), "scale": () float32 or None (the one divided by), "focal_length": ()
            float32 or None}`: the focal length used, in original-image pixels (the given one, `fx` of `intrinsics`,
            or the one the predicted scale implies; `None` for a model without a scale branch).

        Raises:
            ValueError: for both `focal_length` and `intrinsics`, a focal length that is not a positive finite number,
                intrinsics of another shape or with non-finite values, or a wrong number of entries.
        """
        pointmaps = outputs.pointmaps if hasattr(outputs, "pointmaps") else outputs
        layout = DenseLayout.resolve(pointmaps, self.input_size, source_sizes, target_sizes, do_remove_padding,
                                     paddings)
        smoothing = PointmapSmoothing(self.pointmap_num_blurs, self.pointmap_blur_sigma) if do_smooth else None
        return metric_pointmaps(pointmaps, getattr(outputs, "scales", None), layout, self.input_size, smoothing,
                                focal_length=focal_length, intrinsics=intrinsics)

    def post_process_depth_estimation(
        self, outputs, target_sizes: Any = None, focal_length: Any = None
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Pointmap model output -> metric depth, in the format of transformers' `post_process_depth_estimation` (what
        its `pipeline("depth-estimation")` calls, with each image's original size as `target_sizes`): the Z channel
        of `post_process_pointmap_estimation`'s metric pointmap in metres (`target_sizes` as its `source_sizes`, the
        same `focal_length`), so it equals the `sapiens2-pointmap` pipeline's `depth`. To keep only the person:
        `apply_foreground_mask(result["predicted_depth"], foreground_mask_from_segmentation(seg))` (NaN background).

        Args:
            outputs: a pointmap model's output (`pointmaps`, `scales`; see `post_process_pointmap_estimation`).
            target_sizes: per image the original `(height, width)`: the letterbox padding is removed and the depth
                resized to it. `None` keeps the model's output grid, padding included.
            focal_length (`float`, or one per image, *optional*): the camera's horizontal focal length in pixels of
                the image `target_sizes` describes, as in `post_process_pointmap_estimation`.

        Returns:
            Per image `{"predicted_depth": (height, width) float32 metres, "focal_length": () float32}`: the focal
            length used, in pixels of the same image as `focal_length` (the given one, or the one the predicted
            scale implies; `None` for a model without a scale branch, whose depth is the canonical camera's).

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
        Raw albedo (`outputs.albedos`, `(batch_size, 3, height, width)`) -> RGB albedo in [0, 1] at the original size:
        clamp, unpad, bilinear; the arguments as in `post_process_normal_estimation`. Returns per image `{"albedo":
        (3, height, width) float32 RGB in [0, 1]}` (the official demo then saves `(albedo * 255)` truncated to uint8).
        """
        albedos = getattr(outputs, "albedos", None)
        if albedos is None:
            albedos = getattr(outputs, "albedo", outputs)
        layout = DenseLayout.resolve(albedos, self.input_size, source_sizes, target_sizes, do_remove_padding, paddings)
        return [{"albedo": a} for a in clamped_albedo(albedos, layout)]

    def post_process_dense_maps(
        self, outputs, source_sizes: Any = None, target_sizes: Any = None, do_remove_padding: bool | None = None,
        paddings: Any = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Raw maps of this processor's task (its `output_field` of `outputs`, `(batch_size, channels, height, width)`, or
        that tensor) -> the same maps at the original size: unpad (letterboxed tasks), bilinear; no value mapping.
        The post-processing of a dense task registered with `sapiens2_hf.register_task` whose `post_process` names
        this method; the arguments as in `post_process_normal_estimation`. Returns per image `{key: (channels,
        height, width) float32}`, `key` the task's first `result_maps` entry (else its name).
        """
        spec = task_spec(self.task)
        maps = outputs if isinstance(outputs, torch.Tensor) else getattr(outputs, spec.output_field)
        maps = maps.float()
        key = spec.result_maps[0] if spec.result_maps else spec.name
        if do_remove_padding is None and not _letterboxed(self.task):
            do_remove_padding = False
        layout = DenseLayout.resolve(maps, self.input_size, source_sizes, target_sizes, do_remove_padding, paddings)
        return [{key: m} for m in layout.finish(maps)]

    def post_process_image_matting(
        self, outputs, target_sizes: Any = None, backgrounds: Any = None, source_sizes: Any = None,
        paddings: Any = None, do_remove_padding: bool | None = None,
    ) -> list[dict[str, torch.Tensor]]:
        r"""
        Matting output -> alpha matte and pre-multiplied foreground at the original size (the arguments, keys and
        shapes of transformers' `Sapiens2ImageProcessor.post_process_image_matting`, `alpha` a `(1, height, width)`
        map; ours adds `source_sizes`, `paddings` and `do_remove_padding`). The matting task stretches the whole
        image (no letterbox), so the inverse is a bilinear resize (`align_corners=False`); a letterboxed input has its
        padding removed first. Values are clamped to `[0, 1]` after the resize.

        Args:
            outputs: model output with `alphas` (`(batch_size, 1, height, width)`) and pre-multiplied RGB
                `foregrounds` (`(batch_size, 3, height, width)`), or the head's `(batch_size, 4, height, width)` tensor
                (foreground channels first).
            target_sizes: per image the final `(height, width)`; `None` keeps the model's resolution (or
                `source_sizes`).
            backgrounds (*optional*): one for all, or one per image; an image (PIL, `(height, width, 3)` uint8 RGB
                array, path) or a `(red, green, blue)` colour in `[0, 255]`: each result gains `composite`,
                `foreground + (1 - alpha) * background`, `(3, height, width)` uint8 (an image resized bilinearly).
            source_sizes: per image the original `(height, width)`; the default final size, and what the letterbox
                padding is recomputed from.
            paddings: optional `(left, right, top, bottom)` per image from `preprocess` (letterboxed inputs only).
            do_remove_padding: default: when this processor's task letterboxes and sizes or paddings are given.

        Returns:
            Per image `{"alpha": (1, height, width) float32 in [0, 1], "foreground": (3, height, width) float32
            pre-multiplied RGB in [0, 1], "composite": (3, height, width) uint8 or None}` (`alpha[0]` is the matte
            that `pipeline("sapiens2-matting")` returns).
        """
        maps = matting_maps(outputs)
        count = maps.shape[0]
        if do_remove_padding is None:
            do_remove_padding = paddings is not None or (
                _letterboxed(self.task) and _sizes_list(source_sizes, count, "source_sizes") is not None)
        layout = DenseLayout.resolve(maps, self.input_size, source_sizes, target_sizes, do_remove_padding, paddings)
        return alpha_mattes(maps, layout, backgrounds)


def image_processor_for_task(task: str | None, **kwargs) -> Sapiens2HFImageProcessor:
    """The official-policy processor for a task (`None` means the pretrained backbone: stretch resize)."""
    return Sapiens2HFImageProcessor(task=task or "pretrain", **kwargs)


def _split_boxes(boxes_xyxy: torch.Tensor, image_index: torch.Tensor, num_images: int) -> list[torch.Tensor]:
    return [boxes_xyxy[image_index == i] for i in range(num_images)]


__all__ = [
    "Sapiens2HFImageProcessor", "image_processor_for_task", "validate_pose_boxes", "processor_tasks",
]
