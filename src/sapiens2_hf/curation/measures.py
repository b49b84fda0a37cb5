"""Per-image measures of the curation stages (numpy and OpenCV; no model): size, sharpness, exposure, JPEG
blockiness, the person measures of a foreground mask, and a perceptual hash.

Scale: sharpness and exposure are measured on a working copy whose short side is `WORKING_SHORT_SIDE` pixels, so one
threshold serves every resolution; blockiness on the original pixels (JPEG's 8x8 grid lives there), in a centre crop
of at most `BLOCKINESS_CROP` pixels per side.
"""

from __future__ import annotations

import cv2
import numpy as np

# the curation stages, in the order they run (`curate.py` has what each measures and drops)
STAGES = ("decode", "size", "quality", "person", "duplicates", "domain", "balance")
WORKING_SHORT_SIDE = 256
BLOCKINESS_CROP = 1024


def working_copy(image: np.ndarray) -> np.ndarray:
    """`image` resized (area interpolation) so that its short side is `WORKING_SHORT_SIDE`, as float32 grey in [0, 1]."""
    grey = cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0
    height, width = grey.shape
    scale = WORKING_SHORT_SIDE / min(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    return cv2.resize(grey, size, interpolation=interpolation)


def sharpness(grey: np.ndarray) -> float:
    """Variance of the Laplacian (x 1000) of a working copy: low for blurred or out-of-focus images."""
    return float(cv2.Laplacian(grey, cv2.CV_32F, ksize=3).var() * 1000)


def exposure(grey: np.ndarray) -> dict[str, float]:
    """Mean luminance and the fraction of pixels clipped dark (< 4/255) or bright (> 251/255) of a working copy."""
    return {"luminance": float(grey.mean()),
            "clipped": float(((grey < 4 / 255) | (grey > 251 / 255)).mean())}


def blockiness(image: np.ndarray) -> float:
    """JPEG blocking: the mean absolute step between neighbouring pixels across the 8x8 block borders over the same
    inside the blocks, horizontally and vertically (about 1 for a natural image; heavy JPEG compression makes the
    borders stand out). Measured on a centre crop of the original pixels."""
    grey = cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2GRAY).astype(np.float32)
    height, width = grey.shape
    top, left = max(0, (height - BLOCKINESS_CROP) // 2) // 8 * 8, max(0, (width - BLOCKINESS_CROP) // 2) // 8 * 8
    grey = grey[top:top + BLOCKINESS_CROP, left:left + BLOCKINESS_CROP]
    ratios = []
    for steps in (np.abs(np.diff(grey, axis=1)), np.abs(np.diff(grey, axis=0)).T):
        if steps.shape[1] < 16:
            continue
        position = np.arange(steps.shape[1]) % 8
        border = steps[:, position == 7].mean()  # between pixel 8k+7 and 8k+8
        inside = steps[:, position != 7].mean()
        ratios.append((border + 1e-3) / (inside + 1e-3))
    return float(np.mean(ratios)) if ratios else 1.0


def person_measures(mask: np.ndarray) -> dict[str, float]:
    """From a person foreground mask: the person-pixel fraction, and the largest connected component's box height
    and area as fractions of the image's (a prominent person is a large, tall component)."""
    mask = np.asarray(mask, dtype=np.uint8)
    height, width = mask.shape
    count, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    if count <= 1:
        return {"person_fraction": 0.0, "largest_height": 0.0, "largest_area": 0.0}
    largest = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    return {"person_fraction": float(mask.mean()),
            "largest_height": float(stats[largest, cv2.CC_STAT_HEIGHT] / height),
            "largest_area": float(stats[largest, cv2.CC_STAT_AREA] / (height * width))}


def perceptual_hash(image: np.ndarray) -> int:
    """64-bit DCT perceptual hash: the signs, against their median, of the 8x8 lowest frequencies (DC left out) of the
    32x32 grey image. Near-duplicates (re-encoded, slightly cropped, colour-shifted) differ in a few bits."""
    grey = cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2GRAY).astype(np.float32)
    small = cv2.resize(grey, (32, 32), interpolation=cv2.INTER_AREA)
    low = cv2.dct(small)[:8, :8].reshape(-1)
    bits = low[1:] > np.median(low[1:])
    return int(sum(1 << k for k, bit in enumerate(bits) if bit))


__all__ = ["BLOCKINESS_CROP", "STAGES", "WORKING_SHORT_SIDE", "blockiness", "exposure", "perceptual_hash",
           "person_measures", "sharpness", "working_copy"]
