"""Loading an exported folder (layer 2): `load_exported(folder)` by the folder's own format, `load_backend(folder,
backend)` by a backend name of `RUNTIME_BACKENDS` (the `backend=` of `sapiens2_hf.pipeline`, the `--backend` of the
predict commands). Which runtime class runs which format, and the backend names, are rows of `formats.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

from .formats import EXPORT_FORMAT_TABLE, RUNTIME_BACKENDS
from .info import read_export_info
from .runtime import ExportedSapiens2Model


def load_exported(folder, precision: str = "fp32", num_threads: int | None = None) -> ExportedSapiens2Model:
    """An exported folder's runtime (`OnnxRuntimeSapiens2Model`, `TorchExportSapiens2Model` or `AotiSapiens2Model`),
    by its format."""
    info = read_export_info(folder)
    spec = EXPORT_FORMAT_TABLE.get(info.get("format"))
    if spec is None:
        raise ValueError(f"{folder}: unknown export format {info.get('format')!r}.")
    return spec.load("runtime").from_pretrained(folder, precision=precision, num_threads=num_threads)


def load_backend(folder, backend: str, task: str | None = None,
                 num_threads: int | None = None) -> ExportedSapiens2Model:
    """The runtime of `backend` (a `RUNTIME_BACKENDS` name) for the exported `folder`.

    Args:
        folder: an exported folder of the format `backend` needs.
        task (`str`, *optional*): when given, the folder must hold this task (`None`: any).

    Raises:
        ValueError: unknown backend, not a folder, another format or task (the message says which export to make).
    """
    if backend not in RUNTIME_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose 'torch' or one of {sorted(RUNTIME_BACKENDS)}.")
    format, precision = RUNTIME_BACKENDS[backend]
    if not Path(folder).is_dir():
        raise ValueError(f"backend {backend!r} needs a folder written by `sapiens2-hf export --format {format}`, "
                         f"not {os.fspath(folder)!r}.")
    info = read_export_info(folder)
    if info.get("format") != format:
        raise ValueError(f"{folder} holds a {info.get('format')!r} export; backend {backend!r} needs "
                         f"`sapiens2-hf export --format {format}`.")
    if task is not None and info.get("task") != task:
        raise ValueError(f"{folder} is an exported {info.get('task') or 'backbone'} model, not {task}.")
    return load_exported(folder, precision=precision, num_threads=num_threads)
