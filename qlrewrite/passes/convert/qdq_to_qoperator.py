"""Q/DQ groups to the QOperator form: ``convert --to qoperator``.

Each DequantizeLinear -> float op -> QuantizeLinear group the QOperator form holds
(:mod:`qlrewrite.passes.convert.qdq_groups` plans them) becomes one node: QLinearConv,
QLinearMatMul (ai.onnx), QGemm, QLinearAdd, QLinearMul, QLinearConcat,
QLinearAveragePool, QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearSigmoid,
QLinearSoftmax (com.microsoft, imported when written), its inputs in the order of the
operator's row (:data:`qlrewrite.opsets.QOPERATOR_ROWS`), the DequantizeLinear inputs'
data, scales and zero points, the QuantizeLinear's scale and zero point, Conv's / Gemm's
int32 bias. MaxPool, Reshape, Transpose, ... with the same scale and zero point on both
sides run on the integers (exact). The dynamic form DequantizeLinear -> MatMul / Conv
with a float output becomes ONNX Runtime's quantize_dynamic form: MatMulInteger /
ConvInteger -> Cast -> Mul(a_scale * w_scale). Every other group stays Q/DQ, counted by
reason; with ``target`` a group whose QLinear form the runtime's tables say it refuses
stays too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.convert.qdq_groups import Group, plan, reason_text
from qlrewrite.passes.convert.to_qoperator_result import STEPS, ToQOperatorResult, stated_bound
from qlrewrite.qdq import (
    MS_DOMAIN,
    QDQ,
    GraphScope,
    QDQView,
    constant_tensor,
    ensure_import_at,
    iter_graphs,
    iter_sites,
    site_view,
)
from qlrewrite.targets.forms import qoperator_form
from qlrewrite.toolkit import FreshNames, add_constant, replace_value
from qlrewrite.verify.difference import output_bounds

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

__all__ = ["QdqToQOperatorPass", "find_groups", "target_refusal"]

_DT = ir.DataType


def _views(model: ir.Model) -> dict[int, QDQView]:
    """The view of every Q/DQ node, by node id."""
    found: dict[int, QDQView] = {}
    for site in iter_sites(model, (QDQ,)):
        view = site_view(model, site)
        if isinstance(view, QDQView):
            found[id(site.node)] = view
    return found


def _dequantize(value: ir.Value | None, views: dict[int, QDQView]) -> QDQView | None:
    producer = value.producer() if value is not None else None
    view = views.get(id(producer)) if producer is not None else None
    return view if view is not None and not view.is_quantize else None


def _only_consumer(value: ir.Value) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def _quantize_after(
    node: ir.Node, views: dict[int, QDQView]
) -> tuple[QDQView | None, ir.Node | None]:
    """The QuantizeLinear that is the only consumer of ``node`` (through a foldable Relu)."""
    if len(node.outputs) != 1:
        return None, None
    consumer = _only_consumer(node.outputs[0])
    relu = None
    if consumer is not None and consumer.op_type == "Relu" and consumer.domain in ("", "ai.onnx"):
        relu, consumer = consumer, _only_consumer(consumer.outputs[0])
    view = views.get(id(consumer)) if consumer is not None else None
    if view is None or not view.is_quantize:
        return None, None
    return view, relu


def _relu_foldable(view: QDQView) -> bool:
    """Q(Relu(x)) = Q(x) where the zero point is the bottom of the type."""
    zero = view.value_view(view.node.inputs[2], read=True) if len(view.node.inputs) > 2 else None
    value = 0 if zero is None or zero.array is None else int(zero.array.reshape(-1)[0])
    if zero is not None and zero.array is None:
        return False
    bottom = {_DT.UINT8: 0, _DT.INT8: -128}.get(view.output_type)  # type: ignore[arg-type]
    return bottom is not None and value == bottom


def _group(scope: GraphScope, node: ir.Node, views: dict[int, QDQView]) -> Group | None:
    """The group ``node`` is the float op of (None: it is not one)."""
    if id(node) in views or node.domain not in ("", "ai.onnx"):
        return None
    inputs = [_dequantize(v, views) for v in node.inputs]
    if not any(inputs):
        return None
    quantize, relu = _quantize_after(node, views)
    if relu is not None and quantize is not None and not _relu_foldable(quantize):
        return None  # DQ -> op -> Relu -> Q: the op's output is not quantized
    if quantize is None:
        first = inputs[0].node.inputs[0] if inputs[0] is not None else None
        source = first.producer() if first is not None else None
        if source is None or source.op_type != "DynamicQuantizeLinear":
            return None
    return Group(scope, node, inputs, quantize, relu)


def find_groups(model: ir.Model) -> list[Group]:
    """Every group of every graph, in graph order."""
    views = _views(model)
    found = []
    for scope in iter_graphs(model):
        for node in scope.graph:
            group = _group(scope, node, views)
            if group is not None:
                found.append(group)
    return found


def _input_types(node: ir.Node, group: Group) -> list[tuple[ir.DataType | None, int | None] | None]:
    """(element type, element count) of each input of a written node: constants' from
    their tensors, the quantized data's from its DequantizeLinear."""
    data = {id(v.node.inputs[0]): v.x_type for v in group.inputs if v is not None}
    found: list[tuple[ir.DataType | None, int | None] | None] = []
    for value in node.inputs:
        tensor = constant_tensor(value) if value is not None else None
        if value is None:
            found.append(None)
        elif tensor is not None:
            found.append((tensor.dtype, int(np.prod(tensor.shape.numpy()))))
        else:
            found.append((data.get(id(value), value.dtype), None))
    return found


def target_refusal(target: Target) -> Any:
    """A function telling whether a release of ``target`` refused the written node's form
    (measured tables: :meth:`qlrewrite.targets.tables.Table.refusal`)."""

    def refused(node: ir.Node, group: Group) -> bool:
        if group.row is None:
            return False
        imported = group.scope.opset(group.row.domain) or (1 if group.row.domain else None)
        form = qoperator_form(group.row, imported, _input_types(node, group))
        return form is not None and any(t.refusal(form) is not None for t in target.tables)

    return refused


class QdqToQOperatorPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite DequantizeLinear -> op -> QuantizeLinear groups as QLinear / integer ops.

    ``ops``: the float op types to convert (None: every one the QOperator form holds);
    ``refused``: a function telling whether the target runtime refuses a written node's
    form (None: no target).
    """

    def __init__(self, *, ops: Iterable[str] | None = None, refused: Any = None) -> None:
        super().__init__()
        self.ops = frozenset(ops) if ops is not None else None
        self.refused = refused

    def call(self, model: ir.Model) -> ToQOperatorResult:
        groups = find_groups(model)
        for group in groups:
            plan(group, self.ops)
        done = [g for g in groups if not g.reason]
        sources = {_output_name(g): STEPS.get(g.written[1], 0.0) for g in done if g.row}
        sources = {name: steps for name, steps in sources.items() if steps}
        limits = output_bounds(model, sources).bounds if sources else {}
        writer = _Writer(model, self.refused)
        for group in done:
            writer.write(group)
        done = [g for g in groups if not g.reason]
        return self._result(model, groups, done, writer, limits)

    def _result(
        self,
        model: ir.Model,
        groups: list[Group],
        done: list[Group],
        writer: _Writer,
        limits: dict[str, float],
    ) -> ToQOperatorResult:
        summary = {
            "groups_converted": sum(1 for g in done if g.row is not None),
            "integer_ops_written": sum(1 for g in done if g.row is None),
            "opset_imports_added": writer.imports_added,
        }
        warnings = []
        for key in dict.fromkeys(g.reason for g in groups if g.reason):
            left = [g for g in groups if g.reason == key]
            summary[f"left_{key}"] = len(left)
            if key != "not_chosen":
                names = ", ".join(g.where for g in left[:3]) + (" ..." if len(left) > 3 else "")
                warnings.append(f"{len(left)} group(s) stay Q/DQ: {reason_text(key)} ({names})")
        written: dict[str, int] = {}
        for g in done:
            written[g.written[1]] = written.get(g.written[1], 0) + 1
        float_sums = any(g.dynamic for g in done)
        kept = {n: s for n, s in writer.sources.items()}
        bound = (
            stated_bound({n: v for n, v in limits.items()}, float_sums)
            if done
            else stated_bound({}, False)
        )
        return ToQOperatorResult(
            model,
            bool(done),
            summary,
            warnings,
            verify_bound=bound,
            written=written,
            differences=kept,
        )


def _output_name(group: Group) -> str:
    out = group.output
    return (out.node.outputs[0].name or "") if out is not None else ""


class _Writer:
    """Writes the planned groups, one node each (three for the dynamic form)."""

    def __init__(self, model: ir.Model, refused: Any) -> None:
        self.model = model
        self.refused = refused
        self.names = FreshNames(model, nodes=True)
        self.imports_added = 0
        self.sources: dict[str, float] = {}
        self._zeros: dict[tuple[int, _DT], ir.Value] = {}

    def write(self, group: Group) -> None:
        if group.dynamic:
            self._dynamic(group)
        elif group.row is None:
            self._move(group)
        else:
            self._qlinear(group)

    def _zero(self, group: Group, dtype: _DT) -> ir.Value:
        key = (id(group.scope.graph), dtype)
        if key not in self._zeros:
            name = self.names.fresh(f"zero_point_{dtype.name.lower()}")
            tensor = ir.tensor(np.zeros((), dtype.numpy()), name=name)
            self._zeros[key] = add_constant(
                group.scope.graph, tensor, name, before=group.node, node_name=self.names.fresh(name)
            )
        return self._zeros[key]

    def _triple(self, group: Group, view: QDQView, dtype: _DT | None) -> list[ir.Value]:
        inputs = [*list(view.node.inputs), None, None]
        data = inputs[0] if not view.is_quantize else None
        zero = inputs[2] if inputs[2] is not None else self._zero(group, dtype or _DT.UINT8)
        return [data, inputs[1], zero]  # type: ignore[list-item]

    def _inputs(self, group: Group) -> list[ir.Value | None]:
        row = group.row
        assert row is not None and group.output is not None
        out = self._triple(group, group.output, group.output.output_type)
        if row.variadic:
            threes = [self._triple(group, v, v.x_type) for v in group.inputs if v is not None]
            return [out[1], out[2], *[value for three in threes for value in three]]
        named: dict[str, ir.Value | None] = {}
        specs = [t for t in row.triples if t.role != "output"]
        for spec, view in zip(specs, group.inputs, strict=False):
            assert view is not None
            data, scale, zero = self._triple(group, view, view.x_type)
            named.update({spec.data: data, spec.scale: scale, spec.zero_point: zero})  # type: ignore[dict-item]
        spec = next(t for t in row.triples if t.role == "output")
        named.update({spec.scale: out[1], spec.zero_point: out[2]})  # type: ignore[dict-item]
        bias = group.inputs[2] if len(group.inputs) > 2 else None
        if bias is not None:
            named["B" if group.node.op_type == "Conv" else "C"] = bias.node.inputs[0]
        values = [named.get(operand.name) for operand in row.inputs]
        while values and values[-1] is None:
            values.pop()
        return values

    def _attributes(self, group: Group) -> dict[str, Any]:
        row, node = group.row, group.node
        assert row is not None
        kept: dict[str, Any] = {n: a for n, a in node.attributes.items() if n in row.attributes}
        if node.op_type == "Softmax":
            opset = group.scope.opset("") or 13
            axis = node.attributes.get("axis")
            value = axis.value if axis is not None else (-1 if opset >= 13 else 1)
            kept = {"axis": value, "opset": opset}
        return kept

    def _qlinear(self, group: Group) -> None:
        domain, op = group.written
        node = ir.node(
            op,
            self._inputs(group),
            attributes=self._attributes(group),
            domain=domain,
            name=self.names.fresh(group.node.name or op),
        )
        if self.refused is not None and self.refused(node, group):
            group.reason = "target_refuses"
            return
        assert group.output is not None
        quantize = group.output.node
        group.scope.graph.insert_before(quantize, node)
        steps = STEPS.get(op, 0.0)
        replace_value(quantize.outputs[0], node.outputs[0])
        node.outputs[0].dtype = group.output.output_type
        if steps and node.outputs[0].name:
            self.sources[node.outputs[0].name] = steps
        self._drop(group, [quantize, group.relu, group.node])
        if domain == MS_DOMAIN and ensure_import_at(self.model, group.scope.ref, MS_DOMAIN, 1):
            self.imports_added += 1

    def _move(self, group: Group) -> None:
        data, quantize = group.inputs[0], group.output
        assert data is not None and quantize is not None
        node = group.node
        node.replace_input_with(0, data.node.inputs[0])
        replace_value(quantize.node.outputs[0], node.outputs[0])
        node.outputs[0].dtype = quantize.output_type
        self._drop(group, [quantize.node])

    def _dynamic(self, group: Group) -> None:
        a, w = group.inputs[0], group.inputs[1]
        assert a is not None and w is not None
        graph, node = group.scope.graph, group.node
        a_in, w_in = list(a.node.inputs) + [None] * 2, list(w.node.inputs) + [None] * 2
        inputs = [a_in[0], w_in[0], a_in[2], w_in[2]]
        while inputs and inputs[-1] is None:
            inputs.pop()
        op = group.written[1]
        base = node.name or op
        attrs = dict(node.attributes) if op == "ConvInteger" else {}
        integer = ir.node(op, inputs, attributes=attrs, name=self.names.fresh(base))
        cast = ir.node(
            "Cast",
            integer.outputs,
            attributes={"to": _DT.FLOAT},
            name=self.names.fresh(base + "_cast"),
        )
        scale = ir.node("Mul", [a_in[1], w_in[1]], name=self.names.fresh(base + "_scale"))
        result = ir.node(
            "Mul", [cast.outputs[0], scale.outputs[0]], name=self.names.fresh(base + "_scaled")
        )
        for new in (integer, cast, scale, result):
            for output in new.outputs:
                output.name = self.names.fresh(new.name or base)
        graph.insert_before(node, [integer, cast, scale, result])
        replace_value(node.outputs[0], result.outputs[0])
        self._drop(group, [node])

    def _drop(self, group: Group, nodes: Sequence[ir.Node | None]) -> None:
        graph = group.scope.graph
        for node in nodes:
            if node is not None:
                graph.remove(node, safe=True)
        for view in group.inputs:
            if view is None or view.node.graph is None:
                continue
            output = view.node.outputs[0]
            if not list(output.uses()) and not output.is_graph_output():
                graph.remove(view.node, safe=True)
