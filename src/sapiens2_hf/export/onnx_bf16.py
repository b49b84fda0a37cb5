"""bfloat16 arithmetic of an ONNX graph, reproduced in float32 storage with explicit rounding Casts.

Why: the official bf16 RoPE exports as bf16 `Mul`/`Add` nodes, which onnxruntime's CPU provider cannot run ("Could
not find an implementation for Mul(14)"); it has bf16 `Cast` only.

How: as torch's CPU bf16 element-wise kernels (load as float32, compute in float32, round to nearest even), every bf16
tensor becomes a float32 tensor holding bf16-representable values (initializers and constants widened exactly); a
`Cast(to=bfloat16)`, and every rounding op (`Mul`, `Add`, `Cos`, ...: `_ROUNDING`), gets a `Cast(to=float)` pair
after it; value-preserving ops (`Split`, `Neg`, `Reshape`, ...) are left alone. A bf16 product is exact in float32
(bit-identical to torch); a sum is rounded twice (float32, then bf16), as torch's own kernel does. onnxruntime's
float->bf16 Cast rounds like torch (tests/test_export.py) and its optimiser keeps the pairs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np


# Ops whose float32 output is already bf16-representable when their inputs are (no new rounding).
_VALUE_PRESERVING = {
    "Abs", "Concat", "Expand", "Flatten", "Gather", "GatherElements", "Identity", "Neg", "Reshape", "Slice", "Split",
    "Squeeze", "Tile", "Transpose", "Unsqueeze", "Max", "Min", "Relu",
}
# Ops that read only the shape of a bf16 tensor.
_SHAPE_ONLY = {"Shape", "Size"}
# Ops that torch computes in float32 and rounds once to bf16: emulated as float32 op + Cast pair.
_ROUNDING = {
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Cos", "Sin", "Exp", "Log", "Sigmoid", "Tanh", "Erf",
    "ReduceMean", "ReduceSum", "Softmax", "MatMul",
}


class Bfloat16EmulationError(ValueError):
    """A bf16 op this pass does not know how to reproduce in float32."""


def _bf16_names(graph, TensorProto) -> set[str]:
    """Names of the bf16 tensors of `graph`: declared ones plus a forward propagation through the node list (which
    ONNX keeps in topological order), so a graph without complete `value_info` is handled too."""
    bf16 = set()
    for value in list(graph.value_info) + list(graph.input) + list(graph.output):
        if value.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            bf16.add(value.name)
    bf16.update(init.name for init in graph.initializer if init.data_type == TensorProto.BFLOAT16)
    for node in graph.node:
        if node.op_type == "Cast":
            to = next(a.i for a in node.attribute if a.name == "to")
            if to == TensorProto.BFLOAT16:
                bf16.update(node.output)
        elif node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.t.data_type == TensorProto.BFLOAT16:
                    bf16.update(node.output)
        elif node.op_type in _VALUE_PRESERVING | _ROUNDING and node.input and node.input[0] in bf16:
            bf16.update(node.output[:1] if node.op_type != "Split" else node.output)
    return bf16


def emulate_bfloat16(model) -> dict:
    """Rewrites `model` (an `onnx.ModelProto`, in place) so that it holds no bf16 arithmetic (see the module docstring).

    Returns:
        `dict` with `rounding_casts` (the number of float32 -> bf16 -> float32 Cast pairs the graph now holds),
        `emulated_ops` (op type -> count of float32 ops standing in for bf16 ops) and `widened_initializers`.

    Raises:
        Bfloat16EmulationError: a graph input or output is bf16, or an op on bf16 values is not in the known sets.
    """
    import onnx

    TensorProto = onnx.TensorProto
    graph = model.graph
    if any(v.type.tensor_type.elem_type == TensorProto.BFLOAT16 for v in list(graph.input) + list(graph.output)):
        raise Bfloat16EmulationError("a graph input or output is bfloat16; export the model in float32.")
    bf16 = _bf16_names(graph, TensorProto)
    control_flow = sorted({node.op_type for node in graph.node if any(a.type == a.GRAPH for a in node.attribute)})
    if bf16 and control_flow:
        raise Bfloat16EmulationError(f"bf16 values in a graph with control flow ({control_flow}) are not supported.")
    report = {"rounding_casts": 0, "emulated_ops": Counter(), "widened_initializers": 0}
    if not bf16:
        report["emulated_ops"] = {}
        return report

    for index, init in enumerate(graph.initializer):
        if init.data_type == TensorProto.BFLOAT16:
            values = onnx.numpy_helper.to_array(init).astype(np.float32)
            graph.initializer[index].CopyFrom(onnx.numpy_helper.from_array(values, init.name))
            report["widened_initializers"] += 1
    nodes = []
    for node in graph.node:
        if any(name in bf16 for name in list(node.input) + list(node.output)):
            nodes.extend(_float32_nodes(onnx, node, report))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    for value in graph.value_info:
        if value.name in bf16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    report["emulated_ops"] = dict(sorted(report["emulated_ops"].items()))
    return report


def _rounding_pair(onnx, source: str, target: str) -> list:
    """``target = float32(bfloat16(source))``: two Cast nodes."""
    rounded = f"{target}__bf16"
    return [
        onnx.helper.make_node("Cast", [source], [rounded], to=onnx.TensorProto.BFLOAT16, name=f"{target}__round_bf16"),
        onnx.helper.make_node("Cast", [rounded], [target], to=onnx.TensorProto.FLOAT, name=f"{target}__widen_f32"),
    ]


def _float32_nodes(onnx, node, report: dict) -> list:
    """The float32 nodes standing in for one node that reads or writes bf16 values (counted in ``report``)."""
    op = node.op_type
    if op == "Cast":
        to = next(a.i for a in node.attribute if a.name == "to")
        if to != onnx.TensorProto.BFLOAT16:
            return [node]  # bf16 (now float32) -> float32 or int: same values
        # the rounding itself: kept, then widened back to float32 storage
        output = node.output[0]
        node.output[0] = f"{output}__bf16"
        report["rounding_casts"] += 1
        return [node, onnx.helper.make_node("Cast", [node.output[0]], [output], to=onnx.TensorProto.FLOAT,
                                            name=f"{output}__widen_f32")]
    if op == "Constant":
        attribute = next(a for a in node.attribute if a.name == "value")
        values = onnx.numpy_helper.to_array(attribute.t).astype(np.float32)
        attribute.t.CopyFrom(onnx.numpy_helper.from_array(values, attribute.t.name))
        return [node]
    if op in _VALUE_PRESERVING or op in _SHAPE_ONLY:
        return [node]
    if op in _ROUNDING:
        report["emulated_ops"][op] += 1
        pairs = []
        for position, output in enumerate(node.output):
            node.output[position] = f"{output}__f32"
            pairs.extend(_rounding_pair(onnx, node.output[position], output))
            report["rounding_casts"] += 1
        return [node, *pairs]
    raise Bfloat16EmulationError(
        f"the exported graph computes {op} ({node.name}) in bfloat16, which this pass cannot reproduce in "
        "float32; export the float32-RoPE variant (rope_dtype='float32')."
    )


def rounding_pairs(graph) -> list[tuple]:
    """The bf16 rounding pairs of `graph`: `(Cast(to=bfloat16) node, its consumers)` where every consumer is a
    `Cast(to=float)`."""
    from onnx import TensorProto

    def casts_to(node, dtype) -> bool:
        return node.op_type == "Cast" and any(a.name == "to" and a.i == dtype for a in node.attribute)

    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = []
    for node in graph.node:
        after = consumers.get(node.output[0], []) if casts_to(node, TensorProto.BFLOAT16) else []
        if after and all(casts_to(n, TensorProto.FLOAT) for n in after):
            found.append((node, after))
    return found


def count_rounding_casts(model) -> int:
    """Number of `Cast(to=bfloat16)` nodes directly followed by `Cast(to=float)` in `model`'s main graph."""
    return len(rounding_pairs(model.graph))
