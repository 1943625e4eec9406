"""QL440, QL442, QL443: shapes of the QOperator scales, zero points and int32 biases:
per-tensor activations and outputs, per-channel weights with one value per output
channel, read from the (data, scale, zero point) triples of :func:`qlrewrite.qdq.triples`;
QLinearConv weights without output channels."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import ERROR, WARNING, Finding
from qlrewrite.qdq import QOperatorView, TripleView, ValueView, triples
from qlrewrite.rules.common import QOPERATOR_KINDS, QOPERATOR_VERSIONS
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


def _size(view: ValueView | None) -> int | None:
    return view.size if view is not None else None


def _length_mismatch(t: TripleView) -> str | None:
    """Per channel, the scale and the zero point need as many values (either may be one
    value shared by every channel: ONNX Runtime and the spec allow it)."""
    scale_view, zp_view = t.scale, t.zero_point
    scale, zero_point = _size(scale_view), _size(zp_view)
    if scale_view is None or zp_view is None or scale is None or zero_point is None:
        return None
    if 1 in (scale, zero_point) or scale == zero_point:
        return None
    return (
        f"{t.label}'s zero point {zp_view.describe()} has {zero_point} values, its "
        f"scale {scale_view.describe()} {scale}"
    )


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


def _scale_problem(ctx: QOperatorView, t: TripleView, name: str, view: ValueView) -> str | None:
    if view.shape is None or _per_tensor(view, ctx.version.scalar_only):
        return None
    what = "a scalar" if ctx.version.scalar_only else "a scalar or 1-element 1-D tensor"
    if t.channel_axis is None or ctx.version.scalar_only:
        return f"{name} {view.describe()} must be {what} ({t.role} {t.label} is per-tensor)"
    channels = _channels(t)
    if len(view.shape) != 1 and not t.column_shaped(view):
        return f"{name} {view.describe()} must be {what} or 1-D per channel"
    if channels is not None and view.shape[-1] != channels:
        return (
            f"{name} {view.describe()} has {view.shape[-1]} values; {t.label} has {channels} "
            f"channels on axis {t.channel_axis}"
        )
    return None


@rule(
    "QL440",
    "qoperator-scale-shape",
    ERROR,
    summary="A QOperator scale or zero point is not per-tensor, or a weight's per-channel "
    "scale or zero point does not have one value per output channel.",
    explanation="""
    The integer kernels requantize with one scale per activation and output: those scales
    and zero points must be scalars (or 1-element 1-D tensors; com.microsoft QLinearAdd /
    QLinearMul take scalars only). A weight (QLinearConv's w, QLinearMatMul's b, QGemm's B,
    ...) may be quantized per channel: a 1-D scale with one value per output channel
    (QLinearConv: w.shape[0]; MatMul: the last dim of b; QGemm: N), and so may its zero
    point (one shared zero point, or one shared scale, is allowed too). ONNX Runtime
    refuses other shapes when it runs the node.
    """,
    example="""
    bad:  QLinearConv(x, x_scale, x_zp, w: [16, 8, 3, 3], w_scale: [8], w_zp: [8], ...)
    good: QLinearConv(x, x_scale, x_zp, w: [16, 8, 3, 3], w_scale: [16], w_zp: [16], ...)
    """,
    versions=QOPERATOR_VERSIONS,
    kinds=QOPERATOR_KINDS,
    examples=[
        Example(
            "conv-weight-scale-2-of-3-channels",
            ModelSpec(
                "qoperator",
                "QLinearConv",
                w_scale=ModelSpec("array", 0.01, DT.FLOAT, shape=(2,)),
                w_zero_point=ModelSpec("array", 0, DT.INT8, shape=(2,)),
            ),
            ModelSpec("qoperator", "QLinearConv"),
        ),
    ],
)
def qoperator_scale_shape(ctx: QOperatorView) -> Iterator[Finding]:
    for t in triples(ctx):
        problems = [
            _scale_problem(ctx, t, f"{t.label}'s {name}", view)
            for name, view in (("scale", t.scale), ("zero point", t.zero_point))
            if view is not None
        ]
        if not any(problems):
            problems.append(_length_mismatch(t))
        for problem in problems:
            if problem is not None:
                yield ctx.report(
                    problem,
                    "quantize activations and outputs per tensor; a per-channel weight "
                    "scale has one value per output channel",
                )


def _bias_channels(ctx: QOperatorView) -> tuple[str, ValueView, int | None] | None:
    """(bias name, bias, the length it needs) of QLinearConv's B / QGemm's C; None without
    one."""
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
    bias = ctx.operand(name)
    return (name, bias, channels) if bias is not None else None


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
    kinds=QOPERATOR_KINDS,
    examples=[
        Example(
            "conv-bias-2-of-3-channels",
            ModelSpec("qoperator", "QLinearConv", B=ModelSpec("array", (1, 2), DT.INT32)),
            ModelSpec("qoperator", "QLinearConv"),
        ),
    ],
)
def qoperator_bias_shape(ctx: QOperatorView) -> Iterator[Finding]:
    found = _bias_channels(ctx)
    if found is None:
        return
    name, bias, channels = found
    if bias.shape is None or channels is None:
        return
    ok = bias.shape == (channels,)
    if ctx.op_type == "QGemm":  # Gemm's C broadcasts: scalar, [N], [1, N] also do
        ok = ok or bias.size == 1 or (len(bias.shape) == 2 and bias.shape[-1] == channels)
    if not ok:
        yield ctx.report(
            f"bias {name} {bias.describe()} must be [{channels}] (one value per output channel)",
            f"give {name} {channels} int32 values",
        )


#: QLinearConv constants with 0 output channels.
_NO_CHANNELS = {
    "w": ModelSpec("array", 0, DT.INT8, shape=(0, 2, 3, 3)),
    "w_scale": ModelSpec("array", 0, DT.FLOAT, shape=(0,)),
    "w_zero_point": ModelSpec("array", 0, DT.INT8, shape=(0,)),
    "B": ModelSpec("array", 0, DT.INT32, shape=(0,)),
}


@rule(
    "QL443",
    "qlinearconv-no-output-channels",
    WARNING,
    summary="A QLinearConv whose weight has 0 output channels: ONNX Runtime 1.31 crashes.",
    explanation="""
    A weight w [0, C, kH, kW] makes the output [N, 0, H, W], empty, by the specification.
    ONNX Runtime 1.31's QLinearConv (ai.onnx and com.microsoft) crashes the whole process
    on it (measured: SIGSEGV when it runs), where QLinearMatMul and QGemm with 0 output
    columns run. `--verify` runs ONNX Runtime in a child process and reports such a crash
    as its reason.
    """,
    example="""
    warn: QLinearConv(x: [1, 2, 4, 4], ..., w: [0, 2, 3, 3], w_scale: [0], ..., B: [0])
    good: QLinearConv(x: [1, 2, 4, 4], ..., w: [3, 2, 3, 3], w_scale: [3], ..., B: [3])
    """,
    versions="ai.onnx QLinearConv 10, com.microsoft QLinearConv 1",
    kinds=QOPERATOR_KINDS,
    examples=[
        Example(
            "no-output-channels",
            ModelSpec("qoperator", "QLinearConv", **_NO_CHANNELS),
            ModelSpec("qoperator", "QLinearConv"),
        ),
    ],
)
def qlinearconv_no_output_channels(ctx: QOperatorView) -> Iterator[Finding]:
    if ctx.op_type != "QLinearConv":
        return
    w = ctx.operand("w")
    if w is not None and w.shape is not None and len(w.shape) > 0 and w.shape[0] == 0:
        yield ctx.report(
            f"w {w.describe()} has 0 output channels: the output is empty, and ONNX Runtime "
            "1.31 crashes the process running it",
            "drop the node (its output is empty), or give w its output channels",
        )
