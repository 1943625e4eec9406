"""QOperator / dynamic nodes to the Q/DQ form: DequantizeLinear -> float op -> QuantizeLinear.

Each QOperator node (ai.onnx QLinearConv, QLinearMatMul; com.microsoft QLinearConv,
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
QLinearGlobalAveragePool, QLinearConcat, QLinearSoftmax, QLinearWhere, QLinearReduceMean,
QGemm) becomes the form ONNX Runtime's QDQ quantizer writes: one ai.onnx DequantizeLinear
per quantized input (a weight stays quantized behind its DequantizeLinear, per channel
where it was), the float operator of its row (:attr:`QOperatorVersion.float_op`), and a
QuantizeLinear to the node's output scale and zero point. QLinearConv's int32 bias
becomes an int32 DequantizeLinear with scale x_scale * w_scale (QGemm's C likewise).

The dynamic forms: com.microsoft MatMulIntegerToFloat becomes DequantizeLinear(A),
DequantizeLinear(B) -> MatMul (-> Add bias); DynamicQuantizeMatMul becomes
DynamicQuantizeLinear(A) -> DequantizeLinear -> MatMul with DequantizeLinear(B); ONNX
Runtime's dynamic pattern DynamicQuantizeLinear -> MatMulInteger / ConvInteger -> Cast ->
Mul(a_scale * b_scale) becomes DequantizeLinear(A), DequantizeLinear(B) -> MatMul / Conv.
Nodes without a Q/DQ form are refused with the reason (com.microsoft QAttention) or, when
already ai.onnx (MatMulInteger / ConvInteger outside that pattern), left with a warning;
DynamicQuantizeLinear stays (the QuantizeLinear of dynamic Q/DQ).

The integer kernels requantize with their own rounding, so outputs may differ from the
float form by a quantization step; the result carries the bound ``--verify`` checks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.errors import Refusal
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import (
    LEFT_ALONE,
    MS_DOMAIN,
    QOPERATOR,
    QOperatorView,
    TripleView,
    ValueView,
    drop_unused_domain,
    iter_sites,
    site_view,
    triples,
)
from qlrewrite.text import grouped
from qlrewrite.toolkit import FreshNames, add_constant, replace_value
from qlrewrite.verify.bound import EXACT_BOUND, Bound
from qlrewrite.verify.difference import output_bounds

__all__ = ["QOperatorResult", "QOperatorToQdqPass", "measured_bound"]


@dataclasses.dataclass
class QOperatorResult(RewritePassResult):
    """:class:`~qlrewrite.passes.convert.qoperator_to_qdq.QOperatorToQdqPass`:
    ``qoperator_converted``, ``qoperator_left``, ``opset_imports_dropped``; and
    ``differences``: the output name of each QuantizeLinear written for a converted node
    -> the steps it may differ by (the sources of :func:`qlrewrite.verify.difference.output_bounds`,
    which ``--verify`` re-checks on measured values)."""

    differences: dict[str, float] = dataclasses.field(default_factory=dict)


_DT = ir.DataType
#: Attributes of the QOperator node the float operator keeps, per float op.
#: The integer ops of ORT's dynamic pattern, and their float op.
_INTEGER_OPS = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}
_KEPT = {
    "Conv": ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
    "AveragePool": (
        "auto_pad",
        "ceil_mode",
        "count_include_pad",
        "kernel_shape",
        "pads",
        "strides",
    ),
    "Gemm": ("alpha", "transA", "transB"),
    "LeakyRelu": ("alpha",),
    "Concat": ("axis",),
}


@dataclasses.dataclass
class _Plan:
    """One node to rewrite: its view, triples, the float op's attributes, or problems."""

    view: QOperatorView
    triples: list[TripleView]
    problems: list[str] = dataclasses.field(default_factory=list)
    #: The float operator (the row's, or the integer op's of ORT's dynamic pattern).
    float_op: str = ""
    attributes: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: ai.onnx nodes without a Q/DQ form stay (a warning); com.microsoft ones refuse.
    leave: bool = False
    #: MatMulInteger / ConvInteger of ORT's dynamic pattern: (Cast, Mul, a_scale, b_scale).
    pattern: _Pattern | None = None

    @property
    def where(self) -> str:
        return self.view.where


def _opset(view: QOperatorView) -> int:
    return view.site.scope.opset("") or 0


def _attr_value(view: QOperatorView, name: str) -> Any:
    """The attribute's value as written, else the default of the version in force (a node
    without one is refused before its attributes are read)."""
    attr = view.attributes.get(name)
    if attr is not None:
        return attr.value
    return view.version.default(name)


def _float_attributes(view: QOperatorView, float_op: str) -> tuple[dict[str, Any], list[str]]:
    """The float operator's attributes, and why the node has no float form (if so)."""
    problems: list[str] = []
    if view.attr_or_default("channels_last"):
        problems.append("channels_last=1 has no ai.onnx form (NHWC)")
    attrs = {n: _attr_value(view, n) for n in _KEPT.get(float_op, ()) if n in view.attributes}
    if float_op == "LeakyRelu":
        attrs["alpha"] = float(_attr_value(view, "alpha"))
    elif float_op == "Softmax":
        attrs["axis"], problem = _softmax_axis(view)
        problems += [problem] if problem else []
    elif float_op == "ReduceMean":
        attrs["keepdims"] = int(_attr_value(view, "keepdims") or 0)
    elif float_op == "Gemm" and float(_attr_value(view, "alpha")) != 1.0 and view.operand("C"):
        problems.append("alpha other than 1 with an int32 bias C has no exact Gemm form")
    return attrs, problems


def _softmax_axis(view: QOperatorView) -> tuple[int, str | None]:
    """QLinearSoftmax's axis for ai.onnx Softmax at the model's opset: its ``opset``
    attribute says which Softmax it computes (before 13: coerced to 2-D at ``axis``)."""
    semantics = view.int_attr("opset") or 13
    axis = view.int_attr("axis")
    axis = axis if axis is not None else (-1 if semantics >= 13 else 1)
    rank = next((t.data.rank for t in triples(view) if t.data and t.data.rank), None)
    last = axis == -1 or (rank is not None and axis == rank - 1)
    if (semantics >= 13) != (_opset(view) >= 13) and not last:
        return axis, (
            f"Softmax-{semantics} semantics on axis {axis} differ from ai.onnx opset "
            f"{_opset(view)}'s Softmax"
        )
    return axis, None


def _triple_problems(view: QOperatorView, found: list[TripleView]) -> list[str]:
    problems = []
    opset = _opset(view)
    for t in found:
        scale = t.scale
        if t.values[0] is None:
            problems.append(f"{t.label} is omitted")
            continue
        if t.spec.scale is None and scale is None:  # no scale (a dynamic pattern's: its Mul)
            continue
        if scale is None or (t.role == "weight" and scale.shape is None):
            # a weight's scale decides per-tensor or per-channel; an activation's is
            # per-tensor (its kernel takes no other), even when computed at run time
            problems.append(f"{t.label}'s scale has an unknown shape")
        elif scale.shape is not None and len(scale.shape) > 0 and opset < 13:
            problems.append(
                f"{t.label}'s scale is 1-D: DequantizeLinear needs ai.onnx opset 13 "
                "(run `qlrewrite upgrade --opset 13`)"
            )
        elif t.dtype == _DT.FLOAT:
            problems.append(f"{t.label} is float (not quantized)")
        elif any(
            v is not None and t.column_shaped(v) and v.array is None for v in (scale, t.zero_point)
        ):
            problems.append(f"{t.label}'s [1, N] scale or zero point is not a constant")
        elif t.zero_point is not None and _per_channel(scale) != _per_channel(t.zero_point):
            shared = t.zero_point if _per_channel(scale) else scale
            if shared.array is None:
                problems.append(f"{t.label}'s shared {shared.name!r} is not a constant")
    return problems


def _plan(view: QOperatorView) -> _Plan:
    row = view.row
    found = triples(view)
    plan = _Plan(view, found)
    if row is None:
        plan.problems.append("no version of the operator at the imported opset")
        return plan
    if view.op_type in _INTEGER_OPS:
        plan.pattern = _dynamic_pattern(view)
    if row.float_op is None and plan.pattern is None:
        plan.problems.append(row.refusal)
        plan.leave = view.domain == ""
        return plan
    plan.float_op = float_op = row.float_op or _INTEGER_OPS[view.op_type]
    plan.attributes, plan.problems = _float_attributes(view, float_op)
    if plan.pattern is not None:  # the scales are those of the Mul after the node
        found = _pattern_triples(view, plan.pattern)
    plan.problems += _triple_problems(view, found)
    if view.op_type in ("QLinearConv", "QGemm"):
        plan.problems += _bias_problems(view, found)
    return plan


def _bias_problems(view: QOperatorView, found: list[TripleView]) -> list[str]:
    bias = view.operand("B" if view.op_type == "QLinearConv" else "C")
    if bias is None:
        return []
    scales = [t.scale for t in found if t.role in ("input", "weight")]
    arrays = [s.array for s in scales if s is not None and s.array is not None]
    if len(arrays) != len(scales):
        return ["the int32 bias needs constant input and weight scales"]
    channels = max(a.size for a in arrays)
    if channels > 1 and bias.shape is not None and bias.shape != (channels,):
        return [
            f"the int32 bias {bias.describe()} broadcasts over {channels} per-channel "
            "weight scales: no per-axis DequantizeLinear takes it"
        ]
    return []


#: ORT's dynamic pattern after an integer node: (Cast, Mul, a_scale, b_scale).
_Pattern = tuple[ir.Node, ir.Node, ir.Value, ir.Value]


def _dynamic_pattern(view: QOperatorView) -> _Pattern | None:
    """ORT's dynamic MatMul / Conv: DynamicQuantizeLinear(A) -> MatMulInteger(A, B, a_zp,
    b_zp) (ConvInteger) -> Cast(float) -> Mul(., Mul(a_scale, b_scale)); None when the
    node is not in one."""
    node = view.node
    inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
    source = inputs[0].producer() if inputs[0] is not None else None
    if (
        source is None
        or source.op_type != "DynamicQuantizeLinear"
        or source.domain not in ("", "ai.onnx")
    ):
        return None
    if inputs[2] is not None and inputs[2] is not source.outputs[2]:
        return None
    cast = _only_use(node.outputs[0])
    if cast is None or cast.op_type != "Cast" or cast.attributes.get_int("to") != _DT.FLOAT:
        return None
    mul = _only_use(cast.outputs[0])
    if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2:
        return None
    other = mul.inputs[1] if mul.inputs[0] is cast.outputs[0] else mul.inputs[0]
    scales = other.producer() if other is not None else None
    if scales is None or scales.op_type != "Mul" or len(scales.inputs) != 2:
        return None
    if source.outputs[1] not in scales.inputs:
        return None
    b_scale = scales.inputs[1] if scales.inputs[0] is source.outputs[1] else scales.inputs[0]
    return None if b_scale is None else (cast, mul, source.outputs[1], b_scale)


def _pattern_triples(view: QOperatorView, pattern: _Pattern) -> list[TripleView]:
    """The A and B triples of a dynamic pattern's integer node, with the scales its Mul
    applies (the integer node itself takes none)."""
    _, _, a_scale, b_scale = pattern
    found = []
    for t, scale in zip(triples(view), (a_scale, b_scale), strict=True):
        values = (t.values[0], scale, t.values[2])
        scale_view = view.value_view(scale, read=True)
        found.append(dataclasses.replace(t, values=values, scale=scale_view))
    return found


def _only_use(value: ir.Value) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


class QOperatorToQdqPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite QOperator / dynamic nodes as DequantizeLinear -> float op -> QuantizeLinear.

    ``strict`` (default): refuse (:class:`~qlrewrite.errors.Refusal`) when a com.microsoft
    node has no Q/DQ form, before changing anything. ai.onnx nodes without one
    (ConvInteger / MatMulInteger outside ORT's dynamic pattern) stay, with a warning.
    """

    def __init__(self, *, strict: bool = True) -> None:
        super().__init__()
        self.strict = strict

    def call(self, model: ir.Model) -> QOperatorResult:
        # constants and declared types are enough (no shape inference on large models)
        plans = [
            _plan(view)
            for site in iter_sites(model, (QOPERATOR,))
            if site.node.op_type != "DynamicQuantizeLinear"
            and isinstance(view := site_view(model, site), QOperatorView)
        ]
        refused = [p for p in plans if p.problems and not p.leave]
        if refused and self.strict:
            raise Refusal(_refusal(refused))
        warnings = [
            f"{p.where} left as it is: {'; '.join(dict.fromkeys(p.problems))}"
            for p in plans
            if p.problems
        ] + [
            f"{site.node.op_type} {site.node.name!r} in {site.ref} left as it is: "
            + opsets.QUANTIZED_LEFT_ALONE[(site.domain, site.node.op_type)]
            for site in iter_sites(model, (LEFT_ALONE,))
        ]
        done = [p for p in plans if not p.problems]
        rewriter = _Rewriter(model)
        for plan in done:
            rewriter.apply(plan)
        dropped = drop_unused_domain(model, MS_DOMAIN) if done else False
        summary = {
            "qoperator_converted": len(done),
            "qoperator_left": len(plans) - len(done),
            "opset_imports_dropped": int(dropped),
        }
        float_sums = any(_sums_in_float(p) for p in done)
        bound = _bound(model, rewriter, float_sums)
        return QOperatorResult(
            model,
            bool(done),
            summary,
            warnings,
            verify_bound=bound,
            differences=dict(rewriter.requantized),
        )


#: Why ``--verify`` accepts differences after a QOperator conversion.
REQUANTIZE_REASON = (
    "a QOperator kernel requantizes its integer result with its own fixed-point / float "
    "rounding, DequantizeLinear -> float op -> QuantizeLinear rounds the float result "
    "once: each converted node's output may differ by one quantization step (measured: "
    "bit-identical on ONNX Runtime's quantizer outputs, one step in a few elements of "
    "QLinearAdd and the average pools); each step is carried through the ops after it "
    "to every output by how much each op can amplify a difference (docs/verify.md)"
)
#: Why a uint8 QLinearSoftmax may differ by its whole range.
SOFTMAX_WRAP_REASON = (
    "ONNX Runtime's uint8 QLinearSoftmax wraps around where a probability quantizes above "
    "255 (measured, 1.31: a one-element row at output scale 1/256 gives 0, not 255), the "
    "QuantizeLinear of the Q/DQ form saturates"
)
#: Why, and by how much relative to an output's largest magnitude, float results differ.
FLOAT_SUM_REASON = (
    "MatMulInteger / ConvInteger / MatMulIntegerToFloat / DynamicQuantizeMatMul / QGemm sum "
    "exact int32 "
    "products and scale once, DequantizeLinear -> MatMul sums float32 products (another "
    "rounding; measured under 3e-7 of the output's largest magnitude)"
)
FLOAT_SUM_RELATIVE = 1e-5


def _bound(model: ir.Model, rewriter: _Rewriter, float_sums: bool) -> Bound:
    """What ``--verify`` accepts: the difference each requantizing conversion may make,
    carried to every output (:func:`qlrewrite.verify.difference.output_bounds`: steps for an
    integer output, float units otherwise; an output it cannot bound is ``unbounded``);
    float sums in another order within FLOAT_SUM_RELATIVE."""
    sources = rewriter.requantized
    limits = output_bounds(model, sources).bounds if sources else {}
    return _stated(limits, rewriter.wraps, float_sums)


def _stated(limits: dict[str, float], wraps: bool, float_sums: bool) -> Bound:
    per_output = tuple((n, v) for n, v in sorted(limits.items()) if 0 < v < math.inf)
    unbounded = tuple(n for n, v in sorted(limits.items()) if v == math.inf)
    differ = bool(per_output or unbounded)
    reasons = [REQUANTIZE_REASON] * differ + [SOFTMAX_WRAP_REASON] * (wraps and differ)
    reasons += [FLOAT_SUM_REASON] * float_sums
    if not reasons:
        return EXACT_BOUND
    relative = FLOAT_SUM_RELATIVE if float_sums else None
    return Bound("; ".join(reasons), relative, None, per_output, unbounded)


def measured_bound(
    model: ir.Model, result: QOperatorResult, measured: Mapping[str, float]
) -> tuple[Bound, list[str]]:
    """The bound of :func:`_bound` from the differences ``--verify`` measured inside both
    models (``result.differences`` are the sources), and the values that differ more than
    their inputs' measured differences allow."""
    outcome = output_bounds(model, result.differences, measured)
    wraps = any(steps > 1 for steps in result.differences.values())
    float_sums = result.verify_bound.relative is not None
    return _stated(outcome.bounds, wraps, float_sums), outcome.violations


def _sums_in_float(plan: _Plan) -> bool:
    """A dynamic op, or one with a float output (QGemm without y_scale): its Q/DQ form
    sums float products where the kernel sums int32 ones."""
    dynamic = plan.view.version.dynamic
    return dynamic or not any(t.role == "output" and t.values[1] for t in plan.triples)


def _refusal(failed: list[_Plan]) -> str:
    described = grouped((p.where, p.problems) for p in failed)
    return f"cannot convert {len(failed)} node(s) to Q/DQ; nothing written: {described}"


def _may_wrap(t: TripleView) -> bool:
    """A uint8 softmax output whose probability 1 quantizes above 255 (unknown: yes)."""
    if t.dtype != _DT.UINT8:
        return False
    scale = t.scale.array if t.scale is not None else None
    zero = t.zero_point.array if t.zero_point is not None else None
    if scale is None or scale.size != 1 or scale.reshape(-1)[0] <= 0:
        return True
    offset = float(zero.reshape(-1)[0]) if zero is not None and zero.size else 0.0
    return round(1 / float(scale.reshape(-1)[0])) + offset > 255


def _given(value: ir.Value | None, label: str) -> ir.Value:
    """An input planning found given (a node with a quantized input omitted is refused)."""
    if value is None:
        raise ValueError(f"{label} is omitted")
    return value


def _size(view: ValueView | None) -> int:
    """A scale's or zero point's element count (0: none, or unknown)."""
    return (view.size or 0) if view is not None else 0


def _per_channel(view: ValueView | None) -> bool:
    """A scale or zero point of more than one value (unknown shape: no; a weight's scale of
    unknown shape is refused before)."""
    return view is not None and view.size is not None and view.size > 1


def _known(view: ValueView) -> tuple[npt.NDArray[Any], np.dtype[Any]]:
    """A scale's or zero point's values and NumPy type, which planning checked are known
    where they are read (a constant's view has both)."""
    if view.array is None or view.dtype is None:
        raise ValueError(f"'{view.name}' is not a constant of a known type")
    return view.array, view.dtype.numpy()


class _Rewriter:
    """Builds the Q/DQ nodes and constants; shares one DequantizeLinear per quantized value."""

    def __init__(self, model: ir.Model) -> None:
        self._names = FreshNames(model, nodes=True)
        self._dq: dict[tuple[object, ...], ir.Value] = {}
        #: each QuantizeLinear output written for a converted node, and the steps it may
        #: differ by with the same input (1; a wrapping softmax's range).
        self._requantized: list[tuple[ir.Value, float]] = []
        self.wraps = False  # a uint8 QLinearSoftmax that may wrap around was converted

    @property
    def requantized(self) -> dict[str, float]:
        """The name each requantized output has now (it takes the converted node's
        output's name) -> its steps."""
        return {value.name: steps for value, steps in self._requantized if value.name}

    def name(self, base: str) -> str:
        """A name no value, node or initializer of the model has."""
        return self._names.fresh(base)

    def constant(self, plan: _Plan, array: npt.NDArray[Any], base: str) -> ir.Value:
        """A new initializer (a Constant node inside a function) holding ``array``."""
        graph = plan.view.site.graph
        name = self.name(base)
        node_name = self.name(name) if isinstance(graph, ir.Function) else None
        tensor = ir.tensor(array, name=name)
        return add_constant(graph, tensor, name, before=plan.view.node, node_name=node_name)

    def _node(
        self,
        plan: _Plan,
        op: str,
        inputs: Sequence[ir.Value | None],
        attrs: Mapping[str, Any],
        base: str,
    ) -> ir.Value:
        node = ir.node(op, inputs, attributes=attrs, name=self.name(base + "_node"))
        node.outputs[0].name = self.name(base)
        plan.view.site.graph.insert_before(plan.view.node, node)
        return node.outputs[0]

    def dequantize(self, plan: _Plan, t: TripleView, scale: ir.Value | None = None) -> ir.Value:
        """DequantizeLinear of ``t`` (``scale``: another scale, for a bias)."""
        data, own_scale, zero_point = t.values
        data = _given(data, t.label)
        scale = scale or self._flat(plan, t, t.scale, own_scale)
        zero_point = self._flat(plan, t, t.zero_point, zero_point)
        scales, zeros = _size(t.scale), _size(t.zero_point)
        per_channel = scales > 1
        if not per_channel and zeros > 1 and t.scale is not None:  # one scale, a zero point each
            scale, per_channel = self._expanded(plan, t, t.scale, zeros), True
        elif per_channel and zero_point is not None and zeros == 1 and t.zero_point is not None:
            zero_point = self._expanded(plan, t, t.zero_point, scales)
        attrs = {"axis": t.channel_axis} if per_channel and t.channel_axis is not None else {}
        key = (id(plan.view.site.graph), id(data), id(scale), id(zero_point), str(attrs))
        if key not in self._dq:
            inputs = [data, scale] + ([zero_point] if zero_point is not None else [])
            base = (data.name or "x") + "_dequantized"
            self._dq[key] = self._node(plan, "DequantizeLinear", inputs, attrs, base)
        return self._dq[key]

    def _flat(
        self, plan: _Plan, t: TripleView, view: ValueView | None, value: ir.Value | None
    ) -> ir.Value | None:
        """A per-column scale or zero point written [1, N] as the 1-D [N] Q/DQ take."""
        if view is None or value is None or not t.column_shaped(view):
            return value
        array, dtype = _known(view)
        return self.constant(plan, array.reshape(-1).astype(dtype), (view.name or t.label) + "_1d")

    def _expanded(self, plan: _Plan, t: TripleView, view: ValueView, count: int) -> ir.Value:
        """A per-channel copy of a scale or zero point shared by every channel: Q/DQ need
        the scale and zero point of one shape."""
        values, dtype = _known(view)
        array = np.full(count, values.reshape(-1)[0], dtype)
        return self.constant(plan, array, (view.name or t.label) + "_per_channel")

    def _bias(self, plan: _Plan, name: str) -> ir.Value | None:
        """DequantizeLinear of QLinearConv's B / QGemm's C with scale input x weight scale."""
        view = plan.view
        index = view.version.input_index(name)
        bias = view.node.inputs[index] if len(view.node.inputs) > index else None
        first, weight = plan.triples[0], plan.triples[1]
        if bias is None or first.scale is None or weight.scale is None:
            return None  # (planning refused a bias without an input and a weight scale)
        input_scale, weight_scale = _known(first.scale)[0], _known(weight.scale)[0]
        product = (input_scale * weight_scale.reshape(-1)).astype(np.float32)
        shape = () if product.size == 1 else (product.size,)
        scale = self.constant(plan, product.reshape(shape), (bias.name or "bias") + "_scale")
        spec = dataclasses.replace(weight.spec, channel_axis=0)
        bias_triple = dataclasses.replace(
            weight,
            spec=spec,
            values=(bias, scale, None),
            zero_point=None,
            channel_axis=0,
            scale=dataclasses.replace(weight.scale, shape=shape),
        )
        return self.dequantize(plan, bias_triple, scale)

    def apply(self, plan: _Plan) -> None:
        """Replace the plan's node by its Q/DQ form."""
        if plan.pattern is not None:
            self._apply_pattern(plan, plan.pattern)
            return
        view = plan.view
        plan.triples = triples(view)  # inputs may be outputs of nodes rewritten before
        floats = [self.dequantize(plan, t) for t in plan.triples if t.role != "output"]
        base = view.node.name or plan.float_op
        if view.op_type == "DynamicQuantizeMatMul":
            floats[0:0] = [self._dynamic_input(plan)]
        inputs = self._float_inputs(plan, floats)
        result = self._node(plan, plan.float_op, inputs, plan.attributes, base)
        result = self._add_bias(plan, result)
        outputs = [
            (t, scale)
            for t in plan.triples
            if t.role == "output" and (scale := t.values[1]) is not None
        ]
        if outputs:
            result = self._quantize(plan, *outputs[0], result)
        replace_value(view.node.outputs[0], result)
        plan.view.site.graph.remove(view.node, safe=True)

    def _float_inputs(self, plan: _Plan, floats: list[ir.Value]) -> Sequence[ir.Value | None]:
        view = plan.view
        if view.op_type == "QLinearConv":
            return [*floats, *[b for b in [self._bias(plan, "B")] if b is not None]]
        if view.op_type == "QGemm":
            return [*floats, *[b for b in [self._bias(plan, "C")] if b is not None]]
        if view.op_type == "QLinearWhere":
            return [view.node.inputs[0], *floats]
        if view.op_type == "QLinearReduceMean" and _opset(view) >= 18:
            axes = np.array(_attr_value(view, "axes"), np.int64)
            return [*floats, self.constant(plan, axes, "axes")]
        if view.op_type == "QLinearReduceMean":
            plan.attributes["axes"] = list(_attr_value(view, "axes"))
        return floats

    def _add_bias(self, plan: _Plan, result: ir.Value) -> ir.Value:
        view = plan.view
        if view.op_type not in ("MatMulIntegerToFloat", "DynamicQuantizeMatMul"):
            return result
        bias = view.operand("bias")
        if bias is None:
            return result
        value = view.node.inputs[view.version.input_index("bias")]
        return self._node(plan, "Add", [result, value], {}, (view.node.name or "matmul") + "_bias")

    def _dynamic_input(self, plan: _Plan) -> ir.Value:
        """DynamicQuantizeMatMul's A: DynamicQuantizeLinear -> DequantizeLinear."""
        view = plan.view
        a = _given(view.node.inputs[0], "A")
        node = ir.node(
            "DynamicQuantizeLinear",
            [a],
            num_outputs=3,
            name=self.name((a.name or "a") + "_quantize"),
        )
        for output, suffix in zip(
            node.outputs, ("_quantized", "_scale", "_zero_point"), strict=True
        ):
            output.name = self.name((a.name or "a") + suffix)
        view.site.graph.insert_before(view.node, node)
        return self._node(
            plan, "DequantizeLinear", list(node.outputs), {}, (a.name or "a") + "_dequantized"
        )

    def _quantize(self, plan: _Plan, t: TripleView, scale: ir.Value, value: ir.Value) -> ir.Value:
        """QuantizeLinear of ``value`` to the output ``t`` (``scale``: its scale)."""
        zero_point = t.values[2]
        if zero_point is None:  # int8 without a zero point: QuantizeLinear would give uint8
            dtype = next((x.dtype for x in plan.triples if x.dtype is not None), _DT.UINT8)
            zero_point = self.constant(
                plan, np.zeros((), dtype.numpy()), (scale.name or "y") + "_zero_point"
            )
        base = (plan.view.node.outputs[0].name or "y") + "_quantize"
        result = self._node(plan, "QuantizeLinear", [value, scale, zero_point], {}, base)
        steps = 1.0
        if plan.view.op_type == "QLinearSoftmax" and _may_wrap(t):
            steps, self.wraps = 255.0, True
        self._requantized.append((result, steps))
        return result

    def _apply_pattern(self, plan: _Plan, pattern: _Pattern) -> None:
        cast, mul, _, _ = pattern
        view = plan.view
        a, b = (self.dequantize(plan, t) for t in _pattern_triples(view, pattern))
        op = _INTEGER_OPS[view.op_type]
        result = self._node(plan, op, [a, b], plan.attributes, view.node.name or op)
        replace_value(mul.outputs[0], result)
        graph = view.site.graph
        scales = mul.inputs[1] if mul.inputs[0] is cast.outputs[0] else mul.inputs[0]
        for node in (mul, cast, view.node):
            graph.remove(node, safe=True)
        if scales is None or scales.uses() or scales.is_graph_output():
            return
        producer = scales.producer()
        if producer is not None:
            graph.remove(producer, safe=True)  # the a_scale * b_scale Mul
