# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Saving user-facing outputs (images, arrays, JSON) atomically: a file is either absent or complete, never half
written. The atomic write itself is `sapiens2_hf.utils.atomic_io`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..utils.atomic_io import atomic_write, atomic_write_json


def save_image(image: Image.Image | np.ndarray, path: str | os.PathLike) -> Path:
    """Save a PIL image or `(height, width[, 3])` uint8 array atomically; format from the suffix (png, jpg, ...)."""
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    fmt = Image.registered_extensions().get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot tell the image format of {path}; use a suffix such as .png or .jpg.")
    return atomic_write(path, lambda f: image.save(f, format=fmt))


def save_npy(array: np.ndarray, path: str | os.PathLike) -> Path:
    """Save a numpy array atomically (`.npy`, never pickled objects)."""
    return atomic_write(path, lambda f: np.save(f, np.asarray(array), allow_pickle=False))


def save_json(data: Any, path: str | os.PathLike, indent: int | None = None) -> Path:
    """Save JSON atomically (UTF-8)."""
    return atomic_write_json(path, data, indent=indent)
