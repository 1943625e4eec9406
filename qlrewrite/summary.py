"""What `qlrewrite info` reports: the model's Q/DQ nodes grouped, and model-level facts.

Reads no weights: types and shapes come from the graph (with ONNX type inference on a
weight-free copy where a type is not declared), byte counts from shapes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import onnx
import onnx_ir as ir

from qlrewrite import tensors
from qlrewrite.custom_quant import custom_quant_groups
from qlrewrite.qdq import NodeView, constant_tensor, is_constant, iter_graphs, node_views

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


def _name(dtype: ir.DataType | None) -> str:
    return dtype.name if dtype is not None else "?"


def _constant_inputs(node: ir.Node) -> dict[int, int]:
    """id -> bytes of the node's initializers (overridable ones too) and Constant outputs."""
    found = {}
    for value in node.inputs:
        if value is None:
            continue
        tensor = value.const_value if value.const_value is not None else constant_tensor(value)
        if tensor is not None:
            found[id(value)] = tensors.tensor_bytes(tensor)
    return found


def _group(view: NodeView) -> QDQGroup:
    scale = view.scale
    return QDQGroup(
        domain=view.domain_label,
        op_type=view.op_type,
        version=view.site.version,
        x_type=_name(view.x_type),
        scale_type=_name(scale.dtype if scale is not None else None),
        granularity=str(view.granularity),
        constant=all(is_constant(v) for v in view.node.inputs),
    )


def model_summary(model: ir.Model, *, weightless: onnx.ModelProto | None = None) -> dict[str, Any]:
    """A JSON-ready description of ``model`` (the `info` command's content).

    ``weightless``: a weight-free proto of the model for type inference (see
    :class:`qlrewrite.qdq.inference.Inference`); without it the model is serialized.

    ``input_bytes`` of a group counts each constant input (weight, scale, zero point)
    once, however many of the group's nodes share it.
    """
    groups: Counter[QDQGroup] = Counter()
    group_inputs: dict[QDQGroup, dict[int, int]] = {}
    for site, views in node_views(model, weightless=weightless, read=False, calls=False):
        (view,) = views
        group = _group(view)
        groups[group] += 1
        group_inputs.setdefault(group, {}).update(_constant_inputs(site.node))
    n_graphs = sum(1 for _ in iter_graphs(model))  # main, subgraphs and functions
    return {
        "ir_version": model.ir_version,
        "opset_imports": {(d or "ai.onnx"): v for d, v in sorted(model.opset_imports.items())},
        "graphs": 1,
        "subgraphs": n_graphs - 1 - len(model.functions),
        "functions": len(model.functions),
        "initializers": {
            "count": sum(len(g.initializers) for g in model.graphs()),
            "bytes": tensors.initializer_bytes(model),
            "external_data": tensors.uses_external_data(model),
        },
        "custom_quant": [g.to_json() for g in custom_quant_groups(model)],
        "qdq_nodes": sum(groups.values()),
        "qdq": [
            {
                **dataclasses.asdict(group),
                "nodes": count,
                "input_bytes": sum(group_inputs[group].values()),
            }
            for group, count in sorted(
                groups.items(), key=lambda kv: (kv[0].domain, kv[0].op_type, -kv[1])
            )
        ],
    }
