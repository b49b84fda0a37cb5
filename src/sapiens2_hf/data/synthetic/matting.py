"""Soft-edged alpha mattes for the synthetic humans, by supersampling the silhouette's edge.

The renderer casts one ray per pixel centre, so its image and `mask` have hard, aliased edges. A matting label needs
the fraction of each pixel the people cover. Here every pixel of the edge band (a 3x3 neighbourhood holding both
person and background pixels) casts `supersample` x `supersample` rays at sub-pixel offsets against the same analytic
primitives; its alpha is the fraction of those rays that hit a person (`supersample=4`: 16 rays, alpha in steps of
1/16, the box-filtered coverage of the pixel). Interior pixels keep alpha 1, exterior pixels 0.

The matting image is the same render with those edge pixels composited from the alpha,
`alpha * F + (1 - alpha) * B` (then the image's own sensor noise and 8-bit quantisation), so image and label agree:

* `F`, the foreground colour, is the person's noise-free shaded colour (clipped to [0, 1]) where the pixel centre
  hits a person; an edge pixel whose centre misses takes the mean colour of the person pixels in its 3x3
  neighbourhood (the sub-pixel hits are not shaded: a colour extension, as matting datasets estimate foreground);
* `B`, the background, is the noise-free background render at that pixel (also under the person).

Outside the edge band the matting image equals the plain image exactly. Structures thinner than a pixel that no
pixel centre hits are not in the band and stay background (alpha 0). Every step is symmetric under a horizontal
flip of the scene, like the renderer.
"""

from __future__ import annotations

import cv2
import numpy as np

from ._raycast import NEAR_PLANE, Primitives, _cone_hits, _ellipsoid_hits, screen_bounds

#: Rays per edge pixel side (`supersample**2` rays per edge pixel).
SUPERSAMPLE = 4
#: Most (pixel, primitive) candidate entries tested at once.
_PAIR_CHUNK = 1 << 22


def _neighbourhood_any(mask: np.ndarray) -> np.ndarray:
    """Pixels with at least one `True` in their 3x3 neighbourhood (a 3x3 binary dilation, zero padding)."""
    return cv2.dilate(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0


def edge_band(mask: np.ndarray) -> np.ndarray:
    """Pixels whose 3x3 neighbourhood holds both foreground and background: where partial coverage can occur."""
    return _neighbourhood_any(mask) & _neighbourhood_any(~mask)


def supersampled_coverage(prims: Primitives, fx: float, fy: float, cx: float, cy: float, rows: np.ndarray,
                          cols: np.ndarray, supersample: int = SUPERSAMPLE) -> np.ndarray:
    """Fraction of `supersample**2` sub-pixel rays of each pixel `(rows[i], cols[i])` that hit any primitive.

    The rays pass through the centres of a regular `supersample x supersample` grid of sub-pixels (offsets
    `(k + 0.5) / supersample - 0.5`, symmetric about the pixel centre), with the renderer's float32 intersection
    arithmetic; only whether a ray hits matters. Exact: every ray is tested against every primitive whose screen
    bounds (widened by half a pixel) contain its pixel, so the work grows with the edge band's (pixel, nearby
    primitive) pairs. (Testing only the primitives seen at neighbouring pixel centres first was measured no faster:
    the background-side rays still need every candidate.) Returns `(len(rows),)` float32 in [0, 1].
    """
    num_rays = supersample * supersample
    hits = np.zeros((len(rows), num_rays), dtype=bool)
    if len(rows) == 0 or len(prims) == 0:
        return hits.mean(axis=1).astype(np.float32) if len(rows) else np.zeros(0, np.float32)
    offsets = (np.arange(supersample) + 0.5) / supersample - 0.5
    oy, ox = (grid.ravel() for grid in np.meshgrid(offsets, offsets, indexing="ij"))
    lo, hi = prims.aabb()
    u_min, u_max, v_min, v_max = screen_bounds(lo, hi, fx, fy, cx, cy)
    # Pixel chunks keep the (pixel, primitive) candidate matrix bounded at large resolutions.
    step = max(1, _PAIR_CHUNK // len(prims))
    for first in range(0, len(rows), step):
        r, c = rows[first:first + step], cols[first:first + step]
        with np.errstate(invalid="ignore"):  # NaN bounds (behind the camera) compare False
            cand = ((c[:, None] + 0.5 >= u_min) & (c[:, None] - 0.5 <= u_max)
                    & (r[:, None] + 0.5 >= v_min) & (r[:, None] - 0.5 <= v_max))
        pixel, prim = np.nonzero(cand)
        if pixel.size == 0:
            continue
        # One row per (pixel, primitive) pair and one column per sub-pixel ray: the primitive's constants broadcast
        # over the rays (the intersection code is elementwise), so nothing is repeated per ray.
        dx = ((c[pixel, None] + ox[None, :] - cx) / fx).astype(np.float32)  # (pairs, rays)
        dy = ((r[pixel, None] + oy[None, :] - cy) / fy).astype(np.float32)
        hit = np.zeros(dx.shape, dtype=bool)
        cone = prim < prims.num_cones
        if cone.any():
            c_dx, c_dy = dx[cone], dy[cone]
            tab = prims._cone_table_t[:, prim[cone], None]  # (18, pairs, 1)
            t = _cone_hits(tab, c_dx, c_dy, c_dx * c_dx + c_dy * c_dy + np.float32(1.0))
            hit[cone] = t > NEAR_PLANE  # NaN (miss) compares False
        if not cone.all():
            tab = prims._ellipsoid_table_t[:, prim[~cone] - prims.num_cones, None]
            hit[~cone] = _ellipsoid_hits(tab, dx[~cone], dy[~cone]) > NEAR_PLANE
        np.logical_or.at(hits, first + pixel, hit)  # a pixel's rays hit if they hit any of its primitives
    return hits.mean(axis=1).astype(np.float32)


def soft_matte(prims: Primitives, camera, primitive_map: np.ndarray, image_clean: np.ndarray,
               background_clean: np.ndarray, noise: np.ndarray | None, image: np.ndarray,
               supersample: int = SUPERSAMPLE):
    """The soft alpha, the foreground colour and the matting image of one render (see the module docstring).

    Args:
        prims, camera: the scene's camera-frame primitives and camera (`fx`, `fy`, `cx`, `cy`).
        primitive_map (`(height, width)` int64): the renderer's z-buffer, each pixel centre's first-hit primitive
            (-1 on background).
        image_clean, background_clean (`(height, width, 3)` float32, [0, 1]): the noise-free render and background.
        noise (`(height, width, 3)` float32, *optional*), image (`(height, width, 3)` uint8): the image's sensor
            noise and the rendered image.

    Returns:
        `(alpha, foreground, matting_image)`: `(height, width)` float32 in [0, 1]; `(height, width, 3)` float32
        un-premultiplied colour in [0, 1] (0 where alpha is 0); `(height, width, 3)` uint8.
    """
    mask = primitive_map >= 0
    alpha = mask.astype(np.float32)
    colour = np.clip(image_clean, 0.0, 1.0).astype(np.float32)
    matting_image = image.copy()
    band = edge_band(mask)
    rows, cols = np.nonzero(band)
    if rows.size:
        alpha[rows, cols] = supersampled_coverage(prims, camera.fx, camera.fy, camera.cx, camera.cy, rows, cols,
                                                  supersample)
        # Colour extension for edge pixels whose centre misses: the mean of the neighbouring person pixels (every
        # such pixel has one: the band lies within one pixel of the mask).
        miss_rows, miss_cols = np.nonzero(band & ~mask)
        padded_mask = np.pad(mask, 1)
        padded_colour = np.pad(colour, ((1, 1), (1, 1), (0, 0)))
        total = np.zeros((len(miss_rows), 3), np.float32)
        count = np.zeros(len(miss_rows), np.float32)
        for dy in range(3):
            for dx in range(3):
                person = padded_mask[miss_rows + dy, miss_cols + dx]
                total += np.where(person[:, None], padded_colour[miss_rows + dy, miss_cols + dx], 0.0)
                count += person
        colour[miss_rows, miss_cols] = total / np.maximum(count, 1.0)[:, None]
        a = alpha[rows, cols][:, None]
        composite = a * colour[rows, cols] + (1.0 - a) * background_clean[rows, cols]
        buffer = composite * np.float32(255.0)
        if noise is not None:
            buffer += noise[rows, cols] * np.float32(255.0)
        matting_image[rows, cols] = np.clip(np.rint(buffer), 0.0, 255.0).astype(np.uint8)
    foreground = np.where(alpha[..., None] > 0, colour, 0.0).astype(np.float32)
    return alpha, foreground, matting_image
