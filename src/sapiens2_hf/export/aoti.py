"""AOTInductor packages: a Sapiens2 model compiled ahead of time into a `.pt2` package, and its runtime.

`export_model(..., format="aoti")` compiles the same `torch.export` program as the other formats with
`torch._inductor.aoti_compile_and_package` into `model_aoti.pt2` (kernels built into a shared library, and the
weights). Loading it compiles nothing, so the first call costs what every call costs (docs/deployment.md). The
package runs only on the device type it was built for; inductor's `emulate_precision_casts` makes the bf16 RoPE round
where eager rounds; its sha256 in `export_info.json` makes a package modified after export refused at load.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import torch

from .formats import ExportContext
from .runtime import ExportedSapiens2Model


#: Inductor options of every package: eager's bf16/fp16 rounding points (the official bf16 RoPE arithmetic).
AOTI_INDUCTOR_CONFIGS = {"emulate_precision_casts": True}


class AotiPackageError(RuntimeError):
    """An AOTInductor package that cannot be used: missing, modified after export, or not loadable here."""


def file_sha256(path) -> str:
    """Hex sha256 of a file (streamed)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_aoti(program, path: Path, context: ExportContext) -> dict:
    """The aoti format's writer (`formats.py`): compiles the `torch.export` program (built on `context.device`) into
    an AOTInductor package at `path`; returns its `export_info.json` details under `aoti` (`device`,
    `inductor_configs`, `sha256`, `bytes`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No complete tensor found in the group")
        torch._inductor.aoti_compile_and_package(program, package_path=os.fspath(path),
                                                 inductor_configs=dict(AOTI_INDUCTOR_CONFIGS))
    return {"aoti": {"device": torch.device(context.device).type, "inductor_configs": dict(AOTI_INDUCTOR_CONFIGS),
                     "sha256": file_sha256(path), "bytes": path.stat().st_size}}


class AotiSapiens2Model(ExportedSapiens2Model):
    """An AOTInductor package (`model_aoti.pt2`) with the exported-model interface (see `runtime`).

    Attributes:
        runner: torch's loaded package (`AOTICompiledModel`); called with `pixel_values`, returns the outputs.
        package_device (`torch.device`): where the package's kernels run (inputs are moved there and outputs back).
    """

    format = "aoti"

    def __init__(self, folder, info, config, runner, package_device: torch.device):
        super().__init__(folder, info, config)
        self.runner = runner
        self.package_device = package_device
        self._device = package_device

    @classmethod
    def from_pretrained(cls, folder, num_threads: int | None = None, precision: str = "fp32",
                        check_sha256: bool = True) -> "AotiSapiens2Model":
        """Loads a folder written by `export_model(..., format="aoti")` (`precision` `"fp32"` only; `num_threads` is
        accepted for symmetry: the kernels use torch's intra-op threads). `check_sha256` refuses a package whose
        sha256 differs from the one verified at export (reads the file once: ~1 s per GB).

        Raises:
            AotiPackageError: the package is missing, modified since export, or cannot be loaded here.
        """
        if precision != "fp32":
            raise ValueError("aoti folders hold a float32 package only; quantize an ONNX export instead.")
        info, config = cls._read(folder)
        path = Path(folder) / info["files"]["fp32"]
        if not path.is_file():
            raise AotiPackageError(f"{folder} has no {path.name}; export it again with "
                                   "`sapiens2-hf export MODEL --format aoti --out DIR`.")
        expected = info.get("aoti", {})
        if check_sha256 and expected.get("sha256") and file_sha256(path) != expected["sha256"]:
            raise AotiPackageError(
                f"{path} is not the package that was verified at export (sha256 differs from export_info.json): it "
                "was modified or replaced. Export it again; nothing was loaded."
            )
        device = torch.device(expected.get("device", "cpu"))
        if device.type == "cuda" and not torch.cuda.is_available():
            raise AotiPackageError(f"{path} was compiled for CUDA and this machine has no GPU; export a CPU package "
                                   "(`--device cpu`).")
        try:
            runner = torch._inductor.aoti_load_package(os.fspath(path))
        except Exception as error:  # torch raises RuntimeError/ValueError/zipfile errors for a broken file
            raise AotiPackageError(f"cannot load the AOTInductor package {path}: {error}. It may come from another "
                                   f"torch version (exported with torch {info.get('versions', {}).get('torch')}, "
                                   f"this is {torch.__version__}); export it again.") from error
        return cls(folder, info, config, runner, device)

    def _move(self, device: torch.device) -> None:
        if device.type != self.package_device.type:
            raise ValueError(f"this AOTInductor package was compiled for {self.package_device.type}; it cannot run on "
                             f"{device}. Export another package with --device {device.type}.")
        self._device = device

    def run(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        self._check_input(pixel_values)
        inputs = pixel_values.detach().to(self.package_device, torch.float32).contiguous()
        with torch.no_grad():
            values = self.runner(inputs)
        return {name: value.to(pixel_values.device) for name, value in zip(self.output_names, values)}
