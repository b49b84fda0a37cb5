"""Export a Sapiens2 model to ONNX, a `torch.export` program or an AOTInductor package, verified against the eager
model.

An exported folder holds:

| file | content |
|---|---|
| `model.onnx` (format `onnx`) | the graph with its weights (`model.onnx.data` beside it for models over ~1.8 GB) |
| `model.pt2` (format `torch-export`) | a `torch.export.save` archive |
| `model_aoti.pt2` (format `aoti`) | an AOTInductor package: compiled kernels and weights, for one device type (`aoti.py`) |
| `config.json` | the model's `Sapiens2Config`, `image_size` set to the exported input size |
| `preprocessor_config.json` | the task's image processor at that size |
| `export_info.json` | format, input/output names and shapes, RoPE handling, versions, and the verification figures |

Shapes: `pixel_values` `(batch_size, 3, height, width)` float32, dynamic batch size, height and width fixed (the
model's `image_size` unless `input_size` is given): the RoPE cos/sin tables of the token grid are baked in as
constants (computed by the eager model in its RoPE dtype), and the pointmap scale MLP is tied to one grid anyway.

bfloat16 RoPE: the ONNX graph emulates it in float32 with rounding `Cast` pairs (`onnx_bf16.py`, counted in
`export_info.json -> rope`), as onnxruntime's CPU provider has no bf16 `Mul`/`Add`; `torch-export` keeps the bf16 ops;
AOTInductor rounds where eager rounds (`emulate_precision_casts`). The format table is in `formats.py`.
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MethodType
from typing import Any

import torch
import transformers
from torch import nn

from ..modeling import Sapiens2Config, model_class_for_task
from ..processing import image_processor_for_task
from ..hub.convert_official import checkpoint_task
from ..utils.atomic_io import atomic_write_json, replace_into_folder, staging_folder
from ..utils.extras import require
from ..utils.run_lock import check_run_folder_free, refuse_filled_folder, run_folder_lock
from .backends import load_exported
from .formats import EXPORT_FORMAT_TABLE, EXPORT_FORMATS, ExportContext
from .info import INFO_FILE


ONNX_INT8_FILE = "model_int8.onnx"
INPUT_NAME = "pixel_values"
# Files an export writes; an `overwrite=True` export removes older copies of them that it did not rewrite.
_STALE_PATTERNS = ("model*.onnx", "model*.onnx.data", "model*.pt2", INFO_FILE)
# protobuf cannot serialise a message over 2 GiB: larger graphs keep their weights in a side file.
_EXTERNAL_DATA_BYTES = int(1.8 * 2**30)
# Output fields that are never exported (losses are not computed; per-layer states need flags).
_NOT_EXPORTED = ("loss", "hidden_states", "attentions")


class ExportCheckError(RuntimeError):
    """An exported artefact that does not reproduce the eager model within tolerance (nothing was written)."""


@dataclass(frozen=True)
class ExportTolerance:
    """Largest deviation of an exported output from the eager model's that passes verification.

    Attributes:
        rel_l2 (`float`): `||exported - eager|| / ||eager||` over the whole output.
        max_abs_relative (`float`): largest `|exported - eager|`, relative to the eager output's largest magnitude.
    """

    rel_l2: float
    max_abs_relative: float


# The envelope of the official fixtures' recommended tolerances (shared/fixtures/official/*/meta.json ->
# noise_floor.recommended_tolerance, model cases): `*_rope_fp32` outputs reach rel-L2 2e-5 and max-abs 6e-4 at
# absmax 1.7 (3.5e-4 relative); bf16-RoPE outputs reach rel-L2 3e-3 and max-abs 2e-2 at absmax 1.7 (1.2e-2 relative),
# because an ulp of difference before a bf16 rounding (a different matmul kernel is enough) can flip it.
DEFAULT_TOLERANCES = {
    "float32": ExportTolerance(rel_l2=2e-5, max_abs_relative=4e-4),
    "bfloat16": ExportTolerance(rel_l2=3e-3, max_abs_relative=1.2e-2),
}


@dataclass
class ExportResult:
    """What `export_model` wrote: the `folder`, its `format`, the model file (`artefact`) inside it, and `info`, the
    content of `export_info.json` (verification figures under `"verification"`)."""

    folder: Path
    format: str
    artefact: Path
    info: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ model loading


def load_model_for_export(model_or_path, task: str | None = "auto", rope_dtype: str | None = None,
                          image_size=None) -> nn.Module:
    """The eager float32 model to export, in eval mode, from a sapiens2_hf model or anything its `from_pretrained`
    reads; `task` is `"auto"` (from the checkpoint), `None`/`"pretrain"` (the backbone) or a task; `rope_dtype`
    (`"bfloat16"`/`"float32"`) and `image_size` (`(height, width)`, for a pointmap scale branch) override the model's.
    """
    overrides = {}
    if rope_dtype is not None:
        overrides["rope_dtype"] = rope_dtype
    if image_size is not None:
        overrides["image_size"] = [int(image_size[0]), int(image_size[1])]
    if isinstance(model_or_path, nn.Module):
        model = model_or_path
        config = getattr(model, "config", None)
        if not isinstance(config, Sapiens2Config):
            raise ValueError(f"export_model exports Sapiens2 models; got a {type(model).__name__} without a Sapiens2Config.")
        if task not in ("auto", None, "pretrain") and task != config.task:
            raise ValueError(f"the model is a {config.task or 'backbone'} model, not {task!r}.")
        if any(getattr(config, key) != value for key, value in overrides.items()):
            # a twin with the new RoPE dtype / size: the RoPE periods are a non-persistent buffer rebuilt from it
            new_config = copy.deepcopy(config)
            for key, value in overrides.items():
                setattr(new_config, key, value)
            model = type(model)(new_config)
            model.load_state_dict(model_or_path.state_dict(), strict=True)
    else:
        source = str(model_or_path)
        if task == "auto":
            task = checkpoint_task(source)[0]
        elif task == "pretrain":
            task = None
        model = model_class_for_task(task).from_pretrained(source, **overrides)
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(
            f"export needs a float32 model (onnxruntime has no CPU kernels for bf16/fp16 weights); this one holds "
            f"{sorted(str(d) for d in dtypes)}: call model.float() first."
        )
    return _with_own_storages(model).eval()


def _with_own_storages(model: nn.Module) -> nn.Module:
    """`model`, or a copy whose tensors each own their storage.

    A model read from an official file holds each SwiGLU projection pair as two views of the fused `w12` tensor.
    `torch.export.save` stores tensors by storage and warns that it finds no tensor covering such a shared storage
    ("No complete tensor found in the group ... may cause issues"); a copy with separate storages avoids the question.
    """
    storages = {}
    for tensor in list(model.parameters()) + list(model.buffers()):
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in storages and storages[pointer] is not tensor:
            twin = type(model)(model.config)
            twin.load_state_dict(model.state_dict(), strict=True)  # copies into the twin's own tensors
            return twin
        storages[pointer] = tensor
    return model


# ------------------------------------------------------------------------------------------------ export wrapper


class _ExportWrapper(nn.Module):
    """`pixel_values -> tuple of output tensors` (named by `output_names`), the form exporters take."""

    def __init__(self, model: nn.Module, output_names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.output_names = output_names

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.model(pixel_values=pixel_values, return_dict=True)
        return tuple(outputs[name] for name in self.output_names)


def _batched_window_tokenizer(self, pixel_values: torch.Tensor, patch_embeddings: nn.Conv2d) -> torch.Tensor:
    """The 4K tokenizer over the whole batch in one pass (export only: the eager one loops over samples and bands of
    window rows to bound its memory, and `torch.export` cannot loop over a dynamic batch size): patch-embed, cut into
    `window x window` blocks in row-major window order per sample, pool each block."""
    window = self.window_size
    features = patch_embeddings(pixel_values)  # (batch, hidden, rows, cols)
    batch, hidden, rows, cols = features.shape
    windows_h, windows_w = rows // window, cols // window
    blocks = features.reshape(batch, hidden, windows_h, window, windows_w, window).permute(0, 2, 4, 3, 5, 1)
    blocks = blocks.reshape(batch * windows_h * windows_w, window * window, hidden)
    return self._pool_windows(blocks).reshape(batch, windows_h * windows_w, hidden)


def _fixed_rope_tables(self, num_patches_h: int, num_patches_w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE `(cos, sin)` of the export grid, computed by the eager model before tracing (export only)."""
    if (int(num_patches_h), int(num_patches_w)) != self._export_grid:
        raise ValueError(f"the export was prepared for a {self._export_grid} token grid, not "
                         f"{(num_patches_h, num_patches_w)}.")
    return self._export_tables


@contextmanager
def _export_friendly(model: nn.Module, grid: tuple[int, int]):
    """Swaps two eager code paths during an export: the 4K tokenizer (`_batched_window_tokenizer`), and RoPE, whose
    `(cos, sin)` tables of the fixed grid the eager module computes before tracing: traced, the ONNX optimizer would
    fold them in its own arithmetic, which skips torch's bf16 roundings (seen: cos -0.527 for torch's -0.5; a 1-layer
    model drifted 4e-3 relative)."""
    swapped = []
    for module in model.modules():
        name = type(module).__name__
        if name == "Sapiens2WindowTokenizer" and hasattr(module, "_pool_windows"):
            module.forward = MethodType(_batched_window_tokenizer, module)
            swapped.append(module)
        elif name == "Sapiens2RopePositionEmbedding" and hasattr(module, "compute_cos_sin"):
            with torch.no_grad():
                module._export_tables = tuple(t.detach().clone() for t in module.compute_cos_sin(*grid))
            module._export_grid = tuple(grid)
            module.forward = MethodType(_fixed_rope_tables, module)
            swapped.append(module)
    try:
        yield
    finally:
        for module in swapped:
            for attribute in ("forward", "_export_tables", "_export_grid"):
                if attribute in module.__dict__:
                    delattr(module, attribute)


def output_names_of(model: nn.Module, example: torch.Tensor) -> tuple[tuple[str, ...], str]:
    """`(names of the tensor fields the model returns, output class name)` for one eager forward pass."""
    with torch.no_grad():
        outputs = model(pixel_values=example, return_dict=True)
    names = tuple(k for k, v in outputs.items() if isinstance(v, torch.Tensor) and k not in _NOT_EXPORTED)
    return names, type(outputs).__name__


def _example_input(channels: int, height: int, width: int, batch_size: int, seed: int = 0) -> torch.Tensor:
    # N(0, 1): the scale of normalised pixels; seeded so that verification figures are reproducible.
    return torch.randn(batch_size, channels, height, width, generator=torch.Generator().manual_seed(seed))


def _torch_export(wrapper: nn.Module, example: torch.Tensor):
    # batch 2 in the example: torch.export specialises a dimension of size 1 to a constant
    with torch.no_grad():
        return torch.export.export(wrapper, (example,), strict=False,
                                   dynamic_shapes=({0: torch.export.Dim("batch_size", min=1, max=4096)},))


def write_onnx(program, path: Path, context: ExportContext) -> dict:
    """Translates the `torch.export` program to ONNX, emulates bf16 arithmetic (see module docstring), saves; returns
    the `export_info.json` entries of the format (opset, external data, how RoPE is computed)."""
    import onnx

    from .onnx_bf16 import emulate_bfloat16

    onnx_program = torch.onnx.export(
        program, dynamo=True, input_names=[INPUT_NAME], output_names=list(context.output_names),
        opset_version=context.opset, optimize=True, verbose=False, report=False,
    )
    proto = onnx_program.model_proto
    emulation = emulate_bfloat16(proto)
    if context.rope_bf16 and not emulation["rounding_casts"]:
        raise ExportCheckError(
            "the model runs RoPE in bfloat16 but the exported ONNX graph holds no bf16 rounding; the exporter folded "
            "it away. Export with rope_dtype='float32' and see the documented deviation."
        )
    weight_bytes = sum(len(init.raw_data) for init in proto.graph.initializer)
    external = weight_bytes > _EXTERNAL_DATA_BYTES
    onnx.save_model(proto, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=f"{path.name}.data" if external else None)
    return {
        "opset": max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "external_data": external,
        "rope": {
            "onnx": (f"bf16 arithmetic in float32 storage with {emulation['rounding_casts']} Cast(bfloat16)->"
                     f"Cast(float) rounding pairs ({emulation['emulated_ops']})" if emulation["rounding_casts"]
                     else "float32"),
            "rounding_casts": emulation["rounding_casts"],
        },
    }


def write_torch_export(program, path: Path, context: ExportContext) -> dict:
    """Saves the `torch.export` program as it is (`torch.export.save`); no entries of its own."""
    torch.export.save(program, str(path))
    return {}


# ------------------------------------------------------------------------------------------------ verification


def _deviation(actual: torch.Tensor, expected: torch.Tensor) -> dict[str, float]:
    actual, expected = actual.detach().double().cpu(), expected.detach().double().cpu()
    diff = (actual - expected).abs()
    scale = expected.abs().max().item()
    return {
        "max_abs": diff.max().item(),
        "mean_abs": diff.mean().item(),
        "rel_l2": (diff.norm() / expected.norm().clamp_min(1e-30)).item(),
        "reference_absmax": scale,
        "finite": bool(torch.isfinite(actual).all()),
    }


def compare_outputs(actual: dict, expected: dict, tolerance: ExportTolerance | None) -> dict[str, dict]:
    """Per output name: deviation figures (`max_abs`, `mean_abs`, `rel_l2`, `reference_absmax`) and, with a
    `tolerance`, the limits and `ok`."""
    report = {}
    for name, reference in expected.items():
        if name not in actual:
            report[name] = {"missing": True, "ok": False}
            continue
        if tuple(actual[name].shape) != tuple(reference.shape):
            report[name] = {"shape": list(actual[name].shape), "expected_shape": list(reference.shape), "ok": False}
            continue
        figures = _deviation(actual[name], reference)
        if tolerance is not None:
            max_abs_limit = tolerance.max_abs_relative * max(figures["reference_absmax"], 1e-12)
            figures.update(
                rel_l2_limit=tolerance.rel_l2, max_abs_limit=max_abs_limit,
                ok=figures["finite"] and figures["rel_l2"] <= tolerance.rel_l2 and figures["max_abs"] <= max_abs_limit,
            )
        report[name] = figures
    return report


def format_report(report: dict[str, dict], title: str = "") -> str:
    """A small text table of `compare_outputs` figures."""
    lines = [title] if title else []
    for name, figures in report.items():
        if "max_abs" not in figures:
            lines.append(f"  {name}: {'missing' if figures.get('missing') else 'shape mismatch'}")
            continue
        text = f"  {name}: rel-L2 {figures['rel_l2']:.3g}, max-abs {figures['max_abs']:.3g} (mean {figures['mean_abs']:.3g}, ref absmax {figures['reference_absmax']:.3g})"
        if "ok" in figures:
            text += f" limits rel-L2 {figures['rel_l2_limit']:.3g}, max-abs {figures['max_abs_limit']:.3g}: " + (
                "ok" if figures["ok"] else "FAIL")
        lines.append(text)
    return "\n".join(lines)


def eager_outputs(model: nn.Module, pixel_values: torch.Tensor, names) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    with torch.no_grad():
        outputs = model(pixel_values=pixel_values.to(device), return_dict=True)
    return {name: outputs[name] for name in names}


def verify_export(folder, model: nn.Module, pixel_values: torch.Tensor | None = None,
                  tolerance: ExportTolerance | None = None, precision: str = "fp32", raise_on_failure: bool = True,
                  num_threads: int | None = None, label: str | None = None) -> dict[str, dict]:
    """Runs the exported artefact in `folder` and the eager `model` on the same input and compares every output.

    Args:
        pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`, *optional*): default: 2 seeded N(0, 1)
            images at the exported size.
        tolerance (`ExportTolerance`, *optional*): default `DEFAULT_TOLERANCES[model.config.rope_dtype]`.
        precision (`str`): `"fp32"` or `"int8"` (the quantized ONNX file; pass a tolerance of your own, or
            `raise_on_failure=False` to only measure).

    Returns `compare_outputs` figures per output name; raises `ExportCheckError` (with `raise_on_failure`) when an
    output is missing, misshapen, not finite or out of tolerance.
    """
    runtime = load_exported(folder, precision=precision, num_threads=num_threads)
    if pixel_values is None:
        height, width = runtime.input_size
        pixel_values = _example_input(runtime.config.num_channels, height, width, 2, seed=1)
    tolerance = tolerance or DEFAULT_TOLERANCES[model.config.rope_dtype]
    expected = eager_outputs(model, pixel_values, runtime.output_names)
    actual = runtime.run(pixel_values)
    report = compare_outputs(actual, expected, tolerance)
    failed = [name for name, figures in report.items() if not figures["ok"]]
    if failed and raise_on_failure:
        raise ExportCheckError(
            f"the exported {runtime.format} model {label or folder} does not reproduce the eager model: "
            f"{', '.join(failed)} out of tolerance.\n{format_report(report)}\nA wrong or modified model, or an "
            "exporter bug; nothing was published. For a bfloat16-RoPE model you can export the float32-RoPE variant "
            "(rope_dtype='float32')."
        )
    return report


# ------------------------------------------------------------------------------------------------ export


def _save_processor(folder: Path, task: str | None, height: int, width: int, image_processor=None) -> None:
    if image_processor is None:
        image_processor = image_processor_for_task(task, size={"height": height, "width": width})
    else:
        image_processor = copy.deepcopy(image_processor)
        image_processor.size = {"height": height, "width": width}
    image_processor.save_pretrained(folder)


def _check_request(format: str, quantize: str | None, device: str, out_dir: Path, overwrite: bool):
    """The format's `ExportFormat` and the `torch.device`, checked against each other, this machine and `out_dir`."""
    spec = EXPORT_FORMAT_TABLE.get(format)
    if spec is None:
        raise ValueError(f"unknown export format {format!r}; choose one of {EXPORT_FORMATS}.")
    if quantize is not None and format != "onnx":
        raise ValueError("quantize= needs format='onnx' (onnxruntime quantization).")
    device = torch.device(device)
    if device.type not in spec.devices:
        able = [name for name, other in EXPORT_FORMAT_TABLE.items() if device.type in other.devices]
        raise ValueError(f"device={str(device)!r} needs format={' or '.join(map(repr, able))}; the {format} export is "
                         "built on the CPU.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a GPU and a CUDA build of torch; export device='cpu' here.")
    refuse_filled_folder(out_dir, overwrite)
    check_run_folder_free(out_dir)  # refused now rather than after the export; the lock is taken to publish
    require(*spec.packages, feature=f"{spec.title} export")
    return spec, device


def _input_size(config, input_size) -> tuple[int, int]:
    """``input_size`` or the model's own, checked to be a multiple of the feature stride."""
    height, width = (int(input_size[0]), int(input_size[1])) if input_size is not None else config.image_size_hw
    stride_h, stride_w = config.feature_stride
    if height % stride_h or width % stride_w:
        raise ValueError(f"the input size {height}x{width} is not a multiple of the model's feature stride "
                         f"{stride_h}x{stride_w}.")
    return height, width


def _base_info(format: str, model, output_class, output_names, height: int, width: int) -> dict[str, Any]:
    """The `INFO_FILE` entries every format shares; the format's writer adds its own."""
    config = model.config
    return {
        "format": format,
        "task": config.task,
        "model_class": type(model).__name__,
        "output_class": output_class,
        "input_name": INPUT_NAME,
        "input_shape": ["batch_size", config.num_channels, height, width],
        "input_size": [height, width],
        "input_dtype": "float32",
        "output_names": list(output_names),
        "dynamic_axes": {"batch_size": [INPUT_NAME, *output_names]},
        "exporter": None,
        "versions": _versions(),
        "rope": {"dtype": config.rope_dtype},
    }


def _write_artefact(spec, model, output_names, example, artefact: Path, info: dict, context: ExportContext) -> None:
    """Trace the model (`torch.export`) and write it with the format's writer; its entries extend ``info``."""
    config = model.config
    stride_h, stride_w = config.feature_stride
    height, width = example.shape[-2:]
    wrapper = _ExportWrapper(model, output_names).eval()
    with _export_friendly(model, (height // stride_h, width // stride_w)):
        program = _torch_export(wrapper, example)
    written = spec.load("writer")(program, artefact, context)
    info["exporter"] = spec.exporter
    info["files"] = {"fp32": spec.artefact}
    for key, value in written.items():  # nested entries (`rope`) extend the common ones
        info[key] = {**info[key], **value} if isinstance(value, dict) and isinstance(info.get(key), dict) else value


def _save_config(folder: Path, model, height: int, width: int) -> None:
    """The model's config with the fixed input size and its class, beside the artefact."""
    export_config = copy.deepcopy(model.config)
    export_config.image_size = [height, width]
    export_config.architectures = [type(model).__name__]
    export_config.save_pretrained(folder)


def _quantize(staging: Path, artefact: str, info: dict, mode: str, calibration_inputs, input_size, num_threads):
    """Write `ONNX_INT8_FILE` beside the float graph and record it and its deviation in ``info``."""
    from .quantization import quantize_onnx

    quantization = quantize_onnx(staging / artefact, staging / ONNX_INT8_FILE, mode=mode,
                                 calibration_inputs=calibration_inputs, input_size=input_size)
    info["files"]["int8"] = ONNX_INT8_FILE
    atomic_write_json(staging / INFO_FILE, info, indent=1)
    quantization["deviation_from_fp32_onnx"] = _int8_deviation(staging, num_threads)
    info["quantization"] = quantization


def export_model(model_or_path, out_dir, format: str = "onnx", task: str | None = "auto",
                 input_size: tuple[int, int] | None = None, rope_dtype: str | None = None, opset: int | None = None,
                 verify: bool = True, tolerance: ExportTolerance | None = None, image_processor=None,
                 overwrite: bool = False, quantize: str | None = None, calibration_inputs=None,
                 num_threads: int | None = None, device: str = "cpu") -> ExportResult:
    """Exports a Sapiens2 model (backbone or any task) and verifies it against the eager model.

    Args:
        model_or_path, task, rope_dtype: as `load_model_for_export`.
        out_dir: the folder to write (staged beside it, then renamed into place; held meanwhile: `utils.run_lock`).
        format (`str`): `"onnx"` (onnxruntime), `"torch-export"`, or `"aoti"` (an AOTInductor package).
        input_size (`(height, width)`, *optional*): the fixed input size; default the model's `image_size`.
        opset (`int`, *optional*): ONNX opset; default: the exporter's.
        verify (`bool`): refuse to write an artefact that differs from the eager model (2 seeded images) beyond
            `tolerance` (default `DEFAULT_TOLERANCES[rope_dtype]`).
        image_processor: saved beside, at the input size; default: the task's own.
        overwrite (`bool`): replace the export files in a non-empty `out_dir` (other files stay).
        quantize (`str`, *optional*): `"int8-dynamic"` (alias `"int8-dynamic-linear"`) or `"int8-static"` also
            writes `model_int8.onnx` (ONNX only; `quantize_onnx`); its deviation from float32 is recorded, not checked.
        calibration_inputs: for `"int8-static"`: an iterable of `pixel_values` batches (default: seeded noise).
        num_threads (`int`, *optional*): onnxruntime threads of the verification.
        device (`str`): `"aoti"` only: the device the package is compiled for and verified on (`"cpu"`, `"cuda"`).

    Raises:
        ExportCheckError: verification failed (nothing is written).
        FileExistsError: `out_dir` is not empty and `overwrite` is False.
    """
    spec, device = _check_request(format, quantize, device, Path(out_dir), overwrite)
    out_dir = Path(out_dir)
    model = load_model_for_export(model_or_path, task=task, rope_dtype=rope_dtype, image_size=input_size)
    height, width = _input_size(model.config, input_size)
    if device.type != "cpu":
        model = copy.deepcopy(model).to(device)
    with run_folder_lock(out_dir), staging_folder(out_dir) as staging:
        refuse_filled_folder(out_dir, overwrite)  # again under the lock: an export may have published meanwhile
        info = _export_into(staging, spec, model, (height, width), device, opset, image_processor)
        if verify:
            tolerance = tolerance or DEFAULT_TOLERANCES[model.config.rope_dtype]
            info["verification"] = {"input": "2 images, N(0, 1), seed 1", "tolerance": asdict(tolerance),
                                    "outputs": verify_export(staging, model, tolerance=tolerance,
                                                             label=f"for {out_dir}", num_threads=num_threads)}
        if quantize is not None:
            _quantize(staging, spec.artefact, info, quantize, calibration_inputs, (height, width), num_threads)
        atomic_write_json(staging / INFO_FILE, _json_safe(info), indent=1)
        replace_into_folder(staging, out_dir, stale=_STALE_PATTERNS)
    return ExportResult(folder=out_dir, format=format, artefact=out_dir / spec.artefact, info=info)


def _export_into(staging: Path, spec, model, size: tuple[int, int], device, opset, image_processor) -> dict:
    """Writes the artefact, config, processor and a first `INFO_FILE` (the runtime reads it to verify) into
    `staging`; returns the info."""
    config, (height, width) = model.config, size
    started = time.perf_counter()
    example = _example_input(config.num_channels, height, width, 2).to(device)
    output_names, output_class = output_names_of(model, example)
    info = _base_info(spec.name, model, output_class, output_names, height, width)
    _write_artefact(spec, model, output_names, example, staging / spec.artefact, info,
                    ExportContext(tuple(output_names), opset, config.rope_dtype == "bfloat16", device.type))
    info["export_seconds"] = round(time.perf_counter() - started, 2)
    _save_config(staging, model, height, width)
    _save_processor(staging, config.task, height, width, image_processor)
    atomic_write_json(staging / INFO_FILE, info, indent=1)
    return info


def _int8_deviation(folder: Path, num_threads: int | None = None) -> dict:
    """Deviation of the int8 graph from the float32 graph on 2 seeded images (informational)."""
    fp32 = load_exported(folder, precision="fp32", num_threads=num_threads)
    int8 = load_exported(folder, precision="int8", num_threads=num_threads)
    height, width = fp32.input_size
    pixel_values = _example_input(fp32.config.num_channels, height, width, 2, seed=1)
    return compare_outputs(int8.run(pixel_values), fp32.run(pixel_values), None)


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _versions() -> dict[str, str]:
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            pass
    return versions
