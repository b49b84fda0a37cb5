"""AOTInductor packages: a Sapiens2 model compiled ahead of time into a `.pt2` package, and its runtime.

`export_model(..., format="aoti")` takes the same `torch.export` program as the other formats (dynamic batch size,
fixed input size, RoPE tables of the token grid as constants) and compiles it with
`torch._inductor.aoti_compile_and_package` into `model_aoti.pt2`: the generated C++/Triton kernels, built into a
shared library, and the weights. Loading it (`torch._inductor.aoti_load_package`) compiles nothing, so the first
call costs what every call costs; a `torch.compile`d model compiles on its first call instead
(`benchmarks/bench_startup_compile.py` measures both).

- The package is built for one device type (`device="cpu"` by default, or `"cuda"`) and runs only there.
- Inductor's `emulate_precision_casts` is on, as for `torch.compile` in `inference_recipe`: the bf16 RoPE rounds
  where the eager model rounds, so the package is verified against the eager model with the usual tolerances.
- The package is verified against the eager model before the folder is written, like every export, and its sha256
  is recorded in `export_info.json`: a package replaced or modified after export is refused when it is loaded.
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


def write_aoti_package(program, path: Path, device: str = "cpu") -> dict:
    """Compiles a `torch.export` program (built on `device`) into an AOTInductor package at `path`.

    Returns:
        the `export_info.json` details: `device`, `inductor_configs`, `sha256`, `bytes`.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No complete tensor found in the group")
        torch._inductor.aoti_compile_and_package(program, package_path=os.fspath(path),
                                                 inductor_configs=dict(AOTI_INDUCTOR_CONFIGS))
    return {"device": torch.device(device).type, "inductor_configs": dict(AOTI_INDUCTOR_CONFIGS),
            "sha256": file_sha256(path), "bytes": path.stat().st_size}


def write_aoti(program, path: Path, context: ExportContext) -> dict:
    """The aoti format's writer (`formats.py`): the package, and its details under `aoti` in export_info.json."""
    return {"aoti": write_aoti_package(program, path, device=context.device)}


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
        """Loads an exported folder.

        Args:
            folder: written by `export_model(..., format="aoti")`.
            num_threads (`int`, *optional*): accepted for symmetry with the other runtimes; the package's CPU kernels
                use torch's intra-op threads (`torch.set_num_threads`).
            precision (`str`): `"fp32"` only.
            check_sha256 (`bool`): refuse a package whose sha256 differs from the one verified at export (reads the
                whole file once: ~1 s per GB).

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
