"""QL107, QL314, QL440-QL442, QL511: the QOperator / dynamic operators (QLinearConv,
QLinearMatMul, ConvInteger, MatMulInteger, DynamicQuantizeLinear, com.microsoft QLinear*,
QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat, QAttention): their inputs, types,
and the shapes and values of their scales and zero points, read from their
:class:`~qlrewrite.opsets.QOperatorVersion` rows and (data, scale, zero point) triples
(:func:`qlrewrite.qdq.triples`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import ERROR, WARNING, Finding
from qlrewrite.qdq import QOPERATOR, NodeView, TripleView, ValueView, triples
from qlrewrite.rules.common import type_names
from qlrewrite.rules.registry import rule

__all__: list[str] = []

_KINDS = (QOPERATOR,)
_VERSIONS = "ai.onnx QLinearConv, QLinearMatMul, ...; com.microsoft QLinear*, QGemm, ..."


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
    other counts, and an empty name in a required slot, when it loads the model.
    """,
    example="""
    bad:  QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale)
    good: QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zp)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
)
def qoperator_input_count(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.row
    low, high = row.input_range
    count = len(ctx.node.inputs)
    names = [o.name for o in row.inputs]
    if count < low or (high is not None and count > high) or _bad_variadic(ctx):
        most = "more in threes" if high is None else str(high)
        yield ctx.finding(
            "QL107", ERROR, f"has {count} inputs; {ctx.op_type} takes {low} to {most} "
            f"({', '.join(names)})", "give the node the inputs its schema lists, in order",
        )  # fmt: skip
        return
    missing = [
        o.name
        for o, value in zip(row.inputs, ctx.node.inputs, strict=False)
        if not o.optional and value is None
    ]
    if missing:
        yield ctx.finding(
            "QL107", ERROR, f"required input {' and '.join(missing)} is empty",
            "connect the missing input",
        )  # fmt: skip
    required = sum(not o.optional for o in row.outputs)
    if not required <= len(ctx.node.outputs) <= len(row.outputs):
        yield ctx.finding(
            "QL107", ERROR, f"has {len(ctx.node.outputs)} outputs; {ctx.op_type} has "
            f"{required} to {len(row.outputs)}", "keep the outputs the schema lists",
        )  # fmt: skip


def _bad_variadic(ctx: NodeView) -> bool:
    """QLinearConcat: after Y_scale and Y_zero_point, whole (data, scale, zp) threes."""
    if not ctx.row.variadic:
        return False
    rest = len(ctx.node.inputs) - (len(ctx.row.inputs) - 1)
    return rest < 3 or rest % 3 != 0


def _typed_operands(ctx: NodeView) -> Iterator[tuple[str, str, ValueView]]:
    """(schema name, type parameter, view) of every present input and output with a known
    element type; QLinearConcat's variadic inputs take their three's type parameters."""
    row = ctx.row
    fixed = [(o, v) for o, v in zip(row.inputs, ctx.node.inputs, strict=False)]
    if row.variadic:
        fixed = fixed[: len(row.inputs) - 1]
        scale, zero_point = row.inputs[0].type_param, row.inputs[1].type_param
        for t in triples(ctx)[len(row.triples) :]:
            for suffix, view, param in zip(
                ("", "_scale", "_zero_point"), (t.data, t.scale, t.zero_point),
                (row.inputs[-1].type_param, scale, zero_point), strict=True,
            ):  # fmt: skip
                if view is not None and view.dtype is not None:
                    yield t.label + suffix, param, view
    outputs = list(zip(row.outputs, ctx.node.outputs, strict=False))
    for operand, value in (*fixed, *outputs):
        view = ctx.value_view(value)
        if view is not None and view.dtype is not None:
            yield operand.name, operand.type_param, view


@rule(
    "QL314",
    "qoperator-type",
    ERROR,
    summary="An input or output of a QOperator / dynamic node has a type its schema does not "
    "allow, or a zero point's type differs from its data's.",
    explanation="""
    The integer kernels are typed: scales are float (float16 / bfloat16 only where the
    schema says so), quantized tensors int8 or uint8 (float8 for QLinearMatMul-21), the
    QLinearConv bias int32, and a zero point has the type of the tensor it belongs to.
    ONNX Runtime refuses a model breaking this when it loads it ("bound to different
    types").
    """,
    example="""
    bad:  QLinearConv(x: uint8, x_scale, x_zero_point: int8, ...)
    good: QLinearConv(x: uint8, x_scale, x_zero_point: uint8, ...)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
)
def qoperator_type(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.row
    bound: dict[str, tuple[str, ir.DataType]] = {}
    for name, param, view in _typed_operands(ctx):
        allowed = row.type_params[param]
        if view.dtype not in allowed:
            yield ctx.finding(
                "QL314", ERROR, f"{name} {view.describe()} is {view.dtype.name}; {row.label} "
                f"takes {type_names(allowed)}", f"give {name} one of {type_names(allowed)}",
            )  # fmt: skip
            continue
        if param.startswith("tensor(") or len(allowed) == 1:
            continue
        first = bound.setdefault(param, (name, view.dtype))
        if first[1] != view.dtype:
            yield ctx.finding(
                "QL314", ERROR, f"{name} is {view.dtype.name} but {first[0]} is "
                f"{first[1].name}; {row.label} needs them of one type ({param})",
                f"give {name} and {first[0]} the same type",
            )  # fmt: skip
    for t in triples(ctx)[len(row.triples) :] if row.variadic else ():
        data = t.data.dtype if t.data is not None else None
        zero_point = t.zero_point.dtype if t.zero_point is not None else None
        if data is not None and zero_point is not None and data != zero_point:
            yield ctx.finding(
                "QL314", ERROR, f"{t.label}'s zero point is {zero_point.name} but its data "
                f"is {data.name}", "give them the same type",
            )  # fmt: skip


def _size(view: ValueView | None) -> int | None:
    return view.size if view is not None else None


def _channels(t: TripleView) -> int | None:
    """The length a per-channel scale of ``t`` needs (None: per-tensor only, or unknown)."""
    data, axis = t.data, t.channel_axis
    if axis is None or data is None or data.shape is None:
        return None
    rank = len(data.shape)
    return data.shape[axis] if -rank <= axis < rank else None


def _per_tensor(view: ValueView, scalar_only: bool) -> bool:
    shape = view.shape
    return shape == () or (not scalar_only and shape == (1,))


def _scale_problem(ctx: NodeView, t: TripleView, name: str, view: ValueView) -> str | None:
    if view.shape is None or _per_tensor(view, ctx.row.scalar_only):
        return None
    what = "a scalar" if ctx.row.scalar_only else "a scalar or 1-element 1-D tensor"
    if t.channel_axis is None or ctx.row.scalar_only:
        return f"{name} {view.describe()} must be {what} ({t.role} {t.label} is per-tensor)"
    channels = _channels(t)
    if len(view.shape) != 1:
        return f"{name} {view.describe()} must be {what} or 1-D per channel"
    if channels is not None and view.shape[0] != channels:
        return (
            f"{name} {view.describe()} has {view.shape[0]} values; {t.label} has {channels} "
            f"channels on axis {t.channel_axis}"
        )
    return None


@rule(
    "QL440",
    "qoperator-scale-shape",
    ERROR,
    summary="A QOperator scale or zero point is not per-tensor, or a weight's per-channel "
    "scale does not have one value per output channel.",
    explanation="""
    The integer kernels requantize with one scale per activation and output: those scales
    and zero points must be scalars (or 1-element 1-D tensors; com.microsoft QLinearAdd /
    QLinearMul take scalars only). A weight (QLinearConv's w, QLinearMatMul's b, QGemm's B,
    ...) may be quantized per channel: a 1-D scale with one value per output channel
    (QLinearConv: w.shape[0]; MatMul: the last dim of b; QGemm: N). ONNX Runtime refuses
    other shapes when it runs the node.
    """,
    example="""
    bad:  QLinearConv(x, x_scale, x_zp, w: [16, 8, 3, 3], w_scale: [8], w_zp: [8], ...)
    good: QLinearConv(x, x_scale, x_zp, w: [16, 8, 3, 3], w_scale: [16], w_zp: [16], ...)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
)
def qoperator_scale_shape(ctx: NodeView) -> Iterator[Finding]:
    for t in triples(ctx):
        for name, view in (("scale", t.scale), ("zero point", t.zero_point)):
            problem = _scale_problem(ctx, t, f"{t.label}'s {name}", view) if view else None
            if problem is not None:
                yield ctx.finding(
                    "QL440", ERROR, problem,
                    "quantize activations and outputs per tensor; a per-channel weight "
                    "scale has one value per output channel",
                )  # fmt: skip


@rule(
    "QL441",
    "qoperator-zero-point-shape",
    ERROR,
    summary="A QOperator zero point has neither one value nor as many as its scale.",
    explanation="""
    A zero point belongs to its scale: per channel both have one value per channel; ONNX
    Runtime also accepts one zero point shared by every channel. Any other count leaves
    channels without a zero point: ONNX Runtime refuses the node when it runs it.
    """,
    example="""
    bad:  QLinearMatMul(..., b: [64, 32], b_scale: [32], b_zero_point: [16], ...)
    good: QLinearMatMul(..., b: [64, 32], b_scale: [32], b_zero_point: [32], ...)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
)
def qoperator_zero_point_shape(ctx: NodeView) -> Iterator[Finding]:
    for t in triples(ctx):
        scale, zero_point = _size(t.scale), _size(t.zero_point)
        if scale is None or zero_point is None or zero_point in (1, scale):
            continue
        yield ctx.finding(
            "QL441", ERROR, f"{t.label}'s zero point {t.zero_point.describe()} has "
            f"{zero_point} values, its scale {t.scale.describe()} {scale}",
            "give the zero point the scale's shape",
        )  # fmt: skip


def _bias_channels(ctx: NodeView) -> tuple[str, int | None] | None:
    """(bias name, the length it needs) of QLinearConv's B / QGemm's C; None without one."""
    if ctx.op_type == "QLinearConv":
        name, weight = "B", ctx.operand("w")
        channels = weight.shape[0] if weight is not None and weight.shape else None
    elif ctx.op_type == "QGemm":
        name, weight = "C", ctx.operand("B")
        axis = 0 if ctx.attr_or_default("transB") else 1
        shape = weight.shape if weight is not None else None
        channels = shape[axis] if shape is not None and len(shape) == 2 else None
    else:
        return None
    return (name, channels) if ctx.operand(name) is not None else None


@rule(
    "QL442",
    "qoperator-bias-shape",
    ERROR,
    summary="QLinearConv's int32 bias is not 1-D with one value per output channel (QGemm's "
    "C: per output column).",
    explanation="""
    QLinearConv adds its bias B in the int32 accumulator, quantized with scale x_scale *
    w_scale and zero point 0: one value per output channel (w.shape[0]). QGemm's C is the
    same for its N output columns. ONNX Runtime refuses another shape when it runs the
    node.
    """,
    example="""
    bad:  QLinearConv(x, ..., w: [16, 8, 3, 3], ..., B: int32 [8])
    good: QLinearConv(x, ..., w: [16, 8, 3, 3], ..., B: int32 [16])
    """,
    versions="ai.onnx QLinearConv 10, com.microsoft QLinearConv 1, QGemm 1",
    kinds=_KINDS,
)
def qoperator_bias_shape(ctx: NodeView) -> Iterator[Finding]:
    found = _bias_channels(ctx)
    if found is None:
        return
    name, channels = found
    bias = ctx.operand(name)
    if bias.shape is None or channels is None:
        return
    ok = bias.shape == (channels,)
    if ctx.op_type == "QGemm":  # Gemm's C broadcasts: scalar, [N], [1, N] also do
        ok = ok or bias.size == 1 or (len(bias.shape) == 2 and bias.shape[-1] == channels)
    if not ok:
        yield ctx.finding(
            "QL442", ERROR, f"bias {name} {bias.describe()} must be [{channels}] (one value "
            "per output channel)", f"give {name} {channels} int32 values",
        )  # fmt: skip


@rule(
    "QL511",
    "qoperator-scale-value",
    WARNING,
    summary="A constant scale of a QOperator node is zero, negative, NaN or infinite.",
    explanation="""
    The integer kernels divide by the output scale when they requantize, and multiply
    the input and weight scales: a zero, NaN or infinite scale gives saturated or garbage
    outputs, and ONNX Runtime runs the model regardless. ORT's quantizers never write a
    scale that is not positive and finite.
    """,
    example="""
    warn: QLinearMatMul(a, a_scale=0.0, ...)
    good: QLinearMatMul(a, a_scale=0.02, ...)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
)
def qoperator_scale_value(ctx: NodeView) -> Iterator[Finding]:
    for t in triples(ctx):
        values = t.scale.array if t.scale is not None else None
        if values is None:
            continue
        bad = values[~(np.isfinite(values) & (values > 0))]
        if bad.size:
            yield ctx.finding(
                "QL511", WARNING, f"{t.label}'s scale {t.scale.describe()} has {bad.size} "
                f"value(s) that are not positive and finite: {bad[:4].tolist()}",
                "recompute the scale from the tensor's range",
            )  # fmt: skip
