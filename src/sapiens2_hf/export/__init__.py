"""Export of Sapiens2 models (ONNX, torch.export, AOTInductor), their runtimes and CPU int8 quantization (layer 2).

- `export_model(model_or_path, out_dir, format="onnx" | "torch-export")`: every task and the backbone, dynamic batch,
  fixed input size, verified against the eager model (`ExportCheckError` when out of tolerance), written atomically
  with config.json and preprocessor_config.json beside the artefact.
- `OnnxRuntimeSapiens2Model.from_pretrained(folder)`: an exported folder as a model the pipelines and the CLI accept;
  `AotiSapiens2Model` for an AOTInductor package (`format="aoti"`: compiled once at export, loaded without compiling);
  `load_backend(folder, backend)` by a `RUNTIME_BACKENDS` name (`"onnxruntime"`, `"onnxruntime-int8"`, `"aoti"`).
- `quantize_onnx`: onnxruntime int8 quantization (dynamic or static) of an exported graph.

onnx, onnxscript and onnxruntime are optional (`pip install 'sapiens2_hf[export]'`); they are imported only when used.
"""

from .exporter import (
    DEFAULT_TOLERANCES,
    EXPORT_FORMATS,
    ExportCheckError,
    ExportResult,
    ExportTolerance,
    compare_outputs,
    export_model,
    format_report,
    load_model_for_export,
    verify_export,
)
from .info import read_export_info
from .aoti import AotiPackageError, AotiSapiens2Model
from .quantization import QUANTIZATION_MODES, quantize_onnx
from .runtime import ExportedSapiens2Model, OnnxRuntimeSapiens2Model, TorchExportSapiens2Model
from .backends import RUNTIME_BACKENDS, load_backend, load_exported


__all__ = [
    "AotiPackageError",
    "AotiSapiens2Model",
    "DEFAULT_TOLERANCES",
    "EXPORT_FORMATS",
    "ExportCheckError",
    "ExportResult",
    "ExportTolerance",
    "ExportedSapiens2Model",
    "OnnxRuntimeSapiens2Model",
    "QUANTIZATION_MODES",
    "RUNTIME_BACKENDS",
    "TorchExportSapiens2Model",
    "compare_outputs",
    "export_model",
    "format_report",
    "load_backend",
    "load_exported",
    "load_model_for_export",
    "quantize_onnx",
    "read_export_info",
    "verify_export",
]
