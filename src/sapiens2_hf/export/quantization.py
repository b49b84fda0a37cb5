"""CPU int8 quantization of an exported ONNX Sapiens2 graph with onnxruntime's quantization tools.

| mode | what is int8 | activations |
|---|---|---|
| `"int8-dynamic"` (fastest) | linear layers (`MatMul` with a constant weight) | uint8 per tensor, range per call |
| `"int8-static"` | the same layers, QDQ format | uint8 per tensor, calibrated (MinMax) on images |

Measured (`benchmarks/bench_export.py`: 0.4b-wide 4-layer backbone at 512x384, onnxruntime 1.32, 2-core AVX2 Zen3
without VNNI, shared with other processes): `"int8-dynamic"` runs 1.71x faster than the float32 ONNX graph on 1 thread
and 1.61-1.69x (process CPU time 1.67-1.70x) on 2, at rel-L2 0.052 on the backbone features; `"int8-static"` runs
1.44-1.56x at rel-L2 0.061 (its Quantize/Dequantize passes cost more than computing the ranges per call).
`"int8-dynamic-linear"` is another name for `"int8-dynamic"`: the two always built the same graph (the attention
products, meant to be int8 in `"int8-dynamic"`, were skipped by the quantizer for lack of type information; made int8
on purpose they were no faster: head size 64 and 777x777 score matrices make them memory-bound).

Why these choices:

- Weights are int8 per output channel, symmetric, in onnxruntime's reduced range [-64, 64]. On x86 CPUs without VNNI
  (AVX2, AVX-512F) the uint8 x int8 kernel adds pairs of products in saturating int16 (`vpmaddubsw`): with
  full-range weights, 255 * 127 * 2 overflows and results go wrong (by 40 % on adversarial inputs, checked with
  `MatMulInteger`). On the official e2e fixtures' tiny models this was most of int8's error (pose heatmaps rel-L2
  0.16 -> 0.036, segmentation pixels changed 19.5 % -> 3.4 %). With |w| <= 64 nothing can saturate, so every CPU
  computes the same numbers; on random 0.4b-wide weights (no saturation) the 7-bit weights cost rel-L2 0.052 vs 0.048.
- Only the linear layers: they are ~79 % of the float32 run time. The attention products, softmax, norms, RoPE and
  the patch convolution stay float32 (int8 `ConvInteger` was not faster). uint8 x uint8 (no saturation but a 1.5x GEMM
  kernel instead of 2.0x), onnxruntime's 4-/8-bit `MatMulNBits` (0.7-1.0x of float32 on AVX2) and torch's dynamic
  int8 linear (1.36x) were measured and lose.
- The float32 graph's bf16 RoPE emulation (`Cast` pairs to bfloat16 and back, `onnx_bf16.py`) is removed from the
  int8 graph: it reproduces the official rounding to ~1e-6, far below int8's ~5e-2, and its single-threaded Casts
  are ~2-3 % of the int8 run time. RoPE then runs in float32 (transformers' arithmetic).

Why not 1.8x on this machine class: onnxruntime's int8 GEMM is 1.9-2.1x faster than its float32 GEMM on the
backbone's shapes (without VNNI, two 16-bit multiply-add instructions per 32 int8 products against one float32 FMA per
8), and the remaining ~21 % of the float32 time runs at the same speed in both graphs: Amdahl gives
1 / (0.79 / 2 + 0.21) = 1.65x, up to ~1.8x as the int8 graph also fuses the bias additions and drops the bf16
Casts. The benchmark prints this profile and the kernel speed-up. CPUs with VNNI (AVX-512 VNNI, AVX-VNNI: one
instruction per 32 int8 products) have a faster int8 kernel and a higher ceiling (not measured here).
`export_model(..., quantize=...)` records the deviation from the float32 graph in `export_info.json`.
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
