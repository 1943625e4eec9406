"""QL501-QL504: values of the constant scales and zero points of Q/DQ nodes (read only
when small)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import WARNING, Finding
from qlrewrite.qdq import QDQView, ValueView
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []

_FLOAT_ZERO_POINT = frozenset(
    {
        ir.DataType.FLOAT8E4M3FN,
        ir.DataType.FLOAT8E4M3FNUZ,
        ir.DataType.FLOAT8E5M2,
        ir.DataType.FLOAT8E5M2FNUZ,
        ir.DataType.FLOAT4E2M1,
        ir.DataType.FLOAT6E2M3,
        ir.DataType.FLOAT6E3M2,
    }
)


def _sample(values: np.ndarray, limit: int = 4) -> str:
    shown = ", ".join(str(v) for v in values[:limit].tolist())
    return f"[{shown}{', ...' if values.size > limit else ''}]"


@rule(
    "QL501",
    "scale-value",
    WARNING,
    summary="A constant scale is zero, NaN or infinite.",
    explanation="""
    A scale maps integers to real values: it must be nonzero and finite. A zero scale
    makes QuantizeLinear divide by zero (every output saturates) and DequantizeLinear
    return zeros; NaN or infinity poison every value computed from it. Runtimes do not
    refuse these values, so the model runs and gives wrong numbers. Negative scales are
    allowed by the spec and written on purpose (see QL504).
    """,
    example="""
    warn: DequantizeLinear(w, scale=[0.02, 0.0, nan], zp, axis=0)
    good: DequantizeLinear(w, scale=[0.02, 0.01, 0.01], zp, axis=0)
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    examples=[
        Example(
            "scale-zero",
            ModelSpec("qdq", DQ, 21, scale=0.0),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def scale_value(ctx: QDQView) -> Iterator[Finding]:
    found = _constant_scale(ctx)
    if found is None:
        return
    scale, values = found
    bad = values[~(np.isfinite(values) & (values != 0))]
    if bad.size:
        yield ctx.report(
            f"scale {scale.describe()} has {bad.size} value(s) that are zero, NaN or "
            f"infinite: {_sample(bad)}",
            "recompute the scale (nonzero, finite) from the tensor's range",
        )


@rule(
    "QL504",
    "scale-negative",
    WARNING,
    summary="A constant scale is negative (opt-in: the spec allows it).",
    explanation="""
    The spec puts no sign on the scale, and quantizers write negative scales on purpose:
    NNCF's symmetric weight compression (INT4_SYM / INT8_SYM) stores w[argmax |w|] / -8,
    so about half the block scales are negative, and ONNX Runtime's MatMulNBits symmetric
    quantizer does the same. Every runtime computes them as written. Select this rule
    (`--select QL504`) to find them in a pipeline that assumes positive scales.
    """,
    example="""
    warn: DequantizeLinear(w: int4, scale=[0.02, -0.01], zp, axis=0)
    good: DequantizeLinear(w: int4, scale=[0.02, 0.01], zp, axis=0)   # w of row 1 negated
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    opt_in=True,
    examples=[
        Example(
            "scale-negative",
            ModelSpec("qdq", DQ, 21, scale=-1.0, scale_as="constant"),
            ModelSpec("qdq", DQ, 21, scale_as="constant"),
        ),
    ],
)
def scale_negative(ctx: QDQView) -> Iterator[Finding]:
    found = _constant_scale(ctx)
    if found is None:
        return
    scale, values = found
    negative = values[values < 0]
    if negative.size:
        yield ctx.report(
            f"scale {scale.describe()} has {negative.size} negative value(s): {_sample(negative)}",
            "negate the scale and the quantized values of the slice, if a positive scale "
            "is required",
        )


def _constant_scale(ctx: QDQView) -> tuple[ValueView, np.ndarray] | None:
    """The constant scale and its values, flat (None when not constant or empty)."""
    scale = ctx.scale
    if scale is None or scale.array is None or scale.array.size == 0:
        return None
    return scale, scale.array.ravel()


@rule(
    "QL502",
    "int32-zero-point-nonzero",
    WARNING,
    summary="An int32 DequantizeLinear has a nonzero zero point.",
    explanation="""
    int32 DequantizeLinear is used for biases whose zero point is, per the spec, supposed
    to be 0. Runtimes disagree on a nonzero one: ONNX Runtime subtracts in int32, the
    reference evaluator in float32 (losing precision above 2^24).
    """,
    example="""
    warn: DequantizeLinear(b: int32, scale, zp: int32 = 5)
    good: DequantizeLinear(b: int32, scale)       # or zp = 0
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    examples=[
        Example(
            "int32-zero-point",
            ModelSpec("qdq", DQ, 21, x_type=DT.INT32, zp=5),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT32),
        ),
    ],
)
def int32_zero_point_nonzero(ctx: QDQView) -> Iterator[Finding]:
    zp = ctx.zero_point
    if ctx.is_quantize or zp is None or zp.array is None or zp.dtype != ir.DataType.INT32:
        return
    nonzero = zp.array.ravel()[zp.array.ravel() != 0]
    if nonzero.size:
        yield ctx.report(
            f"int32 zero point {zp.describe()} is nonzero: {_sample(nonzero.astype(np.int64))}",
            "fold the zero point into the bias and use zero point 0 (or omit it)",
        )


@rule(
    "QL503",
    "float-zero-point-nonzero",
    WARNING,
    summary="A float8 / float4 / float6 zero point is not 0.",
    explanation="""
    Float quantized types have no zero point: the spec expects 0. ONNX Runtime and the
    reference evaluator fail at run time on a nonzero float8 zero point in
    DequantizeLinear, and QuantizeLinear ignores it, so the value is either an error or
    silently dropped.
    """,
    example="""
    warn: DequantizeLinear(x: float8e4m3fn, scale, zp: float8e4m3fn = 1.0)
    good: DequantizeLinear(x: float8e4m3fn, scale)
    """,
    versions="ai.onnx 19+",
    examples=[
        Example(
            "float8-zero-point",
            ModelSpec("qdq", DQ, 21, x_type=DT.FLOAT8E4M3FN, zp=1.0),
            ModelSpec("qdq", DQ, 21, x_type=DT.FLOAT8E4M3FN),
            ort=False,  # ONNX Runtime's Python API cannot feed this input type
        ),
    ],
)
def float_zero_point_nonzero(ctx: QDQView) -> Iterator[Finding]:
    zp = ctx.zero_point
    if zp is None or zp.array is None or zp.dtype not in _FLOAT_ZERO_POINT:
        return
    values = zp.array.ravel()
    bad = values[values != 0]
    if bad.size:
        yield ctx.report(
            f"{zp.dtype.name} zero point {zp.describe()} is not 0: {_sample(bad)}",
            "omit the zero point (float types have none) or set it to 0",
        )
