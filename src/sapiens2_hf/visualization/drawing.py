# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Pure functions that turn Sapiens2 predictions into images (PIL) and point clouds (PLY).

Inputs are numpy arrays (or torch tensors) in original-image coordinates, as returned by the pipelines:
keypoints `(num_keypoints, 2)` `(x, y)` pixels; class maps `(height, width)`; normals, pointmaps and albedo
`(height, width, 3)` channels-last. Images are RGB uint8.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..utils.atomic_io import atomic_write_bytes
from .styles import (
    KEYPOINT_COLORS_RGB,
    SEGMENTATION_CLASS_NAMES,
    SEGMENTATION_PALETTE_RGB,
    SKELETON_LINK_COLORS_RGB,
    SKELETON_LINKS,
)


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _rgb_image(image: Any) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    array = _numpy(image)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    if array.dtype != np.uint8:
        raise ValueError(f"expected a uint8 RGB image array, got dtype {array.dtype}.")
    return Image.fromarray(np.ascontiguousarray(array[..., :3]))


# ----------------------------------------------------------------------------------------------------------------
# pose
# ----------------------------------------------------------------------------------------------------------------


def draw_keypoints(
    image: Any,
    people: Sequence[dict],
    score_threshold: float = 0.3,
    radius: int | None = None,
    thickness: int | None = None,
    draw_bbox: bool = True,
    keypoint_colors: Sequence[Sequence[int]] = KEYPOINT_COLORS_RGB,
    skeleton_links: Sequence[Sequence[int]] = SKELETON_LINKS,
    link_colors: Sequence[Sequence[int]] = SKELETON_LINK_COLORS_RGB,
) -> Image.Image:
    """A new RGB image of `image` (PIL or `(height, width, 3)` uint8) with the skeletons of `people` (pose pipeline
    results: `keypoints` `(num_keypoints, 2)`, `scores` `(num_keypoints,)`, optional `bbox` xyxy) in the official
    colours; keypoints (and links) scored at or below `score_threshold` are not drawn. `radius` and `thickness` are
    pixels, by default scaled with the image size."""
    canvas = _rgb_image(image).copy()
    width, height = canvas.size
    scale = max(width, height)
    radius = radius if radius is not None else max(1, round(scale / 300))
    thickness = thickness if thickness is not None else max(1, round(scale / 400))
    draw = ImageDraw.Draw(canvas)
    for person in people:
        keypoints = _numpy(person["keypoints"]).astype(np.float64)
        scores = _numpy(person.get("scores", np.ones(len(keypoints)))).astype(np.float64)
        visible = np.isfinite(keypoints).all(axis=1) & (scores > score_threshold)
        if draw_bbox and person.get("bbox") is not None:
            x0, y0, x1, y1 = (float(v) for v in _numpy(person["bbox"]))
            draw.rectangle([x0, y0, x1, y1], outline=(0, 255, 0), width=thickness)
        for link, (a, b) in enumerate(skeleton_links):  # another keypoint set's links reuse the colours in turn
            color = link_colors[link % len(link_colors)]
            if a < len(keypoints) and b < len(keypoints) and visible[a] and visible[b]:
                draw.line([tuple(keypoints[a]), tuple(keypoints[b])], fill=tuple(int(c) for c in color),
                          width=thickness)
        for index in np.flatnonzero(visible):
            x, y = keypoints[index]
            color = tuple(int(c) for c in keypoint_colors[index % len(keypoint_colors)])
            draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=color)
    return canvas


def enlarge(image: Any, people: Sequence[dict] = (), min_height: int = 384) -> tuple[Image.Image, list[dict]]:
    """`(image, people)` enlarged nearest-neighbour by the smallest integer factor that makes the image at least
    `min_height` pixels tall (a 96 x 72 synthetic human becomes readable), with copies of `people`'s `keypoints`
    (pixel centres at integers: `x -> (x + 0.5) * factor - 0.5`) and `bbox` mapped onto it. `image` and `people` as
    `draw_keypoints` takes them."""
    canvas = _rgb_image(image)
    factor = max(1, -(-min_height // canvas.height))  # ceil
    if factor == 1:
        return canvas.copy(), [dict(person) for person in people]
    canvas = canvas.resize((canvas.width * factor, canvas.height * factor), Image.NEAREST)
    scaled = []
    for person in people:
        person = dict(person)
        person["keypoints"] = (_numpy(person["keypoints"]).astype(np.float64) + 0.5) * factor - 0.5
        if person.get("bbox") is not None:
            person["bbox"] = _numpy(person["bbox"]).astype(np.float64) * factor  # box edges, not pixel centres
        scaled.append(person)
    return canvas, scaled


def side_by_side(panels: Sequence[tuple[str, Any]], caption: str | None = None, gap: int = 4) -> Image.Image:
    """A new RGB image of `panels` (`(title, image)` pairs, PIL or uint8 arrays, top-aligned) next to each other
    `gap` white pixels apart, each under its title, with an optional one-line `caption` below all of them."""
    images = [_rgb_image(image) for _, image in panels]
    font = _font(14)
    line = 20  # pixels per text line
    width = sum(image.width for image in images) + gap * (len(images) - 1)
    if caption:
        width = max(width, int(np.ceil(font.getlength(caption))) + 4)
    height = line + max(image.height for image in images) + (line if caption else 0)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    x = 0
    for (title, _), image in zip(panels, images):
        draw.text((x + 2, 2), title, fill=(0, 0, 0), font=font)
        canvas.paste(image, (x, line))
        x += image.width + gap
    if caption:
        draw.text((2, height - line + 2), caption, fill=(0, 0, 0), font=font)
    return canvas


# ----------------------------------------------------------------------------------------------------------------
# segmentation
# ----------------------------------------------------------------------------------------------------------------


def colorize_segmentation(
    segmentation: Any, palette: Sequence[Sequence[int]] = SEGMENTATION_PALETTE_RGB
) -> Image.Image:
    """Class map `(height, width)` (ids) -> RGB image in the official palette (ids outside the palette are black)."""
    seg = _numpy(segmentation).astype(np.int64)
    table = np.zeros((len(palette) + 1, 3), dtype=np.uint8)  # last row: black for unknown ids
    table[: len(palette)] = np.asarray(palette, dtype=np.uint8)
    return Image.fromarray(table[np.where((seg >= 0) & (seg < len(palette)), seg, len(palette))])


def overlay_segmentation(
    image: Any,
    segmentation: Any,
    alpha: float = 0.5,
    legend: bool = True,
    class_names: Sequence[str] = SEGMENTATION_CLASS_NAMES,
    palette: Sequence[Sequence[int]] = SEGMENTATION_PALETTE_RGB,
    skip_background: bool = True,
) -> Image.Image:
    """Blend the coloured class map over the image, with an optional legend of the classes present.

    `alpha` weighs the colours (0 = image only); Background (id 0) stays unblended with `skip_background`. `legend`
    widens the image by a panel with a swatch and the name of each class present (in columns, so the height stays).
    """
    base = _rgb_image(image)
    seg = _numpy(segmentation).astype(np.int64)
    if seg.shape != (base.size[1], base.size[0]):
        raise ValueError(f"segmentation {seg.shape} does not match the image (height, width) "
                         f"{(base.size[1], base.size[0])}; resize it to the image first.")
    colours = np.asarray(colorize_segmentation(seg, palette), dtype=np.float32)
    pixels = np.asarray(base, dtype=np.float32)
    mask = (seg != 0)[..., None] if skip_background else np.ones(seg.shape + (1,), bool)
    blended = np.where(mask, pixels * (1 - alpha) + colours * alpha, pixels)
    out = Image.fromarray(np.clip(np.round(blended), 0, 255).astype(np.uint8))
    present = [int(c) for c in np.unique(seg) if 0 <= c < len(palette)]
    return _with_legend(out, present, class_names, palette) if legend and present else out


def _with_legend(out: Image.Image, present: list[int], class_names: Sequence[str],
                 palette: Sequence[Sequence[int]]) -> Image.Image:
    """`out` widened by a panel with a swatch and the name of each class in `present`."""
    font = ImageFont.load_default()
    row = 14
    # columns of legend entries, so that the legend never makes the picture taller than the image (if >= 1 row)
    rows_per_column = max(1, (out.size[1] - 8) // row)
    columns = -(-len(present) // rows_per_column)
    longest = max(len(class_names[c]) if c < len(class_names) else len(str(c)) for c in present)
    column_width = 12 + 6 + longest * 6 + 10
    canvas = Image.new("RGB", (out.size[0] + 8 + columns * column_width,
                               max(out.size[1], 8 + row * min(len(present), rows_per_column))), (255, 255, 255))
    canvas.paste(out, (0, 0))
    draw = ImageDraw.Draw(canvas)
    for k, class_id in enumerate(present):
        column, line = divmod(k, rows_per_column)
        x = out.size[0] + 8 + column * column_width
        y = 4 + line * row
        draw.rectangle([x, y, x + 11, y + 11], fill=tuple(int(v) for v in palette[class_id]), outline=(0, 0, 0))
        name = class_names[class_id] if class_id < len(class_names) else str(class_id)
        draw.text((x + 18, y), name, fill=(0, 0, 0), font=font)
    return canvas


# ----------------------------------------------------------------------------------------------------------------
# normals, depth, pointmap, albedo
# ----------------------------------------------------------------------------------------------------------------


def normals_to_rgb(normals: Any) -> Image.Image:
    """Normals `(height, width, 3)` in [-1, 1] -> RGB image `(n + 1) / 2 * 255` (x, y, z as R, G, B; truncated)."""
    n = _numpy(normals).astype(np.float32)
    if n.ndim != 3 or n.shape[-1] != 3:
        raise ValueError(f"normals must be (height, width, 3), got {n.shape}.")
    n = np.nan_to_num(n, nan=0.0)
    return Image.fromarray(np.clip((n + 1.0) / 2.0 * 255.0, 0, 255).astype(np.uint8))


def map_to_rgb(values: Any) -> Image.Image:
    """Any dense map `(height, width)` or `(height, width, channels)` -> an RGB picture, for tasks without a drawing
    of their own (a task registered with `sapiens2_hf.register_task`): one channel in Turbo colours, two or three as
    R, G (and B) channels, each stretched over its own finite range (a constant channel is black; NaN is black); more
    than three channels: the first three."""
    v = _numpy(values).astype(np.float32)
    if v.ndim == 3 and v.shape[-1] == 1:
        v = v[..., 0]
    if v.ndim not in (2, 3) or v.size == 0:
        raise ValueError(f"a map must be (height, width) or (height, width, channels), got {v.shape}.")
    planes = [v] if v.ndim == 2 else [v[..., c] for c in range(min(3, v.shape[-1]))]
    stretched = np.zeros((*v.shape[:2], len(planes)), np.float32)
    for c, plane in enumerate(planes):
        finite = np.isfinite(plane)
        if finite.any():
            low, high = float(plane[finite].min()), float(plane[finite].max())
            if high > low:
                stretched[..., c] = np.where(finite, (plane - low) / (high - low), 0.0)
    if v.ndim == 2:  # Turbo: low blue, high red; NaN black
        colours = turbo_colours(stretched[..., 0])
        colours[~np.isfinite(v)] = 0
        return Image.fromarray(colours)
    rgb = np.zeros((*v.shape[:2], 3), np.float32)
    rgb[..., : len(planes)] = stretched
    return Image.fromarray(np.clip(np.round(rgb * 255.0), 0, 255).astype(np.uint8))


def turbo_colours(x: np.ndarray) -> np.ndarray:
    """Google's Turbo colour map through OpenCV's lookup table (`cv2.COLORMAP_TURBO`, the published 256 entries):
    `x` in [0, 1] (clipped; NaN -> 0) -> uint8 RGB of shape `x.shape + (3,)`. 0 is dark blue, 1 dark red."""
    import cv2  # a dependency of the package; imported here so that importing the drawing helpers stays light

    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0)
    if x.size == 0:
        return np.zeros(x.shape + (3,), dtype=np.uint8)
    levels = np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)
    flat = levels.reshape(1, -1)  # applyColorMap wants a 2-D image
    return np.ascontiguousarray(cv2.applyColorMap(flat, cv2.COLORMAP_TURBO)[0, :, ::-1]).reshape(x.shape + (3,))


def _depth_range(depth: Any, mask: Any, percentiles: tuple[float, float]):
    """Depth as float64, the pixels shown (finite, masked in) and the colour range `(lo, hi)` (None if none)."""
    d = _numpy(depth).astype(np.float64)
    if d.ndim != 2:
        raise ValueError(f"depth must be (height, width), got {d.shape}.")
    valid = np.isfinite(d)
    if mask is not None:
        m = _numpy(mask).astype(bool)
        if m.shape != d.shape:
            raise ValueError(f"mask {m.shape} does not match the depth {d.shape} (height, width).")
        valid &= m
    if not valid.any():
        return d, valid, None
    lo, hi = np.percentile(d[valid], percentiles)
    return d, valid, (float(lo), float(hi))


def depth_to_rgb(depth: Any, mask: Any = None, percentiles: tuple[float, float] = (1.0, 99.0)) -> Image.Image:
    """`depth_to_image` without the colour bar, masked-out and non-finite pixels black."""
    return depth_to_image(depth, mask, colorbar=False, percentiles=percentiles, background=(0, 0, 0))


def _font(size: int):
    try:  # Pillow >= 10.1 scales its built-in font; older ones have one fixed bitmap size
        return ImageFont.load_default(size=size)
    except TypeError:
        return ImageFont.load_default()


def _format_depth(value: float, units: str) -> str:
    return f"{value:.3g} {units}".rstrip()


def depth_to_image(
    depth: Any,
    mask: Any = None,
    colorbar: bool = True,
    units: str = "m",
    percentiles: tuple[float, float] = (1.0, 99.0),
    background: Sequence[int] = (128, 128, 128),
) -> Image.Image:
    """Depth `(height, width)` -> Turbo-coloured image with a labelled colour bar (the CLI's `<name>_depth.png`).

    Near = red, far = blue (OpenCV's Turbo table, `turbo_colours`), over `percentiles` of the shown depths; pixels
    outside the optional bool `mask` and non-finite depths are `background`. The bar (`colorbar`), on a white panel
    at the right, runs from the far end (top) to the near end (bottom), its two ends labelled in `units` (the
    Sapiens2 pointmaps are in metres), under the title `depth (<units>)`.

    Returns:
        RGB `PIL.Image`: the image's height (taller only when the image is too short for the labels) and its width
        plus the bar panel.
    """
    d, valid, value_range = _depth_range(depth, mask, percentiles)
    height, width = d.shape
    pixels = np.full((height, width, 3), background, dtype=np.uint8)
    if value_range is not None:
        lo, hi = value_range
        pixels[valid] = turbo_colours(1.0 - ((d[valid] - lo) / (hi - lo) if hi > lo else np.zeros(int(valid.sum()))))
    picture = Image.fromarray(pixels)
    return _with_depth_colorbar(picture, value_range, units) if colorbar else picture


def _with_depth_colorbar(picture: Image.Image, value_range: tuple[float, float] | None, units: str) -> Image.Image:
    """`picture` with `depth_to_image`'s colour bar panel on its right."""
    width, height = picture.size
    font_size = max(10, round(height / 40))
    font = _font(font_size)
    pad = max(3, font_size // 2)
    bar_width = max(8, font_size)
    title = f"depth ({units})" if units else "depth"
    if value_range is None:
        top_label = bottom_label = "n/a"
    else:
        top_label, bottom_label = _format_depth(value_range[1], units), _format_depth(value_range[0], units)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    def box(text):  # (width, height) of the text as drawn
        left, top, right, bottom = measure.textbbox((0, 0), text, font=font)
        return right, bottom

    text_width = max(box(t)[0] for t in (top_label, bottom_label))
    text_height = max(box(t)[1] for t in (title, top_label, bottom_label))
    panel_width = pad + max(bar_width + pad + text_width, box(title)[0]) + pad
    bar_top = pad + text_height + pad
    # the bar is at least two label heights long, so that its two labels never overlap
    canvas_height = max(height, bar_top + 2 * text_height + pad + pad)
    bar_bottom = canvas_height - pad - 1
    canvas = Image.new("RGB", (width + panel_width, canvas_height), (255, 255, 255))
    canvas.paste(picture, (0, 0))
    draw = ImageDraw.Draw(canvas)
    x0 = width + pad
    draw.text((x0, pad), title, fill=(0, 0, 0), font=font)
    if value_range is not None:
        # top row = far end (t = 1 -> turbo(0), blue), bottom row = near end (turbo(1), red), as in the image
        rows = bar_bottom - bar_top + 1
        t = 1.0 - np.arange(rows) / max(rows - 1, 1)
        gradient = turbo_colours(1.0 - t)
        canvas.paste(Image.fromarray(np.repeat(gradient[:, None, :], bar_width, axis=1)), (x0, bar_top))
    draw.rectangle([x0 - 1, bar_top - 1, x0 + bar_width, bar_bottom + 1], outline=(0, 0, 0))
    tick_end = x0 + bar_width + pad // 2
    label_x = x0 + bar_width + pad
    for y, label, anchor_top in ((bar_top, top_label, True), (bar_bottom, bottom_label, False)):
        draw.line([(x0 + bar_width, y), (tick_end, y)], fill=(0, 0, 0))
        label_height = box(label)[1]
        draw.text((label_x, y if anchor_top else y - label_height), label, fill=(0, 0, 0), font=font)
    return canvas


def pointmap_to_depth_image(pointmap: Any, mask: Any = None) -> Image.Image:
    """Pointmap `(height, width, 3)` XYZ -> coloured depth image of its Z channel."""
    p = _numpy(pointmap)
    if p.ndim != 3 or p.shape[-1] != 3:
        raise ValueError(f"pointmap must be (height, width, 3), got {p.shape}.")
    return depth_to_rgb(p[..., 2], mask)


def albedo_to_image(albedo: Any) -> Image.Image:
    """Albedo `(height, width, 3)` RGB in [0, 1] -> uint8 RGB image, `albedo * 255` truncated as the official demo."""
    a = _numpy(albedo).astype(np.float32)
    if a.ndim != 3 or a.shape[-1] != 3:
        raise ValueError(f"albedo must be (height, width, 3), got {a.shape}.")
    return Image.fromarray((np.clip(a, 0.0, 1.0) * 255.0).astype(np.uint8))


def save_ply(
    path: str | os.PathLike,
    points: Any,
    colors: Any = None,
    mask: Any = None,
    binary: bool = True,
) -> int:
    """Writes `points` (`(num_points, 3)` or a pointmap `(height, width, 3)`, XYZ) as a binary little-endian or
    ASCII PLY (atomically), with optional uint8 RGB `colors` and bool `mask` of the same leading shape (non-finite
    points are always dropped); returns the number of points written."""
    xyz = _numpy(points).astype(np.float32).reshape(-1, 3)
    keep = np.isfinite(xyz).all(axis=1)
    if mask is not None:
        keep &= _numpy(mask).astype(bool).reshape(-1)
    rgb = None
    if colors is not None:
        rgb = _numpy(colors).astype(np.uint8).reshape(-1, 3)
        if len(rgb) != len(xyz):
            raise ValueError(f"colors hold {len(rgb)} points but points hold {len(xyz)}.")
        rgb = rgb[keep]
    xyz = xyz[keep]
    atomic_write_bytes(path, _ply_bytes(xyz, rgb, binary))
    return len(xyz)


def _ply_bytes(xyz: np.ndarray, rgb: np.ndarray | None, binary: bool) -> bytes:
    """The PLY file of `(N, 3)` float32 points with optional `(N, 3)` uint8 colours."""
    header = ["ply", f"format {'binary_little_endian' if binary else 'ascii'} 1.0", f"element vertex {len(xyz)}",
              "property float x", "property float y", "property float z"]
    if rgb is not None:
        header += ["property uchar red", "property uchar green", "property uchar blue"]
    header.append("end_header")
    head = ("\n".join(header) + "\n").encode("ascii")
    if not binary:
        lines = (" ".join(f"{v:.6g}" for v in p) + ("" if rgb is None else " " + " ".join(str(int(c)) for c in rgb[i]))
                 for i, p in enumerate(xyz))
        return head + ("\n".join(lines) + ("\n" if len(xyz) else "")).encode("ascii")
    if rgb is None:
        return head + xyz.astype("<f4").tobytes()
    record = np.empty(len(xyz), dtype=[("xyz", "<f4", 3), ("rgb", "u1", 3)])
    record["xyz"], record["rgb"] = xyz, rgb
    return head + record.tobytes()


def read_ply_header(path: str | os.PathLike) -> list[str]:
    """The header lines of a PLY file (helper for checks)."""
    lines = []
    with open(path, "rb") as file:
        while True:
            line = file.readline().decode("ascii").rstrip("\n")
            lines.append(line)
            if line == "end_header" or not line:
                return lines


__all__ = [
    "albedo_to_image",
    "colorize_segmentation",
    "depth_to_image",
    "depth_to_rgb",
    "draw_keypoints",
    "normals_to_rgb",
    "overlay_segmentation",
    "pointmap_to_depth_image",
    "read_ply_header",
    "save_ply",
]
