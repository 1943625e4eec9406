"""Ops a downgrade writes as their formula in older ops, and those it refuses up front.

ONNX's version converter stops on an op that has no version at the target opset ("No
Previous Version of Gelu exists"). Before it runs, on the weight-free copy it converts:

- ``Gelu`` (ai.onnx 20) becomes ONNX Runtime's formula in older ops: ``approximate="none"``
  is ``(0.5 * x) * (Erf(x * M_SQRT1_2) + 1)``, as its CPU kernel computes it
  (onnxruntime/core/providers/cpu/tensor/gelu.cc; measured bit-identical to Gelu-20 with
  ORT 1.31.1, optimizations off); ``approximate="tanh"`` is
  ``(0.5 * x) * (Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) + 1)`` (not the kernel's
  evaluation order: tests/test_downgrade_ops.py states the measured bound);
- any other op with no version at the target opset is refused, naming the op, its
  version and the lowest opset that holds it (upgrading the target or exporting the
  model at that opset are the ways on).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from qlrewrite.errors import Refusal
from qlrewrite.listing import grouped
from qlrewrite.toolkit import normalize_domain, proto_graphs

__all__ = ["lower_new_ops"]

_SQRT1_2 = np.float32(math.sqrt(0.5))
_SQRT_2_PI = np.float32(math.sqrt(2 / math.pi))


def lower_new_ops(proto: onnx.ModelProto, source: int, target: int) -> int:
    """Rewrite, in ``proto`` (ai.onnx opset ``source``), every op with no version at
    ``target`` that has a formula here; Refusal naming the others. Returns the number of
    nodes rewritten."""
    refused: list[tuple[str, list[str]]] = []
    lowered = 0
    for _, graph in proto_graphs(proto):
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            since = _missing_since(node, source, target)
            if since is None:
                nodes.append(node)
            elif node.op_type == "Gelu":
                nodes.extend(_gelu(node))
                lowered += 1
            else:
                refused.append((node.name or node.output[0], [_why(node.op_type, since)]))
        if lowered:
            del graph.node[:]
            graph.node.extend(nodes)
    if refused:
        raise Refusal(f"cannot lower to opset {target}: {grouped(refused)}; nothing written")
    return lowered


def _missing_since(node: onnx.NodeProto, source: int, target: int) -> int | None:
    """The version of ``node``'s ai.onnx op at ``source`` when the op has none at
    ``target`` (None: it has one, or the node is another domain's)."""
    if normalize_domain(node.domain) != "":
        return None
    try:
        since = onnx.defs.get_schema(node.op_type, source, "").since_version
    except onnx.defs.SchemaError:
        return None
    try:
        onnx.defs.get_schema(node.op_type, target, "")
    except onnx.defs.SchemaError:
        return since
    return None


def _why(op: str, since: int) -> str:
    return (
        f"{op}-{since} has no earlier version (ai.onnx {since} is the lowest opset that "
        f"holds it): target a runtime that loads opset {since}, or export the model with "
        f"{op} written in older ops"
    )


def _gelu(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """``node`` (Gelu) as ONNX Runtime's CPU kernel computes it, in Mul / Erf / Tanh /
    Add nodes with their constants as Constant nodes (names from the node's output)."""
    x, y = node.input[0], node.output[0]
    approximate = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
    stem = f"{y}__gelu"

    def const(name: str, value: float) -> onnx.NodeProto:
        tensor = numpy_helper.from_array(np.array(value, np.float32), f"{stem}_{name}")
        return helper.make_node("Constant", [], [f"{stem}_{name}"], value=tensor)

    def op(kind: str, inputs: list[str], out: str) -> onnx.NodeProto:
        return helper.make_node(kind, inputs, [out], name=f"{stem}_{out.rsplit('_', 1)[-1]}")

    nodes = [const("half", 0.5), const("one", 1.0)]
    if approximate == "tanh":
        nodes += [const("c", 0.044715), const("k", float(_SQRT_2_PI))]
        nodes += [
            op("Mul", [x, x], f"{stem}_sq"),
            op("Mul", [f"{stem}_sq", x], f"{stem}_cube"),
            op("Mul", [f"{stem}_cube", f"{stem}_c"], f"{stem}_cc"),
            op("Add", [x, f"{stem}_cc"], f"{stem}_inner"),
            op("Mul", [f"{stem}_inner", f"{stem}_k"], f"{stem}_arg"),
            op("Tanh", [f"{stem}_arg"], f"{stem}_f"),
        ]
    else:
        nodes += [
            const("r", float(_SQRT1_2)),
            op("Mul", [x, f"{stem}_r"], f"{stem}_arg"),
            op("Erf", [f"{stem}_arg"], f"{stem}_f"),
        ]
    nodes += [
        op("Add", [f"{stem}_f", f"{stem}_one"], f"{stem}_p1"),
        op("Mul", [f"{stem}_half", x], f"{stem}_hx"),
        helper.make_node("Mul", [f"{stem}_hx", f"{stem}_p1"], [y], name=node.name or stem),
    ]
    return nodes
