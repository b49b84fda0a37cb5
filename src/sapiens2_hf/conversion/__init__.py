"""Reading official Sapiens2 checkpoints (the key mapping itself ships with the models in
`sapiens2_hf.modeling.convert_official_sapiens2`, so that `from_pretrained` reads official files directly)."""

import os

from ..modeling.convert_official_sapiens2 import (
    OfficialCheckpointError,
    convert_official_state_dict,
    detect_official_kind,
    infer_config_kwargs,
)
from ..modeling.loading_sapiens2_hf import safetensors_keys_and_dtypes


def official_checkpoint_kind(path: str | os.PathLike) -> str:
    """`"pretrain"` or the task of an official file, read from its tensor names only (no tensor is loaded)."""
    return detect_official_kind(safetensors_keys_and_dtypes([path]))


__all__ = [
    "OfficialCheckpointError",
    "convert_official_state_dict",
    "detect_official_kind",
    "infer_config_kwargs",
    "official_checkpoint_kind",
]
