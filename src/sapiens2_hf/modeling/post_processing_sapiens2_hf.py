# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The official Sapiens2 post-processing as module-level functions (layer 0, Hub-shippable).

Each task's step is one function over the model's tensors and one geometry input; the image processor's
`post_process_*` methods (transformers' names and arguments) only turn their arguments into that input and call them:

- pose: `decode_pose_keypoints(heatmaps, crops, ...)`, with `crops` a `PoseCrops` (what `preprocess` returned, read by
  `PoseCrops.from_preprocess`; transformers' `boxes=` convention is converted once by `PoseCrops.from_boxes`);
- dense maps: `DenseLayout` (letterbox padding and final size per image), then `unit_normals`, `clamped_albedo`,
  `metric_pointmaps`, `alpha_mattes`, `resized_maps`; segmentation: `segmentation_maps`.

The numerics are the official ones (see `sapiens2_processing_ops`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .image_loading_sapiens2_hf import load_image_rgb
from .processing_checks_sapiens2_hf import (
    CANONICAL_FOCAL_LENGTH,
    _camera_per_image,
    _check_one_camera_kind,
    _sizes_list,
    foreground_mask_array,
    validate_pose_boxes,
)
from .sapiens2_label_data import NUM_POSE_KEYPOINTS, POSE_KEYPOINT_NAMES
from .sapiens2_processing_ops import (
    boxes_to_center_scale,
    crop_to_image,
    decode_udp_heatmaps,
    flip_test_average,
    keypoint_subset_maps,
    letterbox_geometry,
    remove_padding,
    resize_logits_argmax,
    resize_maps_bilinear,
    smooth_and_resize_pointmap,
)


#: Crops whose heatmaps `decode_pose_keypoints` flip-averages and decodes at once: the DARK refinement works on whole
#: heatmaps (a few copies of 308x256x192 float32, about 60 MB each, per crop at 1024x768), so its memory is bounded
#: by this many crops whatever the number of boxes. Each crop decodes independently: the results do not depend on it.
POSE_DECODE_CHUNK_SIZE = 16


# ----------------------------------------------------------------------------------------------------------------
# pose
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoseCrops:
    """The geometry of the pose crops, the one input pose decoding reads (format-free: centres and sizes in pixels).

    Attributes:
        bbox_center, bbox_scale: `(num_boxes, 2)` official crop centre and padded size (image pixels).
        boxes_xyxy: `(num_boxes, 4)` float32, the boxes the results report.
        image_index: `(num_boxes,)` int64, the image of each crop.
        num_images: how many result lists to return (images without crops get an empty one).
        source_sizes: per image `(height, width)`, when known (needed to rescale to `target_sizes`).
    """

    bbox_center: torch.Tensor
    bbox_scale: torch.Tensor
    boxes_xyxy: torch.Tensor
    image_index: torch.Tensor
    num_images: int
    source_sizes: list[tuple[int, int]] | None = None

    @classmethod
    def from_preprocess(cls, crops: Mapping[str, torch.Tensor], source_sizes: Any = None) -> "PoseCrops":
        """What `preprocess` returned (its `bbox_center`, `bbox_scale`; `image_index` defaults to one image,
        `boxes_xyxy` to the crop window `center -/+ scale / 2`)."""
        if not isinstance(crops, Mapping):
            raise TypeError(f"crops must be what preprocess returned (a mapping with bbox_center and bbox_scale), got "
                            f"{type(crops).__name__}.")
        center, scale = crops.get("bbox_center"), crops.get("bbox_scale")
        if center is None or scale is None:
            raise ValueError("pass the boxes given to preprocess (boxes= with box_format=) or what it returned "
                             "(crops=, with its bbox_center and bbox_scale).")
        image_index, boxes_xyxy = crops.get("image_index"), crops.get("boxes_xyxy")
        if image_index is None:
            image_index = torch.zeros(len(center), dtype=torch.long)
        num_images = int(image_index.max()) + 1 if len(image_index) else 0
        if source_sizes is not None:
            num_images = max(num_images, len(source_sizes))
            source_sizes = _sizes_list(source_sizes, num_images, "source_sizes")
        if boxes_xyxy is None:
            boxes_xyxy = torch.cat([center - scale / 2, center + scale / 2], dim=1)
        return cls(center, scale, boxes_xyxy.float(), image_index, num_images, source_sizes)

    @classmethod
    def from_boxes(cls, boxes: Any, box_format: str | None, input_size: tuple[int, int], bbox_padding: float,
                   source_sizes: Any = None) -> "PoseCrops":
        """transformers' convention, per image a list of boxes in `box_format` (required: heatmaps cannot tell which
        format `preprocess` read, and the other one moves every keypoint silently)."""
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
        center, scale = boxes_to_center_scale(flat, input_size, bbox_padding)
        image_index = torch.tensor([i for i, b in enumerate(per_image) for _ in range(len(b))], dtype=torch.long)
        return cls(torch.from_numpy(center), torch.from_numpy(scale), torch.from_numpy(flat), image_index,
                   len(per_image), sizes)

    def agrees_with(self, other: "PoseCrops") -> bool:
        """Whether two readings describe the same crops (the boxes given with the crops preprocess returned)."""
        return (self.bbox_center.shape == other.bbox_center.shape and self.bbox_scale.shape == other.bbox_scale.shape
                and torch.allclose(self.bbox_center.cpu().float(), other.bbox_center, rtol=1e-5, atol=1e-3)
                and torch.allclose(self.bbox_scale.cpu().float(), other.bbox_scale, rtol=1e-5, atol=1e-3))


@dataclass(frozen=True)
class FlippedCropOutputs:
    """The model's outputs on the horizontally flipped crops, as the model returned them (the official flip test):
    `decode_pose_keypoints` flips them back with `flip_pairs` (the model config's; default: the processor's
    `flip_indices`, else the official 308 table) and averages. Outputs already flipped back (transformers' convention)
    are passed as they are instead."""

    outputs: Any
    flip_pairs: Sequence[Sequence[int]] | None = None

    @staticmethod
    def wraps(value: Any) -> bool:
        """Whether `value` is such a wrapper, read by its fields: remote code loads this module once per repository
        folder, so the pipeline's copy of the class may not be the processor's."""
        return isinstance(value, FlippedCropOutputs) or (hasattr(value, "outputs") and hasattr(value, "flip_pairs"))


@dataclass(frozen=True)
class PoseFlipTest:
    """Flip-test heatmaps: `flip_indices` given, raw (flipped back here); `None`, already flipped back."""

    heatmaps: torch.Tensor
    flip_indices: Sequence[int] | None = None


def _heatmaps(outputs: Any) -> torch.Tensor:
    return outputs.heatmaps if hasattr(outputs, "heatmaps") else outputs


def decode_pose_keypoints(
    heatmaps: torch.Tensor, crops: PoseCrops, *, input_size: tuple[int, int], kernel_size: int = 11,
    flip_test: PoseFlipTest | None = None, threshold: float | None = None, target_sizes: Any = None,
    keypoint_indices: Sequence[int] | None = None,
) -> list[list[dict[str, torch.Tensor]]]:
    """Pose heatmaps `(num_crops, num_keypoints, h, w)` of crops of `input_size` -> keypoints in image pixels.

    Args:
        heatmaps, crops: one row per crop of `crops` (the one geometry input, `PoseCrops`), in order.
        flip_test: heatmaps of the flipped crops (`PoseFlipTest`), averaged with `heatmaps`.
        kernel_size: the DARK blur kernel; threshold: keep only keypoints with a score above it.
        target_sizes: per image the size to rescale to (needs `crops.source_sizes`).
        keypoint_indices: decode only these heatmap channels (the model's keypoints at these indices, in this
            order; `labels` are the indices), with the same results as decoding all of them and selecting: what a
            keypoint format reads (`sapiens2_hf.data.keypoint_formats.post_process_in_format`: 17 of 308 for coco17).

    Returns:
        Per image, a list (one entry per crop, in order) of dicts:
        - `keypoints` (`torch.Tensor` of shape `(num_keypoints, 2)`, float64): `(x, y)` image pixels;
        - `scores` (`(num_keypoints,)` float32): heatmap maxima (not probabilities; can be <= 0);
        - `labels` (`(num_keypoints,)` int64): keypoint indices;
        - `bbox` (`(4,)` float32): the box as `(x_min, y_min, x_max, y_max)`.
    """
    channels = None if keypoint_indices is None else [int(i) for i in keypoint_indices]
    if channels is not None and not all(0 <= i < heatmaps.shape[1] for i in channels):
        raise ValueError(f"keypoint_indices={channels[:10]} holds indices outside the {heatmaps.shape[1]} heatmap "
                         "channels; pass indices of the model's keypoints.")
    if len(crops.bbox_center) != heatmaps.shape[0]:
        raise ValueError(f"{heatmaps.shape[0]} heatmaps for {len(crops.bbox_center)} boxes; the outputs must hold one "
                         "row per box, in the order given to preprocess.")
    results: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(crops.num_images)]
    if heatmaps.shape[0] == 0:
        return results
    keypoints_input, scores = _decode_pose_heatmaps(heatmaps, flip_test, channels, input_size, kernel_size)
    keypoints = crop_to_image(keypoints_input, crops.bbox_center, crops.bbox_scale, input_size)
    keypoints, boxes_xyxy = _rescale_keypoints(keypoints, crops, target_sizes)
    labels = torch.arange(keypoints.shape[1], device=heatmaps.device) if channels is None \
        else torch.tensor(channels, device=heatmaps.device)
    for row, image in enumerate(crops.image_index.tolist()):
        person = {"keypoints": keypoints[row], "scores": scores[row], "labels": labels, "bbox": boxes_xyxy[row]}
        if threshold is not None:
            keep = person["scores"] > threshold
            person.update(keypoints=person["keypoints"][keep.to(keypoints.device)], scores=person["scores"][keep],
                          labels=labels[keep])
        results[image].append(person)
    return results


def _rescale_keypoints(keypoints: torch.Tensor, crops: PoseCrops, target_sizes: Any):
    """Keypoints and boxes moved from the source images to `target_sizes` (unchanged without them)."""
    boxes_xyxy = crops.boxes_xyxy.to(keypoints.device)
    target_sizes = _sizes_list(target_sizes, crops.num_images, "target_sizes")
    if target_sizes is None:
        return keypoints, boxes_xyxy
    if crops.source_sizes is None:
        raise ValueError("source_sizes must be given with target_sizes.")
    source_sizes = _sizes_list(crops.source_sizes, crops.num_images, "source_sizes")
    factors = torch.tensor([[t[1] / s[1], t[0] / s[0]] for s, t in zip(source_sizes, target_sizes)],
                           dtype=torch.float64, device=keypoints.device)[crops.image_index.to(keypoints.device)]
    return keypoints * factors[:, None, :], (boxes_xyxy.double() * factors[:, [0, 1, 0, 1]]).float()


def _decode_pose_heatmaps(heatmaps, flip_test, channels, input_size, kernel_size):
    """`(keypoints in crop pixels, scores)` of every crop, decoded `POSE_DECODE_CHUNK_SIZE` crops at a time (memory
    bounded by the chunk; results independent of it), with the flip test of either convention, and only the
    `channels` asked for when given."""
    num_channels = heatmaps.shape[1]

    def decode(rows: slice, maps: list[int] | None, previous_map: list[int] | None) -> dict[str, torch.Tensor]:
        """Decode the channels `maps` (all when None) of the crops `rows`."""
        select = (lambda t: t) if maps is None else (
            lambda t: t.index_select(1, torch.tensor(maps, dtype=torch.long, device=t.device)))
        chunk = select(heatmaps[rows]).float()
        if flip_test is not None and flip_test.flip_indices is None:
            chunk = (chunk + select(flip_test.heatmaps[rows]).float()) * 0.5
        elif flip_test is not None:
            chunk = flip_test_average(chunk, flip_test.heatmaps[rows].float(), flip_test.flip_indices, channels=maps)
        return decode_udp_heatmaps(chunk, input_size, kernel_size, previous_map=previous_map)

    keypoints_input, scores = [], []
    for start in range(0, heatmaps.shape[0], POSE_DECODE_CHUNK_SIZE):
        rows = slice(start, start + POSE_DECODE_CHUNK_SIZE)
        if channels is None:
            decoded = decode(rows, None, None)
        else:
            # decode only the channels asked for; a maximum <= 0 makes the official refinement read the
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


# ----------------------------------------------------------------------------------------------------------------
# dense maps
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseLayout:
    """Where each dense output goes: its letterbox `paddings` `(left, right, top, bottom)` in map pixels (zeros: none
    removed), the `final_sizes` to resize to (None: keep the map's), and the `source_sizes` (original images)."""

    paddings: list[tuple[int, int, int, int]]
    final_sizes: list[tuple[int, int]] | None
    source_sizes: list[tuple[int, int]] | None

    @classmethod
    def resolve(cls, maps: torch.Tensor, input_size: tuple[int, int], source_sizes: Any = None,
                target_sizes: Any = None, do_remove_padding: bool | None = None, paddings: Any = None,
                ) -> "DenseLayout":
        """From the `post_process_*` arguments: `source_sizes` (original sizes; the default final size, and what the
        padding is recomputed from), `target_sizes` (final sizes), `paddings` (from `preprocess`, in model-input
        pixels) and `do_remove_padding` (default: when `source_sizes` are given)."""
        count = maps.shape[0]
        source_sizes = _sizes_list(source_sizes, count, "source_sizes")
        target_sizes = _sizes_list(target_sizes, count, "target_sizes")
        if do_remove_padding is None:
            do_remove_padding = source_sizes is not None
        final_sizes = target_sizes if target_sizes is not None else source_sizes
        pads = _paddings(maps, input_size, source_sizes, paddings) if do_remove_padding else [(0, 0, 0, 0)] * count
        return cls(pads, final_sizes, source_sizes)

    def finish(self, maps: torch.Tensor, resize_fn: Callable = resize_maps_bilinear) -> list[torch.Tensor]:
        """Unpad and resize `(batch, channels, height, width)` maps; batched when all items share the geometry."""
        if maps.shape[0] == 0:
            return []
        paddings, final_sizes = self.paddings, self.final_sizes
        same_sizes = final_sizes is None or all(s == final_sizes[0] for s in final_sizes)
        if all(p == paddings[0] for p in paddings) and same_sizes:
            cropped = remove_padding(maps, paddings[0])
            return list(resize_fn(cropped, final_sizes[0]) if final_sizes is not None else cropped)
        results = []
        for i in range(maps.shape[0]):
            cropped = remove_padding(maps[i : i + 1], paddings[i])
            results.append((resize_fn(cropped, final_sizes[i]) if final_sizes is not None else cropped)[0])
        return results


def _paddings(maps: torch.Tensor, input_size: tuple[int, int], source_sizes, paddings) -> list:
    """The letterbox padding of each map: `preprocess`'s (scaled to the map), else recomputed from `source_sizes`."""
    if paddings is not None:
        paddings = paddings.tolist() if isinstance(paddings, torch.Tensor) else list(paddings)
        if len(paddings) != maps.shape[0]:
            raise ValueError(f"{len(paddings)} paddings for {maps.shape[0]} outputs.")
        paddings = [tuple(int(v) for v in p) for p in paddings]
        input_height, input_width = input_size
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


def segmentation_maps(logits: torch.Tensor, target_sizes: Any = None, return_scores: bool = False) -> list:
    """Logits -> per image a class map (bilinear logits, then argmax, a few channels at a time), or with
    `return_scores` `(class map, resized logits)` pairs."""
    sizes = _sizes_list(target_sizes, logits.shape[0], "target_sizes")
    if return_scores:
        layout = DenseLayout([(0, 0, 0, 0)] * logits.shape[0], sizes, None)
        # max(dim).indices: the first maximum like argmax, but ~2x faster over the channel axis on CPU
        return [(scores.max(dim=0).indices, scores) for scores in layout.finish(logits)]
    return [resize_logits_argmax(logits[i], sizes[i] if sizes is not None else tuple(logits.shape[-2:]))
            for i in range(logits.shape[0])]


def unit_normals(normals: torch.Tensor, layout: DenseLayout) -> list[torch.Tensor]:
    """Raw normals -> unit normals (eps 1e-8), unpadded and resized (official quirk kept: not re-normalised after the
    resize, so slightly shorter than 1 at edges)."""
    return layout.finish(normals / normals.norm(dim=1, keepdim=True).clamp(min=1e-8))


def clamped_albedo(albedos: torch.Tensor, layout: DenseLayout) -> list[torch.Tensor]:
    """Raw albedo -> RGB in [0, 1]: clamp, unpad, resize."""
    return layout.finish(albedos.clamp(0.0, 1.0))


@dataclass(frozen=True)
class PointmapSmoothing:
    """The official smoothing before enlarging a pointmap: `num_blurs` 3x3 Gaussian passes of `sigma`."""

    num_blurs: int = 4
    sigma: float = 0.8

    def resize(self, maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        return smooth_and_resize_pointmap(maps, size, self.num_blurs, self.sigma)


def metric_pointmaps(
    pointmaps: torch.Tensor, scales: torch.Tensor | None, layout: DenseLayout, input_size: tuple[int, int],
    smoothing: PointmapSmoothing | None = PointmapSmoothing(), focal_length: Any = None, intrinsics: Any = None,
) -> list[dict[str, Any]]:
    """Canonical pointmaps -> per image `{"pointmap", "depth", "scale", "focal_length"}` (see
    `Sapiens2HFImageProcessor.post_process_pointmap_estimation`)."""
    count = pointmaps.shape[0]
    _check_one_camera_kind(focal_length, intrinsics)
    cameras = _camera_per_image(intrinsics, "intrinsics", count)
    focals = _camera_per_image(focal_length, "focal_length", count)
    if cameras is not None:
        focals = [None if camera is None else camera[0] for camera in cameras]
    # model-input pixels per original pixel along x: the letterbox resize (the scale's f_x is in model-input pixels)
    factors = [1.0] * count if layout.source_sizes is None else [
        letterbox_geometry(size, input_size)[0][1] / size[1] for size in layout.source_sizes]
    used, predicted = _pointmap_scales(scales, focals, factors, pointmaps.device)
    if used is not None:
        pointmaps = pointmaps / used[:, :, None, None]
    maps = layout.finish(pointmaps, resize_maps_bilinear if smoothing is None else smoothing.resize)
    results = []
    for i, m in enumerate(maps):
        if cameras is not None and cameras[i] is not None:
            reference = layout.source_sizes[i] if layout.source_sizes is not None else input_size
            m = _reproject_pointmap(m, cameras[i], reference)
        if focals is not None and focals[i] is not None:
            focal, scale = torch.tensor(focals[i], dtype=torch.float32), used[i, 0]
        elif predicted is not None and predicted[i]:
            scale = used[i, 0]
            focal = CANONICAL_FOCAL_LENGTH / (scale * factors[i])
        else:
            focal = scale = None
        results.append({"pointmap": m, "depth": m[2], "scale": scale, "focal_length": focal})
    return results


def _pointmap_scales(scales, focals, factors, device):
    """`(the scales divided by, which images keep the predicted one)`: a known camera's `768 / (f * factor)` in
    float64 rounded once to float32; an image without a camera keeps its predicted scale (or 1, the canonical camera,
    for a model without a scale branch)."""
    if focals is None or all(f is None for f in focals):
        return scales, ([True] * len(factors) if scales is not None else None)
    used = torch.tensor(
        [[CANONICAL_FOCAL_LENGTH / (f * r) if f is not None else (1.0 if scales is None else float(scales[i, 0]))]
         for i, (f, r) in enumerate(zip(focals, factors))], dtype=torch.float32, device=device)
    return used, ([f is None for f in focals] if scales is not None else None)


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


def matting_maps(outputs: Any) -> torch.Tensor:
    """A matting output (`alphas` and `foregrounds`, or the head's `(batch, 4, h, w)` tensor) as float32 RGBA maps."""
    alphas = getattr(outputs, "alphas", None)
    if alphas is None and isinstance(outputs, torch.Tensor) and outputs.ndim == 4 and outputs.shape[1] == 4:
        return outputs.float()
    if alphas is None:
        raise ValueError(f"post_process_image_matting needs a matting model's output (`alphas`, `foregrounds`), "
                         f"got a {type(outputs).__name__}.")
    foregrounds = getattr(outputs, "foregrounds", None)
    if foregrounds is None:
        raise ValueError("post_process_image_matting needs `foregrounds` beside `alphas` (a Sapiens2 matting "
                         "model's output).")
    return torch.cat([foregrounds, alphas], dim=1).float()


def alpha_mattes(maps: torch.Tensor, layout: DenseLayout, backgrounds: Any = None) -> list[dict[str, Any]]:
    """RGBA matting maps -> per image `{"alpha", "foreground", "composite"}`: unpad, resize, clamp to [0, 1], and
    composite over `backgrounds` (one for all or one per image; images or `(red, green, blue)` colours)."""
    count = maps.shape[0]
    background_list = None
    if backgrounds is not None:
        one = _is_colour(backgrounds) or not isinstance(backgrounds, (list, tuple))
        background_list = [backgrounds] if one else backgrounds
        if len(background_list) not in (1, count):
            raise ValueError(f"{len(background_list)} backgrounds for {count} images; pass one, or one per image.")
    out = []
    for index, item in enumerate(layout.finish(maps)):
        item = item.clamp(0.0, 1.0)
        foreground, alpha = item[:3], item[3:]
        composite = None
        if background_list is not None:
            composite = _composite(foreground, alpha, background_list[0 if len(background_list) == 1 else index])
        out.append({"alpha": alpha, "foreground": foreground, "composite": composite})
    return out


def _composite(foreground: torch.Tensor, alpha: torch.Tensor, background: Any) -> torch.Tensor:
    """`foreground + (1 - alpha) * background` as `(3, height, width)` uint8 (an image background resized
    bilinearly to the matte's size)."""
    if _is_colour(background):
        if not all(0 <= value <= 255 for value in background):
            raise ValueError(f"A background colour is (red, green, blue) in [0, 255], got {background}.")
        rgb = torch.tensor([float(value) / 255.0 for value in background], device=foreground.device)
        rgb = rgb[:, None, None].expand(3, *alpha.shape[-2:])
    else:
        rgb = torch.from_numpy(load_image_rgb(background)).to(foreground.device).permute(2, 0, 1).float() / 255.0
        rgb = resize_maps_bilinear(rgb[None], tuple(alpha.shape[-2:]))[0]
    blended = (foreground + (1.0 - alpha) * rgb).clamp(0.0, 1.0)
    return (blended * 255.0).round().to(torch.uint8)


def _is_colour(value: Any) -> bool:
    """Whether a matting background is a colour: three numbers `(red, green, blue)` (not images, not booleans)."""
    return isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(item, (int, float, np.integer, np.floating)) and not isinstance(item, bool) for item in value)


# ----------------------------------------------------------------------------------------------------------------
# person foreground
# ----------------------------------------------------------------------------------------------------------------


def mask_background(values: Any, mask: Any, fill_value: float, channels_last: bool | None = None):
    """A copy of a `(height, width)`, `(height, width, channels)` or `(channels, height, width)` map (numpy or torch)
    with the pixels outside the `(height, width)` person `mask` set to `fill_value` (see
    `Sapiens2HFImageProcessor.apply_foreground_mask`)."""
    is_tensor = isinstance(values, torch.Tensor)
    if not is_tensor:
        values = np.asarray(values)
    if not (is_tensor and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.ndim == 2):
        mask = foreground_mask_array(mask)
    channels_last = _channels_last(tuple(values.shape), tuple(mask.shape), channels_last)
    if np.isnan(fill_value) and not (values.is_floating_point() if is_tensor
                                     else np.issubdtype(values.dtype, np.floating)):
        raise ValueError(f"cannot fill {values.dtype} values with NaN; pass fill_value= a number.")
    background = ~torch.as_tensor(mask, device=values.device) if is_tensor else ~mask
    out = values.clone() if is_tensor else values.copy()
    if channels_last:
        out[background] = fill_value
    else:
        out[:, background] = fill_value
    return out


def _channels_last(shape: tuple, mask_shape: tuple, channels_last: bool | None) -> bool:
    """Where the channels of a map of `shape` are, given its `(height, width)` mask (read from the shapes unless
    `channels_last` says; an error when both readings fit or neither does)."""
    fits_last = len(shape) == 3 and shape[:2] == mask_shape
    fits_first = len(shape) == 3 and shape[1:] == mask_shape
    mismatch = ValueError(f"values of shape {shape} do not match the mask {mask_shape[0]}x{mask_shape[1]} "
                          "(height x width); pass a (height, width), (height, width, channels) or (channels, "
                          "height, width) map of the mask's size.")
    if len(shape) == 2 and shape == mask_shape:
        return True
    if not (fits_last or fits_first):
        raise mismatch
    if channels_last is None:
        if fits_last and fits_first:
            raise ValueError(f"values {shape} and mask {mask_shape} fit channels first and last; pass "
                             "channels_last=.")
        return fits_last
    if not (fits_last if channels_last else fits_first):
        raise mismatch
    return channels_last


def foreground_from_segmentation(segmentation: Any) -> np.ndarray | torch.Tensor:
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


def keypoint_names(num_keypoints: int) -> list[str]:
    """Official names for 308 keypoints, else `keypoint_<i>`."""
    if num_keypoints == NUM_POSE_KEYPOINTS:
        return list(POSE_KEYPOINT_NAMES)
    return [f"keypoint_{i}" for i in range(num_keypoints)]
