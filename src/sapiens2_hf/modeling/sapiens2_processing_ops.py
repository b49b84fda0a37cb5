# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Pure pre- and post-processing functions for Sapiens2, each reproducing one step of the official inference code
(facebookresearch/sapiens2 @ 3098c14) numerically, checked against the official fixtures (tests/fixtures/official).

Geometry works on ``uint8`` RGB ``(height, width, 3)`` images, as the official code warps and resizes with OpenCV and
rounds to ``uint8`` before normalising. OpenCV is used when importable; the torch fallback emulates the pose crop
(``cv2.warpAffine``: 1/32-pixel coordinates, 15-bit fixed-point weights) and ``cv2.resize`` INTER_LINEAR and
INTER_AREA shrinks bit-exactly (OpenCV 4.x, x86), and computes INTER_CUBIC and growing INTER_AREA in float: at most
one grey level off on some pixels (tests/test_processing_parity.py). Post-processing is batched torch on the
tensors' own device.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms.functional import gaussian_blur


try:
    import cv2  # optional: exact parity with the official pre-processing
except ImportError:  # pragma: no cover - exercised by forcing backend="torch"
    cv2 = None


from .sapiens2_heatmap_ops import (  # noqa: F401 (one import path for every processing function)
    crop_to_image,
    decode_udp_heatmaps,
    flip_back_heatmaps,
    flip_pairs_to_indices,
    flip_test_average,
    gaussian_blur_preserve_max,
    gaussian_blur_zero_padded,
    heatmap_argmax,
    keypoint_subset_maps,
    opencv_gaussian_kernel1d,
    refine_keypoints_dark_udp,
)


#: Official normalisation constants, RGB, on the 0-255 scale (the official data preprocessor).
OFFICIAL_MEAN_255 = (123.675, 116.28, 103.53)
OFFICIAL_STD_255 = (58.395, 57.12, 57.375)

_VALID_BACKENDS = ("auto", "cv2", "torch")


def resolve_backend(backend: str | None) -> str:
    """``"cv2"`` or ``"torch"`` for a requested geometry `backend`: ``"auto"`` (or `None`: OpenCV when importable,
    else torch), ``"cv2"`` or ``"torch"``."""
    backend = "auto" if backend is None else backend
    if backend not in _VALID_BACKENDS:
        raise ValueError(f"backend={backend!r} is not valid; use one of {_VALID_BACKENDS}.")
    if backend == "auto":
        return "cv2" if cv2 is not None else "torch"
    if backend == "cv2" and cv2 is None:
        raise ValueError("backend='cv2' was requested but OpenCV is not installed; install opencv-python-headless "
                         "or use backend='torch'.")
    return backend


# ----------------------------------------------------------------------------------------------------------------
# Pose: boxes, UDP affine crop
# ----------------------------------------------------------------------------------------------------------------


def boxes_to_center_scale(
    boxes_xyxy: np.ndarray, input_size: tuple[int, int], padding: float = 1.25
) -> tuple[np.ndarray, np.ndarray]:
    """`(num_boxes, 4)` xyxy boxes (image pixels) -> `(center, scale)`, two float32 `(num_boxes, 2)` arrays (`(x, y)`,
    `(width, height)`): the size padded by `padding` and fixed to the aspect of `input_size` `(height, width)`, in
    float32 numpy, bit-identical to the official top-down test pipeline.
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4)
    x1, y1, x2, y2 = boxes[:, 0:1], boxes[:, 1:2], boxes[:, 2:3], boxes[:, 3:4]
    center = np.hstack([x1 + x2, y1 + y2]) * np.float32(0.5)
    scale = np.hstack([x2 - x1, y2 - y1]) * np.float32(padding)
    aspect = np.float32(input_size[1] / input_size[0])
    w, h = scale[:, 0:1], scale[:, 1:2]
    scale = np.where(w > h * aspect, np.hstack([w, w / aspect]), np.hstack([h * aspect, h])).astype(np.float32)
    return center.astype(np.float32), scale


def udp_warp_matrices(center: np.ndarray, scale: np.ndarray, input_size: tuple[int, int]) -> np.ndarray:
    """`(num_boxes, 2, 3)` float32 UDP affine matrices (image -> crop of `input_size` `(height, width)`, rotation 0)
    of the `boxes_to_center_scale` arrays, as the official code builds them: the box's left/right edges map to crop
    pixel centres 0 and `width - 1`."""
    center = np.asarray(center, dtype=np.float32).reshape(-1, 2)
    scale = np.asarray(scale, dtype=np.float32).reshape(-1, 2)
    out_h, out_w = input_size
    mats = np.zeros((center.shape[0], 2, 3), dtype=np.float32)
    for i in range(center.shape[0]):
        sx = (out_w - 1) / scale[i, 0]  # float32 (numpy weak-scalar promotion)
        sy = (out_h - 1) / scale[i, 1]
        twice_center = center[i] * np.float32(2)
        # cos(0) = 1 and -sin(0) = -0.0: the official matrix has a signed zero at [0, 1]; kept for bit-equality.
        mats[i, 0, 0] = sx
        mats[i, 0, 1] = -0.0 * sx
        mats[i, 0, 2] = sx * (np.float32(-0.5) * twice_center[0] + np.float32(0.5) * scale[i, 0])
        mats[i, 1, 0] = 0.0
        mats[i, 1, 1] = sy
        mats[i, 1, 2] = sy * (np.float32(-0.5) * twice_center[1] + np.float32(0.5) * scale[i, 1])
    return mats


def crop_interpolation(matrix: np.ndarray) -> str:
    """Official kernel choice for a crop: ``"area"`` (which OpenCV's warpAffine treats as bilinear) when the warp
    shrinks (smaller axis scale < 1), else ``"cubic"``."""
    return "area" if min(float(matrix[0, 0]), float(matrix[1, 1])) < 1.0 else "cubic"


def _invert_affine_like_cv2(matrix: np.ndarray) -> list[float]:
    m = [float(v) for v in np.asarray(matrix, dtype=np.float32).reshape(6)]
    det = m[0] * m[4] - m[1] * m[3]
    det = 1.0 / det if det != 0 else 0.0
    a11, a22 = m[4] * det, m[0] * det
    m[0], m[1], m[3], m[4] = a11, m[1] * -det, m[3] * -det, a22
    b1 = -m[0] * m[2] - m[1] * m[5]
    b2 = -m[3] * m[2] - m[4] * m[5]
    m[2], m[5] = b1, b2
    return m


_CUBIC_TAB_CACHE: dict[str, torch.Tensor] = {}


def _cv2_fixed_point_tab(kind: str) -> torch.Tensor:
    """OpenCV's 15-bit fixed-point 2-D interpolation table, `(32 * 32, k, k)` int64 indexed `frac_y * 32 + frac_x`."""
    if kind in _CUBIC_TAB_CACHE:
        return _CUBIC_TAB_CACHE[kind]
    one = np.float32(1.0)
    tab1 = []
    for i in range(32):
        x = np.float32(i) * np.float32(1.0 / 32)
        if kind == "linear":
            tab1.append([one - x, x])
        else:
            a = np.float32(-0.75)
            c0 = ((a * (x + one) - np.float32(5) * a) * (x + one) + np.float32(8) * a) * (x + one) - np.float32(4) * a
            c1 = ((a + np.float32(2)) * x - (a + np.float32(3))) * x * x + one
            c2 = ((a + np.float32(2)) * (one - x) - (a + np.float32(3))) * (one - x) * (one - x) + one
            c3 = one - c0 - c1 - c2
            tab1.append([c0, c1, c2, c3])
    tab1 = np.asarray(tab1, dtype=np.float32)
    ksize = tab1.shape[1]
    itab = np.zeros((32, 32, ksize, ksize), dtype=np.int64)
    for i in range(32):
        for j in range(32):
            weights = (tab1[i][:, None] * tab1[j][None, :]).astype(np.float32)
            fixed = np.rint(weights * np.float32(32768)).astype(np.int64)
            diff = int(fixed.sum()) - 32768
            if diff != 0:
                # OpenCV moves the rounding excess onto the largest / smallest of the central taps.
                half = ksize // 2
                lo = hi = (half, half)
                for k1 in range(half, half + 2):
                    for k2 in range(half, half + 2):
                        if fixed[k1, k2] < fixed[lo]:
                            lo = (k1, k2)
                        elif fixed[k1, k2] > fixed[hi]:
                            hi = (k1, k2)
                if diff < 0:
                    fixed[hi] -= diff
                else:
                    fixed[lo] -= diff
            itab[i, j] = fixed
    _CUBIC_TAB_CACHE[kind] = torch.from_numpy(itab).reshape(32 * 32, ksize, ksize)
    return _CUBIC_TAB_CACHE[kind]


def _warp_affine_torch(image: np.ndarray, matrix: np.ndarray, output_size: tuple[int, int], kind: str) -> np.ndarray:
    """Bit-exact torch emulation of ``cv2.warpAffine`` on uint8 (bilinear or bicubic, constant-0 border)."""
    out_h, out_w = output_size
    m = _invert_affine_like_cv2(matrix)
    xs = torch.arange(out_w, dtype=torch.float64)
    ys = torch.arange(out_h, dtype=torch.float64)
    # OpenCV: source coordinates in 1/1024 px (rounded half-to-even), then shifted down to 1/32 px.
    x_delta = torch.round(m[0] * xs * 1024).long()
    y_delta = torch.round(m[3] * xs * 1024).long()
    x_row = torch.round((m[1] * ys + m[2]) * 1024).long() + 16
    y_row = torch.round((m[4] * ys + m[5]) * 1024).long() + 16
    src_x = (x_row[:, None] + x_delta[None, :]) >> 5  # (out_h, out_w), 1/32 px
    src_y = (y_row[:, None] + y_delta[None, :]) >> 5
    ix, fx, iy, fy = src_x >> 5, src_x & 31, src_y >> 5, src_y & 31
    tab = _cv2_fixed_point_tab(kind).to(torch.int32)
    ksize = tab.shape[-1]
    first = 0 if ksize == 2 else -1
    source = torch.from_numpy(np.ascontiguousarray(image))
    in_h, in_w, channels = source.shape
    # int32 accumulation is enough: |weights| < 2^16, at most 16 taps of 255
    if m[1] == 0.0 and m[3] == 0.0:
        # axis-aligned warp (rotation 0, always the case for pose crops): rows and columns are gathered separately
        row_index, frac_y = iy[:, 0], fy[:, 0]
        col_index, frac_x = ix[0], fx[0]
        padded = torch.zeros(in_h + 1, in_w + 1, channels, dtype=torch.int32)  # last row / column: the zero border
        padded[:in_h, :in_w] = source.to(torch.int32)
        weights = tab.reshape(32, 32, ksize, ksize)[frac_y][:, frac_x]  # (out_h, out_w, ksize, ksize)
        acc = torch.zeros(out_h, out_w, channels, dtype=torch.int32)
        for k1 in range(ksize):
            yy = row_index + (first + k1)
            rows = padded[torch.where((yy >= 0) & (yy < in_h), yy, in_h)]  # (out_h, in_w + 1, channels)
            for k2 in range(ksize):
                xx = col_index + (first + k2)
                values = rows[:, torch.where((xx >= 0) & (xx < in_w), xx, in_w)]
                acc += values * weights[:, :, k1, k2, None]
        return ((acc + (1 << 14)) >> 15).clamp(0, 255).to(torch.uint8).numpy()
    flat = torch.cat([source.reshape(-1, channels).to(torch.int32), torch.zeros(1, channels, dtype=torch.int32)])
    outside = in_h * in_w  # index of the zero row (constant border)
    ix, iy = ix.reshape(-1), iy.reshape(-1)
    weights = tab[(fy * 32 + fx).reshape(-1)]  # (out_h * out_w, ksize, ksize)
    acc = torch.zeros(out_h * out_w, channels, dtype=torch.int32)
    for k1 in range(ksize):
        yy = iy + (first + k1)
        row_ok = (yy >= 0) & (yy < in_h)
        for k2 in range(ksize):
            xx = ix + (first + k2)
            index = torch.where(row_ok & (xx >= 0) & (xx < in_w), yy * in_w + xx, outside)
            acc += flat[index] * weights[:, k1, k2, None]
    acc = acc.reshape(out_h, out_w, channels)
    return ((acc + (1 << 14)) >> 15).clamp(0, 255).to(torch.uint8).numpy()


def warp_crops(
    image: np.ndarray, matrices: np.ndarray, input_size: tuple[int, int], backend: str | None = "auto"
) -> np.ndarray:
    """Warp a `(height, width, 3)` uint8 image into one crop per `udp_warp_matrices` matrix, as the official top-down
    affine step (`backend` `"auto"`, `"cv2"` or `"torch"`, the bit-exact emulation of OpenCV 4.x; channel order kept).

    Returns `(num_boxes, input_height, input_width, 3)` uint8.
    """
    backend = resolve_backend(backend)
    out_h, out_w = input_size
    crops = np.zeros((len(matrices), out_h, out_w, image.shape[2]), dtype=np.uint8)
    for i, matrix in enumerate(matrices):
        kind = crop_interpolation(matrix)
        if backend == "cv2":
            flag = cv2.INTER_AREA if kind == "area" else cv2.INTER_CUBIC
            crops[i] = cv2.warpAffine(image, np.asarray(matrix, dtype=np.float32), (out_w, out_h), flags=flag)
        else:
            crops[i] = _warp_affine_torch(image, matrix, input_size, "linear" if kind == "area" else "cubic")
    return crops


# ----------------------------------------------------------------------------------------------------------------
# Dense: stretch resize (seg) and letterbox (normal / pointmap / albedo)
# ----------------------------------------------------------------------------------------------------------------


def _area_taps(in_size: int, out_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenCV's INTER_AREA shrink table: per output pixel, source indices and float32 weights, in OpenCV's order."""
    scale = in_size / out_size
    taps = []
    for dx in range(out_size):
        start = dx * scale
        stop = start + scale
        cell = min(scale, in_size - start)
        first, last = math.ceil(start), math.floor(stop)
        last = min(last, in_size - 1)
        first = min(first, last)
        row = []
        if first - start > 1e-3:
            row.append((first - 1, (first - start) / cell))
        row.extend((sx, 1.0 / cell) for sx in range(first, last))
        if stop - last > 1e-3:
            row.append((last, min(min(stop - last, 1.0), cell) / cell))
        taps.append(row)
    width = max(len(row) for row in taps)
    index = torch.zeros(out_size, width, dtype=torch.long)
    weight = torch.zeros(out_size, width, dtype=torch.float32)  # padded taps weigh 0: adding 0 is exact
    for dx, row in enumerate(taps):
        for j, (sx, alpha) in enumerate(row):
            index[dx, j] = sx
            weight[dx, j] = alpha
    return index, weight


def _resize_area_torch(image: torch.Tensor, output_size: tuple[int, int]) -> torch.Tensor:
    """Bit-exact emulation of ``cv2.resize(INTER_AREA)`` for a uint8 shrink on both axes (OpenCV 4.x, x86)."""
    out_h, out_w = output_size
    in_h, in_w = image.shape[:2]
    scale_x, scale_y = in_w / out_w, in_h / out_h
    if abs(scale_x - round(scale_x)) < 2.2e-16 and abs(scale_y - round(scale_y)) < 2.2e-16:
        # integer factors: OpenCV's fast path sums integers
        ix, iy = int(round(scale_x)), int(round(scale_y))
        blocks = image[: out_h * iy, : out_w * ix].long().reshape(out_h, iy, out_w, ix, -1).sum(dim=(1, 3))
        if ix == 2 and iy == 2:
            return ((blocks + 2) >> 2).to(torch.uint8)
        return torch.round(blocks.to(torch.float32) * (1.0 / (ix * iy))).clamp(0, 255).to(torch.uint8)
    x_index, x_weight = _area_taps(in_w, out_w)
    y_index, y_weight = _area_taps(in_h, out_h)
    source = image.to(torch.float32)
    rows = torch.zeros(in_h, out_w, image.shape[2], dtype=torch.float32)
    for j in range(x_index.shape[1]):  # float32 accumulation in OpenCV's tap order
        rows = rows + source[:, x_index[:, j]] * x_weight[None, :, j, None]
    out = rows[y_index[:, 0]] * y_weight[:, 0, None, None]
    for j in range(1, y_index.shape[1]):
        out = out + rows[y_index[:, j]] * y_weight[:, j, None, None]
    return torch.round(out).clamp(0, 255).to(torch.uint8)


def _linear_coefficients(in_size: int, out_size: int, clamp_fraction: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Source index and 11-bit fixed-point weights of OpenCV's INTER_LINEAR resize along one axis."""
    scale = in_size / out_size
    index = torch.zeros(out_size, dtype=torch.long)
    weight = torch.zeros(out_size, 2, dtype=torch.long)
    for d in range(out_size):
        f = np.float32((d + 0.5) * scale - 0.5)
        s = math.floor(f)
        f = np.float32(f - np.float32(s))
        if clamp_fraction and s < 0:
            f, s = np.float32(0), 0
        if clamp_fraction and s >= in_size - 1:
            f, s = np.float32(0), in_size - 1
        index[d] = s
        weight[d, 0] = int(np.rint((np.float32(1) - f) * np.float32(2048)))
        weight[d, 1] = int(np.rint(f * np.float32(2048)))
    return index, weight


def _resize_linear_torch(image: torch.Tensor, output_size: tuple[int, int]) -> torch.Tensor:
    """Bit-exact emulation of ``cv2.resize(INTER_LINEAR)`` on uint8 (OpenCV 4.x SIMD vertical pass, x86)."""
    out_h, out_w = output_size
    in_h, in_w = image.shape[:2]
    # OpenCV zeroes the fraction at the left/right border but not at the top/bottom (rows are clamped instead)
    x_index, x_weight = _linear_coefficients(in_w, out_w, clamp_fraction=True)
    y_index, y_weight = _linear_coefficients(in_h, out_h, clamp_fraction=False)
    source = image.long()
    rows = (source[:, x_index] * x_weight[None, :, 0, None]
            + source[:, (x_index + 1).clamp(max=in_w - 1)] * x_weight[None, :, 1, None])  # (in_h, out_w, 3)
    top = rows[y_index.clamp(0, in_h - 1)] >> 4
    bottom = rows[(y_index + 1).clamp(0, in_h - 1)] >> 4
    mixed = ((top * y_weight[:, 0, None, None]) >> 16) + ((bottom * y_weight[:, 1, None, None]) >> 16)
    return ((mixed + 2) >> 2).clamp(0, 255).to(torch.uint8)


def _resize_torch(image: np.ndarray, output_size: tuple[int, int], interpolation: str) -> np.ndarray:
    out_h, out_w = output_size
    in_h, in_w = image.shape[:2]
    source = torch.from_numpy(np.ascontiguousarray(image))
    if interpolation == "area" and out_h <= in_h and out_w <= in_w:
        return _resize_area_torch(source, output_size).numpy()
    if interpolation == "linear":
        return _resize_linear_torch(source, output_size).numpy()
    if interpolation not in ("area", "cubic"):
        raise ValueError(f"interpolation={interpolation!r}; use 'area', 'linear' or 'cubic'.")
    # Approximations (float, then rounding): OpenCV's fixed-point cubic, and INTER_AREA when an axis grows
    # (OpenCV then uses a linear-like kernel), differ by at most one grey level on some pixels.
    x = source.permute(2, 0, 1)[None].to(torch.float64)  # (1, 3, in_h, in_w)
    mode = "bilinear" if interpolation == "area" else "bicubic"
    x = F.interpolate(x, size=(out_h, out_w), mode=mode, align_corners=False, antialias=False)
    return x.round().clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()


def resize_uint8(
    image: np.ndarray, output_size: tuple[int, int], interpolation: str, backend: str | None = "auto"
) -> np.ndarray:
    """``cv2.resize`` of a `(height, width, 3)` uint8 image to `output_size` `(height, width)` with ``"area"``,
    ``"linear"`` or ``"cubic"`` `interpolation` (or its torch emulation, `resolve_backend`)."""
    backend = resolve_backend(backend)
    if backend == "cv2":
        flag = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC}[interpolation]
        out = cv2.resize(image, (int(output_size[1]), int(output_size[0])), interpolation=flag)
        return out if out.ndim == 3 else out[..., None]
    return _resize_torch(image, output_size, interpolation)


def stretch_resize(image: np.ndarray, input_size: tuple[int, int], backend: str | None = "auto") -> np.ndarray:
    """Official segmentation resize: stretch to `input_size`, INTER_AREA when the new width is smaller (the official
    choice looks at the width only), else INTER_CUBIC."""
    interpolation = "area" if input_size[1] < image.shape[1] else "cubic"
    return resize_uint8(image, input_size, interpolation, backend)


def letterbox_geometry(image_size: tuple[int, int], input_size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """`((new_height, new_width), (left, right, top, bottom))` of the official letterbox of an `image_size` image into
    `input_size`: `size * min(axis ratios)` truncated (at least 1 pixel), padding centred, the odd pixel right/bottom.
    """
    in_h, in_w = image_size
    out_h, out_w = input_size
    scale = min(out_w / in_w, out_h / in_h)
    # at least one pixel: for extreme aspect ratios the official code would hand OpenCV an empty size and fail
    new_w, new_h = max(1, int(in_w * scale)), max(1, int(in_h * scale))
    pad_w, pad_h = out_w - new_w, out_h - new_h
    return (new_h, new_w), (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2)


def letterbox(
    image: np.ndarray, input_size: tuple[int, int], backend: str | None = "auto"
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Official normal / pointmap / albedo letterbox: INTER_LINEAR aspect resize, centred zero padding. Returns the
    `(input_height, input_width, 3)` uint8 image and its `(left, right, top, bottom)` padding."""
    (new_h, new_w), padding = letterbox_geometry(image.shape[:2], input_size)
    resized = resize_uint8(image, (new_h, new_w), "linear", backend)
    left, _, top, _ = padding
    out = np.zeros((input_size[0], input_size[1], image.shape[2]), dtype=np.uint8)
    out[top : top + new_h, left : left + new_w] = resized
    return out, padding


def composite_over_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Alpha-composite `(height, width, 3)` uint8 colours over white with a `(height, width, 1)` uint8 alpha: what
    transformers' `do_convert_rgb=True` does to RGBA images (not an official step: OpenCV drops the alpha), computed
    as transformers does (`rgb * a + 1 - a` in float32 on [0, 1]), so the pixels equal theirs.
    """
    from torchvision.transforms.v2.functional import to_dtype

    colour = to_dtype(torch.from_numpy(np.ascontiguousarray(rgb)), torch.float32, scale=True)
    opacity = to_dtype(torch.from_numpy(np.ascontiguousarray(alpha)), torch.float32, scale=True)
    blended = colour * opacity + (1.0 - opacity)
    return np.ascontiguousarray(to_dtype(blended, torch.uint8, scale=True).numpy())


def normalize_uint8(
    images: np.ndarray | torch.Tensor,
    mean_255: Sequence[float] = OFFICIAL_MEAN_255,
    std_255: Sequence[float] = OFFICIAL_STD_255,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """`(x - mean) / std` on the 0-255 scale in float32, like the official preprocessor: `(batch_size, height, width,
    3)` uint8 RGB (numpy or torch) -> `(batch_size, 3, height, width)` float32."""
    x = torch.as_tensor(np.ascontiguousarray(images) if isinstance(images, np.ndarray) else images, device=device)
    x = x.permute(0, 3, 1, 2).to(torch.float32)
    mean = torch.tensor(mean_255, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    std = torch.tensor(std_255, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    return ((x - mean) / std).contiguous()


# ----------------------------------------------------------------------------------------------------------------
# Pose: training targets (UDP Gaussian heatmaps)
# ----------------------------------------------------------------------------------------------------------------


def crop_windows_torch(
    boxes_xywh: torch.Tensor, input_size: tuple[int, int], padding: float = 1.25
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(num_boxes, 4)` COCO boxes -> crop windows `(center, size)`, float32 `(num_boxes, 2)` tensors, in the
    arithmetic of transformers' Sapiens2 heatmap targets. `boxes_to_center_scale` computes the same window the
    official way; the two can differ in the last float32 bit, and training targets follow transformers', so this
    is kept separate.
    """
    x_min, y_min, width, height = boxes_xywh.unbind(-1)
    center = torch.stack([x_min + 0.5 * width, y_min + 0.5 * height], dim=-1)
    padded_w, padded_h = width * padding, height * padding
    aspect = input_size[1] / input_size[0]
    wider = (padded_w > padded_h * aspect).unsqueeze(-1)
    size = torch.where(wider, torch.stack([padded_w, padded_w / aspect], dim=-1),
                       torch.stack([padded_h * aspect, padded_h], dim=-1))
    return center, size


def _person_heatmaps(
    rows, center: torch.Tensor, size: torch.Tensor, grid_x: torch.Tensor, grid_y: torch.Tensor, sigma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heatmaps `(num_keypoints, height, width)` and weights `(num_keypoints,)` of one person's `(x, y[, v])` rows
    (no rows: empty ones)."""
    height, width = grid_x.shape
    if len(rows) == 0:
        return grid_x.new_zeros((0, height, width)), grid_x.new_zeros((0,))
    keypoints = torch.as_tensor(rows, dtype=torch.float32, device=grid_x.device)
    # UDP: the crop window's edges map to the first and last heatmap pixel centres (size - 1 steps, not size)
    last_pixel = torch.tensor([width - 1, height - 1], dtype=torch.float32, device=grid_x.device)
    position = ((keypoints[:, :2] - center) / size + 0.5) * last_pixel
    px, py = position[:, 0, None, None], position[:, 1, None, None]
    heatmaps = torch.exp(-((grid_x - px) ** 2 + (grid_y - py) ** 2) / (2 * sigma**2))
    visible = (keypoints[:, 2] > 0).float() if keypoints.shape[1] > 2 else torch.ones_like(keypoints[:, 0])
    # The Gaussian is cut to a (2 * 3 sigma + 1)-pixel square around the rounded centre (truncated towards zero, as
    # the official integer cast does); a keypoint whose square misses the map entirely gets weight 0.
    reach = int(sigma * 3)
    rounded = (position + 0.5).to(torch.int64)
    left, top = rounded[:, 0] - reach, rounded[:, 1] - reach
    right, bottom = rounded[:, 0] + reach + 1, rounded[:, 1] + reach + 1
    outside = (left >= width) | (top >= height) | (right < 0) | (bottom < 0)
    weights = visible * (~outside).float()
    square = ((grid_x >= left[:, None, None]) & (grid_x < right[:, None, None])
              & (grid_y >= top[:, None, None]) & (grid_y < bottom[:, None, None]))
    return heatmaps * weights[:, None, None] * square.float(), weights


def udp_gaussian_heatmaps(
    boxes_xywh: Sequence[Sequence[Sequence[float]]],
    keypoints: Sequence[Sequence[Sequence[Sequence[float]]]],
    input_size: tuple[int, int],
    downscale_factor: int = 4,
    sigma: float = 6.0,
    padding: float = 1.25,
    device: torch.device | str | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Pose training targets, numerically those of transformers' Sapiens2 image processor: keypoints mapped into the
    padded, aspect-fixed crop window of their box (`crop_windows_torch`), onto the heatmap grid with UDP, each a
    `exp(-d^2 / (2 sigma^2))` Gaussian (`sigma` in heatmap pixels) cut to a 3-sigma square.

    Args:
        boxes_xywh: per image, the people's COCO boxes `[x_min, y_min, width, height]`, image pixels.
        keypoints: per image, per person (in box order), rows `[x, y, visibility]` (or `[x, y]`, all visible), image
            pixels; visibility `<= 0` gives weight 0.
        input_size (`tuple[int, int]`): crop `(height, width)`; the heatmaps are `input_size // downscale_factor`.

    Returns:
        `(heatmaps, weights)`: two lists with one entry per person, images concatenated in order: float32
        `(num_keypoints, height, width)` heatmaps and `(num_keypoints,)` weights (1 visible and on the map, else 0).
    """
    if len(boxes_xywh) != len(keypoints):
        raise ValueError(f"{len(boxes_xywh)} images of boxes but {len(keypoints)} of keypoints; pass one list of "
                         "people's keypoints per image.")
    height, width = input_size[0] // downscale_factor, input_size[1] // downscale_factor
    grid_y, grid_x = torch.meshgrid(torch.arange(height, dtype=torch.float32, device=device),
                                    torch.arange(width, dtype=torch.float32, device=device), indexing="ij")
    all_heatmaps, all_weights = [], []
    for image, (image_boxes, image_keypoints) in enumerate(zip(boxes_xywh, keypoints)):
        if len(image_boxes) != len(image_keypoints):
            raise ValueError(f"image {image} has {len(image_boxes)} boxes but keypoints for {len(image_keypoints)} "
                             "people; pass one keypoint list per box, in box order.")
        if len(image_boxes) == 0:
            continue
        boxes = torch.as_tensor(image_boxes, dtype=torch.float32, device=device).reshape(-1, 4)
        centers, sizes = crop_windows_torch(boxes, input_size, padding)
        for person, rows in enumerate(image_keypoints):
            heatmaps, weights = _person_heatmaps(rows, centers[person], sizes[person], grid_x, grid_y, sigma)
            all_heatmaps.append(heatmaps)
            all_weights.append(weights)
    return all_heatmaps, all_weights


# ----------------------------------------------------------------------------------------------------------------
# Dense post-processing (batched, torch)
# ----------------------------------------------------------------------------------------------------------------


def remove_padding(maps: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """Crop `(left, right, top, bottom)` letterbox padding from `(..., height, width)` maps."""
    left, right, top, bottom = (int(v) for v in padding)
    height, width = maps.shape[-2:]
    return maps[..., top : height - bottom, left : width - right]


def resize_maps_bilinear(maps: torch.Tensor, output_size: tuple[int, int]) -> torch.Tensor:
    """`F.interpolate(bilinear, align_corners=False, antialias=False)` on `(batch, channels, h, w)` maps."""
    if tuple(maps.shape[-2:]) == tuple(output_size):
        return maps
    return F.interpolate(maps, size=tuple(int(v) for v in output_size), mode="bilinear", align_corners=False,
                         antialias=False)


#: Resized-logit elements held at once by `resize_logits_argmax` (2**25 float32 = 128 MiB per chunk).
SEGMENTATION_CHUNK_ELEMENTS = 2**25


def resize_logits_argmax(
    logits: torch.Tensor, output_size: tuple[int, int], max_chunk_elements: int = SEGMENTATION_CHUNK_ELEMENTS
) -> torch.Tensor:
    """Class map of bilinearly resized `(num_labels, height, width)` logits, bit-identical to
    `resize_maps_bilinear(logits[None], size)[0].max(0).indices` (int64, `output_size`, on the logits' device;
    ties to the lowest class, NaN wins), with bounded memory.

    Resizing all 29 channels of an 8000x6000 photo at once costs 5.6 GB; here the channels are resized a group at a
    time (at most `max_chunk_elements` values) under a running maximum: about 0.5 GB. Exact because each output value
    of a bilinear resize depends only on its own channel (given `_channel_group`'s group sizes); chunking by output
    rows could not be, as `F.interpolate` cannot take the full resize's source coordinates for a band of rows.
    """
    if max_chunk_elements < 1:
        raise ValueError(f"max_chunk_elements must be >= 1, got {max_chunk_elements}.")
    num_labels = logits.shape[0]
    out_h, out_w = (int(v) for v in output_size)
    group = _channel_group(num_labels, out_h * out_w, max_chunk_elements)
    if group >= num_labels or num_labels <= 3:
        return resize_maps_bilinear(logits[None], (out_h, out_w))[0].max(dim=0).indices
    return _running_argmax(logits, group, (out_h, out_w))


def _channel_group(num_labels: int, pixels: int, max_chunk_elements: int) -> int:
    """How many channels `resize_logits_argmax` resizes at once."""
    group = max(1, min(num_labels, max_chunk_elements // max(1, pixels)))
    # PyTorch's CPU bilinear kernel has its own path for exactly 3 channels (one thread: channels-last, as for RGB
    # images; see upsample_bilinear2d_kernel_impl_float in ATen's UpSampleKernel.cpp), which rounds differently, so
    # no group (nor the last, partial one) may hold 3 channels; every other channel count takes the generic path,
    # whose value for one output element does not depend on the other channels (so do CUDA's kernels). Outputs with
    # height + width <= 128 take a channels-last path for any count, but they never need chunking.
    while 1 < group < num_labels and (group == 3 or num_labels % group == 3):
        group -= 1
    return group


def _running_argmax(logits: torch.Tensor, group: int, size: tuple[int, int]) -> torch.Tensor:
    """The first maximum over the channels of the resized logits, `group` channels resized at a time."""
    num_labels, (out_h, out_w) = logits.shape[0], size
    # uint8 / int16 running indices: 1-2 bytes per pixel instead of int64's 8 while looping
    index_dtype = torch.uint8 if num_labels <= 256 else torch.int16 if num_labels <= 32768 else torch.int64
    # bilinear weights are in [0, 1]: finite logits give finite resized values, so the NaN rule costs nothing then
    nan_possible = not bool(torch.isfinite(logits).all())
    best_value = best_index = None
    for start in range(0, num_labels, group):
        scores = resize_maps_bilinear(logits[None, start : start + group], (out_h, out_w))[0]  # (group, H, W)
        if scores.shape[0] == 1:
            value, index = scores[0], None
        else:
            value, index = scores.max(dim=0)
            index = (index + start).to(index_dtype)
        del scores
        if best_value is None:
            # a same-size "resize" returns the logits themselves; the running maximum is updated in place
            best_value = value.clone() if (out_h, out_w) == tuple(logits.shape[-2:]) and index is None else value
            best_index = torch.full_like(value, start, dtype=index_dtype) if index is None else index
            continue
        # strictly greater: an equal value keeps the earlier class (first maximum); NaN beats any number
        better = value > best_value
        if nan_possible:
            better |= value.isnan() & ~best_value.isnan()
            best_value = torch.where(better, value, best_value)
        else:
            torch.maximum(best_value, value, out=best_value)
        if index is None:
            best_index.masked_fill_(better, start)
        else:
            best_index = torch.where(better, index, best_index)
        del value, index, better
    del best_value
    return best_index.to(torch.int64)


def gaussian_blur_reflect(maps: torch.Tensor, kernel_size: int = 3, sigma: float = 0.8) -> torch.Tensor:
    """torchvision's tensor `gaussian_blur` (reflection padding) of `(batch, channels, height, width)` float maps; a
    map too small to reflect (1 pixel high: a 1x1 or a 20000x10 image) is replicate-padded first."""
    pad = kernel_size // 2
    if min(maps.shape[-2:]) > pad:
        return gaussian_blur(maps, [kernel_size, kernel_size], [sigma, sigma])
    padded = F.pad(maps, [pad, pad, pad, pad], mode="replicate")
    return gaussian_blur(padded, [kernel_size, kernel_size], [sigma, sigma])[..., pad:-pad, pad:-pad]


def smooth_and_resize_pointmap(
    pointmap: torch.Tensor, output_size: tuple[int, int], num_blurs: int = 4, sigma: float = 0.8
) -> torch.Tensor:
    """Official pointmap resize of `(batch, 3, height, width)` maps to `output_size` `(height, width)`: when upsampling
    in either direction, blur 4x (3x3, sigma 0.8), then bilinear."""
    if output_size[0] > pointmap.shape[-2] or output_size[1] > pointmap.shape[-1]:
        for _ in range(num_blurs):
            pointmap = gaussian_blur_reflect(pointmap, 3, sigma)
    return resize_maps_bilinear(pointmap, output_size)


def resize_label_maps(maps, letterboxed: bool, input_size: tuple[int, int], paddings) -> torch.Tensor:
    """Label maps resized as their images were (nearest, OpenCV's index rule), letterbox padding set to the ignore
    index 255; `(num_images, height, width)` int64."""
    if not isinstance(maps, (list, tuple)):
        maps = [maps]
    out = []
    for label_map, padding in zip(maps, paddings):
        label = torch.as_tensor(np.asarray(label_map)).long()
        if label.ndim == 3:
            label = label[..., 0] if label.shape[-1] in (1, 3) else label[0]
        height, width = label.shape
        target = letterbox_geometry((height, width), input_size)[0] if letterboxed else input_size
        # nearest, OpenCV convention: source index floor(dst * in / out)
        rows = torch.clamp((torch.arange(target[0]) * (height / target[0])).floor().long(), max=height - 1)
        cols = torch.clamp((torch.arange(target[1]) * (width / target[1])).floor().long(), max=width - 1)
        resized = label[rows][:, cols]
        if letterboxed:
            left, _, top, _ = padding
            canvas = torch.full(input_size, 255, dtype=torch.long)
            canvas[top : top + target[0], left : left + target[1]] = resized
            resized = canvas
        out.append(resized)
    return torch.stack(out)
