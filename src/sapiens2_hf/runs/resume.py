"""Per-input resume markers with fingerprints (layer 1): the one resume scheme.

Outputs are written atomically (a file is absent or complete); when all of a unit's outputs are written, a
marker `<out>/.sapiens2-hf/done/[<run>/]<kind>/<name>.json` records them (paths relative to `<out>`) and a
fingerprint of what they depend on (`file_fingerprint` of the input, plus the caller's facts: task, model,
options). A later run skips a unit whose marker's fingerprint equals the expected one and whose files all exist;
anything else is computed again (`clear` first). Markers are per unit, so an interrupted run resumes where it stopped, whatever process held it.
A composed command (pose3d) keeps its markers under its name, apart from those of the task it composes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from ..utils.atomic_io import atomic_write_json

STATE_FOLDER = ".sapiens2-hf"


def file_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """An input file's identity: its resolved path, size and modification time (raises `OSError` if unreadable)."""
    stat = Path(path).stat()
    return {"input": str(Path(path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))  # tuples -> lists, as they read back


class ResumeMarkers:
    """The markers of one kind of unit (`"images"`, `"videos"`, `"chunks"`) in the folder `out` (of the run `run`,
    when given)."""

    def __init__(self, out: str | os.PathLike, kind: str, run: str | None = None):
        self.folder = Path(out) / STATE_FOLDER / "done" / (run or "") / kind
        self.out = Path(out)

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def is_done(self, name: str, fingerprint: dict[str, Any]) -> bool:
        """The unit's marker exists, its fingerprint equals `fingerprint` and every file it lists exists."""
        try:
            marker = json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(marker, dict) or marker.get("fingerprint") != _jsonable(fingerprint):
            return False
        return all((self.out / relative).is_file() for relative in marker.get("files", []))

    def mark_done(self, name: str, fingerprint: dict[str, Any], files: Sequence[str | os.PathLike]) -> None:
        """Record that the unit's outputs `files` are complete (written after them, atomically)."""
        relative = sorted(str(Path(f).relative_to(self.out)) for f in files)
        # `process`: which process of a launch wrote it (RANK, set by the launcher), for the record
        record = {"fingerprint": _jsonable(fingerprint), "files": relative, "process": int(os.environ.get("RANK", "0"))}
        atomic_write_json(self.path(name), record, indent=1, durable=False)

    def clear(self, name: str) -> None:
        """Forget that a unit was done (before it is written again)."""
        self.path(name).unlink(missing_ok=True)


__all__ = ["ResumeMarkers", "STATE_FOLDER", "file_fingerprint"]
