"""Writing a benchmark's JSON record (shared by the scripts of this folder, which run as `python benchmarks/<x>.py`
and so import this module by its file name)."""

from __future__ import annotations

import json
from pathlib import Path

from sapiens2_hf.utils.atomic_io import atomic_write_text


def write_record(path: str | Path | None, record: dict) -> None:
    """Write `record` as indented JSON to `path`, atomically, creating its folder; nothing when `path` is None."""
    if path is None:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
