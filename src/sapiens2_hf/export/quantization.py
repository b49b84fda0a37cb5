"""CPU int8 quantization of an exported ONNX Sapiens2 graph with onnxruntime's quantization tools.

| mode | what is int8 | activations |
|---|---|---|
| `"int8-dynamic"` (fastest) | linear layers (`MatMul` with a constant weight) | uint8 per tensor, range per call |
| `"int8-static"` | the same layers, QDQ format | uint8 per tensor, calibrated (MinMax) on images |

`"int8-dynamic-linear"` is another name for `"int8-dynamic"` (the quantizer skipped the attention products for lack
of type information, so both built the same graph). Measured speed and accuracy: README ("CPU int8");
`export_model(..., quantize=...)` records the deviation from the float32 graph in `export_info.json`.

Why these choices:

- Weights are int8 per output channel, symmetric, in the reduced range [-64, 64]: on x86 CPUs without VNNI the
  uint8 x int8 kernel adds pairs of products in saturating int16 (`vpmaddubsw`), and full-range weights overflow it
  (40 % off on adversarial inputs; most of int8's error on the official tiny models: pose heatmaps rel-L2 0.16 ->
  0.036, seg pixels changed 19.5 % -> 3.4 %). With |w| <= 64 every CPU computes the same numbers.
- Only the linear layers (~79 % of the float32 time). Measured and lost: int8 attention products (memory-bound: head
  size 64, 777x777 scores), int8 `ConvInteger`, uint8 x uint8 (a 1.5x GEMM instead of 2.0x), onnxruntime's
  4-/8-bit `MatMulNBits` (0.7-1.0x of float32 on AVX2), torch's dynamic int8 linear (1.36x).
- The float32 graph's bf16 RoPE emulation (`Cast` pairs, `onnx_bf16.py`) is removed from the int8 graph: its ~1e-6
  is nothing next to int8's ~5e-2, and its single-threaded Casts cost ~2-3 % of the int8 run time.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..utils.extras import require
from .onnx_bf16 import rounding_pairs


QUANTIZATION_MODES = ("int8-dynamic", "int8-dynamic-linear", "int8-static")
#: another name of "int8-dynamic" (see the module docstring)
_ALIASES = {"int8-dynamic-linear": "int8-dynamic"}
_OPS = ["MatMul"]
#: onnxruntime's reduced int8 weight range, [-64, 64]: 255 * 64 * 2 fits the int16 of the AVX2 kernel's pairwise sums
WEIGHT_RANGE = (-64, 64)


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


@contextmanager
def _quiet_quantizer():
    # onnxruntime's quantizer logs "Please consider to run pre-processing" on the root logger for every graph; its
    # pre-processing (shape inference + graph optimisation) fuses MatMuls into ops it then cannot quantize.
    def quiet(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def drop_bf16_rounding(model) -> int:
    """Removes the bf16 rounding `Cast` pairs (`Cast(to=bfloat16)` whose every consumer is a `Cast(to=float)`) from
    `model` (an `onnx.ModelProto`, in place): their consumers read the unrounded float32 value instead.

    Returns:
        `int`: the number of pairs removed.
    """
    graph = model.graph
    graph_outputs = {value.name for value in graph.output}
    replaced, removed, pairs = {}, set(), 0
    found = rounding_pairs(graph)  # held: `removed` compares the ids of these node wrappers
    for node, after in found:
        if any(n.output[0] in graph_outputs for n in after):  # a graph output keeps its name
            continue
        for widen in after:
            replaced[widen.output[0]] = node.input[0]
            removed.add(id(widen))
        removed.add(id(node))
        pairs += 1
    kept = [node for node in graph.node if id(node) not in removed]
    for node in kept:
        for position, name in enumerate(node.input):
            while name in replaced:  # a rounded value rounded again
                name = replaced[name]
            node.input[position] = name
    del graph.node[:]
    graph.node.extend(kept)
    return pairs


def _drop_bf16_rounding_in_file(path: str) -> int:
    import onnx

    # the structure only: weights stored beside the graph (external data) stay where they are
    model = onnx.load(path, load_external_data=False)
    pairs = drop_bf16_rounding(model)
    if pairs:
        onnx.save(model, path)
    return pairs


def _calibration(calibration_inputs, input_size):
    """The static quantizer's calibration batches and how to describe them: the caller's, or seeded noise."""
    if calibration_inputs is not None:
        return calibration_inputs, "the caller's images"
    if input_size is None:
        raise ValueError("int8-static needs calibration_inputs (or input_size for noise inputs).")
    generator = np.random.default_rng(0)
    return ((generator.standard_normal((1, 3, *input_size), dtype=np.float32) for _ in range(4)),
            "4 seeded N(0, 1) images (no real images given: ranges not representative)")


def quantize_onnx(source, target, mode: str = "int8-dynamic", calibration_inputs=None, input_size=None,
                  input_name: str = "pixel_values") -> dict:
    """Writes an int8 version of the ONNX graph `source` to `target`.

    Args:
        source, target: `.onnx` paths.
        mode (`str`): one of `QUANTIZATION_MODES` (see the module docstring); `"int8-dynamic"` is the fastest.
        calibration_inputs: `"int8-static"` only: an iterable of `pixel_values` batches (tensors or arrays of shape
            `(batch_size, 3, height, width)`), real normalised images; default: 4 seeded N(0, 1) images of
            `input_size`, which only makes the graph run (the ranges are then not those of real images).
        input_size (`(height, width)`): for the default calibration inputs.

    Returns:
        `dict` describing what was done (recorded in `export_info.json -> quantization`).
    """
    require("onnxruntime", feature="int8 quantization")
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    if mode not in QUANTIZATION_MODES:
        raise ValueError(f"unknown quantization mode {mode!r}; choose one of {QUANTIZATION_MODES}.")
    source, target = os.fspath(Path(source)), os.fspath(Path(target))
    calibration = None
    with _quiet_quantizer():
        if _ALIASES.get(mode, mode) == "int8-dynamic":
            quantize_dynamic(
                source, target, op_types_to_quantize=_OPS, per_channel=True, reduce_range=True,
                weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True},
            )
        else:
            calibration_inputs, calibration = _calibration(calibration_inputs, input_size)
            quantize_static(
                source, target, _CalibrationReader(input_name, calibration_inputs), quant_format=QuantFormat.QDQ,
                op_types_to_quantize=_OPS, per_channel=True, reduce_range=True, activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True},
                calibrate_method=CalibrationMethod.MinMax,
            )
    rounding_pairs = _drop_bf16_rounding_in_file(target)
    return {
        "mode": mode,
        "tool": "onnxruntime.quantization",
        "quantized": "linear layers (MatMul with a constant weight)",
        "weights": f"int8 per output channel, symmetric, in [{WEIGHT_RANGE[0]}, {WEIGHT_RANGE[1]}] (reduce_range: no "
                   "int16 saturation in the AVX2 / AVX-512 kernels without VNNI)",
        "activations": "uint8 per tensor, dynamic (range computed per call)" if mode != "int8-static"
        else "uint8 per tensor, calibrated (MinMax)",
        "calibration": calibration,
        "bf16_rope_rounding_casts_removed": rounding_pairs,
        "file_bytes": Path(target).stat().st_size,
        "fp32_file_bytes": Path(source).stat().st_size,
    }
