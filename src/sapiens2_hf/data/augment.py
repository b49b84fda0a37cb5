"""Training-time image augmentations of the official Sapiens2 recipes (the train pipelines of facebookresearch/sapiens2
`sapiens/pose/configs` and `sapiens/dense/configs`), driven by an explicit `torch.Generator`.

Images are `(height, width, 3)` uint8 RGB numpy arrays (OpenCV does the pixel work, as in the official pipelines);
every random draw comes from the generator passed in, so a sample's augmentation is a pure function of
`(example, generator state)`. The probabilities and ranges default to the official configs; the exact random
streams cannot match the official ones (those use numpy/``random`` global state and albumentations).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import torch


# ------------------------------------------------------------------------------------------------ random draws
def step_probabilities(defaults: dict, overrides: dict | None) -> dict:
    """A transform's step probabilities: ``defaults`` with ``overrides`` by step name (unknown names raise)."""
    unknown = set(overrides or {}) - set(defaults)
    if unknown:
        raise ValueError(f"Unknown augment_probabilities keys {sorted(unknown)}; use {sorted(defaults)}.")
    return {**defaults, **(overrides or {})}


def rand(generator: torch.Generator) -> float:
    """Uniform draw in [0, 1)."""
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def uniform(generator: torch.Generator, low: float, high: float) -> float:
    """Uniform draw in [low, high)."""
    return low + (high - low) * rand(generator)


def randint(generator: torch.Generator, low: int, high: int) -> int:
    """Integer draw in [low, high] (both inclusive)."""
    return int(torch.randint(int(low), int(high) + 1, (), generator=generator))


def coin(generator: torch.Generator, probability: float) -> bool:
    """True with the given probability."""
    return rand(generator) < probability


def truncnorm(generator: torch.Generator, size: int = 1) -> np.ndarray:
    """Standard normal draws truncated to [-1, 1] (rejection sampling; scipy ``truncnorm(-1, 1)`` distribution)."""
    out = []
    while len(out) < size:
        value = float(torch.randn((), generator=generator, dtype=torch.float64))
        if -1.0 <= value <= 1.0:
            out.append(value)
    return np.asarray(out)


# ---------------------------------------------------------------------------------------------- photometric
def _convert(channel: np.ndarray, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    return np.clip(channel.astype(np.float32) * alpha + beta, 0, 255).astype(np.uint8)


def photometric_distortion(image: np.ndarray, generator: torch.Generator, brightness_delta: float = 32,
                           contrast_range: tuple[float, float] = (0.5, 1.5),
                           saturation_range: tuple[float, float] = (0.5, 1.5), hue_delta: int = 18) -> np.ndarray:
    """Official ``PhotoMetricDistortion``: brightness, then contrast either first or last, saturation and hue, each
    applied with probability 1/2 (hue in OpenCV's 0-180 scale)."""
    if coin(generator, 0.5):
        image = _convert(image, beta=uniform(generator, -brightness_delta, brightness_delta))
    contrast_first = coin(generator, 0.5)
    if contrast_first and coin(generator, 0.5):
        image = _convert(image, alpha=uniform(generator, *contrast_range))
    if coin(generator, 0.5):
        hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
        hsv[:, :, 1] = _convert(hsv[:, :, 1], alpha=uniform(generator, *saturation_range))
        image = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    if coin(generator, 0.5):
        hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
        hsv[:, :, 0] = (hsv[:, :, 0].astype(int) + randint(generator, -hue_delta, hue_delta)) % 180
        image = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    if not contrast_first and coin(generator, 0.5):
        image = _convert(image, alpha=uniform(generator, *contrast_range))
    return image


def gaussian_blur(image: np.ndarray, generator: torch.Generator, kernel_size: int = 3,
                  sigma_range: tuple[float, float] = (0.1, 2.0)) -> np.ndarray:
    """Official ``RandomGaussianBlur`` body: a `kernel_size` Gaussian with sigma drawn from `sigma_range`."""
    sigma = uniform(generator, *sigma_range)
    return cv2.GaussianBlur(image, (kernel_size, kernel_size), sigma)


def gaussian_noise(image: np.ndarray, generator: torch.Generator,
                   variance_range: tuple[float, float] = (5.0, 20.0)) -> np.ndarray:
    """Official ``RandomGaussianNoise`` body: additive N(0, var) noise on the 0-255 scale, var drawn per image."""
    sigma = math.sqrt(uniform(generator, *variance_range))
    noise = torch.randn(image.shape, generator=generator, dtype=torch.float32).numpy() * sigma
    return np.clip(image.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def solarize(image: np.ndarray, threshold: int = 128) -> np.ndarray:
    """Invert the pixels at or above `threshold` (official ``RandomSolarize`` body)."""
    return np.where(image >= threshold, 255 - image, image).astype(np.uint8)


_INTERPOLATIONS = (cv2.INTER_NEAREST, cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_AREA, cv2.INTER_LANCZOS4)


def down_up_sample(image: np.ndarray, generator: torch.Generator,
                   scale_range: tuple[float, float] = (0.1, 0.7)) -> np.ndarray:
    """Official ``RandomDownUpSampleImage`` body: shrink by a random factor with a random interpolation, then
    resize back with another random interpolation."""
    height, width = image.shape[:2]
    factor = uniform(generator, *scale_range)
    down = _INTERPOLATIONS[randint(generator, 0, len(_INTERPOLATIONS) - 1)]
    up = _INTERPOLATIONS[randint(generator, 0, len(_INTERPOLATIONS) - 1)]
    small = cv2.resize(image, (max(1, int(width * factor)), max(1, int(height * factor))), interpolation=down)
    return cv2.resize(small, (width, height), interpolation=up)


def box_blur(image: np.ndarray, generator: torch.Generator, blur_limit: tuple[int, int] = (3, 7)) -> np.ndarray:
    """albumentations ``Blur`` (used by the official pose pipeline): a box filter of random odd size."""
    size = 2 * randint(generator, (blur_limit[0] - 1) // 2, (blur_limit[1] - 1) // 2) + 1  # odd sizes in range
    return cv2.blur(image, (size, size))


def median_blur(image: np.ndarray, generator: torch.Generator, blur_limit: tuple[int, int] = (3, 7)) -> np.ndarray:
    """albumentations ``MedianBlur``: a median filter of random odd size."""
    size = 2 * randint(generator, (blur_limit[0] - 1) // 2, (blur_limit[1] - 1) // 2) + 1  # odd sizes in range
    return cv2.medianBlur(image, size)


def coarse_dropout(image: np.ndarray, generator: torch.Generator, size_range: tuple[float, float] = (0.2, 0.4),
                   fill_value: int = 0) -> np.ndarray:
    """albumentations ``CoarseDropout`` with one hole whose height and width are each a random 20-40 % of the
    image's (official pose config), filled with `fill_value`."""
    height, width = image.shape[:2]
    hole_h = max(1, int(round(height * uniform(generator, *size_range))))
    hole_w = max(1, int(round(width * uniform(generator, *size_range))))
    top = randint(generator, 0, height - hole_h)
    left = randint(generator, 0, width - hole_w)
    image = image.copy()
    image[top : top + hole_h, left : left + hole_w] = fill_value
    return image


# ------------------------------------------------------------------------------------------------- geometry
def letterbox_geometry(image_size: tuple[int, int], input_size: tuple[int, int]):
    """Aspect-preserving resize into `input_size` with centred padding, rounding the new size (official train/val
    ``*Resize`` transforms; the inference letterbox truncates instead, see the image processor).

    Returns:
        `((new_height, new_width), (left, right, top, bottom), scale)`.
    """
    height, width = image_size
    out_h, out_w = input_size
    scale = min(out_w / width, out_h / height)
    new_w, new_h = int(round(width * scale)), int(round(height * scale))
    left, top = (out_w - new_w) // 2, (out_h - new_h) // 2
    return (new_h, new_w), (left, out_w - new_w - left, top, out_h - new_h - top), scale


def letterbox_array(array: np.ndarray, input_size: tuple[int, int], interpolation: int, fill=0) -> np.ndarray:
    """Letterbox one `(height, width[, channels])` array with `letterbox_geometry`."""
    (new_h, new_w), (left, _, top, _), _ = letterbox_geometry(array.shape[:2], input_size)
    resized = cv2.resize(array, (new_w, new_h), interpolation=interpolation)
    if resized.ndim == 2 and array.ndim == 3:
        resized = resized[..., None]
    out = np.full((input_size[0], input_size[1]) + array.shape[2:], fill, dtype=array.dtype)
    out[top : top + new_h, left : left + new_w] = resized
    return out


def random_crop_box(generator: torch.Generator, image_size: tuple[int, int],
                    aspect_range: tuple[float, float] = (0.5, 2.0), area_range: tuple[float, float] = (0.4, 1.0),
                    attempts: int = 8):
    """Official ``*RandomCropContinuous`` box: up to `attempts` draws of an aspect ratio (width / height) and an
    area fraction; the first one that fits gives `(y1, y2, x1, x2)`, else `None` (no crop)."""
    height, width = image_size
    for _ in range(attempts):
        aspect = uniform(generator, *aspect_range)
        area = uniform(generator, *area_range) * height * width
        crop_h = math.sqrt(area / aspect)
        crop_w = aspect * crop_h
        if crop_w <= width and crop_h <= height:
            crop_h, crop_w = int(round(crop_h)), int(round(crop_w))
            y1 = randint(generator, 0, height - crop_h)
            x1 = randint(generator, 0, width - crop_w)
            return y1, y1 + crop_h, x1, x1 + crop_w
    return None
