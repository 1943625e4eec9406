"""QL314: element types of the QOperator / dynamic operators, read from their
:class:`~qlrewrite.opsets.QOperatorVersion` rows (type parameters shared by a tensor and
its zero point)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QOperatorView, ValueView, triples
from qlrewrite.rules.common import QOPERATOR_KINDS, QOPERATOR_VERSIONS, type_names
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


def _typed_operands(
    ctx: QOperatorView,
) -> Iterator[tuple[str, str, ValueView, ir.DataType]]:
    """(schema name, type parameter, view, element type) of every present input and output
    with a known element type; QLinearConcat's variadic inputs take their three's type
    parameters."""
    row = ctx.version
    fixed = [(o, v) for o, v in zip(row.inputs, ctx.node.inputs, strict=False)]
    if row.variadic:
        fixed = fixed[: len(row.inputs) - 1]
        scale, zero_point = row.inputs[0].type_param, row.inputs[1].type_param
        for t in triples(ctx)[len(row.triples) :]:
            for suffix, view, param in zip(
                ("", "_scale", "_zero_point"),
                (t.data, t.scale, t.zero_point),
                (row.inputs[-1].type_param, scale, zero_point),
                strict=True,
            ):
                if view is not None and view.dtype is not None:
                    yield t.label + suffix, param, view, view.dtype
    outputs = list(zip(row.outputs, ctx.node.outputs, strict=False))
    for operand, value in (*fixed, *outputs):
        view = ctx.value_view(value)
        if view is not None and view.dtype is not None:
            yield operand.name, operand.type_param, view, view.dtype


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
    versions=QOPERATOR_VERSIONS,
    kinds=QOPERATOR_KINDS,
    examples=[
        Example(
            "conv-weight-zero-point-uint8",
            ModelSpec(
                "qoperator", "QLinearConv", w_zero_point=ModelSpec("array", 0, DT.UINT8, shape=(3,))
            ),
            ModelSpec("qoperator", "QLinearConv"),
        ),
    ],
)
def qoperator_type(ctx: QOperatorView) -> Iterator[Finding]:
    row = ctx.version
    bound: dict[str, tuple[str, ir.DataType]] = {}
    for name, param, view, dtype in _typed_operands(ctx):
        allowed = row.type_params[param]
        if dtype not in allowed:
            yield ctx.report(
                f"{name} {view.describe()} is {dtype.name}; {row.label} "
                f"takes {type_names(allowed)}",
                f"give {name} one of {type_names(allowed)}",
            )
            continue
        if param.startswith("tensor(") or len(allowed) == 1:
            continue
        first = bound.setdefault(param, (name, dtype))
        if first[1] != dtype:
            yield ctx.report(
                f"{name} is {dtype.name} but {first[0]} is "
                f"{first[1].name}; {row.label} needs them of one type ({param})",
                f"give {name} and {first[0]} the same type",
            )
    for t in triples(ctx)[len(row.triples) :] if row.variadic else ():
        data = t.data.dtype if t.data is not None else None
        zero_point = t.zero_point.dtype if t.zero_point is not None else None
        if data is not None and zero_point is not None and data != zero_point:
            yield ctx.report(
                f"{t.label}'s zero point is {zero_point.name} but its data is {data.name}",
                "give them the same type",
            )
