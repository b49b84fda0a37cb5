"""The one image decoder for files (layer 1): a path, encoded bytes, a `datasets` image cell or a PIL image ->
`(height, width, 3)` uint8 RGB, on PIL. Every command that reads image files (predict, pose3d, curate, the web app)
reads them here, and so do the training and pretraining datasets. The pipelines' own input normalisation (PIL images,
arrays, tensors, paths and URLs: `processing.load_image_rgb`) is what a Hub repo ships; both convert with its
`pil_to_rgb`.

Guarantees, each with its test (tests/test_runs_layer.py):

- nothing is decoded before the header is checked: the pixel cap (`2 * PIL.Image.MAX_IMAGE_PIXELS`, PIL's
  decompression-bomb limit), the memory bound (`MAX_DECODED_BYTES` for the decoded pixels in the file's own mode)
  and the aspect limit (`MAX_ASPECT_RATIO`, longer side over shorter side);
- EXIF orientation applied; every PIL mode made RGB by the rules of `load_image_rgb` (16-bit scaled, not clipped;
  float; palette, alpha dropped);
- a file's pixels are never ambiguous: a 1x1 or a 300x3 image is that image (nothing is guessed from array shapes);
- a zero-byte, truncated (PIL raises on a file cut short) or non-image file, a folder, FIFO or device is refused
  with one line naming the file (`ImageDecodeError`, a `ValueError`).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..modeling.image_loading_sapiens2_hf import bomb_error, check_image_pixels, pil_to_rgb

#: The decoded pixels of one image, in the file's own mode, may take at most this many bytes (1 GiB).
MAX_DECODED_BYTES = 1 << 30
#: Longer side over shorter side: a 20000x2 strip is no photo, and the models' resizing and the curation measures
#: would blow it up to gigabytes.
MAX_ASPECT_RATIO = 200


class ImageDecodeError(ValueError):
    """An image that cannot be decoded or is over a limit; the message is one line naming it."""


def _bytes_per_pixel(mode: str) -> int:
    if mode in ("I", "F", "I;32", "I;32B", "I;32L"):
        return 4
    if mode.startswith("I;16"):
        return 2
    try:
        return Image.getmodebands(mode)
    except (KeyError, ValueError):
        return 4


def check_header(width: int, height: int, mode: str, name: str) -> None:
    """The limits checked from an image's header, before it is decoded (see the module docstring)."""
    if width < 1 or height < 1:
        raise ImageDecodeError(f"{name} has no pixels ({width}x{height}); pass an image of at least 1x1 pixels.")
    check_image_pixels(height, width, name)
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageDecodeError(f"{name} is {width}x{height}, an aspect ratio over the limit of {MAX_ASPECT_RATIO}:1 "
                               "(sapiens2_hf.runs.decode.MAX_ASPECT_RATIO); crop or pad it.")
    needed = width * height * _bytes_per_pixel(mode)
    if needed > MAX_DECODED_BYTES:
        raise ImageDecodeError(f"{name} ({width}x{height}, mode {mode}) needs {needed:,} bytes decoded, over the "
                               f"limit of {MAX_DECODED_BYTES:,} (sapiens2_hf.runs.decode.MAX_DECODED_BYTES); "
                               "downscale it.")


def _open(data: bytes, name: str) -> Image.Image:
    if not data:
        raise ImageDecodeError(f"could not read an image from {name}: the file is empty (0 bytes).")
    try:
        return Image.open(io.BytesIO(data))  # the header only; PIL refuses over 2 x MAX_IMAGE_PIXELS itself
    except Image.DecompressionBombError as error:
        raise ImageDecodeError(str(bomb_error(name, error))) from error
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageDecodeError(f"could not read an image from {name}: {error}".rstrip(".") + "; pass an image file "
                               "(.jpg, .png, .webp, .bmp, .tif).") from error


def _read_file(path: Path, name: str) -> bytes:
    if not path.exists():
        raise ImageDecodeError(f"could not read an image from {name}: no such file.")
    if not path.is_file():
        raise ImageDecodeError(f"could not read an image from {name}: it is not a regular file (a folder, FIFO or "
                               "device); pass an image file.")
    try:
        return path.read_bytes()
    except OSError as error:
        raise ImageDecodeError(f"could not read an image from {name}: {error.strerror or error}.") from error


def decode_image(source: Any, name: str | None = None) -> np.ndarray:
    """A path, encoded bytes, a `datasets` image cell (`{"bytes", "path"}`) or a PIL image -> `(H, W, 3)` uint8 RGB,
    upright by its EXIF orientation (see the module docstring). `name` is how messages call it (default: the path,
    or the kind of input)."""
    if isinstance(source, dict):  # a datasets Image(decode=False) cell
        source = source.get("bytes") or source.get("path")
    if isinstance(source, (str, os.PathLike)):
        name = name or repr(str(source))
        source = _read_file(Path(source), name)
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = name or "(encoded image bytes)"
        pil = _open(bytes(source), name)
    elif isinstance(source, Image.Image):
        pil = source
        name = name or repr(getattr(pil, "filename", "") or f"(PIL {pil.mode} image)")
    else:
        raise ImageDecodeError(f"{name or 'input'}: unsupported image type {type(source).__name__}; pass a path, "
                               "encoded bytes or a PIL image.")
    with pil if pil is not source else contextlib.nullcontext():  # a caller's PIL image stays open
        try:  # check_image_pixels and pil_to_rgb raise ValueError: reworded as this decoder's error, on one line
            check_header(pil.width, pil.height, pil.mode, name)
            return pil_to_rgb(pil, name)
        except (OSError, SyntaxError, ValueError) as error:
            raise ImageDecodeError(" ".join(str(error).split())) from error


__all__ = ["ImageDecodeError", "MAX_ASPECT_RATIO", "MAX_DECODED_BYTES", "check_header", "decode_image"]

