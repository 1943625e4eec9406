"""What `qlrewrite info` reports: the model's Q/DQ nodes grouped, its weight-only nodes
(com.microsoft MatMulNBits, GatherBlockQuantized) grouped, and model-level facts.

Reads no weights: types and shapes come from the graph (with ONNX type inference on a
weight-free copy where a type is not declared), byte counts from shapes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import onnx
import onnx_ir as ir

from qlrewrite import opsets, tensors
from qlrewrite.custom_quant import custom_quant_groups
from qlrewrite.qdq import QDQSite, granularity, is_constant, iter_graphs, iter_qdq_nodes
from qlrewrite.weight_only import int_attributes
from qlrewrite.weightless import weightless_proto

__all__ = ["QDQGroup", "WeightOnlyGroup", "model_summary"]


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


def _dtype(value: ir.Value | None) -> ir.DataType | None:
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype
    if value.const_value is not None:
        return value.const_value.dtype
    return None


def _output_type(site: QDQSite, zero_point: ir.Value | None) -> ir.DataType | None:
    """The element type of a Q/DQ node's output as its opset decides it (no data read)."""
    node = site.node
    row = opsets.lookup(site.domain, node.op_type, site.imported)
    if row is None:
        return None
    attr = node.attributes.get("output_dtype")
    output_dtype = attr.as_int() if attr is not None and attr.type == ir.AttributeType.INT else None
    try:
        return opsets.output_type(
            row,
            scale_type=_dtype(node.inputs[1]) if len(node.inputs) > 1 else None,
            zero_point_type=_dtype(zero_point),
            output_dtype=output_dtype,
        )
    except ValueError:  # an output_dtype that is no data type
        return None


class _InferredTypes:
    """Element types by value name from ONNX type inference on a weight-free copy of the
    model; computed once, and only if a Q/DQ input has no declared type."""

    def __init__(self, model: ir.Model, weightless: onnx.ModelProto | None = None) -> None:
        self._model = model
        self._weightless = weightless
        self._types: dict[str, ir.DataType] | None = None

    def get(self, name: str) -> ir.DataType | None:
        if self._types is None:
            self._types = self._infer()
        return self._types.get(name)

    def _infer(self) -> dict[str, ir.DataType]:
        try:
            proto = self._weightless
            if proto is None:
                proto = weightless_proto(self._model, max_inline_bytes=0)
            proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
        except Exception:  # an invalid model: fall back to the opset rules
            return {}
        types: dict[str, ir.DataType] = {}
        graphs = [proto.graph]
        while graphs:
            graph = graphs.pop()
            for info in (*graph.value_info, *graph.output):
                elem = info.type.tensor_type.elem_type
                if elem and elem in _KNOWN_TYPES:
                    types.setdefault(info.name, ir.DataType(elem))
            for node in graph.node:
                for attr in node.attribute:
                    graphs.extend([attr.g] if attr.HasField("g") else [])
                    graphs.extend(attr.graphs)
        return types


_KNOWN_TYPES = frozenset(int(t) for t in ir.DataType)


def _declared_or_inferred(value: ir.Value | None, inferred: _InferredTypes) -> ir.DataType | None:
    found = _dtype(value)
    if found is None and value is not None and value.name:
        found = inferred.get(value.name)
    return found


def _x_type(
    site: QDQSite, sites: dict[int, QDQSite], inferred: _InferredTypes
) -> ir.DataType | None:
    """The type of x: declared, inferred, or implied by the zero point, the producing Q,
    or the opset."""
    node = site.node
    x = node.inputs[0] if node.inputs else None
    found = _declared_or_inferred(x, inferred)
    if found is not None or x is None:
        return found
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    if node.op_type == "DequantizeLinear":
        found = _dtype(zero_point)  # DQ: x and zero point share a type
        producer = x.producer()
        if found is None and producer is not None and id(producer) in sites:
            parent = sites[id(producer)]
            parent_zp = producer.inputs[2] if len(producer.inputs) > 2 else None
            found = _output_type(parent, parent_zp)
        return found
    row = opsets.lookup(site.domain, node.op_type, site.imported)
    if row is not None and row.scale_matches_x and len(node.inputs) > 1:
        return _dtype(node.inputs[1])
    if row is not None and len(row.x_types) == 1:
        return next(iter(row.x_types))
    return None


def _name(dtype: ir.DataType | None) -> str:
    return dtype.name if dtype is not None else "?"


def _constant_inputs(node: ir.Node) -> dict[int, int]:
    """id -> bytes of the node's constant inputs (initializers or Constant outputs)."""
    found = {}
    for value in node.inputs:
        if value is None:
            continue
        tensor = value.const_value
        producer = value.producer()
        if tensor is None and producer is not None and producer.op_type == "Constant":
            attr = producer.attributes.get("value")
            if attr is not None and attr.type == ir.AttributeType.TENSOR:
                tensor = attr.value
        if tensor is not None:
            found[id(value)] = tensors.tensor_bytes(tensor)
    return found


def _weight_only_group(site: QDQSite, inferred: _InferredTypes) -> WeightOnlyGroup:
    node = site.node
    row = opsets.weight_only(site.domain, node.op_type, site.imported)

    def value(index: int) -> ir.Value | None:
        return node.inputs[index] if index < len(node.inputs) else None

    values = int_attributes(node.attributes, row) if row is not None else {}
    activation = row.input_index(row.activation) if row is not None else -1
    weight = value(row.input_index(row.weight)) if row is not None else value(0)
    weight_type = _declared_or_inferred(weight, inferred)
    storage = row.storage.get(weight_type) if row is not None and weight_type else None
    zero_point = _declared_or_inferred(value(3), inferred)
    if value(3) is None:
        zero_points = "none"
    elif zero_point == ir.DataType.UINT8 and storage is not None and storage.packed:
        zero_points = f"packed {zero_point.name}"
    else:
        zero_points = _name(zero_point)
    bits = values.get("bits") if storage is None or storage.bits else None
    shape = quantize_axis = None
    if node.op_type == "GatherBlockQuantized" and weight is not None and weight.shape is not None:
        dims = [d if isinstance(d, int) else None for d in weight.shape]
        if storage is not None and storage.packed and bits in storage.bits and dims:
            dims[-1] = dims[-1] * (8 // bits) if dims[-1] is not None else None
        shape = tuple(dims)
        axis = values.get("quantize_axis")
        if axis is not None and -len(dims) <= axis < len(dims):
            quantize_axis = axis % len(dims)
    return WeightOnlyGroup(
        op_type=node.op_type,
        version=site.version,
        weight_type=_name(weight_type),
        bits=bits,
        block_size=values.get("block_size"),
        K=values.get("K"),
        N=values.get("N"),
        shape=shape,
        quantize_axis=quantize_axis,
        zero_points=zero_points,
        scale_type=_name(_declared_or_inferred(value(2), inferred)),
        accuracy_level=values.get("accuracy_level"),
        constant=all(is_constant(v) for i, v in enumerate(node.inputs) if i != activation),
    )


def _grouped(counts: Counter, inputs: dict[Any, dict[int, int]], key: Any) -> list[dict]:
    """JSON rows of ``counts`` (group -> nodes), with the bytes of their constant inputs."""
    return [
        {**dataclasses.asdict(group), "nodes": count, "input_bytes": sum(inputs[group].values())}
        for group, count in sorted(counts.items(), key=lambda kv: key(kv[0], kv[1]))
    ]


def model_summary(model: ir.Model, *, weightless: onnx.ModelProto | None = None) -> dict[str, Any]:
    """A JSON-ready description of ``model`` (the `info` command's content).

    ``weightless``: a weight-free proto of the model for type inference (see
    :func:`qlrewrite.passes.check.check_model`); without it the model is serialized.

    ``input_bytes`` of a group counts each constant input (weight, scale, zero point)
    once, however many of the group's nodes share it.
    """
    all_sites = list(iter_qdq_nodes(model))
    by_node = {id(site.node): site for site in all_sites}
    inferred = _InferredTypes(model, weightless)
    groups: Counter[QDQGroup] = Counter()
    group_inputs: dict[QDQGroup, dict[int, int]] = {}
    for site in all_sites:
        node = site.node
        scale = node.inputs[1] if len(node.inputs) > 1 else None
        group = QDQGroup(
            domain=site.domain or "ai.onnx",
            op_type=node.op_type,
            version=site.version,
            x_type=_name(_x_type(site, by_node, inferred)),
            scale_type=_name(_declared_or_inferred(scale, inferred)),
            granularity=granularity(node),
            constant=all(is_constant(v) for v in node.inputs),
        )
        groups[group] += 1
        group_inputs.setdefault(group, {}).update(_constant_inputs(node))
    weight_groups: Counter[WeightOnlyGroup] = Counter()
    weight_inputs: dict[WeightOnlyGroup, dict[int, int]] = {}
    for site in iter_qdq_nodes(model, opsets.WEIGHT_ONLY_OPS):
        group = _weight_only_group(site, inferred)
        weight_groups[group] += 1
        weight_inputs.setdefault(group, {}).update(_constant_inputs(site.node))
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
        "qdq": _grouped(groups, group_inputs, lambda g, n: (g.domain, g.op_type, -n)),
        "weight_only_nodes": sum(weight_groups.values()),
        "weight_only": _grouped(weight_groups, weight_inputs, lambda g, n: (g.op_type, -n)),
    }
