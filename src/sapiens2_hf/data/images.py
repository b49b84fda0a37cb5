"""Image loading and normalisation for the training data path. Both delegate to the image processor's functions, so
training and inference share one implementation of the official preprocessing constants."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from ..modeling.image_loading_sapiens2_hf import load_image_rgb
from ..modeling.sapiens2_processing_ops import normalize_uint8
from ..runs.decode import decode_image


def load_image(image: Any) -> np.ndarray:
    """Path, encoded bytes, `datasets` image cell, PIL image, array or tensor -> `(height, width, 3)` uint8 RGB array.
    Files and bytes are read by the run layer's one decoder (`runs.decode`: its pixel, memory and aspect limits and
    EXIF rule), in-memory images by the processor's `load_image_rgb`, as at inference."""
    if isinstance(image, (str, os.PathLike, bytes, bytearray)) or (
            isinstance(image, dict) and ("bytes" in image or "path" in image)):
        return decode_image(image)
    return load_image_rgb(image)


def normalize_image(image: np.ndarray) -> torch.Tensor:
    """`(height, width, 3)` uint8 RGB -> `(3, height, width)` float32 `(x - mean) / std` with the official 0-255
    ImageNet constants, exactly as the processor normalises inference inputs."""
    return normalize_uint8(np.ascontiguousarray(image)[None])[0]
