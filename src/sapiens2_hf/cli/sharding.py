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
import sys
from pathlib import Path
from typing import Any, Sequence

from .options import PredictOptions
from .outputs import _save_json

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


def _taken(entry: str, inputs: Sequence[str]) -> bool:
    """Whether the input `entry` of an earlier summary is one of this run's `inputs`: given as such, or a file of an
    input folder (folders are read without recursion, so its parent is that folder)."""
    given = [Path(value) for value in inputs]
    return entry in inputs or Path(entry) in given or Path(entry).parent in given


def with_previous_summary(path: Path, record: dict[str, Any], inputs: Sequence[str]) -> dict[str, Any]:
    """`record`, this run's summary, merged with the summary an earlier run into the same --out left at `path`, so
    that summary.json keeps the record of the folder instead of only the last run's.

    The earlier run's per-input entries (`skipped`, `not_processed`, `output_names`) of inputs this run did not take
    (`_taken` by `inputs`) are kept before this run's; the counts, task, model, seconds and `stopped` are this run's;
    `runs` counts the runs recorded. An unreadable earlier summary is replaced, with a warning on stderr.
    """
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return record
    except (OSError, ValueError) as error:
        previous = error
    if not isinstance(previous, dict):
        print(f"sapiens2-hf: the earlier {path} is unreadable ({previous}); replacing it with this run's summary.",
              file=sys.stderr)
        return record
    merged = dict(record)
    for key in ("skipped", "not_processed"):
        kept = [entry for entry in previous.get(key) or []
                if not _taken(entry.get("input", "") if isinstance(entry, dict) else str(entry), inputs)]
        if kept or key in record:
            merged[key] = kept + list(record.get(key, []))
    names = {source: name for source, name in (previous.get("output_names") or {}).items()
             if not _taken(source, inputs)}
    names.update(record.get("output_names", {}))
    if names:
        merged["output_names"] = names
    runs = previous.get("runs", 1)
    merged["runs"] = (runs if isinstance(runs, int) and runs > 0 else 1) + 1
    return merged


def write_summary(record: dict[str, Any], path: Path, inputs: Sequence[str]) -> None:
    """Writes a run's summary to `path` atomically: `summary.json` merged with the one an earlier run left
    (`with_previous_summary`), a process's part file as it is."""
    if path.name == "summary.json":
        record = with_previous_summary(path, record, inputs)
    _save_json(record, path, indent=2)


__all__ = ["Shard", "clear_marker", "fingerprint", "is_done", "mark_done", "marker_path", "merge_summaries",
           "part_path", "with_previous_summary", "world_size", "write_summary"]
