"""QL107: inputs and outputs of the QOperator / dynamic operators (QLinearConv,
QLinearMatMul, MatMulInteger, com.microsoft QLinear*, QGemm, ...), read from their
:class:`~qlrewrite.opsets.QOperatorVersion` rows."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QOperatorView
from qlrewrite.rules.common import QOPERATOR_KINDS, QOPERATOR_VERSIONS
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


@rule(
    "QL107",
    "qoperator-input-count",
    ERROR,
    summary="A QOperator / dynamic node (QLinearConv, QLinearAdd, ...) has too few or too "
    "many inputs or outputs, or an empty required input.",
    explanation="""
    Each QOperator takes its quantized tensors with their scales and zero points in fixed
    places (QLinearConv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point, then an optional int32 bias). QLinearConcat takes Y_scale and
    Y_zero_point, then one (data, scale, zero point) three per input. ONNX Runtime refuses
    other counts, and an empty name in a required slot, when it loads the model; every
    slot of every QLinearConcat three is required (ONNX Runtime 1.31 fails on an empty
    data input when it runs, and crashes the process on an empty scale or zero point).
    Some optional zero points are optional only in part: QLinearAdd, QLinearMul,
    QLinearAveragePool and QLinearReduceMean refuse one given as an empty name (leaving
    out the last one is accepted), and ONNX Runtime 1.31 aborts the process loading a
    QLinearSigmoid or QLinearLeakyRelu whose inputs end before Y_zero_point.
    """,
    example="""
    bad:  QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale)
    good: QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zp)
    """,
    versions=QOPERATOR_VERSIONS,
    kinds=QOPERATOR_KINDS,
    examples=[
        Example(
            "matmul-without-y-zero-point",
            ModelSpec(
                "edited", ModelSpec("qoperator", "QLinearMatMul"), ModelSpec("cut_inputs", 7)
            ),
            ModelSpec("qoperator", "QLinearMatMul"),
        ),
    ],
)
def qoperator_input_count(ctx: QOperatorView) -> Iterator[Finding]:
    row = ctx.version
    low, high = row.input_range
    count = len(ctx.node.inputs)
    names = [o.name for o in row.inputs]
    if count < low or (high is not None and count > high) or _bad_variadic(ctx):
        most = "more in threes" if high is None else str(high)
        yield ctx.report(
            f"has {count} inputs; {ctx.op_type} takes {low} to {most} ({', '.join(names)})",
            "give the node the inputs its schema lists, in order",
        )
        return
    missing = [
        o.name
        for o, value in zip(row.inputs, ctx.node.inputs, strict=False)
        if not o.optional and value is None
    ] + _empty_in_threes(ctx)
    if missing:
        yield ctx.report(
            f"required input {' and '.join(missing)} is empty",
            "connect the missing input",
        )
    yield from _runtime_slots(ctx)
    required = sum(not o.optional for o in row.outputs)
    if not required <= len(ctx.node.outputs) <= len(row.outputs):
        yield ctx.report(
            f"has {len(ctx.node.outputs)} outputs; {ctx.op_type} has "
            f"{required} to {len(row.outputs)}",
            "keep the outputs the schema lists",
        )


def _runtime_slots(ctx: QOperatorView) -> Iterator[Finding]:
    """Optional inputs ONNX Runtime refuses empty, or needs a slot for (opsets rows)."""
    row, inputs = ctx.version, ctx.node.inputs
    if row.empty_optional_refused:
        empty = [o.name for o, v in zip(row.inputs, inputs, strict=False) if v is None]
        if empty:
            yield ctx.report(
                f"optional input {' and '.join(empty)} is given as an empty "
                "name, which ONNX Runtime refuses for this operator when it loads the model",
                "connect it, or leave it out only at the end of the inputs",
            )
    cut = [o.name for o in row.inputs[len(inputs) :] if o.name in row.slot_needed]
    if cut:
        yield ctx.report(
            f"the inputs end before {' and '.join(cut)}: ONNX Runtime 1.31 "
            "aborts the process when it loads such a node",
            f"give {' and '.join(cut)} (an empty name in its place is accepted)",
        )


_THREE = ("data", "scale", "zero point")


def _empty_in_threes(ctx: QOperatorView) -> list[str]:
    """QLinearConcat: every slot of each (data, scale, zero point) three is required (ONNX
    Runtime 1.31 fails on an empty data input and crashes on an empty scale or zero
    point)."""
    if not ctx.version.variadic:
        return []
    fixed = len(ctx.version.inputs) - 1
    return [
        f"{_THREE[i % 3]} of input {i // 3 + 1}"
        for i, value in enumerate(ctx.node.inputs[fixed:])
        if value is None
    ]


def _bad_variadic(ctx: QOperatorView) -> bool:
    """QLinearConcat: after Y_scale and Y_zero_point, whole (data, scale, zp) threes."""
    if not ctx.version.variadic:
        return False
    rest = len(ctx.node.inputs) - (len(ctx.version.inputs) - 1)
    return rest < 3 or rest % 3 != 0
