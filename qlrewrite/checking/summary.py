"""What `qlrewrite info` reports: the model's Q/DQ nodes grouped, its weight-only nodes
(com.microsoft MatMulNBits, GatherBlockQuantized) grouped, its QOperator / dynamic nodes
(QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft QLinear*, QGemm, ...) grouped
with their quantization parameters, the quantized nodes it leaves alone, and model-level
facts.

Reads no weights: types and shapes come from the graph (with ONNX type inference on a
weight-free copy where a type is not declared), byte counts from shapes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import onnx
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.io import tensors
from qlrewrite.qdq import (
    LEFT_ALONE,
    QDQ,
    QOPERATOR,
    WEIGHT_ONLY,
    NodeView,
    constant_tensor,
    implied_imports,
    is_constant,
    iter_graphs,
    node_views,
    triples,
)
from qlrewrite.qdq.custom_ops import custom_quant_groups
from qlrewrite.toolkit import import_table, main_graphs

__all__ = ["LeftAloneGroup", "QDQGroup", "QOperatorGroup", "WeightOnlyGroup", "model_summary"]


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


@dataclasses.dataclass(frozen=True)
class WeightOnlyGroup:
    """MatMulNBits / GatherBlockQuantized nodes that share op, version, weight type,
    attributes, zero-point format, scale type and constness.

    MatMulNBits: ``K`` x ``N`` weights; GatherBlockQuantized: ``shape``, the table's
    logical shape (uint8 data unpacked to its values), quantized along ``quantize_axis``.
    ``bits`` is None for float8 / float4 data (the type gives the width).
    """

    op_type: str
    version: int | None
    weight_type: str
    bits: int | None
    block_size: int | None
    K: int | None
    N: int | None
    shape: tuple[int | None, ...] | None
    quantize_axis: int | None
    zero_points: str  # "none", "packed UINT8", or the element type (unpacked)
    scale_type: str
    accuracy_level: int | None
    constant: bool


@dataclasses.dataclass(frozen=True)
class QOperatorGroup:
    """QOperator / dynamic nodes (QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft
    QLinear*, QGemm, ...) sharing op, version and quantization: one ``name TYPE
    granularity`` entry per quantized tensor (``w INT8 per-channel(axis 0)``)."""

    domain: str
    op_type: str
    version: int | None
    quantization: tuple[str, ...]
    constant_weights: bool
    #: The ai.onnx operator of its Q/DQ form ("" when `convert --to onnx` leaves it).
    float_op: str
    #: Why `convert --to onnx` leaves it ("" when it converts it).
    refusal: str


@dataclasses.dataclass(frozen=True)
class LeftAloneGroup:
    """Quantized com.microsoft nodes qlrewrite neither checks nor converts, and why."""

    domain: str
    op_type: str
    reason: str


def _qoperator_group(view: NodeView) -> QOperatorGroup:
    row = view.row
    found = triples(view)
    weights = [t for t in found if t.role == "weight"]
    return QOperatorGroup(
        domain=view.domain_label,
        op_type=view.op_type,
        version=view.site.version,
        quantization=tuple(t.describe() for t in found),
        constant_weights=all(is_constant(t.values[0]) for t in weights),
        float_op=(row.float_op or "") if row is not None else "",
        refusal=row.refusal if row is not None else "",
    )


def _left_alone_group(view: NodeView) -> LeftAloneGroup:
    reason = opsets.QUANTIZED_LEFT_ALONE[(view.domain, view.op_type)]
    return LeftAloneGroup(view.domain_label, view.op_type, reason)


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


def _weight_only_group(view: NodeView) -> WeightOnlyGroup:
    row, values = view.row, view.weight_attributes
    weight, zero_point, scale = view.x, view.zero_point, view.scale
    weight_type = weight.dtype if weight is not None else None
    storage = row.storage.get(weight_type) if row is not None and weight_type else None
    zp_type = zero_point.dtype if zero_point is not None else None
    if zero_point is None:
        zero_points = "none"
    elif zp_type == ir.DataType.UINT8 and storage is not None and storage.packed:
        zero_points = f"packed {zp_type.name}"
    else:
        zero_points = _name(zp_type)
    bits = values.get("bits") if storage is None or storage.bits else None
    shape = quantize_axis = None
    if view.op_type == "GatherBlockQuantized" and weight is not None and weight.shape is not None:
        dims = list(weight.shape)
        if storage is not None and storage.packed and bits in storage.bits and dims:
            dims[-1] = dims[-1] * (8 // bits) if dims[-1] is not None else None
        shape = tuple(dims)
        axis = values.get("quantize_axis")
        if axis is not None and -len(dims) <= axis < len(dims):
            quantize_axis = axis % len(dims)
    activation = row.input_index(row.activation) if row is not None else -1
    inputs = view.node.inputs
    return WeightOnlyGroup(
        op_type=view.op_type,
        version=view.site.version,
        weight_type=_name(weight_type),
        bits=bits,
        block_size=values.get("block_size"),
        K=values.get("K"),
        N=values.get("N"),
        shape=shape,
        quantize_axis=quantize_axis,
        zero_points=zero_points,
        scale_type=_name(scale.dtype if scale is not None else None),
        accuracy_level=values.get("accuracy_level"),
        constant=all(is_constant(v) for i, v in enumerate(inputs) if i != activation),
    )


_GROUP_OF = {QDQ.name: _group, QOPERATOR.name: _qoperator_group, LEFT_ALONE.name: _left_alone_group}


def _grouped(counts: Counter, inputs: dict[Any, dict[int, int]], key: Any) -> list[dict]:
    """JSON rows of ``counts`` (group -> nodes), with the bytes of their constant inputs."""
    return [
        {**dataclasses.asdict(group), "nodes": count, "input_bytes": sum(inputs[group].values())}
        for group, count in sorted(counts.items(), key=lambda kv: key(kv[0], kv[1]))
    ]


def model_summary(model: ir.Model, *, weightless: onnx.ModelProto | None = None) -> dict[str, Any]:
    """A JSON-ready description of ``model`` (the `info` command's content).

    ``weightless``: a weight-free proto of the model for type inference (see
    :class:`qlrewrite.qdq.inference.Inference`); without it the model is serialized.

    ``input_bytes`` of a group counts each constant input (weight, scale, zero point)
    once, however many of the group's nodes share it.
    """
    groups: Counter[Any] = Counter()
    group_inputs: dict[Any, dict[int, int]] = {}
    kinds = (QDQ, *WEIGHT_ONLY, QOPERATOR, LEFT_ALONE)
    for site, views in node_views(
        model, weightless=weightless, read=False, calls=False, kinds=kinds
    ):
        (view,) = views
        group = _GROUP_OF.get(site.kind.name, _weight_only_group)(view)
        groups[group] += 1
        group_inputs.setdefault(group, {}).update(_constant_inputs(site.node))
    qdq, weight_only, qoperator, left_alone = (
        Counter({g: n for g, n in groups.items() if isinstance(g, cls)})
        for cls in (QDQGroup, WeightOnlyGroup, QOperatorGroup, LeftAloneGroup)
    )
    n_graphs = sum(1 for _ in iter_graphs(model))  # main, subgraphs and functions
    return {
        "ir_version": model.ir_version,
        "opset_imports": {(d or "ai.onnx"): v for d, v in sorted(import_table(model).items())},
        # domains the graph uses without importing them, read at the version ONNX Runtime
        # implies (com.microsoft 1: QL103)
        "implied_imports": implied_imports(model),
        "graphs": 1,
        "subgraphs": n_graphs - 1 - len(model.functions),
        "functions": len(model.functions),
        "initializers": {
            "count": sum(len(g.initializers) for g in main_graphs(model)),
            "bytes": tensors.initializer_bytes(model),
            "external_data": tensors.uses_external_data(model),
        },
        "custom_quant": [g.to_json() for g in custom_quant_groups(model)],
        "qdq_nodes": sum(qdq.values()),
        "qdq": _grouped(qdq, group_inputs, lambda g, n: (g.domain, g.op_type, -n)),
        "weight_only_nodes": sum(weight_only.values()),
        "weight_only": _grouped(weight_only, group_inputs, lambda g, n: (g.op_type, -n)),
        "qoperator_nodes": sum(qoperator.values()),
        "qoperator": _grouped(qoperator, group_inputs, lambda g, n: (g.domain, g.op_type, -n)),
        "left_alone_nodes": sum(left_alone.values()),
        "left_alone": _grouped(left_alone, group_inputs, lambda g, n: (g.domain, g.op_type)),
    }
