# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The official pose heatmap decoding, batched in torch on the heatmaps' device: flip test, OpenCV-equivalent Gaussian
blurs, arg-max, the DARK-UDP refinement with its quirks, and the crop -> image mapping, each reproducing one step of
the official Sapiens2 inference code numerically."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch


def _flip_index(flip_indices: Sequence[int] | torch.Tensor, heatmaps: torch.Tensor) -> torch.Tensor:
    """`flip_indices` as a long tensor on the heatmaps' device, checked against their channels."""
    index = torch.as_tensor(flip_indices, dtype=torch.long, device=heatmaps.device)
    if index.numel() != heatmaps.shape[1]:
        raise ValueError(f"flip_indices has {index.numel()} entries but the heatmaps have "
                         f"{heatmaps.shape[1]} channels; pass the model's flip pairs.")
    return index


def flip_back_heatmaps(heatmaps_flipped: torch.Tensor, flip_indices: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Undo a horizontal input flip on `(num_crops, num_keypoints, height, width)` heatmaps of flipped crops: flip
    along width, then channel `k` takes channel `flip_indices[k]`. No pixel shift (UDP); applying it twice is the
    identity when `flip_indices` is an involution."""
    return heatmaps_flipped.index_select(1, _flip_index(flip_indices, heatmaps_flipped)).flip(-1)


def flip_pairs_to_indices(flip_pairs: Sequence[Sequence[int]], num_keypoints: int) -> list[int]:
    """Unordered left/right pairs -> a full permutation (identity for centre-line keypoints)."""
    indices = list(range(num_keypoints))
    for left, right in flip_pairs:
        if not (0 <= left < num_keypoints and 0 <= right < num_keypoints):
            raise ValueError(f"flip pair ({left}, {right}) is out of range for {num_keypoints} keypoints.")
        indices[left], indices[right] = right, left
    return indices


def flip_test_average(
    heatmaps: torch.Tensor, heatmaps_on_flipped_input: torch.Tensor, flip_indices: Sequence[int] | torch.Tensor,
    channels: Sequence[int] | None = None,
) -> torch.Tensor:
    """Official flip test: `(heatmaps + flip_back(heatmaps_on_flipped_input)) / 2`, in the heatmaps' dtype. With
    `channels`, `heatmaps` hold only those model channels, and only the flipped channels they need are flipped back.
    """
    index = _flip_index(flip_indices, heatmaps_on_flipped_input)
    if channels is not None:
        index = index[torch.as_tensor(channels, dtype=torch.long, device=index.device)]
    flipped_back = heatmaps_on_flipped_input.index_select(1, index).flip(-1).to(heatmaps.dtype)
    return flipped_back.add_(heatmaps).mul_(0.5)  # in place on the fresh copy: same values, two passes fewer


def opencv_gaussian_kernel1d(kernel_size: int, device=None) -> torch.Tensor:
    """The 1-D kernel of ``cv2.GaussianBlur(ksize=(k, k), sigmaX=0)`` for float32 images (sigma from the size)."""
    if kernel_size % 2 == 0 or kernel_size <= 1:
        raise ValueError(f"blur kernel size must be an odd integer > 1, got {kernel_size}.")
    sigma = ((kernel_size - 1) * 0.5 - 1) * 0.3 + 0.8
    scale2 = -0.5 / (sigma * sigma)
    values = [math.exp(scale2 * (i - (kernel_size - 1) * 0.5) ** 2) for i in range(kernel_size)]
    inv_sum = 1.0 / sum(values)
    return torch.tensor([v * inv_sum for v in values], dtype=torch.float32, device=device)


def _band_matrix(kernel: torch.Tensor, size_in: int, size_out: int, offset: int) -> torch.Tensor:
    """`(size_in, size_out)` matrix `M[q, p] = kernel[q - p - offset + half]` (zero outside the kernel): `x @ M` is a
    1-D correlation along the last axis, "same" with `offset = 0`, "valid" on a padded signal with `offset = half`."""
    half = kernel.numel() // 2
    q = torch.arange(size_in, device=kernel.device)[:, None]
    p = torch.arange(size_out, device=kernel.device)[None, :]
    tap = q - p - offset + half
    inside = (tap >= 0) & (tap < kernel.numel())
    return torch.where(inside, kernel[tap.clamp(0, kernel.numel() - 1)], torch.zeros((), dtype=kernel.dtype,
                                                                                       device=kernel.device))


def gaussian_blur_zero_padded(maps: torch.Tensor, kernel_size: int = 11, valid: bool = False) -> torch.Tensor:
    """``cv2.GaussianBlur(ksize=(k, k), sigmaX=0)`` of float32 `(..., height, width)` maps surrounded by zeros (with
    `valid`: maps that already carry a `kernel_size // 2` zero border, only the interior returned), as two banded
    matrix products. On CUDA they run in float64: float32 products may run in TF32 (a process-wide switch), whose
    1e-3 relative error would spoil the DARK refinement.
    """
    kernel = opencv_gaussian_kernel1d(kernel_size, maps.device)
    half = kernel_size // 2
    height, width = maps.shape[-2:]
    out_h, out_w = (height - 2 * half, width - 2 * half) if valid else (height, width)
    offset = half if valid else 0
    compute_dtype = torch.float64 if maps.device.type == "cuda" else maps.dtype
    kernel = kernel.to(compute_dtype)
    rows = maps.to(compute_dtype) @ _band_matrix(kernel, width, out_w, offset)  # (..., height, out_w)
    blurred = _band_matrix(kernel, height, out_h, offset).transpose(0, 1) @ rows  # (..., out_h, out_w)
    return blurred.to(maps.dtype)


def gaussian_blur_preserve_max(heatmaps: torch.Tensor, kernel_size: int = 11) -> torch.Tensor:
    """Official DARK pre-blur of `(num_maps, height, width)` float32 heatmaps: zero-padded Gaussian blur per channel,
    rescaled so each channel keeps its maximum (a channel whose blurred maximum is 0 becomes non-finite, as
    officially)."""
    blurred = gaussian_blur_zero_padded(heatmaps, kernel_size)
    original_max = heatmaps.amax(dim=(-2, -1))
    blurred_max = blurred.amax(dim=(-2, -1))
    return blurred * (original_max / blurred_max)[..., None, None]


def _gather_windows(maps: torch.Tensor, map_index: torch.Tensor, top: torch.Tensor, left: torch.Tensor,
                    height: int, width: int) -> torch.Tensor:
    """`(..., height, width)` windows of `maps[map_index]` starting at `(top, left)`, zero outside the maps."""
    num_rows, num_cols = maps.shape[-2:]
    rows = top[..., None] + torch.arange(height, device=maps.device)  # (..., height)
    cols = left[..., None] + torch.arange(width, device=maps.device)  # (..., width)
    inside = ((rows >= 0) & (rows < num_rows))[..., :, None] & ((cols >= 0) & (cols < num_cols))[..., None, :]
    values = maps[map_index[..., None, None], rows.clamp(0, num_rows - 1)[..., :, None],
                  cols.clamp(0, num_cols - 1)[..., None, :]]
    return values * inside


def _blurred_maxima(maps: torch.Tensor, row_max: torch.Tensor, lower_bound: torch.Tensor,
                    kernel_size: int) -> torch.Tensor:
    """Exact maximum of each zero-padded Gaussian-blurred map of `(num_maps, height, width)` `maps` (`row_max`: their
    row maxima), blurring only a small box around the peak when there is one: a blurred pixel, a weighted mean of its
    window, reaches `lower_bound` (a blurred value of that map) only if its window holds a pixel >= it.
    """
    num_maps, height, width = maps.shape
    half = kernel_size // 2
    device = maps.device
    # 1e-5 slack covers float32 rounding of the kernel weights (their sum is 1 only up to rounding)
    threshold = torch.where(lower_bound > 0, lower_bound * (1 - 1e-5), lower_bound * (1 + 1e-5))
    rows = torch.arange(height, device=device)
    row_hit = row_max >= threshold[:, None]  # (num_maps, height)
    first_row = torch.where(row_hit, rows, height).amin(dim=1)
    last_row = torch.where(row_hit, rows, -1).amax(dim=1)
    band = (last_row - first_row + 1).clamp(min=1)
    maxima = torch.empty(num_maps, dtype=maps.dtype, device=device)
    small = (lower_bound > 0) & (band * 4 <= height)
    if small.any():
        index = small.nonzero().squeeze(1)
        band_h = int(band[index].max())
        top = first_row[index].clamp(max=height - band_h)
        strip = _gather_windows(maps, index, top, torch.zeros_like(top), band_h, width)  # (n, band_h, width)
        col_hit = (strip >= threshold[index, None, None]).any(dim=1)  # (n, width)
        cols = torch.arange(width, device=device)
        first_col = torch.where(col_hit, cols, width).amin(dim=1)
        last_col = torch.where(col_hit, cols, -1).amax(dim=1)
        # the box of candidate blurred pixels, then the same box grown by the radius for the blur's input
        box_h = int((last_row[index] - first_row[index] + 1 + 2 * half).max())
        box_w = int((last_col - first_col + 1 + 2 * half).clamp(min=1).max())
        windows = _gather_windows(maps, index, first_row[index] - 2 * half, first_col - 2 * half,
                                  box_h + 2 * half, box_w + 2 * half)
        blurred = gaussian_blur_zero_padded(windows, kernel_size, valid=True)  # (n, box_h, box_w)
        # only blurred pixels of the map itself count (the box may stick out of the map)
        out_rows = first_row[index, None] - half + torch.arange(box_h, device=device)
        out_cols = first_col[:, None] - half + torch.arange(box_w, device=device)
        real = ((out_rows >= 0) & (out_rows < height))[:, :, None] & ((out_cols >= 0) & (out_cols < width))[:, None]
        maxima[index] = torch.where(real, blurred, torch.full_like(blurred, -math.inf)).amax(dim=(-2, -1))
    if (~small).any():
        index = (~small).nonzero().squeeze(1)
        maxima[index] = gaussian_blur_zero_padded(maps[index], kernel_size).amax(dim=(-2, -1))
    return maxima


def _argmax_with_row_max(heatmaps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pass over the maps: row maxima, maxima, and the float32 `(x, y)` of the first maximum in row-major order
    (numpy's argmax), `(-1, -1)` where the maximum is <= 0."""
    num_crops, num_keypoints, height, width = heatmaps.shape
    row_max = heatmaps.amax(dim=-1)  # (num_crops, num_keypoints, height)
    scores = row_max.amax(dim=-1)
    row = (row_max == scores[..., None]).to(torch.uint8).argmax(dim=-1)  # first row holding the maximum
    values = heatmaps.gather(2, row[..., None, None].expand(-1, -1, 1, width))[:, :, 0]  # (..., width)
    col = (values == scores[..., None]).to(torch.uint8).argmax(dim=-1)
    locations = torch.stack([col, row], dim=-1).to(torch.float32)
    return row_max, scores, torch.where((scores > 0)[..., None], locations, torch.full_like(locations, -1.0))


def heatmap_argmax(heatmaps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer maxima of `(num_crops, num_keypoints, height, width)` heatmaps: `locations` (`(num_crops,
    num_keypoints, 2)` float32 `(x, y)` heatmap pixels of the first maximum in row-major order, `(-1, -1)` where the
    maximum is <= 0) and `scores` (`(num_crops, num_keypoints)`, the maxima, heatmap dtype)."""
    _, scores, locations = _argmax_with_row_max(heatmaps)
    return locations, scores


def refine_keypoints_dark_udp(
    locations: torch.Tensor, heatmaps: torch.Tensor, blur_kernel_size: int = 11, row_max: torch.Tensor | None = None,
    previous_map: Sequence[int] | torch.Tensor | None = None,
) -> torch.Tensor:
    """Official DARK-UDP refinement of the integer `(x, y)` `locations` `(num_crops, num_keypoints, 2)` of
    `heatmap_argmax` on `(num_crops, num_keypoints, height, width)` heatmaps: one Newton step on the blurred
    log-heatmap. Returns the refined float32 `(x, y)` in heatmap pixels, same shape.

    Steps: max-preserving Gaussian blur, clip to [1e-3, 50], log, edge-pad by 1, central differences at the maximum,
    `offset = -(H + eps I)^-1 grad` (float32 eps) in float64, rounded back to float32 as the official numpy update
    does. Only the blurred 3x3 neighbourhood of each maximum and each map's blurred maximum are computed (equal to
    blurring whole maps up to float32 summation order). Official quirk reproduced: a keypoint at `(-1, -1)` (maximum
    <= 0) reads its neighbours from the flattened padded maps of the same crop, wrapping at index 0 like numpy.
    `previous_map` (`(num_keypoints,)` int) names, per map, the map holding the model channel before it (the one the
    quirk reads); default: the map before, the first wrapping to the last (a subset: `keypoint_subset_maps`).
    `row_max` `(num_crops, num_keypoints, height)`: the maps' row maxima if already known.
    """
    num_crops, num_keypoints, height, width = heatmaps.shape
    device = heatmaps.device
    if previous_map is None:
        previous_map = torch.remainder(torch.arange(num_keypoints, device=device) - 1, num_keypoints)
    previous_map = torch.as_tensor(previous_map, dtype=torch.long, device=device)
    maps = heatmaps.to(torch.float32).reshape(-1, height, width)  # (num_maps, height, width)
    half = blur_kernel_size // 2
    kernel1d = opencv_gaussian_kernel1d(blur_kernel_size, device)
    kernel2d = kernel1d[:, None] * kernel1d[None, :]
    map_index, row, col = _difference_pixels(locations, previous_map, num_crops, height, width)
    windows = _gather_windows(maps, map_index, row - half, col - half, blur_kernel_size, blur_kernel_size)
    blurred = (windows * kernel2d).sum(dim=(-2, -1))  # (num_crops, num_keypoints, 7) blurred values
    row_max = maps.amax(dim=-1) if row_max is None else row_max.reshape(-1, height).to(torch.float32)
    original_max = row_max.amax(dim=-1)
    blurred_max = _blurred_maxima(maps, row_max, blurred[..., 0].reshape(-1), blur_kernel_size)
    scale = (original_max / blurred_max)[map_index]  # the rescale of the map each value comes from
    values = (blurred * scale).clamp(1e-3, 50.0).log()
    return _newton_step(locations, values, device)


def _difference_pixels(locations: torch.Tensor, previous_map: torch.Tensor, num_crops: int, height: int,
                       width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 7 pixels the central differences read at each maximum (the centre, then +-x, +-y, +(x+y), -(x+y)), as
    `(map index, row, column)` into the flattened maps, each `(num_crops, num_keypoints, 7)` long, with the official
    quirk (see `refine_keypoints_dark_udp`)."""
    num_keypoints = locations.shape[1]
    device = previous_map.device
    padded_w, padded_h = width + 2, height + 2
    per_map = padded_h * padded_w
    xs = locations[..., 0].to(torch.long)
    ys = locations[..., 1].to(torch.long)
    keypoint = torch.arange(num_keypoints, device=device)[None, :]
    centre = xs + 1 + (ys + 1) * padded_w
    offsets = torch.tensor(
        [0, 1, -1, padded_w, -padded_w, padded_w + 1, -padded_w - 1], dtype=torch.long, device=device
    )
    # index in the map's edge-padded copy; only a maximum at (-1, -1) reaches before it, into the end of the
    # previous channel's padded copy (numpy's flat indexing of the stacked padded maps, wrapping at channel 0)
    rest = centre[..., None] + offsets  # (num_crops, num_keypoints, 7)
    before = rest < 0
    rest = torch.where(before, rest + per_map, rest)
    channel = torch.where(before, previous_map[keypoint][..., None], keypoint[..., None])
    # (channel, row, col) in the padded maps -> clamped source pixel (edge padding)
    row = (rest // padded_w - 1).clamp(0, height - 1)
    col = (rest % padded_w - 1).clamp(0, width - 1)
    map_index = torch.arange(num_crops, device=device)[:, None, None] * num_keypoints + channel
    return map_index, row, col


def _newton_step(locations: torch.Tensor, values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`locations - (H + eps I)^-1 grad` from the log-heatmap `values` at the 7 points the official DARK step reads
    (centre, +-x, +-y, +(x, y), -(x, y)), in float64, rounded to float32 on the heatmaps' `device`."""
    i_, ix1, ix1_, iy1, iy1_, ix1y1, ix1_y1_ = values.unbind(-1)
    dx = 0.5 * (ix1 - ix1_)
    dy = 0.5 * (iy1 - iy1_)
    dxx = ix1 - 2 * i_ + ix1_
    dyy = iy1 - 2 * i_ + iy1_
    dxy = 0.5 * (ix1y1 - ix1 - iy1 + i_ + i_ - ix1_ - iy1_ + ix1_y1_)
    # float64 Newton step (the official code adds a float64 eps*I, which promotes the 2x2 inverse to float64)
    step_device = device if device.type != "mps" else torch.device("cpu")  # MPS has no float64
    eps = float(np.finfo(np.float32).eps)
    a = dxx.to(step_device, torch.float64) + eps
    d = dyy.to(step_device, torch.float64) + eps
    b = dxy.to(step_device, torch.float64)
    gx, gy = dx.to(step_device, torch.float64), dy.to(step_device, torch.float64)
    det = a * d - b * b
    offset_x = (d * gx - b * gy) / det
    offset_y = (a * gy - b * gx) / det
    refined = locations.to(step_device, torch.float64) - torch.stack([offset_x, offset_y], dim=-1)
    return refined.to(torch.float32).to(device)


def decode_udp_heatmaps(
    heatmaps: torch.Tensor, input_size: tuple[int, int], blur_kernel_size: int = 11,
    previous_map: Sequence[int] | torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Official UDP decoding of `(num_crops, num_keypoints, height, width)` heatmaps (any float dtype, decoded in
    float32) of crops of `input_size` `(height, width)`. Each keypoint's result depends on its own map only (and, for
    a maximum <= 0, on the previous channel's: see `refine_keypoints_dark_udp`, also for `previous_map`), so decoding
    a subset of the channels gives the values of a full decode (`keypoint_subset_maps`).

    Returns:
        dict with `keypoints_heatmap` (`(num_crops, num_keypoints, 2)` float32: refined `(x, y)` in heatmap pixels),
        `keypoints_input` (same shape, float64, on CPU for MPS inputs: crop pixels `x * W / (w - 1)`,
        `y * H / (h - 1)`, the official quirk of input size over heatmap size minus one) and `scores`
        (`(num_crops, num_keypoints)` float32: the heatmap maxima).
    """
    heatmaps = heatmaps.to(torch.float32)
    height, width = heatmaps.shape[-2:]
    row_max, scores, locations = _argmax_with_row_max(heatmaps)
    refined = refine_keypoints_dark_udp(locations, heatmaps, blur_kernel_size, row_max=row_max,
                                        previous_map=previous_map)
    step_device = refined.device if refined.device.type != "mps" else torch.device("cpu")
    denominator = torch.tensor([width - 1, height - 1], dtype=torch.float64, device=step_device)
    crop_size = torch.tensor([input_size[1], input_size[0]], dtype=torch.float64, device=step_device)
    keypoints_input = refined.to(step_device, torch.float64) / denominator * crop_size
    return {"keypoints_heatmap": refined, "keypoints_input": keypoints_input, "scores": scores}


def keypoint_subset_maps(
    channels: Sequence[int], num_keypoints: int, with_previous: bool
) -> tuple[list[int], list[int], list[int]]:
    """Which heatmap channels to decode for the keypoints `channels` (distinct), and where their results are. With
    `with_previous` the channel before each one (the first wrapping to the last) is decoded too, so that a keypoint
    whose maximum is <= 0 reads the same neighbour as in a full decode (the quirk in `refine_keypoints_dark_udp`).

    Returns:
        `(maps, positions, previous_map)`: the model channels to decode, in order; the index in `maps` of each of
        `channels`; for each map, the index in `maps` of the channel before it (`decode_udp_heatmaps(previous_map=)`;
        a map whose previous channel is not decoded points at itself, and its own result is not used).
    """
    wanted = [int(c) for c in channels]
    maps = sorted(set(wanted) | ({(c - 1) % num_keypoints for c in wanted} if with_previous else set()))
    where = {c: k for k, c in enumerate(maps)}
    previous_map = [where.get((c - 1) % num_keypoints, k) for k, c in enumerate(maps)]
    return maps, [where[c] for c in wanted], previous_map


def crop_to_image(
    keypoints_input: torch.Tensor, center: torch.Tensor, scale: torch.Tensor, input_size: tuple[int, int]
) -> torch.Tensor:
    """Official crop -> image mapping `kp / input_size * scale + center - scale / 2` of `(num_crops, num_keypoints,
    2)` crop pixels, in float64 (quirk: it divides by the input size, not input size - 1); `center`, `scale` from
    `boxes_to_center_scale`. Returns float64 `(x, y)` original-image pixels."""
    device = keypoints_input.device
    crop_size = torch.tensor([input_size[1], input_size[0]], dtype=torch.float64, device=device)
    scale = scale.to(device, torch.float32)
    center = center.to(device, torch.float32).to(torch.float64)[:, None, :]
    half = (scale * 0.5).to(torch.float64)[:, None, :]
    return keypoints_input.to(torch.float64) / crop_size * scale.to(torch.float64)[:, None, :] + center - half
