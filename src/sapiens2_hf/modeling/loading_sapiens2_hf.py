"""Finding and reading Sapiens2 checkpoints in every layout found in the wild.

A `from_pretrained` argument can be:

- an official file (`sapiens2_<size>_<task>.safetensors`, original tensor names, no config);
- a folder or Hub repo with a config.json and weights in transformers' module layout (saved by this library, or by
  transformers after loading a folder of that layout);
- a folder or Hub repo with a config.json and weights that use the *original* tensor names: transformers (>= 5.23)
  renames Sapiens2 tensors back to the original names when it saves a model it built itself, which is how Meta's
  official repos (facebook/sapiens2-<task>-<size>) were written;
- a folder or Hub repo with a config.json and only the original file (no model.safetensors), or the original file
  alone.

`resolve_checkpoint` tells which, and `read_safetensors` reads weights with one dtype policy for all of them.

Hub-shippable: imports only stdlib, torch, huggingface_hub, safetensors and siblings of this folder.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.utils import logging

from .convert_official_sapiens2 import OFFICIAL_FILENAME_PATTERN, OfficialCheckpointError


logger = logging.get_logger(__name__)

HF_WEIGHTS_NAME = "model.safetensors"
HF_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")

# safetensors dtype codes of floating tensors, which are cast to float32 on load; anything else is refused.
_FLOATING_DTYPES = {"F64", "F32", "F16", "BF16"}
# Original (facebookresearch) tensor names: a bare backbone or the `backbone.` / `decode_head.` task layout.
_ORIGINAL_NAME = re.compile(
    r"^(backbone\.|decode_head\.conv_(pose|seg|normal|pointmap|albedo)\.|cls_token$|storage_tokens$|blocks\.\d+\.)"
)


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """What a `from_pretrained` argument points to.

    Attributes:
        kind: `"official"` (an original file: the architecture is read from its tensors) or `"hf"` (a config.json
            with weights next to it).
        location: the local original file for `"official"`; the folder or Hub repo id for `"hf"`.
        weights_files: `"hf"` only: the local weights files (one file, or the shards of an index).
        original_names: `"hf"` only: the weights use the original tensor names (see the module docstring).
        tensor_dtypes: `"hf"` only: tensor name -> safetensors dtype code of the weights files.
        config_folder: `"official"` only: the local folder of a config.json that sits beside the original file (its
            input size and label names then apply; the tensors must match it).
    """

    kind: str
    location: str
    weights_files: tuple[str, ...] = field(default_factory=tuple)
    original_names: bool = False
    tensor_dtypes: dict[str, str] = field(default_factory=dict)
    config_folder: str | None = None


def safetensors_keys_and_dtypes(paths) -> dict[str, str]:
    """Tensor name -> safetensors dtype code (`"F32"`, `"BF16"`, `"I8"`, ...) of one or more files, without loading
    any tensor."""
    from safetensors import SafetensorError, safe_open

    found = {}
    for path in paths:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():
                    found[key] = handle.get_slice(key).get_dtype()
        except (SafetensorError, OSError, ValueError) as error:
            raise OfficialCheckpointError(
                f"Cannot read {path} as a safetensors file ({error}). The file is truncated or corrupt: download it "
                "again."
            ) from error
    return found


def check_tensor_dtypes(dtypes: dict[str, str], source: str) -> list[str]:
    """Refuses non-floating tensors (naming them); returns the floating ones that are not float32."""
    refused = sorted(f"{key} ({dtype})" for key, dtype in dtypes.items() if dtype not in _FLOATING_DTYPES)
    if refused:
        raise OfficialCheckpointError(
            f"{source} holds tensors that are not floating point: {refused[:10]}. Sapiens2 weights are float32, "
            "float16 or bfloat16; quantized or integer checkpoints are not supported (dequantize them first)."
        )
    return sorted(key for key, dtype in dtypes.items() if dtype != "F32")


def read_safetensors(paths, source: str | None = None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Reads safetensors weights as float32 tensors.

    float16, bfloat16 and float64 tensors are cast to float32 (a logged note says how many): the models compute in
    float32 whatever the storage, and a mixed-dtype state dict would fail later. Non-floating tensors (int8
    quantized weights would otherwise turn into zeros) are refused with their names.

    Returns:
        `(state_dict, metadata)`: the tensors and the header metadata of the first file.
    """
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    paths = [str(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    source = source or ", ".join(os.path.basename(p) for p in paths)
    # The official RoPE periods buffer stays in its own dtype: it is checked against the formula in that dtype.
    cast = [key for key in check_tensor_dtypes(safetensors_keys_and_dtypes(paths), source)
            if not key.endswith("rope_embed.periods")]
    state_dict, metadata = {}, {}
    for index, path in enumerate(paths):
        try:
            state_dict.update(load_file(path))
            if index == 0:
                with safe_open(path, framework="pt") as handle:
                    metadata = dict(handle.metadata() or {})
        except (SafetensorError, OSError, ValueError) as error:
            raise OfficialCheckpointError(
                f"Cannot read {path} as a safetensors file ({error}). The file is truncated or corrupt: download it "
                "again."
            ) from error
    if cast:
        kinds = sorted({str(state_dict[key].dtype).replace("torch.", "") for key in cast})
        logger.warning(
            f"{source}: cast {len(cast)} tensors stored as {', '.join(kinds)} to float32 (e.g. {cast[0]}); pass "
            "`dtype=` to run the model in another precision."
        )
        for key in cast:
            state_dict[key] = state_dict[key].float()
    return state_dict, metadata


def uses_original_names(keys) -> bool:
    """Whether a state dict uses the original (facebookresearch) tensor names rather than transformers' modules."""
    return any(_ORIGINAL_NAME.match(key) for key in keys)


def find_official_file(folder: Path) -> Path | None:
    """The single original-format file of a folder (`sapiens2_<size>_<task>.safetensors`), if any."""
    candidates = sorted(p for p in folder.glob("*.safetensors") if OFFICIAL_FILENAME_PATTERN.match(p.name))
    if len(candidates) > 1:
        raise ValueError(
            f"{folder} holds several official checkpoint files ({[p.name for p in candidates]}); pass the path of "
            "the one to load."
        )
    return candidates[0] if candidates else None


def _local_weights(folder: Path) -> tuple[str, ...]:
    if (folder / HF_WEIGHTS_NAME).is_file():
        return (str(folder / HF_WEIGHTS_NAME),)
    index = folder / HF_WEIGHTS_INDEX_NAME
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return tuple(str(folder / shard) for shard in shards)
    return ()


def _hf(location: str, weights: tuple[str, ...]) -> ResolvedCheckpoint:
    dtypes = safetensors_keys_and_dtypes(weights)
    return ResolvedCheckpoint("hf", location, weights, original_names=uses_original_names(dtypes), tensor_dtypes=dtypes)


def _resolve_folder(path: Path, subfolder: str) -> ResolvedCheckpoint:
    folder = path / subfolder
    has_config = (folder / "config.json").is_file()
    weights = _local_weights(folder) if has_config else ()
    if weights:
        return _hf(str(path), weights)
    official = find_official_file(folder)
    if official is not None:
        # The original file alone, or beside a config.json without transformers-format weights.
        return ResolvedCheckpoint("official", str(official), config_folder=str(folder) if has_config else None)
    if has_config:
        raise OSError(
            f"{folder} has a config.json but no weights: neither {HF_WEIGHTS_NAME} (or a sharded index) nor an "
            "official sapiens2_<size>_<task>.safetensors file. Pickled .bin/.pth weights are never read."
        )
    raise OSError(f"{folder} has neither a config.json nor an official sapiens2_<size>_<task>.safetensors file.")


def _offline_error(repo_id: str, error: Exception) -> OSError:
    return OSError(
        f"Cannot resolve the Hub repo {repo_id!r}: the Hub is unreachable or offline mode is on (HF_HUB_OFFLINE=1), "
        f"and the repo's files are not in the local cache ({type(error).__name__}). Download it on a connected "
        "machine (`hf download " + repo_id + "`), or pass a local folder or an official .safetensors file path."
    )


def _resolve_hub(repo_id: str, hub_kwargs: dict) -> ResolvedCheckpoint:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, OfflineModeIsEnabled

    download_kwargs = {
        key: hub_kwargs[key]
        for key in ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")
        if hub_kwargs.get(key) is not None
    }

    def fetch(filename: str) -> str | None:
        """Local path of a repo file; None when the repo has no such file. Unreachable Hub: a clear OSError."""
        try:
            return hf_hub_download(repo_id, filename, **download_kwargs)
        # LocalEntryNotFoundError subclasses EntryNotFoundError: it means "not cached and no Hub", not "absent".
        except (LocalEntryNotFoundError, OfflineModeIsEnabled) as error:
            raise _offline_error(repo_id, error) from error
        except EntryNotFoundError:
            return None

    config_file = fetch("config.json")
    if config_file is not None:
        try:
            weights = fetch(HF_WEIGHTS_NAME)
            index = None if weights is not None else fetch(HF_WEIGHTS_INDEX_NAME)
        except OSError:
            # Offline with only part of the repo cached: an original file cached beside config.json still serves.
            cached = find_official_file(Path(config_file).parent)
            if cached is None:
                raise
            return ResolvedCheckpoint("official", str(cached), config_folder=str(Path(config_file).parent))
        if weights is not None:
            return _hf(repo_id, (weights,))
        if index is not None:
            shards = sorted(set(json.loads(Path(index).read_text())["weight_map"].values()))
            return _hf(repo_id, tuple(fetch(shard) for shard in shards))
    try:
        files = HfApi().list_repo_files(repo_id, revision=hub_kwargs.get("revision"), token=hub_kwargs.get("token"))
    except (OfflineModeIsEnabled, ConnectionError) as error:
        raise _offline_error(repo_id, error) from error
    subfolder = hub_kwargs.get("subfolder") or ""
    official = [
        name for name in files
        if OFFICIAL_FILENAME_PATTERN.match(os.path.basename(name)) and os.path.dirname(name) == subfolder
    ]
    if len(official) != 1:
        raise OSError(
            f"{repo_id} has no {HF_WEIGHTS_NAME} and {len(official)} official sapiens2_<size>_<task>.safetensors "
            f"files ({official}); pass one file's path."
        )
    config_folder = str(Path(config_file).parent) if config_file else None
    return ResolvedCheckpoint("official", fetch(os.path.basename(official[0])), config_folder=config_folder)


def resolve_checkpoint(pretrained_model_name_or_path, hub_kwargs: dict | None = None) -> ResolvedCheckpoint:
    """Tells what a `from_pretrained` argument points to (see the module docstring for the layouts).

    A folder or repo with both transformers-format weights and the original file resolves to the former (they hold
    the same tensors); with only the original file it resolves to that file.
    """
    hub_kwargs = hub_kwargs or {}
    path = Path(os.fspath(pretrained_model_name_or_path))
    if path.is_file():
        if path.suffix != ".safetensors":
            raise ValueError(
                f"{path} is not a .safetensors file. sapiens2_hf reads only safetensors checkpoints, never pickled "
                "(.pth/.bin) ones, which can run arbitrary code when loaded."
            )
        if path.name == HF_WEIGHTS_NAME and (path.parent / "config.json").is_file():
            return _hf(str(path.parent), (str(path),))
        return ResolvedCheckpoint("official", str(path))
    if path.is_dir():
        return _resolve_folder(path, hub_kwargs.get("subfolder") or "")
    if re.match(r"^[\w.-]+/[\w.-]+$", str(pretrained_model_name_or_path)):
        return _resolve_hub(str(pretrained_model_name_or_path), hub_kwargs)
    raise OSError(f"{pretrained_model_name_or_path} is neither a local file or folder nor a Hub repo id.")
