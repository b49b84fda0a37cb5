"""Export of Sapiens2 models (ONNX, torch.export, AOTInductor), their runtimes and CPU int8 quantization (layer 2).

`export_model` (every task and the backbone, verified against the eager model, written atomically), the runtimes
that load an exported folder as a model the pipelines and the CLI accept (`load_exported`, `load_backend` by a
`RUNTIME_BACKENDS` name), and `quantize_onnx`. onnx, onnxscript and onnxruntime are the `export` extra, imported
only when used. The package face is lazy (PEP 562), so the command line's parser reads `formats` (stdlib only)
without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Public name -> the module defining it.
_PUBLIC_NAMES = {
    **dict.fromkeys(("DEFAULT_TOLERANCES", "ExportCheckError", "ExportResult", "ExportTolerance", "compare_outputs",
                     "export_model", "format_report", "load_model_for_export", "verify_export"), "exporter"),
    **dict.fromkeys(("EXPORT_FORMATS", "EXPORT_FORMAT_TABLE", "ExportFormat", "RUNTIME_BACKENDS"), "formats"),
    "read_export_info": "info",
    **dict.fromkeys(("AotiPackageError", "AotiSapiens2Model"), "aoti"),
    **dict.fromkeys(("QUANTIZATION_MODES", "quantize_onnx"), "quantization"),
    **dict.fromkeys(("ExportedSapiens2Model", "OnnxRuntimeSapiens2Model", "TorchExportSapiens2Model"), "runtime"),
    **dict.fromkeys(("load_backend", "load_exported"), "backends"),
}
__all__ = sorted(_PUBLIC_NAMES)

if TYPE_CHECKING:
    from .aoti import AotiPackageError, AotiSapiens2Model
    from .backends import load_backend, load_exported
    from .exporter import (
        DEFAULT_TOLERANCES,
        ExportCheckError,
        ExportResult,
        ExportTolerance,
        compare_outputs,
        export_model,
        format_report,
        load_model_for_export,
        verify_export,
    )
    from .formats import EXPORT_FORMAT_TABLE, EXPORT_FORMATS, RUNTIME_BACKENDS, ExportFormat
    from .info import read_export_info
    from .quantization import QUANTIZATION_MODES, quantize_onnx
    from .runtime import ExportedSapiens2Model, OnnxRuntimeSapiens2Model, TorchExportSapiens2Model

def __getattr__(name: str):
    module = _PUBLIC_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
