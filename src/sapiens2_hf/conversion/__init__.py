"""Reading official Sapiens2 checkpoints (the key mapping itself ships with the models in
`sapiens2_hf.modeling.convert_official_sapiens2`, so that `from_pretrained` reads official files directly)."""

import os

from safetensors import safe_open

from ..modeling.convert_official_sapiens2 import (
    OfficialCheckpointError,
    convert_official_state_dict,
    detect_official_kind,
    infer_config_kwargs,
)


def official_checkpoint_kind(path: str | os.PathLike) -> str:
    """`"pretrain"` or the task of an official file, read from its tensor names only (no tensor is loaded)."""
    with safe_open(str(path), framework="pt") as handle:
        keys = {key: None for key in handle.keys()}
    return detect_official_kind(keys)


__all__ = [
    "OfficialCheckpointError",
    "convert_official_state_dict",
    "detect_official_kind",
    "infer_config_kwargs",
    "official_checkpoint_kind",
]
