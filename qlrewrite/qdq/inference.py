"""Type and shape inference: ONNX shape inference on a weight-free copy, per graph.

Run at most once per model, and only when a view asks for a value that is neither
constant nor declared. Results are kept per :class:`~qlrewrite.qdq.graphs.GraphRef`
(subgraphs see their outer scopes' names). Model-local functions get nothing here: inside
them only the call site's actual values have inferred facts. A run of passes shares one
(:class:`qlrewrite.passes.context.RunContext`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx
import onnx_ir as ir

from qlrewrite.io.weightless import weightless_proto
from qlrewrite.opsets import MS_DOMAIN
from qlrewrite.qdq.kinds import QDQ_OPS
from qlrewrite.qdq.view import TypeShape
from qlrewrite.toolkit import MAIN, GraphRef, graphs_within

__all__ = ["Inference", "declared", "infer", "tables_of"]


class Inference:
    """Inferred (type, shape) by value name, per graph; inference runs on first need.

    ``weightless``: a weight-free proto of the model as it is now (from
    :func:`~qlrewrite.io.weightless.weightless_proto`, or for a model just loaded
    :func:`~qlrewrite.io.weightless.weightless_from_source`); without it the model is
    serialized again if inference is needed.
    """

    def __init__(
        self,
        model: ir.Model,
        weightless: onnx.ModelProto | None = None,
        *,
        inferred: onnx.ModelProto | None = None,
    ) -> None:
        self._model = model
        self._weightless = weightless
        self._tables: dict[GraphRef, dict[str, TypeShape]] | None = None
        if inferred is not None:  # ONNX shape inference already ran on it (strict check)
            self._tables = tables_of(inferred)
        self._visible: dict[GraphRef, dict[str, TypeShape]] = {}

    @property
    def ran(self) -> bool:
        """Whether ONNX shape inference ran (or its result was given)."""
        return self._tables is not None

    def known(self, ref: GraphRef) -> dict[str, TypeShape]:
        """Name -> (type, shape) of graph ``ref`` alone, as ONNX shape inference gave it if
        it ran (or its result was given), else empty: asking never runs it."""
        return dict(self._tables.get(ref, {})) if self._tables is not None else {}

    def table(self, ref: GraphRef) -> dict[str, TypeShape]:
        """Name -> (type, shape) visible in graph ``ref`` (inner scopes first); merged
        once per graph."""
        if ref in self._visible:
            return self._visible[ref]
        if self._tables is None:
            self._tables = infer(self._model, self._weightless)
        outer = self.table(ref.parent) if ref.parent is not None else {}
        merged = {**outer, **self._tables.get(ref, {})}
        self._visible[ref] = merged
        return merged

    def scope(self, ref: GraphRef) -> Mapping[str, TypeShape]:
        """A lazy mapping for graph ``ref`` (empty inside a function)."""
        if ref.in_function:
            return {}
        return _Scope(self, ref)


class _Scope(Mapping[str, TypeShape]):
    """The names visible in one graph; inference runs only if a lookup needs it."""

    def __init__(self, inference: Inference, ref: GraphRef) -> None:
        self._inference = inference
        self._ref = ref
        self._table: dict[str, TypeShape] | None = None

    @property
    def _names(self) -> dict[str, TypeShape]:
        if self._table is None:
            self._table = self._inference.table(self._ref)
        return self._table

    def __getitem__(self, key: str) -> TypeShape:
        return self._names[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, key: object) -> bool:
        return key in self._names


def infer(
    model: ir.Model, weightless: onnx.ModelProto | None = None
) -> dict[GraphRef, dict[str, TypeShape]]:
    """Graph -> name -> (type, shape) from ONNX shape inference; {} when it cannot run."""
    try:
        source = weightless if weightless is not None else weightless_proto(model)
        proto = onnx.shape_inference.infer_shapes(
            _contrib_qdq_as_casts(source),
            check_type=False,
            strict_mode=False,
            data_prop=False,
        )
    except Exception:  # inference is a bonus: never fail on it
        return {}
    return tables_of(proto)


def _contrib_qdq_as_casts(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto``, or a copy whose com.microsoft Q/DQ nodes (unknown to ONNX's inference,
    so every value after them stayed untyped) are Casts to their output type: a
    DequantizeLinear's is its scale's, a QuantizeLinear's its zero point's (uint8 when
    omitted); the shape is the input's for both."""
    if not any(_is_contrib_qdq(n) for _, g in graphs_within(proto.graph, MAIN) for n in g.node):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for _, graph in graphs_within(copy.graph, MAIN):
        types = {t.name: t.data_type for t in graph.initializer}
        types.update(_constant_types(graph))
        types.update(
            (v.name, v.type.tensor_type.elem_type)
            for v in (*graph.input, *graph.value_info, *graph.output)
            if v.type.HasField("tensor_type")
        )
        for node in graph.node:
            if _is_contrib_qdq(node):
                _as_cast(node, types)
    return copy


def _is_contrib_qdq(node: onnx.NodeProto) -> bool:
    return node.domain == MS_DOMAIN and node.op_type in QDQ_OPS


def _as_cast(node: onnx.NodeProto, types: Mapping[str, int]) -> None:
    """Turn a com.microsoft Q/DQ ``node`` into a Cast to its output type, in place (left
    as it is when that type is not known here)."""
    dequantize = node.op_type == "DequantizeLinear"
    index = 1 if dequantize else 2
    typed_by = node.input[index] if len(node.input) > index else ""
    to = types.get(typed_by) if typed_by else (None if dequantize else onnx.TensorProto.UINT8)
    if not to:
        return
    x, y = node.input[0], node.output[0]
    node.Clear()
    node.CopyFrom(onnx.helper.make_node("Cast", [x], [y], to=to))


def _constant_types(graph: onnx.GraphProto) -> dict[str, int]:
    """The element type of each Constant node's tensor output (``value``)."""
    return {
        node.output[0]: attr.t.data_type
        for node in graph.node
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output
        for attr in node.attribute
        if attr.name == "value"
    }


def tables_of(inferred: onnx.ModelProto) -> dict[GraphRef, dict[str, TypeShape]]:
    """Graph -> name -> (type, shape) declared in ``inferred`` (a proto ONNX shape
    inference ran on)."""
    tables: dict[GraphRef, dict[str, TypeShape]] = {}
    for ref, graph in graphs_within(inferred.graph, MAIN):
        _collect(graph, tables.setdefault(ref, {}))
    return tables


def declared(graph: onnx.GraphProto) -> dict[str, TypeShape]:
    """Name -> (type, shape) of ``graph``'s values as its proto declares them (inferred,
    when ONNX shape inference ran on it); its subgraphs are not read."""
    table: dict[str, TypeShape] = {}
    _collect(graph, table)
    return table


def _collect(graph: onnx.GraphProto, table: dict[str, TypeShape]) -> None:
    """Fill ``table`` with the declared or inferred (type, shape) of ``graph``'s values."""
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name in table or not info.type.HasField("tensor_type"):
            continue
        tensor_type = info.type.tensor_type
        try:
            dtype = ir.DataType(tensor_type.elem_type) if tensor_type.elem_type else None
        except ValueError:
            dtype = None
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim
            )
        table[info.name] = (dtype, shape)
