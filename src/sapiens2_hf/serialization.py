"""Pipeline results as plain JSON values: `to_json_compatible(result)` (layer 1; imports nothing of sapiens2_hf).

The `sapiens2-*` pipelines return numpy arrays (and transformers' stock pipelines tensors and PIL images), which
`json.dumps` refuses. `to_json_compatible` turns any such result into lists, numbers, strings, booleans and `None`:

| value | becomes |
|---|---|
| `np.ndarray`, `torch.Tensor` (any dtype, any device) | nested lists of Python numbers / booleans (`.tolist()`) |
| numpy / torch scalars | Python `int`, `float`, `bool` |
| NaN, +inf, -inf (anywhere) | `None`: strict JSON has no such numbers (`json.dumps(..., allow_nan=False)` works) |
| `PIL.Image.Image` | `images="png"` (default): a `data:image/png;base64,...` URI, lossless (browsers show it; `image_from_json` reads it back); `images="drop"`: the key (or list item) is left out |
| `dict` (also `ModelOutput`, `BatchFeature`) | `dict` with `str` keys |
| `list`, `tuple`, generators of results | `list` |

Floats keep their exact value (`json.dumps` writes the shortest decimal that reads back to the same double), so
`np.asarray(json.loads(text), dtype=original.dtype)` equals the original bit for bit (NaN/inf aside).
"""

from __future__ import annotations

import base64
import io
import math
import types
from typing import Any

import numpy as np

IMAGE_MODES = ("png", "drop")
_PNG_PREFIX = "data:image/png;base64,"
_DROP = object()  # marks a dropped image inside containers


def _clean_floats(value: Any) -> Any:
    """`.tolist()` output with NaN / inf replaced by `None` (walks nested lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_clean_floats(v) for v in value]
    return value


def _is_pil_image(value: Any) -> bool:
    try:
        from PIL import Image
    except ImportError:  # PIL missing: nothing can be a PIL image
        return False
    return isinstance(value, Image.Image)


def _tensor_type():
    try:
        import torch
    except ImportError:
        return None
    return torch.Tensor


def _png_uri(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return _PNG_PREFIX + base64.b64encode(buffer.getvalue()).decode("ascii")


def _convert(value: Any, images: str, tensor_type) -> Any:
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (np.generic, np.ndarray)):
        return _clean_floats(value.tolist())
    if tensor_type is not None and isinstance(value, tensor_type):
        return _clean_floats(value.detach().cpu().tolist())
    if _is_pil_image(value):
        return _png_uri(value) if images == "png" else _DROP
    if isinstance(value, dict) or (hasattr(value, "keys") and hasattr(value, "__getitem__")):
        converted = {}
        for key, item in value.items():
            item = _convert(item, images, tensor_type)
            if item is not _DROP:
                converted[key if isinstance(key, str) else str(_convert(key, images, tensor_type))] = item
        return converted
    if isinstance(value, (list, tuple, types.GeneratorType)):
        return [item for item in (_convert(v, images, tensor_type) for v in value) if item is not _DROP]
    raise TypeError(
        f"to_json_compatible cannot convert a {type(value).__module__}.{type(value).__name__}; it handles numbers, "
        "strings, None, numpy arrays, torch tensors, PIL images, dicts, lists, tuples and generators of those."
    )


def to_json_compatible(result: Any, images: str = "png") -> Any:
    """Turns a pipeline result (one image's, or a list / generator of them) into values `json.dumps` accepts.

    `result` is what a `sapiens2-*` pipeline (or transformers' `image-segmentation` / `depth-estimation` one)
    returned; `images` is `"png"` or `"drop"`. Returns the same structure with only `dict` (str keys), `list`, `str`,
    `int`, `float`, `bool` and `None` (also NaN and infinities): the rules are the module docstring's table.

    Raises:
        ValueError: for an unknown `images` mode. TypeError: for a value of another type, naming it.
    """
    if images not in IMAGE_MODES:
        raise ValueError(f"images={images!r}; use one of {IMAGE_MODES} ('png' keeps images as base64 PNG strings, "
                         "'drop' leaves them out).")
    converted = _convert(result, images, _tensor_type())
    return None if converted is _DROP else converted


def image_from_json(value: str):
    """The PIL image of a `data:image/png;base64,...` string written by `to_json_compatible` (pixel-exact)."""
    from PIL import Image

    if not isinstance(value, str) or not value.startswith(_PNG_PREFIX):
        raise ValueError(f"expected a {_PNG_PREFIX}... string written by to_json_compatible, got {str(value)[:40]!r}.")
    image = Image.open(io.BytesIO(base64.b64decode(value[len(_PNG_PREFIX):])))
    image.load()
    return image


__all__ = ["IMAGE_MODES", "image_from_json", "to_json_compatible"]
