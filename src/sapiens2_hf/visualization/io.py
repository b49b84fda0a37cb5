# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Atomic writes for user-facing outputs: a file is either absent or complete, never half written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "wb") -> Path:
    """Write through `write(file_object)` into a temporary file next to `path`, then rename it over `path`.

    The rename is atomic on POSIX and Windows (same folder). On failure the temporary file is removed and `path` is
    left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, mode) as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        # mkstemp creates owner-only files; give the result the permissions a plain open() would have.
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


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
    text = json.dumps(data, indent=indent)
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))
