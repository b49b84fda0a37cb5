"""Image loading and normalisation for the training data path. Both delegate to the image processor's functions, so
training and inference share one implementation of the official preprocessing constants."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..modeling.image_loading_sapiens2_hf import load_image_rgb
from ..modeling.sapiens2_processing_ops import normalize_uint8


def load_image(image: Any) -> np.ndarray:
    """Path, PIL image, array or tensor -> `(height, width, 3)` uint8 RGB array (see the processor's
    `load_image_rgb`)."""
    return load_image_rgb(image)


def normalize_image(image: np.ndarray) -> torch.Tensor:
    """`(height, width, 3)` uint8 RGB -> `(3, height, width)` float32 `(x - mean) / std` with the official 0-255
    ImageNet constants, exactly as the processor normalises inference inputs."""
    return normalize_uint8(np.ascontiguousarray(image)[None])[0]
