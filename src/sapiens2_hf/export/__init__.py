"""Export of Sapiens2 models (ONNX, torch.export, AOTInductor), their runtimes and CPU int8 quantization (layer 2).

- `export_model(model_or_path, out_dir, format="onnx" | "torch-export")`: every task and the backbone, dynamic batch,
  fixed input size, verified against the eager model (`ExportCheckError` when out of tolerance), written atomically
  with config.json and preprocessor_config.json beside the artefact.
- `OnnxRuntimeSapiens2Model.from_pretrained(folder)`: an exported folder as a model the pipelines and the CLI accept;
  `AotiSapiens2Model` for an AOTInductor package (`format="aoti"`: compiled once at export, loaded without compiling);
  `load_backend(folder, backend)` by a `RUNTIME_BACKENDS` name (`"onnxruntime"`, `"onnxruntime-int8"`, `"aoti"`).
- `quantize_onnx`: onnxruntime int8 quantization (dynamic or static) of an exported graph.

onnx, onnxscript and onnxruntime are optional (`pip install 'sapiens2_hf[export]'`); they are imported only when used.

The package face is lazy (PEP 562): `sapiens2_hf.export.formats` (the format and backend table, stdlib only) is read by
the command line's parser without importing torch; each public name below imports its module on first access.
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
