"""Float model inputs and outputs back from the metadata ``integer-io`` wrote: each
recorded input gets its QuantizeLinear again, each recorded output its
DequantizeLinear, as they were (name, domain, attributes, position, initializers).

Refused, naming the entry (nothing written): metadata under the prefix this tool did
not write (:func:`~qlrewrite.passes.integer_io.record.records`), an input or output it
names that the graph does not have or that is not of the recorded type, an initializer
of the recorded name whose value differs. The round trip gives back the original graph
(byte-identical when the removed node was the only one of its input and its type was
declared as recorded; an input that fed several equal QuantizeLinear nodes gets one).
"""

from __future__ import annotations

import collections

import numpy as np
import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.integer_io.record import Record, key_of, records
from qlrewrite.passes.integer_io.to_integer import IntegerIOResult

__all__ = ["FloatIOPass"]


def _graph_value(graph: ir.Graph, record: Record) -> ir.Value | None:
    values = graph.inputs if record.role == "input" else graph.outputs
    return next((v for v in values if v.name == record.name), None)


def _problem(graph: ir.Graph, record: Record) -> str:
    """Why ``record`` does not match the graph ("" when it does)."""
    value = _graph_value(graph, record)
    if value is None:
        return f"the graph has no {record.role} {record.name!r}"
    if value.dtype != record.quantized_type:
        return f"{record.role} {record.name!r} is {value.dtype}, not {record.quantized_type.name}"
    for name, expected in _initializer_values(record):
        found = graph.initializers.get(name)
        if found is not None and not _same(found, expected):
            return f"initializer {name!r} differs from the recorded value"
    return ""


def _initializer_values(record: Record) -> list[tuple[str, np.ndarray]]:
    names = (record.node.get("scale"), record.node.get("zero_point_name"))
    arrays = (record.scale, record.zero_point)
    return [(n, a) for n, a in zip(names, arrays, strict=True) if n is not None and a is not None]


def _same(value: ir.Value, expected: np.ndarray) -> bool:
    tensor = value.const_value
    if tensor is None:
        return False
    found = np.asarray(tensor.numpy())
    return found.dtype == expected.dtype and found.tobytes() == expected.tobytes()


def _initializer(graph: ir.Graph, name: str | None, array: np.ndarray | None) -> ir.Value | None:
    if name is None or array is None:
        return None
    found = graph.initializers.get(name)
    if found is not None:
        return found
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.dtype = value.const_value.dtype  # type: ignore[union-attr]
    value.shape = ir.Shape(array.shape)
    graph.register_initializer(value)
    return value


class FloatIOPass(ContextPass, ir.passes.InPlacePass):
    """Give back the float inputs and outputs recorded in the metadata (see module)."""

    keeps_types = False  # a restored input or output changes its type under its name

    def call(self, model: ir.Model) -> IntegerIOResult:
        graph = model.graph
        found = records(model)
        problems = [f"{key_of(r.role, r.name)!r}: {p}" for r in found if (p := _problem(graph, r))]
        if problems:
            raise Refusal("metadata does not match the model: " + "; ".join(problems))
        counts: collections.Counter[str] = collections.Counter()
        for record in sorted(found, key=lambda r: int(r.node["position"])):
            _restore(graph, record)
            del model.metadata_props[key_of(record.role, record.name)]
            counts[f"{record.role}s_made_float"] += 1
        return IntegerIOResult(model, modified=bool(found), summary=dict(counts))


def _node(graph: ir.Graph, record: Record, first: ir.Value, output: ir.Value) -> ir.Node:
    entry = record.node
    scale = _initializer(graph, entry.get("scale"), record.scale)
    zero = _initializer(graph, entry.get("zero_point_name"), record.zero_point)
    inputs = [first, scale] + ([zero] if entry.get("zero_point_name") is not None else [])
    op_type = "QuantizeLinear" if record.role == "input" else "DequantizeLinear"
    attributes = [ir.AttrInt64(n, int(v)) for n, v in dict(entry["attributes"]).items()]
    return ir.Node(
        entry.get("domain") or "",
        op_type,
        inputs,
        attributes,
        outputs=[output],
        name=entry.get("name"),
    )


def _declare(value: ir.Value, entry: dict[str, object]) -> None:
    """The quantized value's declared type and shape, as recorded."""
    declared = entry.get("value_type")
    dims = entry.get("value_shape")
    if declared is None:
        value.type = None
        value.shape = None
        return
    value.dtype = ir.DataType[str(declared)]
    value.shape = ir.Shape(dims) if isinstance(dims, list) else None


def _restore(graph: ir.Graph, record: Record) -> None:
    value = _graph_value(graph, record)
    assert value is not None
    entry = record.node
    if record.role == "input":
        quantized = ir.Value(name=str(entry["value"]))
        uses = list(value.uses())
        outputs = [i for i, v in enumerate(graph.outputs) if v is value]
        node = _node(graph, record, value, quantized)
        for use in uses:
            use.node.replace_input_with(use.idx, quantized)
        for index in outputs:
            graph.outputs[index] = quantized
        value.dtype = record.float_type
    else:
        shape = value.shape
        index = list(graph.outputs).index(value)
        value.name = str(entry["value"])
        result = ir.Value(name=record.name, type=ir.TensorType(record.float_type), shape=shape)
        node = _node(graph, record, value, result)
        graph.outputs[index] = result
        quantized = value
    _declare(quantized, entry)
    _insert(graph, node, int(entry["position"]))


def _insert(graph: ir.Graph, node: ir.Node, position: int) -> None:
    nodes = list(graph)
    if position < len(nodes):
        graph.insert_before(nodes[position], node)
    else:
        graph.append(node)
