"""What `qlrewrite info` reports: the model's Q/DQ nodes grouped, and model-level facts.

Reads no weights: types and shapes come from the graph, byte counts from shapes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import onnx_ir as ir

from qlrewrite import model_io
from qlrewrite.qdq import granularity, is_constant, iter_graphs, iter_qdq_nodes

__all__ = ["QDQGroup", "model_summary"]


@dataclasses.dataclass(frozen=True)
class QDQGroup:
    """Q/DQ nodes that share domain, op, version, types, granularity and constness."""

    domain: str
    op_type: str
    version: int | None
    x_type: str
    scale_type: str
    granularity: str
    constant: bool


def _dtype_name(value: ir.Value | None) -> str | None:
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype.name
    if value.const_value is not None:
        return value.const_value.dtype.name
    return None


def _x_type(node: ir.Node) -> str:
    x = node.inputs[0] if node.inputs else None
    name = _dtype_name(x)
    if name is None and node.op_type == "DequantizeLinear" and len(node.inputs) > 2:
        name = _dtype_name(node.inputs[2])  # DQ: x and zero point share a type
    return name or "?"


def _input_bytes(node: ir.Node) -> int:
    total = 0
    for value in node.inputs:
        if value is not None and value.const_value is not None:
            total += value.const_value.nbytes
    return total


def model_summary(model: ir.Model) -> dict[str, Any]:
    """A JSON-ready description of ``model`` (the `info` command's content)."""
    groups: Counter[QDQGroup] = Counter()
    group_bytes: Counter[QDQGroup] = Counter()
    for site in iter_qdq_nodes(model):
        node = site.node
        scale = node.inputs[1] if len(node.inputs) > 1 else None
        group = QDQGroup(
            domain=site.domain or "ai.onnx",
            op_type=node.op_type,
            version=site.version,
            x_type=_x_type(node),
            scale_type=_dtype_name(scale) or "?",
            granularity=granularity(node),
            constant=all(is_constant(v) for v in node.inputs),
        )
        groups[group] += 1
        group_bytes[group] += _input_bytes(node)
    labels = [label for label, _ in iter_graphs(model)]
    return {
        "ir_version": model.ir_version,
        "opset_imports": {(d or "ai.onnx"): v for d, v in sorted(model.opset_imports.items())},
        "graphs": sum(1 for label in labels if not label.startswith("function:")),
        "functions": len(model.functions),
        "initializers": {
            "count": sum(len(g.initializers) for g in model.graphs()),
            "bytes": model_io.initializer_bytes(model),
            "external_data": model_io.uses_external_data(model),
        },
        "qdq_nodes": sum(groups.values()),
        "qdq": [
            {**dataclasses.asdict(group), "nodes": count, "input_bytes": group_bytes[group]}
            for group, count in sorted(
                groups.items(), key=lambda kv: (kv[0].domain, kv[0].op_type, -kv[1])
            )
        ],
    }
