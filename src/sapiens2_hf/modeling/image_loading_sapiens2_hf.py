# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The images a Sapiens2 processor or pipeline is given (layer 0, Hub-shippable): PIL images, numpy arrays and
tensors, local paths and URLs, as `(height, width, 3)` uint8 RGB (`load_image_rgb`).

Paths are opened with PIL and URLs read with transformers' `load_image`, as transformers' pipelines do; the run
layer's decoder (`sapiens2_hf.runs.decode`) converts with `pil_to_rgb` too.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch
from huggingface_hub.utils import httpx  # the client transformers' `load_image` downloads with
from PIL import Image, ImageOps
from transformers import image_utils

from .sapiens2_processing_ops import composite_over_white


def _uint16_to_uint8(array: np.ndarray) -> np.ndarray:
    """Full 16-bit range -> 8 bit, `round(value * 255 / 65535)` (computed in float64: no uint16 overflow)."""
    return np.round(array.astype(np.float64) * (255.0 / 65535.0)).astype(np.uint8)


#: Seconds a URL input may wait for the server (each connect or read, httpx's timeout as transformers' `load_image`
#: passes it), so that a stalled server fails instead of hanging.
URL_TIMEOUT_S = 60.0
# EXIF tag 0x0112: 1 is upright; 2-8 are the mirrorings and rotations `ImageOps.exif_transpose` undoes.
_EXIF_ORIENTATION = 0x0112


def check_image_pixels(height: int, width: int, name: str) -> None:
    """Refuses an image of more pixels than PIL's decompression-bomb limit, `2 * PIL.Image.MAX_IMAGE_PIXELS`
    (178,956,970 by default, about 13,000 x 13,000; `None` lifts it), before it is decoded or converted: the limit
    `Image.open` and transformers' `load_image` apply, for every input `load_image_rgb` takes."""
    if Image.MAX_IMAGE_PIXELS is None:
        return
    limit = 2 * int(Image.MAX_IMAGE_PIXELS)
    if int(height) * int(width) > limit:
        raise ValueError(
            f"{name} is {width}x{height} = {int(height) * int(width):,} pixels, over the limit of {limit:,} "
            "(2 x PIL.Image.MAX_IMAGE_PIXELS, PIL's decompression-bomb guard); downscale it, or raise the limit with "
            "`PIL.Image.MAX_IMAGE_PIXELS = <pixels>` (None: no limit)."
        )


def bomb_error(name: str, error: Exception) -> ValueError:
    """PIL's `DecompressionBombError` (raised by `Image.open` over the same limit) as `check_image_pixels` words it."""
    return ValueError(f"{name}: {error} Downscale it, or raise the limit (2 x PIL.Image.MAX_IMAGE_PIXELS) with "
                      "`PIL.Image.MAX_IMAGE_PIXELS = <pixels>` (None: no limit).")


def pil_to_rgb(pil: Image.Image, name: str, do_convert_rgb: bool | None = None) -> np.ndarray:
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
    """A path or URL (`str` / `os.PathLike`), PIL image, numpy array or torch tensor -> `(height, width, 3)` uint8
    RGB numpy array. Every refusal is a `ValueError` naming the input.

    - Files and URLs are converted as PIL images are; a truncated file or a path that is not a regular file (a
      folder, FIFO or device) is refused. EXIF orientation is applied to files, URLs and PIL images alike.
    - Pixel limit (`check_image_pixels`): checked before decoding (files and URLs: from the header) or converting.
    - Arrays: `(height, width)`, `(height, width, 1|3|4)` or channels-first `(1|3|4, height, width)`, RGB(A); torch
      tensors `(1|3|4, height, width)` are channels first; a numpy shape that can be both (`(3, 100, 3)`) is refused
      unless `input_data_format` (`"channels_first"` / `"channels_last"`) says which, and so is one without pixels.
      uint8 as is; uint16 scaled `round(value * 255 / 65535)`; floats with a maximum <= 1 scaled from [0, 1], others
      rounded and clipped to 0-255, NaN or inf refused with their count; other integers clipped (maximum <= 1: x255).
    - PIL images: 16-bit modes (`I;16*`, `I` within [0, 65535]) scaled like uint16, `F` like floats, `La` through
      `LA`, every other mode through `convert("RGB")`.
    - Transparency (4-channel arrays, PIL alpha bands or transparent palette colours) is dropped, as OpenCV's, PIL's
      and transformers' `load_image` conversions do, unless `do_convert_rgb=True`: then it is composited over white
      as transformers' image processors do (PIL's `alpha_composite`, or `composite_over_white` for arrays). Files and
      URLs always drop it.
    """
    if isinstance(image, str) or hasattr(image, "__fspath__"):
        return _read_image(str(image))
    channels_last_known = input_data_format is not None
    if channels_last_known:
        image = channels_last(image, input_data_format)
    if isinstance(image, Image.Image):
        filename = getattr(image, "filename", None)
        return pil_to_rgb(image, repr(filename) if filename else f"(PIL {image.mode} image)", do_convert_rgb)
    if isinstance(image, torch.Tensor):
        image, channels_last_known = _tensor_to_array(image, channels_last_known)
    if not isinstance(image, np.ndarray):
        raise ValueError(f"unsupported image type {type(image).__name__}; pass a path, URL, PIL image, numpy array "
                         "or torch tensor.")
    if image.ndim in (2, 3):
        check_image_pixels(*_array_height_width(image.shape), "image array")
    return _array_to_rgb(image, do_convert_rgb=do_convert_rgb, channels_last_known=channels_last_known)


def _read_image(source: str) -> np.ndarray:
    """A local path (opened with PIL) or an http(s) / data: URL (read with transformers' `load_image`) ->
    `(height, width, 3)` uint8 RGB; PIL refuses an image over the pixel limit as it opens it, from the header."""
    name = repr(source if len(source) <= 80 else source[:77] + "...")
    is_url = source.startswith(("http://", "https://", "data:"))
    if not is_url and os.path.exists(source) and not os.path.isfile(source):
        raise ValueError(f"could not read an image from {name}: it is not a regular file (a folder, FIFO or "
                         "device); pass an image file.")
    try:
        pil = image_utils.load_image(source, timeout=URL_TIMEOUT_S) if is_url else Image.open(source)
    except Image.DecompressionBombError as error:
        raise bomb_error(name, error) from error
    except (httpx.HTTPError, OSError) as error:  # missing, refused, unreachable, timed out; or not an image
        if not is_url:  # the caller's input is at fault: a ValueError, as for any other bad argument
            raise ValueError(f"could not read an image from {name} ({type(error).__name__}: {error}); check the "
                             "path.") from error
        raise OSError(f"could not read an image from {name} ({type(error).__name__}: {error}); check the URL (and "
                      "the network), or download the image and pass its path.") from error
    except ValueError as error:  # a base64 / data: URL: transformers rewords the error, whole payload included
        if isinstance(error.__context__, Image.DecompressionBombError):
            raise bomb_error(name, error.__context__) from error
        cause = error.__context__ if error.__context__ is not None else error
        raise ValueError(f"could not read an image from {name}: {cause}") from error
    with pil:
        return pil_to_rgb(pil, name)


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
