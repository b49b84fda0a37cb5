"""CPU int8 quantization of an exported ONNX Sapiens2 graph with onnxruntime's quantization tools.

Modes (all quantize `MatMul` nodes only: they carry ~all of the backbone's FLOPs; the heads' convolutions, the norms
and the bf16 RoPE emulation stay float32):

| mode | what is int8 | activations | measured (benchmarks/bench_export.py) |
|---|---|---|---|
| `"int8-dynamic"` | linear layers and the two attention products | per tensor, computed per call | fastest |
| `"int8-dynamic-linear"` | linear layers only | per tensor, computed per call | |
| `"int8-static"` | linear layers only, QDQ format | calibrated (MinMax) on `calibration_inputs` | needs real images |

Weights are int8 per output channel. On an AVX2 CPU without VNNI, onnxruntime's int8 GEMMs run about 2.3x faster
than its float32 ones (profiled on a 0.4b-wide model at 512x384); the float32 rest of the graph bounds the whole-model
gain below that. What int8 costs in accuracy is measured, not assumed: `export_model(..., quantize=...)` records the
deviation from the float32 graph in `export_info.json`, and the benchmark prints task-level figures.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np


QUANTIZATION_MODES = ("int8-dynamic", "int8-dynamic-linear", "int8-static")
_OPS = ["MatMul"]


class _CalibrationReader:
    """onnxruntime's CalibrationDataReader protocol over an iterable of `pixel_values` batches."""

    def __init__(self, input_name: str, batches):
        self._batches = iter(batches)
        self._input_name = input_name

    def get_next(self):
        batch = next(self._batches, None)
        if batch is None:
            return None
        array = batch.detach().cpu().float().numpy() if hasattr(batch, "detach") else np.asarray(batch, np.float32)
        return {self._input_name: np.ascontiguousarray(array)}

    def rewind(self):  # part of the protocol; one pass is all the MinMax calibrator needs
        pass


def _default_calibration(input_size, channels: int = 3, batches: int = 4):
    generator = np.random.default_rng(0)
    for _ in range(batches):
        yield generator.standard_normal((1, channels, *input_size), dtype=np.float32)


class _DropPreprocessingAdvice(logging.Filter):
    # onnxruntime's quantizer logs "Please consider to run pre-processing" on the root logger for every graph; its
    # pre-processing (shape inference + graph optimisation) fuses MatMuls into ops it then cannot quantize.
    def filter(self, record):
        return "pre-processing before quantization" not in record.getMessage()


@contextmanager
def _quiet_quantizer():
    quiet = _DropPreprocessingAdvice()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def quantize_onnx(source, target, mode: str = "int8-dynamic", calibration_inputs=None, input_size=None,
                  input_name: str = "pixel_values") -> dict:
    """Writes an int8 version of the ONNX graph `source` to `target`.

    Args:
        source, target: `.onnx` paths.
        mode (`str`): one of `QUANTIZATION_MODES` (see the module docstring).
        calibration_inputs: `"int8-static"` only: an iterable of `pixel_values` batches (tensors or arrays of shape
            `(batch_size, 3, height, width)`), real normalised images; default: 4 seeded N(0, 1) images of
            `input_size`, which only makes the graph run (the ranges are then not those of real images).
        input_size (`(height, width)`): for the default calibration inputs.

    Returns:
        `dict` describing what was done (recorded in `export_info.json -> quantization`).
    """
    try:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static
    except ImportError as error:
        raise ImportError("int8 quantization needs onnxruntime: pip install 'sapiens2_hf[export]'.") from error
    if mode not in QUANTIZATION_MODES:
        raise ValueError(f"unknown quantization mode {mode!r}; choose one of {QUANTIZATION_MODES}.")
    source, target = os.fspath(Path(source)), os.fspath(Path(target))
    calibration = None
    with _quiet_quantizer():
        if mode.startswith("int8-dynamic"):
            linear_only = mode == "int8-dynamic-linear"
            quantize_dynamic(
                source, target, op_types_to_quantize=_OPS, per_channel=True, weight_type=QuantType.QInt8,
                extra_options={"MatMulConstBOnly": linear_only},
            )
        else:
            if calibration_inputs is None:
                if input_size is None:
                    raise ValueError("int8-static needs calibration_inputs (or input_size for noise inputs).")
                calibration_inputs = _default_calibration(input_size)
                calibration = "4 seeded N(0, 1) images (no real images given: ranges not representative)"
            else:
                calibration = "the caller's images"
            quantize_static(
                source, target, _CalibrationReader(input_name, calibration_inputs), quant_format=QuantFormat.QDQ,
                op_types_to_quantize=_OPS, per_channel=True, activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True},
                calibrate_method=CalibrationMethod.MinMax,
            )
    return {
        "mode": mode,
        "tool": "onnxruntime.quantization",
        "quantized": "linear layers" + (" and attention products" if mode == "int8-dynamic" else ""),
        "weights": "int8, per output channel",
        "activations": "uint8 per tensor, dynamic (range computed per call)" if mode != "int8-static"
        else "uint8 per tensor, calibrated (MinMax)",
        "calibration": calibration,
        "file_bytes": Path(target).stat().st_size,
        "fp32_file_bytes": Path(source).stat().st_size,
    }
