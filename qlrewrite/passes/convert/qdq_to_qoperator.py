"""Q/DQ groups to the QOperator form: ``convert --to qoperator``.

Each DequantizeLinear -> float op -> QuantizeLinear group the QOperator form holds
(:mod:`qlrewrite.passes.convert.qdq_groups` finds them,
:mod:`~qlrewrite.passes.convert.qoperator_plan` decides) becomes one node: QLinearConv,
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

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.convert.qdq_groups import Group, find_groups, reason_text
from qlrewrite.passes.convert.qoperator_plan import plan
from qlrewrite.passes.convert.to_qoperator_result import STEPS, ToQOperatorResult, stated_bound
from qlrewrite.qdq import MAIN, MS_DOMAIN, QDQView, constant_tensor, ensure_import_at
from qlrewrite.targets.forms import qoperator_form, values_key, zero_point_class
from qlrewrite.toolkit import FreshNames, add_constant, replace_value
from qlrewrite.verify.difference import output_bounds

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

__all__ = ["QdqToQOperatorPass", "Refused", "target_refusal"]

_DT = ir.DataType
#: Whether the target refuses the node written for a group (``convert --target``).
Refused = Callable[[ir.Node, Group], bool]
_InputTypes = list[tuple[ir.DataType | None, int | None] | None]


def _input_types(node: ir.Node, group: Group) -> _InputTypes:
    """(element type, element count) of each input of a written node: constants' from
    their tensors, the quantized data's from its DequantizeLinear."""
    data = {id(v.node.inputs[0]): v.x_type for v in group.inputs if v is not None}
    found: _InputTypes = []
    for value in node.inputs:
        tensor = constant_tensor(value) if value is not None else None
        if value is None:
            found.append(None)
        elif tensor is not None:
            found.append((tensor.dtype, int(np.prod(tensor.shape.numpy()))))
        else:
            found.append((data.get(id(value), value.dtype), None))
    return found


def target_refusal(target: Target) -> Refused:
    """Whether a release of ``target`` refused the form of the node written for a group,
    or computed it wrong or failed on it as its zero points are (its measured tables:
    :meth:`qlrewrite.targets.tables.Table.refusal`, the value-compared QOperator rows:
    :meth:`~qlrewrite.targets.tables.Table.computes_wrong`)."""

    def refused(node: ir.Node, group: Group) -> bool:
        if group.row is None:
            return False
        imported = group.scope.opset(group.row.domain) or (1 if group.row.domain else None)
        form = qoperator_form(group.row, imported, _input_types(node, group))
        if form is None:
            return False
        key = values_key(form, _zero_point_classes(node, group.row))
        return any(
            t.refusal(form) is not None or (key is not None and t.computes_wrong(key))
            for t in target.tables
        )

    return refused


def _zero_point_classes(
    node: ir.Node, row: opsets.QOperatorVersion
) -> list[tuple[str, str | None]]:
    """(role, zero point class) of each triple of a written node in schema order, then
    QLinearConcat's inputs (the key of its value-compared row: :func:`values_key`)."""
    slots = [(t.role, row.input_index(t.zero_point) if t.zero_point else None) for t in row.triples]
    if row.variadic:
        fixed = len(row.inputs) - 1
        slots += [("input", start + 2) for start in range(fixed, len(node.inputs) - 2, 3)]
    found: list[tuple[str, str | None]] = []
    for role, index in slots:
        value = node.inputs[index] if index is not None and index < len(node.inputs) else None
        tensor = constant_tensor(value) if value is not None else None
        if value is not None and tensor is None:
            found.append((role, None))  # a zero point computed in the graph: no row
        else:
            array = tensor.numpy() if tensor is not None else None
            found.append((role, zero_point_class(role, array, tensor.dtype if tensor else None)))
    return found


class QdqToQOperatorPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite DequantizeLinear -> op -> QuantizeLinear groups as QLinear / integer ops.

    ``ops``: the float op types to convert (None: every one the QOperator form holds);
    ``refused``: whether the target runtime refuses a written node's form (None: no
    target; :func:`target_refusal`). ``bound``: follow each converted output's possible
    difference to the graph outputs (what ``--verify`` accepts; it dequantizes every
    weight, so the command line asks for it with ``--verify`` only); without it the
    result's bound names every output as unbounded when a converted node may differ.
    """

    def __init__(
        self,
        *,
        ops: Iterable[str] | None = None,
        refused: Refused | None = None,
        bound: bool = True,
    ):
        super().__init__()
        self.ops = frozenset(ops) if ops is not None else None
        self.refused = refused
        self.bound = bound

    def call(self, model: ir.Model) -> ToQOperatorResult:
        groups = find_groups(model)
        writer = _Writer(model)
        built: dict[int, ir.Node] = {}
        for group in groups:
            plan(group, self.ops)
            if group.reason or group.row is None:
                continue
            built[id(group)] = node = writer.build(group)
            if self.refused is not None and self.refused(node, group):
                group.reason = "target_refuses"
        done = [g for g in groups if not g.reason]
        # the bound is followed on the Q/DQ graph, before it changes
        sources = {_output_name(g): STEPS.get(g.written[1], 0.0) for g in done if g.row}
        sources = {name: steps for name, steps in sources.items() if steps}
        limits = _limits_of(model, sources, [g for g in done if g.row], self.bound)
        for group in done:
            writer.write(group, built.get(id(group)))
        writer.drop_unused_zeros()
        return _result(model, groups, writer, limits)


def _limits_of(
    model: ir.Model, sources: dict[str, float], converted: list[Group], follow: bool
) -> dict[str, float]:
    """Each graph output's bound: followed from ``sources`` on the Q/DQ graph (``follow``),
    else (or with a source inside a function or subgraph, which the walk does not follow
    by name) every output unbounded."""
    if not sources:
        return {}
    inner = any(g.scope.ref != MAIN and _output_name(g) in sources for g in converted)
    if follow and not inner:
        return output_bounds(model, sources).bounds
    return {v.name: math.inf for v in model.graph.outputs if v.name}


def _result(
    model: ir.Model, groups: list[Group], writer: _Writer, limits: dict[str, float]
) -> ToQOperatorResult:
    done = [g for g in groups if not g.reason]
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
    for group in done:
        written[group.written[1]] = written.get(group.written[1], 0) + 1
    bound = stated_bound(limits, any(g.dynamic for g in done))
    return ToQOperatorResult(
        model,
        bool(done),
        summary,
        warnings,
        verify_bound=bound,
        written=written,
        differences=dict(writer.sources),
    )


def _output_name(group: Group) -> str:
    out = group.output
    return (out.node.outputs[0].name or "") if out is not None else ""


def _softmax_attributes(softmax: ir.Node, opset: int) -> dict[str, Any]:
    """QLinearSoftmax's axis (as written, else the default of the Softmax in force) and
    ``opset``: which Softmax it computes (before 13: coerced to 2-D at the axis)."""
    written = softmax.attributes.get("axis")
    axis = written.value if written is not None else (-1 if opset >= 13 else 1)
    return {"axis": axis, "opset": opset}


def _take_output(quantize: QDQView, node: ir.Node) -> None:
    """``node``'s output takes the QuantizeLinear's place, name and (integer) type."""
    replace_value(quantize.node.outputs[0], node.outputs[0])
    if quantize.output_type is not None:  # (planning checked it is 8-bit)
        node.outputs[0].dtype = quantize.output_type


class _Writer:
    """Writes the planned groups: one node each (four for the dynamic form)."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.names = FreshNames(model, nodes=True)
        self.imports_added = 0
        #: each converted output that may differ -> its steps
        self.sources: dict[str, float] = {}
        self._zeros: dict[tuple[int, _DT, tuple[int, ...]], tuple[ir.Value, Group]] = {}

    def write(self, group: Group, node: ir.Node | None) -> None:
        """Replace ``group`` by ``node`` (built by :meth:`build`) or its integer form."""
        if group.dynamic:
            self._dynamic(group)
        elif node is None:
            self._move(group)
        else:
            self._qlinear(group, node)

    def _zero(self, group: Group, dtype: _DT, shape: tuple[int, ...]) -> ir.Value:
        """A zero point of ``dtype`` and ``shape`` (one per graph, type and shape)."""
        key = (id(group.scope.graph), dtype, shape)
        if key not in self._zeros:
            name = self.names.fresh(f"zero_point_{dtype.name.lower()}")
            tensor = ir.tensor(np.zeros(shape, dtype.numpy()), name=name)
            value = add_constant(
                group.scope.graph,
                tensor,
                name,
                before=group.node,
                node_name=self.names.fresh(name),
            )
            self._zeros[key] = (value, group)
        return self._zeros[key][0]

    def drop_unused_zeros(self) -> None:
        """Remove the zero points made for groups a target refused."""
        for value, group in self._zeros.values():
            if value.uses():
                continue
            graph, producer = group.scope.graph, value.producer()
            if producer is not None:
                graph.remove(producer, safe=True)
            elif isinstance(graph, ir.Graph) and value.name in graph.initializers:
                graph.initializers.pop(str(value.name))

    def _triple(self, group: Group, view: QDQView, dtype: _DT | None) -> list[ir.Value | None]:
        """(data, scale, zero point) of a DequantizeLinear (data None for a
        QuantizeLinear); an omitted zero point made a zero of ``dtype`` shaped as the
        scale (QGemm wants both of one shape)."""
        inputs = [*view.node.inputs, None, None]
        data = inputs[0] if not view.is_quantize else None
        zero = inputs[2]
        if zero is None:
            dims = view.scale.shape if view.scale is not None else None
            shape = tuple(d or 1 for d in dims) if dims else ()
            zero = self._zero(group, dtype or _DT.UINT8, shape)
        return [data, inputs[1], zero]

    def _inputs(self, group: Group) -> list[ir.Value | None]:
        """The written node's inputs in its row's order."""
        row, out_view = group.row, group.output
        assert row is not None and out_view is not None  # planned: a QLinear group
        out = self._triple(group, out_view, out_view.output_type)
        if row.variadic:
            threes = [self._triple(group, v, v.x_type) for v in group.inputs if v is not None]
            return [out[1], out[2], *[value for three in threes for value in three]]
        named: dict[str | None, ir.Value | None] = {}
        specs = [t for t in row.triples if t.role != "output"]
        for spec, view in zip(specs, group.inputs, strict=False):
            if view is not None:
                triple = self._triple(group, view, view.x_type)
                named.update(zip((spec.data, spec.scale, spec.zero_point), triple, strict=True))
        spec = next(t for t in row.triples if t.role == "output")
        named.update({spec.scale: out[1], spec.zero_point: out[2]})
        bias = group.inputs[2] if len(group.inputs) > 2 else None
        if bias is not None:
            named["B" if group.node.op_type == "Conv" else "C"] = bias.node.inputs[0]
        values = [named.get(operand.name) for operand in row.inputs]
        while values and values[-1] is None:
            values.pop()
        return values

    def build(self, group: Group) -> ir.Node:
        """The QLinear node of a planned group, not yet in the graph."""
        row, node = group.row, group.node
        assert row is not None  # planned: a QLinear group
        if node.op_type == "Softmax":
            attributes = _softmax_attributes(node, group.scope.opset("") or 13)
        else:
            attributes = {n: a for n, a in node.attributes.items() if n in row.attributes}
        return ir.node(
            row.op_type,
            self._inputs(group),
            attributes=attributes,
            domain=row.domain,
            name=self.names.fresh(node.name or row.op_type),
        )

    def _qlinear(self, group: Group, node: ir.Node) -> None:
        quantize = group.output
        assert quantize is not None  # planned: a QLinear group
        group.scope.graph.insert_before(quantize.node, node)
        _take_output(quantize, node)
        steps = STEPS.get(node.op_type, 0.0)
        if steps and node.outputs[0].name:
            self.sources[node.outputs[0].name] = steps
        self._drop(group, [quantize.node, group.activation, group.node])
        if node.domain == MS_DOMAIN and ensure_import_at(self.model, group.scope.ref, MS_DOMAIN, 1):
            self.imports_added += 1

    def _move(self, group: Group) -> None:
        """The op on the integers: its data is the DequantizeLinear's input, its output the
        QuantizeLinear's."""
        data, quantize = group.inputs[0], group.output
        assert data is not None and quantize is not None  # planned: a move
        node = group.node
        node.replace_input_with(0, data.node.inputs[0])
        _take_output(quantize, node)
        self._drop(group, [quantize.node, group.activation])

    def _dynamic(self, group: Group) -> None:
        """MatMulInteger / ConvInteger -> Cast(float) -> Mul(a_scale * w_scale)."""
        a, w = group.inputs[0], group.inputs[1]
        assert a is not None and w is not None  # planned: a dynamic group
        node, op = group.node, group.written[1]
        a_in, w_in = [*a.node.inputs, None, None], [*w.node.inputs, None, None]
        inputs = [a_in[0], w_in[0], a_in[2], w_in[2]]
        while inputs and inputs[-1] is None:
            inputs.pop()
        attributes = dict(node.attributes) if op == "ConvInteger" else {}
        base = node.name or op
        integer = self._new(op, inputs, base, attributes)
        cast = self._new("Cast", list(integer.outputs), base + "_cast", {"to": _DT.FLOAT})
        scale = self._new("Mul", [a_in[1], w_in[1]], base + "_scale")
        result = self._new("Mul", [cast.outputs[0], scale.outputs[0]], base + "_scaled")
        group.scope.graph.insert_before(node, [integer, cast, scale, result])
        replace_value(node.outputs[0], result.outputs[0])
        self._drop(group, [node])

    def _new(
        self,
        op: str,
        inputs: Sequence[ir.Value | None],
        base: str,
        attributes: dict[str, Any] | None = None,
    ) -> ir.Node:
        node = ir.node(op, inputs, attributes=attributes or {}, name=self.names.fresh(base))
        node.outputs[0].name = self.names.fresh(base)
        return node

    def _drop(self, group: Group, nodes: Sequence[ir.Node | None]) -> None:
        """Remove ``nodes``, then the group's DequantizeLinear nodes nothing reads."""
        graph = group.scope.graph
        for node in nodes:
            if node is not None:
                graph.remove(node, safe=True)
        for view in group.inputs:
            if view is None or view.node.graph is None:
                continue
            output = view.node.outputs[0]
            if not output.uses() and not output.is_graph_output():
                graph.remove(view.node, safe=True)
