"""The `export_info.json` of an exported folder (layer 2, below the exporter and the runtimes, which both read it)."""

from __future__ import annotations

import json
from pathlib import Path

#: Written beside the artefact by `export_model`: format, task, files per precision, outputs, versions, tolerances.
INFO_FILE = "export_info.json"


def read_export_info(folder) -> dict:
    """The `export_info.json` of an exported folder, or a clear error when `folder` is not one."""
    path = Path(folder) / INFO_FILE
    if not path.is_file():
        raise OSError(f"{folder} is not an exported Sapiens2 folder (no {INFO_FILE}); make one with "
                      "`sapiens2-hf export MODEL --out DIR` or sapiens2_hf.export.export_model.")
    return json.loads(path.read_text())
