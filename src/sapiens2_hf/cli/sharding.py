"""Sharded and resumable batch inference for the task commands (`sapiens2-hf pose|seg|...`).

Sharding: under `accelerate launch` (or `torchrun`), which start N processes and set `WORLD_SIZE`, every process
builds the same ordered list of inputs (images in the order given, folders sorted, then videos; a video is one unit,
never split, because tracking and the annotated mp4 need its frames in order), takes its contiguous share with
accelerate's `PartialState().split_between_processes` and runs it on its own device (GPU `local_process_index`, or the
CPU). Each process writes its own part of the summary; after all are done the main process merges them into
`summary.json`. On a machine without GPUs, `accelerate launch --multi_gpu --num_processes 2 ...` starts the processes
(they then use gloo on the CPU); plain `--num_processes 2` there starts only one.

Resuming: each input's outputs are written atomically (a file is absent or complete), and when all of them are written a
marker `<out>/.sapiens2-hf/done/{images,videos}/<name>.json` records the files and a fingerprint of what they depend on
(the input file's path, size and modification time, the model argument, the options that change outputs:
cli/options.py `PredictOptions.fingerprint`, the input's entry in --boxes). A later run skips an input whose marker
matches and whose files all exist, and computes it again when any of them is missing or the options differ; `--overwrite` recomputes
everything. Markers are written per input, so an interrupted run resumes where it stopped, whatever process held the
input.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any, Sequence

from .options import PredictOptions

STATE_FOLDER = ".sapiens2-hf"


def world_size() -> int:
    """Processes of this launch (`WORLD_SIZE`, set by accelerate launch / torchrun; 1 otherwise)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


class Shard:
    """This process's place in a launch: `index` of `count`, `is_main`, and how to split, wait and pick a device.

    Single-process runs never import accelerate (or start a process group)."""

    def __init__(self, device: str = "auto"):
        self._state = None
        self.index, self.count, self.local_index = 0, 1, 0
        if world_size() > 1:
            import torch

            from ..utils.extras import require

            PartialState = require("accelerate", feature="multi-process prediction").PartialState

            cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
            # a long timeout: the processes meet only at the end, after shares that may take hours and differ in
            # length (a video set); a crashed process ends the launch through the launcher, not through this timeout
            self._state = PartialState(cpu=cpu, timeout=datetime.timedelta(days=7))
            self.index, self.count = self._state.process_index, self._state.num_processes
            self.local_index = self._state.local_process_index
        self.is_main = self.index == 0

    def split(self, units: Sequence[Any]) -> list[Any]:
        """This process's contiguous share of `units` (the same order on every process; no gaps, no overlap)."""
        if self._state is None:
            return list(units)
        with self._state.split_between_processes(list(units)) as share:
            return list(share)

    def wait(self) -> None:
        if self._state is not None:
            self._state.wait_for_everyone()

    def device(self, requested: str) -> str:
        """The device of this process: `auto` is CUDA when available (this process's GPU under a launch), else the
        CPU; a bare `cuda` becomes this process's GPU."""
        if requested == "auto":
            import torch

            requested = "cuda" if torch.cuda.is_available() else "cpu"
        if requested == "cuda" and self.count > 1:
            return f"cuda:{self.local_index}"
        return requested


# ----------------------------------------------------------------------------------------------------------------
# done markers
# ----------------------------------------------------------------------------------------------------------------


def marker_path(out: Path, kind: str, name: str) -> Path:
    """Where the marker of input `name` (`kind` "images" or "videos") lives."""
    return out / STATE_FOLDER / "done" / kind / f"{name}.json"


def fingerprint(options: PredictOptions, path: Path, boxes: Any) -> dict[str, Any]:
    """What an input's outputs depend on (see the module docstring)."""
    stat = path.stat()
    return {
        "input": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "task": options.task,
        "model": str(options.runtime.model), "options": options.fingerprint(), "boxes": boxes,
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))  # tuples -> lists, as they read back


def is_done(out: Path, kind: str, name: str, expected: dict[str, Any]) -> bool:
    """The input's marker exists, its fingerprint equals `expected` and every file it lists exists."""
    try:
        marker = json.loads(marker_path(out, kind, name).read_text())
    except (OSError, ValueError):
        return False
    if marker.get("fingerprint") != _jsonable(expected):
        return False
    return all((out / relative).is_file() for relative in marker.get("files", []))


def mark_done(out: Path, kind: str, name: str, expected: dict[str, Any], files: Sequence[Path]) -> None:
    """Record that the input's outputs `files` are complete (written after them, atomically)."""
    from ..utils.atomic_io import atomic_write_json

    relative = sorted(str(Path(f).relative_to(out)) for f in files)
    # `process`: which process of a launch wrote it (RANK, set by the launcher), for the record
    record = {"fingerprint": _jsonable(expected), "files": relative, "process": int(os.environ.get("RANK", "0"))}
    atomic_write_json(marker_path(out, kind, name), record, indent=1, durable=False)


def clear_marker(out: Path, kind: str, name: str) -> None:
    """Forget that an input was done (before it is written again)."""
    try:
        marker_path(out, kind, name).unlink()
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------------------------------------------------------
# summary
# ----------------------------------------------------------------------------------------------------------------


def part_path(out: Path, index: int) -> Path:
    return out / STATE_FOLDER / f"summary-process{index}.json"


COUNTS = ("processed", "video_frames", "already_done", "files_written")


def merge_summaries(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One summary from the processes' parts (in process order): counts added, skipped inputs concatenated,
    seconds the longest part's."""
    merged = dict(parts[0])
    for key in COUNTS:
        merged[key] = sum(int(part.get(key, 0)) for part in parts)
    merged["skipped"] = [entry for part in parts for entry in part.get("skipped", [])]
    merged["seconds"] = max(float(part.get("seconds", 0.0)) for part in parts)
    merged["processes"] = len(parts)
    return merged


__all__ = ["Shard", "clear_marker", "fingerprint", "is_done", "mark_done", "marker_path", "merge_summaries",
           "part_path", "world_size"]
