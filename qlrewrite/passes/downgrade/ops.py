"""Ops a downgrade writes as their formula in older ops, and those it refuses up front.

ONNX's version converter stops on an op that has no version at the target opset ("No
Previous Version of Gelu exists"). Before it runs, on the weight-free copy it converts:

- ``Gelu`` (ai.onnx 20) becomes ONNX Runtime's formula in older ops: ``approximate="none"``
  is ``(0.5 * x) * (Erf(x * M_SQRT1_2) + 1)``, as its CPU kernel computes it
  (onnxruntime/core/providers/cpu/tensor/gelu.cc; measured bit-identical to Gelu-20 with
  ORT 1.31.1, optimizations off); ``approximate="tanh"`` is
  ``(0.5 * x) * (Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) + 1)`` (not the kernel's
  evaluation order: tests/pipeline/test_ship.py states the measured bound);
- ``LayerNormalization`` (17; negative axis, float32, Mean / InvStdDev unused) becomes
  ``(x - mean) / Sqrt(var + epsilon) * scale + bias`` with ReduceMean (two-pass variance,
  not the kernel's E[x^2] - E[x]^2: the bound is stated in docs/commands/downgrade.md);
- any other op with no version at the target opset is refused, naming the op, its
  version and the lowest opset that holds it (upgrading the target or exporting the
  model at that opset are the ways on).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from qlrewrite.errors import Refusal
from qlrewrite.text import grouped
from qlrewrite.toolkit import normalize_domain, proto_graphs

__all__ = ["lower_new_ops"]

#: A value's element type by name (None: unknown).
TypeOf = Callable[[str], "int | None"]

_SQRT1_2 = np.float32(math.sqrt(0.5))
_SQRT_2_PI = np.float32(math.sqrt(2 / math.pi))


def lower_new_ops(
    proto: onnx.ModelProto,
    source: int,
    target: int,
    type_of: TypeOf = lambda _name: None,
    *,
    hold: str = "",
) -> int:
    """Rewrite, in ``proto`` (ai.onnx opset ``source``), every op with no version at
    ``target`` that has a formula here; Refusal naming the others (``type_of``: a value's
    element type by name, None when unknown). The formula's nodes are written as opset
    ``target`` has them, in the domain ``hold`` (the downgrade's private domain: the
    converter passes them by). Returns the number of nodes rewritten."""
    refused: list[tuple[str, list[str]]] = []
    lowered = 0
    for _, graph in proto_graphs(proto):
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            since = _missing_since(node, source, target)
            written, why = _formula(node, target, type_of) if since else (None, [])
            if since is None:
                nodes.append(node)
            elif written is not None:
                for new in written:
                    new.domain = hold
                nodes.extend(written)
                lowered += 1
            else:
                where = f"{node.op_type} '{node.name or node.output[0]}'"
                refused.append((where, [*why, _why(node.op_type, since)]))
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


def _formula(
    node: onnx.NodeProto, opset: int, type_of: TypeOf
) -> tuple[list[onnx.NodeProto] | None, list[str]]:
    """``node`` written in ops of ``opset``, or (None, why not)."""
    if node.op_type == "Gelu":
        return _gelu(node), []
    if node.op_type == "LayerNormalization":
        why = _layer_norm_problems(node, type_of)
        return (None, why) if why else (_layer_norm(node, opset), [])
    return None, []


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


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _layer_norm_problems(node: onnx.NodeProto, type_of: TypeOf) -> list[str]:
    """Why LayerNormalization ``node`` is not written as its formula (none: it is)."""
    why = []
    if _attribute(node, "axis", -1) >= 0:
        why.append("its axis is not negative (the formula needs the normalized axes from the end)")
    if any(output for output in node.output[1:]):
        why.append("its Mean / InvStdDev outputs are used")
    if type_of(node.input[0]) != onnx.TensorProto.FLOAT:
        why.append("its input is not known to be float32")
    if _attribute(node, "stash_type", 1) != 1:
        why.append("its stash_type is not 1 (float32)")
    return why


def _layer_norm(node: onnx.NodeProto, opset: int) -> list[onnx.NodeProto]:
    """LayerNormalization (negative ``axis``, float32) as ``(x - mean) / Sqrt(var + eps) *
    scale (+ bias)`` with ReduceMean over the normalized axes (not ONNX Runtime's kernel's
    order, which takes the variance as E[x^2] - E[x]^2: tests/pipeline/test_ship.py states the
    measured bound)."""
    x, y = node.input[0], node.output[0]
    stem = f"{y}__layernorm"
    axes = list(range(_attribute(node, "axis", -1), 0))
    epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
    nodes = [
        helper.make_node(
            "Constant",
            [],
            [f"{stem}_eps"],
            value=numpy_helper.from_array(np.array(epsilon, np.float32), f"{stem}_eps"),
        ),
        *_reduce_mean(x, f"{stem}_mean", axes, opset),
        helper.make_node("Sub", [x, f"{stem}_mean"], [f"{stem}_d"], name=f"{stem}_sub"),
        helper.make_node("Mul", [f"{stem}_d", f"{stem}_d"], [f"{stem}_sq"], name=f"{stem}_sq"),
        *_reduce_mean(f"{stem}_sq", f"{stem}_var", axes, opset),
        helper.make_node("Add", [f"{stem}_var", f"{stem}_eps"], [f"{stem}_ve"], name=f"{stem}_ve"),
        helper.make_node("Sqrt", [f"{stem}_ve"], [f"{stem}_std"], name=f"{stem}_std"),
        helper.make_node("Div", [f"{stem}_d", f"{stem}_std"], [f"{stem}_n"], name=f"{stem}_div"),
    ]
    has_bias = len(node.input) > 2 and node.input[2]
    scaled = f"{stem}_scaled" if has_bias else y
    nodes.append(
        helper.make_node("Mul", [f"{stem}_n", node.input[1]], [scaled], name=f"{stem}_mul")
    )
    if has_bias:
        nodes.append(helper.make_node("Add", [scaled, node.input[2]], [y], name=node.name or stem))
    return nodes


def _reduce_mean(x: str, y: str, axes: list[int], opset: int) -> list[onnx.NodeProto]:
    """ReduceMean over ``axes`` keeping them, in the form of ``opset`` (axes an input from
    18 on, given by a Constant node)."""
    if opset < 18:
        return [helper.make_node("ReduceMean", [x], [y], axes=axes, keepdims=1, name=y)]
    value = numpy_helper.from_array(np.array(axes, np.int64), f"{y}_axes")
    return [
        helper.make_node("Constant", [], [f"{y}_axes"], value=value),
        helper.make_node("ReduceMean", [x, f"{y}_axes"], [y], keepdims=1, name=y),
    ]
