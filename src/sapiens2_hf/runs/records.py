"""A run's records (layer 1): `summary.json`, the folder's record, and each run's own record under its name.

`write_summary(record, out, inputs, run=NAME)` writes, atomically and without NaN:
- `<out>/.sapiens2-hf/runs/<NAME>.json`: this run's record as it is, kept when another run (another task) writes
  into the same folder later;
- `<out>/summary.json`: this run's record merged with the one an earlier run left (`with_previous_summary`), so the
  folder's record lists the earlier runs' per-input entries too; `run_records` names every run's own record.
Under a launch each process writes its part (`part_path`); the main process merges them (`merge_summaries`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..utils.atomic_io import atomic_write_json
from .resume import STATE_FOLDER

SUMMARY = "summary.json"
COUNTS = ("processed", "video_frames", "already_done", "files_written")


def part_path(out: Path, index: int) -> Path:
    return Path(out) / STATE_FOLDER / f"summary-process{index}.json"


def run_record_path(out: Path, run: str) -> Path:
    return Path(out) / STATE_FOLDER / "runs" / f"{run}.json"


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
    """`record`, this run's summary, merged with the summary an earlier run into the same folder left at `path`.

    The earlier run's per-input entries (`skipped`, `not_processed`, `output_names`) of inputs this run did not take
    (`_taken` by `inputs`) are kept before this run's; the counts, task, model, seconds and `stopped` are this run's;
    `runs` counts the runs recorded, `run_records` names each run's own record. An unreadable earlier summary is
    replaced, with a warning on stderr.
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
    earlier = previous.get("run_records")
    if isinstance(earlier, dict):
        merged["run_records"] = {**earlier, **record.get("run_records", {})}
    runs = previous.get("runs", 1)
    merged["runs"] = (runs if isinstance(runs, int) and runs > 0 else 1) + 1
    return merged


def write_summary(record: dict[str, Any], path: Path, inputs: Sequence[str], run: str | None = None) -> None:
    """Writes a run's summary to `path` atomically: `summary.json` merged with the one an earlier run left
    (`with_previous_summary`) and, with `run`, the run's own record beside it (see the module docstring); a
    process's part file as it is."""
    path = Path(path)
    if path.name != SUMMARY:
        atomic_write_json(path, record, indent=2, allow_nan=False)
        return
    own = None if run is None else run_record_path(path.parent, run)
    merged = with_previous_summary(path, record if own is None else {
        **record, "run_records": {run: str(own.relative_to(path.parent))}}, inputs)
    atomic_write_json(path, merged, indent=2, allow_nan=False)
    if own is not None:
        with contextlib.suppress(OSError):  # the folder's record is written: a full disk stops the run there
            atomic_write_json(own, record, indent=2, allow_nan=False)


__all__ = ["COUNTS", "SUMMARY", "merge_summaries", "part_path", "run_record_path", "with_previous_summary",
           "write_summary"]


def reason(error: BaseException) -> str:
    """One line saying why an input was skipped: the message of a `ValueError` / `OSError`, else the type too."""
    text = " ".join(str(error).split())
    return text if isinstance(error, (ValueError, OSError)) else f"{type(error).__name__}: {text}"


@dataclass
class RunReport:
    """What a run did, input by input: counts, the skipped inputs with their reason, and the inputs finished."""

    processed: int = 0
    frames: int = 0
    already_done: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    written: int = 0
    finished: set[str] = field(default_factory=set)  # inputs processed or skipped (the others: not processed)
    notes: dict[str, Any] = field(default_factory=dict)  # a command's own entries of its record

    def skip(self, source: str, error: BaseException | str) -> None:
        self.skipped.append({"input": source, "reason": error if isinstance(error, str) else reason(error)})
        self.finished.add(source)


__all__ += ["RunReport", "reason"]
