"""What every training entry point does before it builds anything: hold `--output_dir` (`hold_output_dir`: one run at
a time), seed the RNGs, and apply the run-folder rule (`prepare_output_dir`) that also reads `--resume_from_checkpoint`.

The run-folder rule (README, "One run per `--output_dir`"), shared by fine-tuning and pretraining, so that a folder
never mixes two runs: a folder holding another run's artefacts is refused, naming `--overwrite_output_dir` (clears
`RUN_ARTEFACTS` and the subfolders the run recorded, keeps other files) and `--resume_from_checkpoint` (continues the
newest complete checkpoint; refused when the `RUN_MARKER` records other model arguments or the other weights kind).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from transformers import TrainingArguments, enable_full_determinism, set_seed
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..data.validation import NoUsableSamplesError, write_skipped_samples
from ..hub.sharing import ADAPTER_FILE_NAMES, WEIGHT_FILE_PATTERNS, is_weight_file
from ..utils.atomic_io import atomic_write_json
from ..utils.run_lock import run_folder_lock


logger = logging.getLogger(__name__)


@dataclass
class Sapiens2TrainingArguments(TrainingArguments):
    """transformers' `TrainingArguments` plus `--overwrite_output_dir` (which transformers 5 dropped) for the
    run-folder rule of `prepare_output_dir`."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start afresh in an --output_dir that holds another run: its checkpoints, weights and "
                          "trainer state are deleted first (other files stay). Without it such a folder is refused "
                          "unless --resume_from_checkpoint continues its run."},
    )

    def __post_init__(self):
        super().__post_init__()
        # Pinned host memory only speeds up copies to an accelerator. transformers pins by default, and torch's
        # DataLoader then warns on every CPU run that it does not pin; pinning stays on only where it can work.
        if self.dataloader_pin_memory and (self.use_cpu or not _accelerator_available()):
            self.dataloader_pin_memory = False


def _accelerator_available() -> bool:
    """Whether torch sees an accelerator (the test torch's DataLoader makes before pinning; CUDA before torch 2.6)."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def seed_run(training_args: TrainingArguments) -> None:
    """Seed python, numpy and torch from `--seed` (with `--full_determinism`, also force deterministic kernels).

    Call it first: the Trainer seeds only in its constructor, after the model (random heads, a tiny preset, the
    pretraining heads) and the data were built from the global RNG, so two runs of one seed would differ.
    """
    if training_args.full_determinism:
        enable_full_determinism(training_args.seed)
    else:
        set_seed(training_args.seed)


# --------------------------------------------------------------------------------------------------- checkpoints
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_TRAINER_STATE = "trainer_state.json"
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0", "")


def _checkpoints(folder: Path) -> list[Path]:
    """The `checkpoint-<step>` folders of `folder`, newest (highest step) first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), path) for path in folder.iterdir()
             if path.is_dir() and (m := _CHECKPOINT.match(path.name))]
    return [path for _, path in sorted(found, reverse=True)]


def checkpoint_problem(folder: str | os.PathLike) -> str | None:
    """Why `folder` is not a complete checkpoint, or `None` when it is.

    Complete: `trainer_state.json` (which transformers writes last, after the weights, optimizer and RNG states)
    parses, and the weights are there and whole (model or adapter weights, every safetensors file and every shard
    an index names readable to its end; or an FSDP / DeepSpeed state folder).
    """
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    state = folder / _TRAINER_STATE
    if not state.is_file():
        return f"no {_TRAINER_STATE}"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return f"{_TRAINER_STATE} is truncated or unreadable"
    names = sorted(path.name for path in folder.iterdir())
    sharded_state = any(name.startswith(("pytorch_model_fsdp", "global_step")) for name in names)
    weights = [name for name in names if is_weight_file(name) and name != "adapter_config.json"]
    if not weights and not sharded_state:
        return "no model weights"
    for name in weights:
        if name.endswith(".index.json"):
            try:
                shards = set(json.loads((folder / name).read_text(encoding="utf-8"))["weight_map"].values())
            except (ValueError, OSError, KeyError, TypeError, AttributeError):
                return f"{name} is truncated or unreadable"
            missing = sorted(shard for shard in shards if not (folder / shard).is_file())
            if missing:
                return f"{name} names missing shards {missing}"
        elif name.endswith(".safetensors"):
            try:
                with safe_open(str(folder / name), framework="pt"):
                    pass
            except (SafetensorError, OSError, ValueError):
                return f"{name} is truncated or corrupt"
    return None


def latest_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete `checkpoint-<step>` folder of `output_dir` (`checkpoint_problem`), or `None`.

    Found as transformers' `get_last_checkpoint` does, with a completeness check: newer incomplete ones (a save cut by
    a kill or a full disk) are skipped with a warning naming them; the resumed run writes them again at their step.
    """
    newest = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    for path in [Path(newest)] + _checkpoints(Path(output_dir))[1:] if newest else []:
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path)
        logger.warning("Skipping %s: incomplete (%s; its save was interrupted).", path, problem)
    return None


def resolve_resume_checkpoint(value: str | bool | None, output_dir: str) -> str | None:
    """`--resume_from_checkpoint` as a checkpoint folder, or `None` to start fresh.

    `True` (the command line gives the string `"True"`) means the newest complete `checkpoint-<step>` folder in
    `output_dir` (`latest_complete_checkpoint`); `False` or nothing starts fresh; anything else is the folder itself,
    which must exist and be complete.
    """
    if value is None or value is False:
        return None
    text = str(value).strip()
    if text.lower() in _FALSE:
        return None
    if value is True or text.lower() in _TRUE:
        last = latest_complete_checkpoint(output_dir)
        if last is None:
            incomplete = [path.name for path in _checkpoints(Path(output_dir))]
            detail = f"only incomplete ones ({', '.join(incomplete)})" if incomplete else "none"
            raise ValueError(
                f"--resume_from_checkpoint True resumes from the newest complete checkpoint-<step> folder in "
                f"--output_dir, but {output_dir} has {detail}; pass a checkpoint folder, or drop the flag to start "
                "fresh."
            )
        return last
    if not os.path.isdir(text):
        raise ValueError(f"--resume_from_checkpoint {text} is not a folder.")
    problem = checkpoint_problem(text)
    if problem is not None:
        raise ValueError(f"--resume_from_checkpoint {text} is not a complete checkpoint ({problem}; a save interrupted "
                         "by a kill or a full disk leaves such a folder); pass an earlier checkpoint, or True for the "
                         "newest complete one in --output_dir.")
    return text


# --------------------------------------------------------------------------------------------------- run folders
# The run marker: which run writes the folder (its model arguments, the kind of its weights, and the subfolders it
# writes beside transformers' files). `_*` files are never pushed (transformers' and our final push skip them).
RUN_MARKER = "_sapiens2_run.json"
# transformers' run files beside the weights.
_RUN_FILES = (_TRAINER_STATE, "training_args.bin", "all_results.json", "train_results.json", "eval_results.json",
              "predict_results.json", RUN_MARKER)
# What `--overwrite_output_dir` clears: these names directly in `--output_dir`, and the `checkpoint-<step>` folders.
RUN_ARTEFACTS = (*WEIGHT_FILE_PATTERNS, *ADAPTER_FILE_NAMES, *_RUN_FILES)


def _final_weights(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.is_file() and is_weight_file(path.name))


def _previous_run(folder: Path) -> list[str]:
    """What in `folder` belongs to a run that wrote checkpoints or a final model (empty: no such run)."""
    if not folder.is_dir():
        return []
    found = [path.name for path in reversed(_checkpoints(folder))] + _final_weights(folder)
    if (folder / _TRAINER_STATE).is_file():
        found.append(_TRAINER_STATE)
    return found


def _read_marker(folder: Path) -> dict | None:
    try:
        marker = json.loads((folder / RUN_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _weights_kind(folder: Path) -> str | None:
    """`"adapter"`, `"model"` or `None`: the kind of `folder`'s final weights, else its newest checkpoint's."""
    for candidate in (folder, *_checkpoints(folder)):
        names = set(_final_weights(candidate)) if candidate.is_dir() else set()
        if names & set(ADAPTER_FILE_NAMES):
            return "adapter"
        if names:
            return "model"
    return None


def _describe(kind: str) -> str:
    return "a LoRA adapter" if kind == "adapter" else "a full model"


def _clear_previous_run(folder: Path, marker: dict | None) -> None:
    """Deletes the previous run's artefacts from `folder` (`RUN_ARTEFACTS`, its checkpoints and the subfolders its
    marker records); every other file stays."""
    removed = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and any(fnmatchcase(path.name, pattern) for pattern in RUN_ARTEFACTS):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed.append(path.name)
        elif path.is_dir() and _CHECKPOINT.match(path.name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    for name in (marker or {}).get("outputs", []):
        path = folder / str(name)
        if Path(str(name)).name == str(name) and path.is_dir():  # a plain subfolder name, never a path out of it
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"{name}/")
    if removed:
        logger.warning("--overwrite_output_dir: removed the previous run's %s from %s.", ", ".join(removed), folder)


def _inside(path: str, folder: Path) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(Path(os.path.abspath(folder)))


def prepare_output_dir(training_args: TrainingArguments, identity: Mapping[str, object], kind: str,
                       resume_from_checkpoint: str | bool | None = None, outputs: Iterable[str] = ()) -> str | None:
    """The run-folder rule (see the module docstring); returns the checkpoint to resume from, or `None`.

    Call it on every process, before anything is written to `output_dir`: it only reads, except on the process that
    saves (`training_args.should_save`), which clears the previous run with `--overwrite_output_dir` and writes the
    run marker.

    `identity` holds the arguments that define the run's weights (entry point, task, model source, LoRA settings...):
    resuming a folder whose marker records others is refused, naming the difference. `kind` is `"model"` or
    `"adapter"` (a LoRA run). `outputs` are the subfolders the run writes beside transformers' files (`backbone`,
    `base_model`, `predictions`), recorded in the marker so that `--overwrite_output_dir` clears them later.
    """
    folder = Path(training_args.output_dir)
    overwrite = bool(getattr(training_args, "overwrite_output_dir", False))
    identity = json.loads(json.dumps(dict(identity), default=str))  # as the marker stores it
    marker = _read_marker(folder)
    if overwrite:
        resume = resolve_resume_checkpoint(resume_from_checkpoint, str(folder))
        if resume is not None and _inside(resume, folder):
            raise ValueError(f"--overwrite_output_dir deletes the checkpoints of {folder}, including the "
                             f"--resume_from_checkpoint {resume}; pass only one of them.")
        if training_args.should_save and folder.is_dir():
            _clear_previous_run(folder, marker)
        marker = None
    else:
        previous = _previous_run(folder)
        resume = resolve_resume_checkpoint(resume_from_checkpoint, str(folder))
        if previous and resume is None:
            shown = ", ".join(previous[:3]) + (", ..." if len(previous) > 3 else "")
            raise ValueError(
                f"--output_dir {folder} holds another run ({shown}); pass --resume_from_checkpoint True to continue "
                "it, --overwrite_output_dir to replace it (deletes its checkpoints, weights and trainer state; other "
                "files stay), or another --output_dir."
            )
        if previous:
            _check_same_run(folder, marker, identity, kind, resume)
    if training_args.should_save:
        recorded = set((marker or {}).get("outputs", []))
        atomic_write_json(folder / RUN_MARKER, {"kind": kind, "identity": identity,
                                                "outputs": sorted(recorded | set(outputs))}, indent=2)
    return resume


def _check_same_run(folder: Path, marker: dict | None, identity: dict, kind: str, resume: str | None) -> None:
    """Refuses resuming into `folder` when it holds another run than this one."""
    hint = "pass the arguments of that run, --overwrite_output_dir to replace it, or another --output_dir."
    found = (marker or {}).get("kind") or _weights_kind(folder)
    if found is not None and found != kind:
        raise ValueError(f"--output_dir {folder} holds {_describe(found)} run and this run trains "
                         f"{_describe(kind)}; {hint}")
    if marker is None:
        if resume is None or not _inside(resume, folder):
            raise ValueError(f"--output_dir {folder} holds another run's checkpoints or weights and "
                             f"--resume_from_checkpoint {resume} is not one of them; {hint}")
        return
    recorded = marker.get("identity") or {}
    differing = [f"{key}: {recorded.get(key)!r} there, {identity.get(key)!r} here"
                 for key in sorted(set(recorded) | set(identity)) if recorded.get(key) != identity.get(key)]
    if differing:
        raise ValueError(f"--output_dir {folder} holds another run ({'; '.join(differing)}); {hint}")


@contextlib.contextmanager
def hold_output_dir(training_args: TrainingArguments, command: str | None = None) -> Iterator[Path]:
    """Holds `--output_dir` for the run (`sapiens2_hf.utils.run_lock`): a second run started into it meanwhile is
    refused in one line naming this one; an `--output_dir` that is a file is refused at once.

    Only the main process (`process_index` 0) takes the lock: the other processes of a launch write into the folder
    the main one holds, and must not be refused by it.
    """
    folder = Path(training_args.output_dir)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"--output_dir {folder} is a file, not a folder; pass a new or existing folder, where "
                              "the run writes its model, checkpoints and results.")
    with run_folder_lock(folder, command=command, enabled=training_args.process_index == 0):
        yield folder


def with_skipped_list(error: NoUsableSamplesError, training_args) -> NoUsableSamplesError:
    """`error`, after writing its skipped records to `<output_dir>/skipped_samples.json` (main process), with the
    file's path appended: a run that stops because every sample is bad still leaves the list of what to fix."""
    if not error.skipped or not training_args.should_save:
        return error
    path = write_skipped_samples(training_args.output_dir, error.skipped)
    return NoUsableSamplesError(f"{error} The full list is in {path}.", error.skipped)


def check_process_count(environ: Mapping[str, str] | None = None) -> None:
    """Refuses a launch that asked for several processes and started one, with one line naming the fix.

    `accelerate launch --num_processes N` (N > 1) without `--multi_gpu`, on a machine with fewer than two GPUs, runs
    accelerate's simple launcher: one process, which would train alone without a word. It still sets `MASTER_PORT`
    and its `ACCELERATE_*` variables but not `WORLD_SIZE`, which every multi-process launcher sets; only these
    variables (of `environ`, default `os.environ`) show it, so they are read here, at the entry points, and nowhere
    else.
    """
    environ = os.environ if environ is None else environ
    launched_by_accelerate = "ACCELERATE_MIXED_PRECISION" in environ
    several_requested = "MASTER_PORT" in environ
    started = environ.get("WORLD_SIZE") or environ.get("OMPI_COMM_WORLD_SIZE") or environ.get("PMI_SIZE")
    if launched_by_accelerate and several_requested and not started:
        raise ValueError(
            "accelerate launch started 1 process although --num_processes asks for more: without --multi_gpu it "
            "runs a single process on a machine with fewer than two GPUs; pass --multi_gpu (on CPUs the processes "
            "then train with gloo), or --num_processes 1 (a MASTER_PORT set in your shell also triggers this check)."
        )
