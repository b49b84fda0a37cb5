"""The backends that run an exported folder (layer 2): which runtime class runs each export format, and the names
the `backend=` of `sapiens2_hf.pipeline` and the `--backend` of the predict commands take.

`RUNTIME_BACKENDS` is the one table of those names: backend name -> (export format, precision); `load_backend(folder,
backend)` loads one, `load_exported(folder)` loads a folder by its own format.
"""

from __future__ import annotations

import os
from pathlib import Path

from .aoti import AotiSapiens2Model
from .info import read_export_info
from .runtime import ExportedSapiens2Model, OnnxRuntimeSapiens2Model, TorchExportSapiens2Model


#: Export format (`export_info.json` "format") -> the class that runs it.
RUNTIME_CLASSES = {
    "onnx": OnnxRuntimeSapiens2Model,
    "torch-export": TorchExportSapiens2Model,
    "aoti": AotiSapiens2Model,
}


def load_exported(folder, precision: str = "fp32", num_threads: int | None = None) -> ExportedSapiens2Model:
    """An exported folder's runtime (`OnnxRuntimeSapiens2Model`, `TorchExportSapiens2Model` or `AotiSapiens2Model`),
    by its format."""
    info = read_export_info(folder)
    runtime_class = RUNTIME_CLASSES.get(info.get("format"))
    if runtime_class is None:
        raise ValueError(f"{folder}: unknown export format {info.get('format')!r}.")
    return runtime_class.from_pretrained(folder, precision=precision, num_threads=num_threads)


#: The backends that run an exported folder: name -> (export format it needs, precision). "torch" (the eager model)
#: is the default everywhere and is not in the table.
RUNTIME_BACKENDS = {
    "onnxruntime": ("onnx", "fp32"),
    "onnxruntime-int8": ("onnx", "int8"),
    "aoti": ("aoti", "fp32"),
}


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
    return RUNTIME_CLASSES[format].from_pretrained(folder, precision=precision, num_threads=num_threads)
