# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Finding, reading and strictly loading Sapiens2 checkpoints in every layout found in the wild.

A `from_pretrained` argument can be an official file (`sapiens2_<size>_<task>.safetensors`, original tensor names, no
config); a folder or Hub repo with a config.json and weights in transformers' module layout, or with the *original*
names (transformers >= 5.23 writes those when it saves a model it built itself: Meta's facebook/sapiens2-<task>-<size>
repos); or a config.json beside only the original file. `resolve_checkpoint` tells which.

`load_pretrained` hands every layout to transformers' own `from_pretrained` (an official file as a folder in which it
is `model.safetensors`), whose loader streams the tensors (memory-mapped, cast one by one, `device_map`, offload,
shards) and renames the original names through the weight conversions declared in official_format_sapiens2_hf.py.
What stays here is what transformers cannot express; each piece says why in a `# Why code:` line.

Hub-shippable: imports only stdlib, torch, huggingface_hub, safetensors, transformers and siblings of this folder.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from huggingface_hub import HfApi
from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, OfflineModeIsEnabled
from transformers.utils import logging

from .configuration_sapiens2_hf import Sapiens2Config, as_sapiens2_config
from .official_format_sapiens2_hf import (
    OFFICIAL_FILENAME_PATTERN,
    ORIGINAL_NAME_PATTERN,
    OfficialCheckpointError,
    compute_rope_periods,
    detect_official_kind,
    infer_config_kwargs,
    original_key_mapping,
)
from .sapiens2_tasks import BACKBONE_MODEL_CLASS, PRETRAIN_TASK, looks_local, task_spec


logger = logging.get_logger(__name__)

HF_WEIGHTS_NAME = "model.safetensors"
HF_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")
# (model class, source, kwargs, class_for_task) -> a LoRA adapter's model or None; set by sapiens2_hf's registration
adapter_loader = None

# safetensors dtype codes of floating tensors, which are cast to float32 on load; anything else is refused.
_FLOATING_DTYPES = {"F64", "F32", "F16", "BF16"}
_TORCH_FLOATING_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
_SAFETENSORS_TORCH_DTYPES = {code: dtype for dtype, code in _TORCH_FLOATING_DTYPES.items()}
# The official RoPE periods buffer keeps its stored dtype: it is checked against the formula in that dtype.
_ROPE_PERIODS_SUFFIX = "rope_embed.periods"


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


class CorruptCheckpointError(OfficialCheckpointError):
    """A .safetensors file that is not a valid one (truncated, empty, or with a header that does not describe its
    data). An `OfficialCheckpointError` (a `ValueError`), which this condition raised before it had a class."""


# safetensors dtype code -> bytes per element, for the header check's size rule; codes not listed (sub-byte float
# formats, future ones) are left to safetensors itself.
_SAFETENSORS_ITEM_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
# safetensors' own bound on the header (its `MAX_HEADER_SIZE`): a larger length is a corrupt file, not a header to read.
_MAX_SAFETENSORS_HEADER_BYTES = 100_000_000


def _corrupt_file_error(path, fault: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"{path} is not a valid safetensors file: {fault}. The file is truncated or corrupt: download it again, or "
        "re-save it from the model that wrote it (save_pretrained)."
    )


def _valid_header_entry(entry) -> bool:
    """A tensor entry of a safetensors header: a dtype code, a shape of sizes and `[begin, end]` data offsets."""
    if not isinstance(entry, dict):
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    return (isinstance(entry.get("dtype"), str) and _are_sizes(shape)
            and _are_sizes(offsets) and len(offsets) == 2 and offsets[0] <= offsets[1])


def _are_sizes(values) -> bool:
    """A JSON list of non-negative integers (a JSON `true` reads as a bool, which is not a size)."""
    return isinstance(values, list) and all(type(n) is int and n >= 0 for n in values)


# Why code: transformers hands a truncated or lying file to safetensors, whose bare `SafetensorError` names no file.
def check_safetensors_file(path) -> None:
    """Refuses a file that is not a complete safetensors file, naming its first fault, before any reader opens it.

    Reads the header length and the JSON header only: the length must fit the file, every entry needs a dtype, a
    shape and `data_offsets`, and the tensors must tile the data exactly (no gap, no overlap, each its dtype and
    shape's size), as safetensors requires.
    """
    size = os.path.getsize(path)
    if size < 8:
        raise _corrupt_file_error(path, f"it is {size} bytes long, shorter than the 8-byte header length")
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if length > size - 8:
            raise _corrupt_file_error(path, f"its header length ({length} bytes) runs past the end of the file "
                                            f"({size} bytes)")
        if length > _MAX_SAFETENSORS_HEADER_BYTES:
            raise _corrupt_file_error(path, f"its header length ({length} bytes) exceeds safetensors' limit "
                                            f"({_MAX_SAFETENSORS_HEADER_BYTES} bytes)")
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise _corrupt_file_error(path, f"its header is not JSON ({type(error).__name__})") from None
    if not isinstance(header, dict):
        raise _corrupt_file_error(path, f"its header is a JSON {type(header).__name__}, not an object")
    data_size, spans = size - 8 - length, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not _valid_header_entry(entry):
            raise _corrupt_file_error(path, f"tensor {name!r} has no valid dtype, shape and data_offsets")
        shape, (begin, end) = entry["shape"], entry["data_offsets"]
        if end > data_size:
            raise _corrupt_file_error(path, f"tensor {name!r} ends at byte {end} of the data, past the end of the "
                                            f"data ({data_size} bytes)")
        item_size = _SAFETENSORS_ITEM_SIZES.get(entry["dtype"])
        if item_size is not None and end - begin != math.prod(shape) * item_size:
            raise _corrupt_file_error(path, f"tensor {name!r} spans {end - begin} bytes, but its dtype and shape "
                                            f"need {math.prod(shape) * item_size}")
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise _corrupt_file_error(path, f"tensor {name!r} starts at byte {begin} of the data, not at {position} "
                                            "(a gap or an overlap)")
        position = end
    if position != data_size:
        raise _corrupt_file_error(path, f"its tensors cover {position} of its {data_size} data bytes")


# Why code: transformers copies integer or quantized tensors into float parameters without a word.
def check_tensor_dtypes(dtypes: dict[str, str], source: str) -> list[str]:
    """Refuses non-floating tensors (naming them); returns the floating ones that are not float32."""
    refused = sorted(f"{key} ({dtype})" for key, dtype in dtypes.items() if dtype not in _FLOATING_DTYPES)
    if refused:
        raise OfficialCheckpointError(
            f"{source} holds tensors that are not floating point: {refused[:10]}. Sapiens2 weights are float32, "
            "float16 or bfloat16; quantized or integer checkpoints are not supported (dequantize them first)."
        )
    return sorted(key for key, dtype in dtypes.items() if dtype != "F32")


# Why code: an official file has no config.json; its architecture is read from the shapes in the header, and
# transformers' loader needs the config before it opens any tensor.
def read_safetensors_header(paths) -> tuple[dict[str, torch.Tensor], dict[str, str], dict[str, str], dict]:
    """The tensors of one or more safetensors files as meta tensors (shape and dtype, no data), the file holding each
    tensor, each tensor's safetensors dtype code (`"BF16"`, `"I8"`, ...), and the header metadata of the first file.
    Nothing is read but the headers. Each file passes `check_safetensors_file` first."""
    from safetensors import SafetensorError, safe_open

    tensors, files, codes, metadata = {}, {}, {}, {}
    for index, path in enumerate(str(p) for p in paths):
        check_safetensors_file(path)
        try:
            with safe_open(path, framework="pt") as handle:
                if index == 0:
                    metadata = dict(handle.metadata() or {})
                for key in handle.keys():
                    view = handle.get_slice(key)
                    codes[key] = view.get_dtype()
                    dtype = _SAFETENSORS_TORCH_DTYPES.get(codes[key], torch.uint8)  # others are refused by name
                    tensors[key] = torch.empty(view.get_shape(), dtype=dtype, device="meta")
                    files[key] = path
        except (SafetensorError, OSError, ValueError) as error:
            raise _corrupt_file_error(path, f"safetensors cannot read it ({error})") from error
    return tensors, files, codes, metadata


def read_tensor(path: str, key: str) -> torch.Tensor:
    """One tensor of a safetensors file (the others stay on disk)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as handle:
        return handle.get_tensor(key)


def official_checkpoint_kind(path: str | os.PathLike) -> str:
    """`"pretrain"` or the task of an official file, read from its tensor names only (no tensor is loaded)."""
    return detect_official_kind(read_safetensors_header([path])[2])


def uses_original_names(keys) -> bool:
    """Whether a state dict uses the original (facebookresearch) tensor names rather than transformers' modules."""
    return any(ORIGINAL_NAME_PATTERN.match(key) for key in keys)


# Why code: transformers reads folders holding `model.safetensors` (or its index); official file names are not one.
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
        return tuple(str(folder / shard) for shard in index_shard_names(index))
    return ()


# Why code: transformers' Auto classes and pipeline factory read config.json and meet a corrupt file only later.
def check_local_weights(location) -> None:
    """Every safetensors weights file of a local folder passes `check_safetensors_file` (nothing for a Hub id or a
    folder without weights): what `Sapiens2Config.check_weights_beside` runs when a pipeline reads the config."""
    folder = Path(os.fspath(location))
    if folder.is_dir():
        for path in _local_weights(folder):
            if os.path.isfile(path):
                check_safetensors_file(path)


Sapiens2Config.check_weights_beside = staticmethod(check_local_weights)


# Why code: transformers joins each `weight_map` entry to the folder unchecked (`../x` reads outside it).
def index_shard_names(index: str | os.PathLike) -> list[str]:
    """The shard files named by a `model.safetensors.index.json`, each a plain `.safetensors` file name beside the
    index (no folder, no `..`, no absolute path), or an `OSError`; also for an index that is not a JSON object mapping
    tensor names to file names."""
    try:
        weight_map = json.loads(Path(index).read_text())["weight_map"]
    except (ValueError, KeyError, TypeError) as error:
        raise OSError(f"{index} is not a safetensors index (a JSON object with a 'weight_map'): {error}") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise OSError(f"{index}: 'weight_map' must map tensor names to shard file names; it holds "
                      f"{type(weight_map).__name__}.")
    shards = sorted(set(weight_map.values()), key=str)
    for shard in shards:
        if (not isinstance(shard, str) or shard != os.path.basename(shard) or shard in ("", ".", "..")
                or "\\" in shard or not shard.endswith(".safetensors")):
            raise OSError(
                f"{index} names the shard {shard!r}: a shard must be a .safetensors file beside the index (no folders, "
                "no '..'), so that loading never reads files outside the checkpoint. Fix or regenerate the index "
                "(save_pretrained(..., max_shard_size=...))."
            )
    return shards


def _hf(location: str, weights: tuple[str, ...]) -> ResolvedCheckpoint:
    dtypes = read_safetensors_header(weights)[2]
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
    exported = sorted(file.name for pattern in ("model*.onnx", "model*.pt2") for file in folder.glob(pattern))
    if exported:  # written by `sapiens2_hf.export.export_model`: a graph, not weights to load into a model
        export_format = _export_format(folder, exported)
        raise OSError(
            f"{folder} is an exported model (format {export_format}: {', '.join(exported)}), not a checkpoint with "
            "weights: load it with sapiens2_hf.export.load_exported(folder)."
        )
    if has_config:
        raise OSError(
            f"{folder} has a config.json but no weights: neither {HF_WEIGHTS_NAME} (or a sharded index) nor an "
            "official sapiens2_<size>_<task>.safetensors file. Pickled .bin/.pth weights are never read."
        )
    raise OSError(f"{folder} has neither a config.json nor an official sapiens2_<size>_<task>.safetensors file.")


def _export_format(folder: Path, files: list[str]) -> str:
    """The format an exported folder records in its `export_info.json` (`onnx`, `torch-export`, `aoti`), else the one
    its file names suggest."""
    try:
        recorded = json.loads((folder / "export_info.json").read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and recorded:
        return recorded
    return "onnx" if any(name.endswith(".onnx") for name in files) else "torch-export"


def _offline_error(repo_id: str, error: Exception) -> OSError:
    return OSError(
        f"Cannot resolve the Hub repo {repo_id!r}: the Hub is unreachable or offline mode is on (HF_HUB_OFFLINE=1), "
        f"and the repo's files are not in the local cache ({type(error).__name__}). Download it on a connected "
        "machine (`hf download " + repo_id + "`), or pass a local folder or an official .safetensors file path."
    )


# Why code: transformers' loader needs `model.safetensors` in the repo; an official repo may hold only the original file.
def _resolve_hub(repo_id: str, hub_kwargs: dict) -> ResolvedCheckpoint:
    from huggingface_hub import hf_hub_download  # read at call time: tests replace it on huggingface_hub

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
            return _hf(repo_id, tuple(fetch(shard) for shard in index_shard_names(index)))
    official = _official_hub_file(repo_id, hub_kwargs)
    config_folder = str(Path(config_file).parent) if config_file else None
    return ResolvedCheckpoint("official", fetch(os.path.basename(official)), config_folder=config_folder)


def _official_hub_file(repo_id: str, hub_kwargs: dict) -> str:
    """The one official `sapiens2_<size>_<task>.safetensors` file of a Hub repo without our weights file (its path
    in the repo), or an `OSError` naming what the repo holds."""
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
    return official[0]


# Why code: the layouts above are ours to tell apart before transformers is handed a folder it can read.
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
    name = str(pretrained_model_name_or_path)
    if looks_local(name):
        raise OSError(f"{name}: no such file or folder.")
    if re.match(r"^[\w.-]+/[\w.-]+$", name):
        return _resolve_hub(name, hub_kwargs)
    raise OSError(f"{name} is neither a local file or folder nor a Hub repo id.")


# ------------------------------------------------------------------------------------------------------- loading
# `model_class` below is the class being loaded: its `task`, `_check_task` and `_allowed_unexpected_keys` say what it
# accepts.


def _class_name(task: str | None) -> str:
    return BACKBONE_MODEL_CLASS if task is None else task_spec(task).model_class


# The keywords transformers' `from_pretrained` (5.x) takes for itself; the others it hands to the config.
TRANSFORMERS_LOADING_KWARGS = frozenset({
    *HUB_KWARGS, "state_dict", "ignore_mismatched_sizes", "use_safetensors", "weights_only", "fusion_config",
    "disable_mmap", "tqdm_class", "output_loading_info", "_from_pipeline", "_from_auto", "dtype", "torch_dtype",
    "device_map", "max_memory", "offload_folder", "offload_buffers", "quantization_config", "_commit_hash", "variant",
    "adapter_kwargs", "adapter_name", "generation_config", "gguf_file", "distributed_config", "device_mesh", "tp_plan",
    "tp_size", "trust_remote_code", "allow_all_kernels", "use_kernels", "kernel_config", "key_mapping",
    "attn_implementation", "experts_implementation", "low_cpu_mem_usage", "code_revision",
})


# Why code: transformers applies config overrides only to a config it reads itself; ours is read first (layout,
# task, shapes) and handed over as an object, which transformers passes through untouched.
def apply_config_overrides(config: Sapiens2Config, kwargs: dict) -> None:
    """transformers' rule for `from_pretrained(..., **kwargs)`: every keyword that is not one of the loader's own
    and names a config attribute sets it (and is consumed); the others are left for the model."""
    for key in [key for key in kwargs if key not in TRANSFORMERS_LOADING_KWARGS and hasattr(config, key)]:
        setattr(config, key, kwargs.pop(key))


# Why code: transformers only logs missing, unexpected and mis-shaped tensors; `strict=True` (our default) raises.
def raise_on_loading_problems(model_class, loading_info: dict, source: str) -> None:
    """Raises a `ValueError` naming the missing, unexpected and mis-shaped tensors of a load, if any."""
    allowed = model_class._allowed_unexpected_keys()
    missing = sorted(loading_info.get("missing_keys") or [])
    unexpected = sorted(k for k in loading_info.get("unexpected_keys") or [] if not k.startswith(allowed))
    mismatched = sorted(str(k) for k in loading_info.get("mismatched_keys") or [])
    problems = []
    if missing:
        problems.append(f"missing tensors (would stay randomly initialised): {missing[:20]}")
    if unexpected:
        problems.append(f"unexpected tensors (would be ignored): {unexpected[:20]}")
    if mismatched:
        problems.append(f"tensors with other shapes: {mismatched[:20]}")
    if problems:
        raise ValueError(
            f"{source} does not match {model_class.__name__}: " + "; ".join(problems) + ". Check that the checkpoint "
            "is of the same task and architecture as the class (see config.json), or pass the right config "
            "(`strict=False` loads it anyway, as transformers does, leaving those tensors as they are)."
        )


# Why code: transformers never looks at the values it loads.
def check_finite_tensors(model: torch.nn.Module, source: str, strict: bool = True) -> None:
    """Refuses a loaded model whose parameters or buffers hold NaN or infinite values, naming them (`strict=False`:
    a warning instead, transformers' behaviour, e.g. to inspect or repair such a checkpoint).

    The sum of each floating tensor on its own device (NaN and infinities propagate through it, and float32/bfloat16
    weights cannot overflow; about twice as fast as `isfinite(tensor).all()`, which float16 takes), one host sync per
    device; meta (offloaded) and integer tensors are skipped.
    """
    names, flags = [], {}
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.device.type == "meta" or not tensor.is_floating_point():
            continue
        names.append((tensor.device, name))
        tensor = tensor.detach()
        finite = torch.isfinite(tensor).all() if tensor.dtype == torch.float16 else torch.isfinite(tensor.sum())
        flags.setdefault(tensor.device, []).append(finite)
    finite = {device: iter(torch.stack(values).tolist()) for device, values in flags.items()}
    bad = [name for device, name in names if not next(finite[device])]
    if not bad:
        return
    message = (
        f"{source} holds NaN or infinite values in {len(bad)} tensor(s): {bad[:10]}"
        f"{' ...' if len(bad) > 10 else ''}. The model would give non-finite or meaningless outputs; the file is "
        "corrupt or was saved from a diverged run: use another checkpoint (`strict=False` loads it anyway)."
    )
    if strict:
        raise ValueError(message)
    logger.warning(message)


# Why code: the models never load the periods buffer (recomputed from the config), so transformers would drop it
# unread; it is the one evidence of the RoPE base and head dim an official file carries.
def check_official_rope_periods(stored: torch.Tensor, config: Sapiens2Config, source: str) -> None:
    """Refuses official RoPE periods (`rope_embed.periods`) that are not the official formula for `config`: the
    formula `base ** (4 j / head_dim)` computed as a known writer computes it, in bfloat16 (the official RoPE dtype),
    float16, float32 or float64, then stored in its own dtype (a state dict cast with `.float()` keeps official
    bfloat16 values). Anything else is another architecture (RoPE base or head dim), whose outputs would be silently
    wrong. Runs on every path that reads the original format, whatever the model's own `rope_dtype`.
    """
    head_dim = config.hidden_size // config.num_attention_heads
    stored = stored.detach().cpu()
    candidates = [compute_rope_periods(head_dim, config.rope_theta, dtype).to(stored.dtype)
                  for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64)]
    if not any(stored.shape == expected.shape and torch.equal(stored, expected) for expected in candidates):
        raise OfficialCheckpointError(
            f"The RoPE periods stored in {source} differ from the official formula (base {config.rope_theta}, head "
            f"dim {head_dim}: {candidates[0].tolist()[:8]}, got {stored.tolist()[:8]}): it is not a Sapiens2 "
            "checkpoint of this architecture (another RoPE base or head dim), or the tensor was modified."
        )


# Why code: transformers has no notion of a config read from tensor shapes (see `read_safetensors_header`).
def config_for_original_tensors(model_class, tensors: dict, source: str, config: Sapiens2Config | None = None,
                                filename: str | None = None, metadata: dict | None = None,
                                image_size=None, read_periods=None) -> Sapiens2Config:
    """The config of a checkpoint in the original layout, for `model_class`.

    `tensors` may be meta tensors: only names and shapes are read (`read_periods(key)` fetches the one tensor whose
    values are checked, the stored RoPE periods). Without `config` the architecture is read from the shapes (and
    cross-checked with an official `filename`); with one (a folder's config.json) the tensors must match it, which
    strict loading checks.
    """
    kind, config_kwargs = infer_config_kwargs(tensors, filename=filename, metadata=metadata, image_size=image_size)
    task = None if kind == PRETRAIN_TASK else kind
    if model_class.task is not None and task != model_class.task:
        if task is None:
            raise ValueError(
                f"{source} is a pretrained backbone (no decode head), not a `{model_class.task}` checkpoint: start a "
                f"new {model_class.task} model from it with {model_class.__name__}.from_backbone({source!r}, ...), "
                "or load it with Sapiens2Model."
            )
        raise ValueError(
            f"{source} is a `{task}` checkpoint (decode_head.conv_{task}), not a `{model_class.task}` one: load it "
            f"with {_class_name(task)}."
        )
    if config is None:
        config = Sapiens2Config(**config_kwargs)
    for key in (_ROPE_PERIODS_SUFFIX, "backbone." + _ROPE_PERIODS_SUFFIX):
        if key in tensors:
            stored = tensors[key] if read_periods is None else read_periods(key)
            check_official_rope_periods(stored, config, source)
    if model_class.task is None and config.task is not None:
        # The backbone classes take the backbone of a task checkpoint; the head layout and labels are not part of it.
        config.task, config.head_config, config.id2label, config.flip_pairs = None, None, None, None
    return config


# Why code: transformers' `from_pretrained` takes a folder or a repo id, never a single weights file.
def _staged_official_file(path: str) -> str:
    """A folder in which the official file is `model.safetensors` (a symbolic link), as transformers' loader reads
    folders. It outlives the call on purpose: disk offload may point at the weights file after loading."""
    import hashlib
    import tempfile

    path = os.path.realpath(path)
    key = hashlib.sha256(path.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "sapiens2_hf_official" / key
    link = folder / HF_WEIGHTS_NAME
    if not (link.is_symlink() and os.readlink(link) == path):
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".{HF_WEIGHTS_NAME}.{os.getpid()}"
        staging.unlink(missing_ok=True)
        staging.symlink_to(path)
        os.replace(staging, link)  # atomic: a concurrent load sees the old link or the new one
    return str(folder)


# Why code: our default dtype is float32 whatever the storage (transformers' is "auto"), so a cast is announced.
def _float32_note(dtypes: dict[str, str], source: str) -> None:
    """Our dtype default (float32 whatever the storage) says so when it casts."""
    cast = [key for key, dtype in dtypes.items() if dtype != "F32" and not key.endswith(_ROPE_PERIODS_SUFFIX)]
    if cast:
        kinds = sorted({dtypes[key] for key in cast})
        logger.warning(
            f"{source}: cast {len(cast)} tensors stored as {', '.join(kinds)} to float32 (e.g. {cast[0]}); pass "
            "`dtype=` to run the model in another precision (`dtype='auto'`: the stored one)."
        )


# A weights bar over a load or save that takes a fraction of a second is noise (tiny models, tests, the demo, the
# README's examples); below this size transformers' bars are paused for the call. Real checkpoints keep them.
QUIET_PROGRESS_BYTES = 64 * 2**20


# Why code: transformers' progress bars have one global switch, no size threshold.
@contextlib.contextmanager
def quiet_progress_below(size_bytes: int | None):
    """Pauses transformers' progress bars while a checkpoint of `size_bytes` (None: unknown, bars kept) is loaded or
    saved, when it is smaller than `QUIET_PROGRESS_BYTES`; a caller that turned them off keeps them off."""
    from transformers.utils import logging as transformers_logging

    small = size_bytes is not None and size_bytes < QUIET_PROGRESS_BYTES
    pause = small and transformers_logging.is_progress_bar_enabled()
    if pause:
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if pause:
            transformers_logging.enable_progress_bar()


def _local_weights_bytes(location) -> int | None:
    """The size of the weights a local file or folder holds (None for a Hub id, not known before the download, and for
    no location: `state_dict=` loads)."""
    if not isinstance(location, (str, os.PathLike)):
        return None
    path = Path(os.fspath(location))
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(file.stat().st_size for file in path.glob("*.safetensors"))
    return None


def load_pretrained(model_class, pretrained_model_name_or_path, model_args: tuple, kwargs: dict,
                    transformers_from_pretrained, class_for_task):
    """`from_pretrained` of the model classes (see `Sapiens2PreTrainedModel.from_pretrained` for the arguments).

    Args:
        transformers_from_pretrained: transformers' own `from_pretrained` bound to `model_class`; every layout is
            handed to it (an official file as a folder holding it, the original names renamed by the declared
            conversions), with every argument it takes.
        class_for_task: the model classes' `model_class_for_task` (`None` -> the backbone class); passed in, as the
            model module imports this one.
    """
    if isinstance(pretrained_model_name_or_path, (str, os.PathLike)):  # None with `state_dict=`
        name = os.fspath(pretrained_model_name_or_path)
        if looks_local(name) and not os.path.exists(name):  # before the adapter lookup asks the Hub about it
            raise OSError(f"{name}: no such file or folder.")
    adapted = adapter_loader and adapter_loader(model_class, pretrained_model_name_or_path, kwargs, class_for_task)
    if adapted is not None:
        # its base was checked when loaded; the adapter's own weights are merged in (or wrap it) here
        check_finite_tensors(adapted, str(pretrained_model_name_or_path), kwargs.get("strict", True))
        return adapted
    strict = kwargs.pop("strict", True)
    want_loading_info = kwargs.pop("output_loading_info", False)
    config = as_sapiens2_config(kwargs.pop("config", None))
    # `None` with `state_dict={}`: no checkpoint at all, every weight initialised by `_init_weights` (what
    # transformers' `test_can_init_all_missing_weights` does); nothing was given, so nothing can be missing.
    state_dict = kwargs.get("state_dict")
    initialise_only = pretrained_model_name_or_path is None and isinstance(state_dict, dict) and not state_dict
    if pretrained_model_name_or_path is None:
        source = kwargs.get("official_filename") or "the state dict"
        config, dtypes, original_names = _config_for_state_dict(model_class, config, kwargs)
        location = None
    else:
        source = str(pretrained_model_name_or_path)
        config, location, dtypes, original_names = _config_for_checkpoint(
            model_class, pretrained_model_name_or_path, config, kwargs)
    kwargs.pop("official_filename", None)
    _settle_config(model_class, config, kwargs, original_names, source)
    if kwargs.get("dtype", kwargs.get("torch_dtype")) is None:
        kwargs["dtype"] = torch.float32  # ours: float32 whatever the storage (transformers' default is "auto")
        _float32_note(dtypes, source)
    # Mismatched shapes are collected and raised below with their names instead of transformers' bare error.
    kwargs.setdefault("ignore_mismatched_sizes", strict)
    with quiet_progress_below(_local_weights_bytes(location)):
        model, loading_info = transformers_from_pretrained(
            location, *model_args, config=config, output_loading_info=True, **kwargs
        )
    if strict and not initialise_only:
        raise_on_loading_problems(model_class, loading_info, source)
    check_finite_tensors(model, source, strict)
    return (model, loading_info) if want_loading_info else model


def _settle_config(model_class, config: Sapiens2Config, kwargs: dict, original_names: bool, source: str) -> None:
    """The config with the call's overrides, checked for the class; the head's official names declared for
    transformers (`key_mapping`) when the tensors carry them."""
    head_mapping = original_key_mapping(model_class) if original_names else None
    if head_mapping is not None:
        kwargs["key_mapping"] = {**(kwargs.get("key_mapping") or {}), **head_mapping}
    apply_config_overrides(config, kwargs)
    # the overrides are checked as the config's own fields are: sizes and values first, in one line each
    config.validate_sizes_and_values()
    config.validate()
    model_class._check_task(config, source)


def _config_for_state_dict(model_class, config, kwargs: dict):
    """`(config, tensor dtypes, original names?)` for `from_pretrained(None, state_dict=...)`."""
    filename, state_dict = kwargs.get("official_filename"), kwargs.get("state_dict")
    source = filename or "the state dict"
    if state_dict is None:
        raise ValueError("Pass a checkpoint (file, folder or Hub id), or `state_dict=` with `config=`.")
    dtypes = {key: _TORCH_FLOATING_DTYPES.get(t.dtype, str(t.dtype).replace("torch.", ""))
              for key, t in state_dict.items()}
    check_tensor_dtypes(dtypes, source)
    original_names = uses_original_names(state_dict)
    if original_names:
        config = config_for_original_tensors(model_class, state_dict, source, config, filename=filename,
                                             image_size=kwargs.get("image_size"))
    elif config is None:
        raise ValueError(f"Loading {source} in our module layout needs `config=`.")
    return config, dtypes, original_names


def _config_for_checkpoint(model_class, name, config, kwargs: dict):
    """`(config, location to hand to transformers, tensor dtypes, original names?)` for a file, folder or Hub id:
    an official file is staged as a folder and its architecture read from the tensor shapes."""
    source, image_size = str(name), kwargs.get("image_size")
    hub_kwargs = {key: kwargs[key] for key in HUB_KWARGS if kwargs.get(key) is not None}
    resolved = resolve_checkpoint(name, hub_kwargs)
    if resolved.kind == "official":
        if config is None and resolved.config_folder is not None:
            config = Sapiens2Config.from_pretrained(resolved.config_folder)
        tensors, files, dtypes, metadata = read_safetensors_header([resolved.location])
        check_tensor_dtypes(dtypes, source)
        config = config_for_original_tensors(
            model_class, tensors, source, config, filename=os.path.basename(resolved.location), metadata=metadata,
            image_size=image_size, read_periods=lambda key: read_tensor(files[key], key),
        )
        for key in ("subfolder", "revision"):  # they named the repo's file; the staged folder has neither
            kwargs.pop(key, None)
        return config, _staged_official_file(resolved.location), dtypes, True
    location, dtypes = resolved.location, resolved.tensor_dtypes
    check_tensor_dtypes(dtypes, source)
    if config is None:
        config = Sapiens2Config.from_pretrained(location, **hub_kwargs)
    if resolved.original_names:
        tensors, files, _, metadata = read_safetensors_header(resolved.weights_files)
        config = config_for_original_tensors(
            model_class, tensors, source, config, metadata=metadata, image_size=image_size,
            read_periods=lambda key: read_tensor(files[key], key),
        )
    return config, location, dtypes, resolved.original_names
