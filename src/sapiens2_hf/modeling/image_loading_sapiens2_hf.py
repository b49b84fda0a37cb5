# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Reading the images a Sapiens2 processor is given (layer 0, Hub-shippable): paths, URLs, PIL images, numpy arrays
and tensors, decoded into `(height, width, 3)` uint8 RGB (`load_image_rgb`).

What it guarantees, each with its test (tests/test_hostile_inputs_loading.py, tests/test_field_pose_and_inputs.py):
a JPEG cut short is refused instead of decoded with grey rows (`_jpeg_is_complete`), the pixel limit is checked from
the header before decoding (`check_image_pixels`), EXIF orientation is applied (PIL inputs by `ImageOps.exif_transpose`,
files by OpenCV), 16-bit and float images are scaled to uint8, non-finite values and unknown layouts are refused,
and URLs time out (`URL_TIMEOUT_S`). Files are decoded with OpenCV when it is installed (the official pipeline reads
them so), else with PIL.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image, ImageOps

from .sapiens2_processing_ops import composite_over_white, cv2


def _jpeg_is_complete(data: bytes) -> bool:
    """Whether JPEG bytes reach the end-of-image marker of the main image.

    Decoders fill a JPEG cut short (an interrupted download or copy) with grey rows and only print a warning, so the
    file is checked here: marker segments are skipped by their length and entropy-coded scans byte by byte (a 0xFF
    there is followed by a stuffed 0x00 or a restart marker) until the end-of-image marker. Data appended after it
    (motion photos, maker trailers) is ignored; the markers of an embedded EXIF thumbnail sit inside the APP1
    segment and are skipped with it.
    """
    size, pos = len(data), 2  # after the start-of-image marker
    while pos + 1 < size:
        if data[pos] != 0xFF:  # stray bytes before a marker: decoders skip them (with a warning), so do we
            pos = data.find(b"\xff", pos)
            if pos < 0:
                return False
            continue
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker == 0xD9:  # end of image
            return True
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        if pos + 4 > size:
            return False
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        if pos > size:
            return False
        if marker == 0xDA:  # start of scan: entropy-coded data runs to the next marker that is not a restart
            while True:
                pos = data.find(b"\xff", pos)
                if pos < 0 or pos + 1 >= size:
                    return False
                following = data[pos + 1]
                if following == 0x00 or 0xD0 <= following <= 0xD7:
                    pos += 2
                elif following == 0xFF:
                    pos += 1
                else:
                    break
    return False


def _check_not_truncated(path: str) -> None:
    with open(path, "rb") as handle:
        if handle.read(2) != b"\xff\xd8":
            return  # not a JPEG: truncated PNG / WebP / TIFF files fail to decode instead
        data = b"\xff\xd8" + handle.read()
    if not _jpeg_is_complete(data):
        raise ValueError(f"{path!r} is a truncated or corrupt JPEG (it ends before its end-of-image marker); "
                         "re-download or re-export the file.")


def _uint16_to_uint8(array: np.ndarray) -> np.ndarray:
    """Full 16-bit range -> 8 bit, `round(value * 255 / 65535)` (computed in float64: no uint16 overflow)."""
    return np.round(array.astype(np.float64) * (255.0 / 65535.0)).astype(np.uint8)


#: Seconds a URL input may wait for the server (each connect or read, httpx's timeout as transformers' `load_image`
#: passes it), so that a stalled server fails instead of hanging.
URL_TIMEOUT_S = 60.0
# EXIF tag 0x0112: 1 is upright; 2-8 are the mirrorings and rotations `ImageOps.exif_transpose` undoes.
_EXIF_ORIENTATION = 0x0112


def check_image_pixels(height: int, width: int, name: str) -> None:
    """Refuses an image of more pixels than PIL's decompression-bomb limit, before it is decoded or converted.

    The limit is PIL's own, `2 * PIL.Image.MAX_IMAGE_PIXELS` (178,956,970 pixels by default, about 13,000 x 13,000):
    `Image.open` refuses larger files with it, and so does transformers' `load_image` for URLs. It applies to every
    input `load_image_rgb` takes, whatever decoder reads it. `PIL.Image.MAX_IMAGE_PIXELS = None` lifts it.
    """
    if Image.MAX_IMAGE_PIXELS is None:
        return
    limit = 2 * int(Image.MAX_IMAGE_PIXELS)
    if int(height) * int(width) > limit:
        raise ValueError(
            f"{name} is {width}x{height} = {int(height) * int(width):,} pixels, over the limit of {limit:,} "
            "(2 x PIL.Image.MAX_IMAGE_PIXELS, PIL's decompression-bomb guard); downscale it, or raise the limit with "
            "`PIL.Image.MAX_IMAGE_PIXELS = <pixels>` (None: no limit)."
        )


def _bomb_error(name: str, error: Exception) -> ValueError:
    """PIL's `DecompressionBombError` (raised by `Image.open` over the same limit) as `check_image_pixels` words it."""
    return ValueError(f"{name}: {error} Downscale it, or raise the limit (2 x PIL.Image.MAX_IMAGE_PIXELS) with "
                      "`PIL.Image.MAX_IMAGE_PIXELS = <pixels>` (None: no limit).")


def _pil_to_rgb(pil: Image.Image, name: str, do_convert_rgb: bool | None = None) -> np.ndarray:
    """PIL image -> `(height, width, 3)` uint8 RGB, upright by its EXIF orientation; 16-bit modes are scaled, not
    clipped (see `load_image_rgb`)."""
    check_image_pixels(pil.height, pil.width, name)  # from the header: nothing is decoded yet
    if pil.width == 0 or pil.height == 0:
        raise ValueError(f"{name} has no pixels ({pil.width}x{pil.height}); pass an image of at least 1x1 pixels.")
    try:
        pil.load()  # decode now, so that a truncated file fails here with its name
    except (OSError, SyntaxError, ValueError) as error:
        raise ValueError(f"could not decode the image {name}: {error}; the file is truncated or corrupt, "
                         "re-download it.") from error
    if pil.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None):
        # as transformers' `load_image` and OpenCV's `imread` do; upright images are not copied
        pil = ImageOps.exif_transpose(pil)
    if pil.mode.startswith("I;16") or pil.mode == "I":
        # PIL's convert("RGB") clips these modes at 255, which turns most of a 16-bit image white
        values = np.asarray(pil)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise ValueError(f"the mode {pil.mode!r} image {name} holds values in [{values.min()}, {values.max()}], "
                             "outside the 16-bit range [0, 65535] this function scales from; convert it to 8 bit "
                             "first.")
        return np.repeat(_uint16_to_uint8(values)[..., None], 3, axis=-1)
    if pil.mode == "F":
        return _array_to_rgb(np.asarray(pil), name)
    if pil.mode == "La":  # premultiplied alpha: PIL converts it to LA only ("conversion from La to L not supported")
        pil = pil.convert("LA")
    try:
        if do_convert_rgb and ("A" in pil.getbands() or pil.info.get("transparency") is not None):
            # transformers' convention for PIL images (`do_convert_rgb=True`): PIL's own compositing over white
            white = Image.new("RGBA", pil.size, (255, 255, 255, 255))
            return np.asarray(Image.alpha_composite(white, pil.convert("RGBA")).convert("RGB")).copy()
        return np.asarray(pil.convert("RGB")).copy()
    except ValueError as error:  # a mode PIL cannot convert to RGB
        raise ValueError(f"the mode {pil.mode!r} image {name} cannot be converted to RGB ({error}); convert it to "
                         "RGB, L or RGBA first.") from error


def _array_to_rgb(image: np.ndarray, name: str = "image array", do_convert_rgb: bool | None = None,
                  channels_last_known: bool = False) -> np.ndarray:
    array = image
    if array.ndim == 3 and not channels_last_known and array.shape[0] in (1, 3, 4):
        if array.shape[-1] in (1, 3, 4):
            # transformers' `infer_channel_dimension_format` guesses channels first here with a logged warning; a
            # wrong guess gives a transposed image, so the caller says which
            raise ValueError(f"{name} of shape {tuple(image.shape)} is ambiguous: its first and its last dimension "
                             "can both be the channels; pass input_data_format='channels_first' or 'channels_last' "
                             "(the image processor's argument), or a PIL image.")
        array = np.transpose(array, (1, 2, 0))
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[-1] not in (1, 3, 4):
        raise ValueError(f"image array of shape {image.shape} is not an image; expected (height, width, 3).")
    if array.shape[0] == 0 or array.shape[1] == 0:  # OpenCV's resize would fail on it with an assertion
        raise ValueError(f"{name} of shape {tuple(image.shape)} has no pixels; pass an image of at least 1x1 "
                         "pixels.")
    if array.shape[-1] == 1:
        array = np.repeat(array, 3, axis=-1)
    rgb = _to_uint8(array[..., :3], name)
    if array.shape[-1] == 4 and do_convert_rgb:
        return composite_over_white(rgb, _to_uint8(array[..., 3:], name))
    return rgb


def _to_uint8(array: np.ndarray, name: str) -> np.ndarray:
    """Image values -> uint8 by the rules of `load_image_rgb`, contiguous."""
    if array.dtype == np.uint16:
        return np.ascontiguousarray(_uint16_to_uint8(array))
    if array.dtype != np.uint8:
        if np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.complexfloating):
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            if bad:
                raise ValueError(f"{name} holds {bad} non-finite value(s) (NaN or inf) out of {array.size}; replace "
                                 "them (e.g. np.nan_to_num) before passing the image.")
        array = array.astype(np.float64)
        if array.size and array.max() <= 1.0:
            array = array * 255.0
        array = np.clip(np.round(array), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array)


def channels_last(image: Any, input_data_format) -> Any:
    """An array or tensor image in `(height, width, channels)` order, given transformers' `input_data_format` (other
    inputs pass through: `load_image_rgb` reads them)."""
    layout = getattr(input_data_format, "value", input_data_format)
    if layout not in ("channels_first", "channels_last"):
        raise ValueError(f"input_data_format={input_data_format!r}; use 'channels_first' or 'channels_last'.")
    if layout == "channels_last" or getattr(image, "ndim", None) != 3:
        return image
    return image.permute(1, 2, 0) if isinstance(image, torch.Tensor) else np.moveaxis(np.asarray(image), 0, -1)


def load_image_rgb(image: Any, do_convert_rgb: bool | None = None, input_data_format: Any = None) -> np.ndarray:
    """Any supported image -> `(height, width, 3)` uint8 RGB numpy array.

    Accepts a path or URL (`str` / `os.PathLike`), a PIL image, a numpy array or a torch tensor.

    - Local files are read with OpenCV when available, like the official demos (the same decoder and EXIF
      handling; 16-bit files become 8 bit as OpenCV does, `value >> 8`), else with PIL plus EXIF transposition.
      A JPEG that ends before its end-of-image marker (cut short) raises a `ValueError` naming the file instead of
      being decoded with grey rows; so does a path that is not a regular file (a folder, FIFO or device, which
      would block or fail inside the decoder).
    - EXIF orientation is honoured for every input that carries it: files, URLs and PIL images (rotated and mirrored
      upright with `ImageOps.exif_transpose`, as transformers' `load_image` does), so the same photo gives the same
      array whichever way it is passed.
    - Pixel limit: an image of more than `2 * PIL.Image.MAX_IMAGE_PIXELS` pixels (PIL's decompression-bomb limit,
      about 13,000 x 13,000 by default) raises a `ValueError` naming its size, before it is decoded (files and URLs:
      from the header) or converted; see `check_image_pixels`. `PIL.Image.MAX_IMAGE_PIXELS = None` lifts it.
    - Arrays: `(height, width)`, `(height, width, 1|3|4)` or channels-first `(1|3|4, height, width)`, assumed
      RGB(A); torch tensors follow torch's convention, `(1|3|4, height, width)` is channels first; for a numpy
      array a shape that is both (`(3, 100, 3)`) raises a `ValueError` unless `input_data_format`
      (`"channels_first"` or `"channels_last"`, transformers' argument) says which, and so does an array without
      pixels (`(0, 0, 3)`). uint8 is used as is; uint16 is 16-bit data scaled to 8 bit,
      `round(value * 255 / 65535)`; floating arrays with a maximum <= 1 are taken as [0, 1] and scaled to 0-255,
      others rounded and clipped to 0-255, and NaN or inf raises a `ValueError` giving their count; other integer
      types are clipped to 0-255 (a maximum <= 1 is scaled by 255).
    - PIL images: 16-bit modes (`I;16*`, and `I` with values in [0, 65535]) are scaled like uint16 arrays, `F` like
      float arrays, `La` (premultiplied) goes through `LA`, every other mode through `convert("RGB")`.
    - Transparency (4-channel arrays and tensors, PIL images with an alpha band or a transparent palette colour) is
      dropped, as OpenCV's and PIL's conversions to RGB (and transformers' `load_image`) do, unless
      `do_convert_rgb=True`: then the image is composited over white as transformers' image processors do with
      `do_convert_rgb=True`, with PIL's `alpha_composite` for PIL images and `composite_over_white` for arrays and
      tensors. Files and URLs always drop it.
    """
    if isinstance(image, (str,)) or hasattr(image, "__fspath__"):
        is_url = str(image).startswith(("http://", "https://", "data:"))
        return _read_image_url(str(image)) if is_url else _read_image_file(str(image))
    channels_last_known = input_data_format is not None
    if channels_last_known:
        image = channels_last(image, input_data_format)
    if isinstance(image, Image.Image):
        filename = getattr(image, "filename", None)
        return _pil_to_rgb(image, repr(filename) if filename else f"(PIL {image.mode} image)", do_convert_rgb)
    if isinstance(image, torch.Tensor):
        image, channels_last_known = _tensor_to_array(image, channels_last_known)
    if not isinstance(image, np.ndarray):
        raise ValueError(f"unsupported image type {type(image).__name__}; pass a path, URL, PIL image, numpy array "
                         "or torch tensor.")
    if image.ndim in (2, 3):
        check_image_pixels(*_array_height_width(image.shape), "image array")
    return _array_to_rgb(image, do_convert_rgb=do_convert_rgb, channels_last_known=channels_last_known)


def _read_image_url(url: str) -> np.ndarray:
    """An http(s) or data: URL -> `(height, width, 3)` uint8 RGB, read with transformers' `load_image`."""
    from huggingface_hub.utils import httpx  # the client transformers' `load_image` downloads with
    from transformers.image_utils import load_image

    name = repr(url if len(url) <= 80 else url[:77] + "...")
    try:
        # transformers' reader (PIL's decompression-bomb limit applies as it opens the image)
        pil = load_image(url, timeout=URL_TIMEOUT_S)
    except Image.DecompressionBombError as error:
        raise _bomb_error(name, error) from error
    except (httpx.HTTPError, OSError) as error:  # refused, unreachable, timed out; or an answer not an image
        raise OSError(f"could not read an image from {name} ({type(error).__name__}: {error}); check the URL "
                      "and the network, or download the image and pass its path.") from error
    except ValueError as error:  # a base64 / data: URL: transformers rewords the error, whole payload included
        if isinstance(error.__context__, Image.DecompressionBombError):
            raise _bomb_error(name, error.__context__) from error
        cause = error.__context__ if error.__context__ is not None else error
        raise ValueError(f"could not read an image from {name}: {cause}") from error
    return _pil_to_rgb(pil, name)


def _tensor_to_array(image: torch.Tensor, channels_last_known: bool) -> tuple[np.ndarray, bool]:
    """A torch image -> a numpy array (channels last when torch's channels-first layout is recognised), pixel count
    checked; with whether its layout is now known to be channels last."""
    image = image.detach().cpu()
    if not channels_last_known and image.ndim == 3 and image.shape[0] in (1, 3, 4):
        image, channels_last_known = image.permute(1, 2, 0), True  # torch's convention: channels first
    if image.ndim in (2, 3):
        check_image_pixels(*_array_height_width(image.shape), "image tensor")
    return (image.float() if image.dtype == torch.bfloat16 else image).numpy(), channels_last_known  # no bf16 in numpy


def _array_height_width(shape: Sequence[int]) -> tuple[int, int]:
    """`(height, width)` of a `(height, width[, channels])` or channels-first `(1|3|4, height, width)` shape, as
    `_array_to_rgb` reads it."""
    if len(shape) == 3 and shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4):
        return shape[1], shape[2]
    return shape[0], shape[1]


def _read_image_file(path: str) -> np.ndarray:
    """A local image file -> `(height, width, 3)` uint8 RGB (see `load_image_rgb`): refused before decoding when it is
    not a regular file, a truncated JPEG, or over the pixel limit (read from its header)."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"could not read an image from {path!r}: it is not a regular file (a folder, FIFO or "
                         "device); pass an image file.")
    try:
        _check_not_truncated(path)
    except OSError as error:
        raise ValueError(f"could not read an image from {path!r}: {error}") from error
    pil = None
    try:
        pil = Image.open(path)  # reads the header only; refuses more than 2 x MAX_IMAGE_PIXELS itself
    except Image.DecompressionBombError as error:
        raise _bomb_error(repr(path), error) from error
    except (OSError, SyntaxError, ValueError) as error:
        if cv2 is None:
            raise ValueError(f"could not read an image from {path!r}: {error}") from error
        # a format only OpenCV reads: its size is checked once decoded (OpenCV has its own limit, 2**30 pixels)
    if cv2 is None:
        with pil:
            return _pil_to_rgb(pil, repr(path))
    if pil is not None:
        with pil:
            check_image_pixels(pil.height, pil.width, repr(path))
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)  # OpenCV honours the EXIF orientation itself
    if bgr is None:
        raise ValueError(f"could not read an image from {path!r} (missing, unreadable or not an image).")
    check_image_pixels(bgr.shape[0], bgr.shape[1], repr(path))
    return np.ascontiguousarray(bgr[..., ::-1])
