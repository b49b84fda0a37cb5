"""The export formats and the backends that run them: one table (layer 2, stdlib only, so that the command line's
`--format` and `--backend` choices read it without importing torch).

A row names the file an export writes, its `writer(program, path, context) -> export_info.json entries`, the runtime
class that loads the folder, the backends (`backend=` / `--backend`) that run it with a precision, the optional
packages it needs and the devices it builds on; functions and classes as `module:attribute`, imported on first use.
A new format is its module (writer and runtime) and one row here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ExportContext:
    """What a format's writer may need besides the program and the file: the output names, the ONNX opset
    (`None`: the exporter's default), whether the model runs RoPE in bfloat16, and the device it was built on."""

    output_names: tuple[str, ...]
    opset: int | None
    rope_bf16: bool
    device: str


@dataclass(frozen=True)
class ExportFormat:
    """One export format (see the module docstring)."""

    name: str
    title: str  # in messages: "<title> export needs ..."
    artefact: str
    writer: str
    runtime: str
    exporter: str  # recorded in export_info.json: what produced the artefact
    backends: dict[str, str] = field(default_factory=dict)  # backend name -> precision of `export_info["files"]`
    packages: tuple[str, ...] = ()  # optional packages (`sapiens2_hf.utils.extras.EXTRAS`) the export needs
    devices: tuple[str, ...] = ("cpu",)

    def load(self, attribute: str):
        """The writer (`"writer"`) or runtime class (`"runtime"`) of this format, imported."""
        module, _, name = getattr(self, attribute).partition(":")
        return getattr(importlib.import_module(module, package=__package__), name)


EXPORT_FORMAT_TABLE = {
    format.name: format
    for format in (
        ExportFormat(
            "onnx", "ONNX", "model.onnx", writer=".exporter:write_onnx", runtime=".runtime:OnnxRuntimeSapiens2Model",
            exporter="torch.onnx.export (dynamo: torch.export program -> ONNX, onnxscript optimizer)",
            backends={"onnxruntime": "fp32", "onnxruntime-int8": "int8"},
            packages=("onnx", "onnxscript", "onnxruntime"),
        ),
        ExportFormat(
            "torch-export", "torch.export", "model.pt2", writer=".exporter:write_torch_export",
            runtime=".runtime:TorchExportSapiens2Model",
            exporter="torch.export.export (non-strict) + torch.export.save",
        ),
        ExportFormat(
            "aoti", "AOTInductor", "model_aoti.pt2", writer=".aoti:write_aoti", runtime=".aoti:AotiSapiens2Model",
            exporter="torch.export.export (non-strict) + torch._inductor.aoti_compile_and_package",
            backends={"aoti": "fp32"}, devices=("cpu", "cuda"),
        ),
    )
}

#: The format names `export_model(format=...)` and `sapiens2-hf export --format` take.
EXPORT_FORMATS = tuple(EXPORT_FORMAT_TABLE)

#: Backend name -> (export format it needs, precision): the backends that run an exported folder ("torch", the eager
#: model, is the default everywhere and is not in the table).
RUNTIME_BACKENDS = {backend: (format.name, precision) for format in EXPORT_FORMAT_TABLE.values()
                    for backend, precision in format.backends.items()}
