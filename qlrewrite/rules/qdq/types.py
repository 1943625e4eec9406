"""QL301-QL309: element types of x, scale, zero point and output per operator version."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, WARNING, Finding
from qlrewrite.qdq import QDQView, ValueView
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec, Q
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


def _names(types: frozenset[ir.DataType]) -> str:
    return ", ".join(sorted(t.name for t in types))


def _first_version_allowing(ctx: QDQView, role: str, dtype: ir.DataType) -> int | None:
    for row in opsets.versions(ctx.domain, ctx.op_type):
        if dtype in getattr(row, role):
            return row.since
    return None


def _type_hint(ctx: QDQView, role: str, dtype: ir.DataType, what: str) -> str:
    since = _first_version_allowing(ctx, role, dtype)
    if since is not None and since > ctx.version.since:
        return f"{dtype.name} {what} needs opset {since}: run `qlrewrite upgrade --opset {since}`"
    if ctx.domain == opsets.MS_DOMAIN:
        low = opsets.versions("", ctx.op_type)
        if any(dtype in getattr(row, role) for row in low):
            return f"com.microsoft has no {dtype.name} {what}; use ai.onnx (`qlrewrite convert`)"
    return f"use one of: {_names(getattr(ctx.version, role))}"


def _role_type(ctx: QDQView, role: str, view: ValueView | None, what: str) -> Iterator[Finding]:
    if view is None or view.dtype is None:
        return
    allowed = getattr(ctx.version, role)
    if view.dtype not in allowed:
        yield ctx.report(
            f"{what} {view.describe()} has type {view.dtype.name}, which {ctx.version_label} "
            f"does not allow (allowed: {_names(allowed)})",
            _type_hint(ctx, role, view.dtype, what),
        )


@rule(
    "QL301",
    "x-type",
    ERROR,
    summary="The type of x is not allowed by the operator version in force.",
    explanation="""
    Each version lists the element types it accepts for x: DequantizeLinear takes int8,
    uint8 and int32 from opset 10, float8 from 19, int16/uint16/int4/uint4 from 21, float4
    from 23, int2/uint2 from 25, float6 from 28; QuantizeLinear takes float and int32, and
    float16/bfloat16 from 19. com.microsoft has no float8 and no bfloat16. A type outside the
    list makes the model invalid: ONNX's checker and runtimes refuse it.
    """,
    example="""
    bad:  opset 13: DequantizeLinear(x: int4, scale, zp)
    good: opset 21: DequantizeLinear(x: int4, scale, zp)   # qlrewrite upgrade --opset 21
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    upgrade_repairs=True,
    examples=[
        Example(
            "dq-x-float16",
            ModelSpec("qdq", DQ, 21, x_type=DT.FLOAT16, zp_type=None, out_type=None),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def x_type(ctx: QDQView) -> Iterator[Finding]:
    yield from _role_type(ctx, "x_types", ctx.x, "x")


@rule(
    "QL302",
    "scale-type",
    ERROR,
    summary="The type of the scale is not allowed by the operator version in force.",
    explanation="""
    Scales are float32 up to opset 18; float16 and bfloat16 are allowed from opset 19 and
    float8e8m0 from 24 (DequantizeLinear only with output_dtype). QuantizeLinear-19/21 also
    accept int32 scales for int32 x. com.microsoft takes float32 and float16 scales only. A
    scale of another type is rejected by ONNX's checker and by runtimes.
    """,
    example="""
    bad:  opset 13: DequantizeLinear(x: uint8, scale: float16, zp)
    good: opset 19: DequantizeLinear(x: uint8, scale: float16, zp)
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    upgrade_repairs=True,
    examples=[
        Example(
            "scale-double",
            ModelSpec("qdq", DQ, 21, scale_type=DT.DOUBLE, out_type=None),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def scale_type(ctx: QDQView) -> Iterator[Finding]:
    yield from _role_type(ctx, "scale_types", ctx.scale, "scale")


@rule(
    "QL303",
    "zero-point-type",
    ERROR,
    summary="The type of the zero point is not allowed by the operator version in force.",
    explanation="""
    The zero point carries the quantized type: for QuantizeLinear it decides the output
    type, for DequantizeLinear it must match x. A type the version does not list (int4
    before opset 21, float8 before 19, any float8 in com.microsoft) makes the model invalid.
    """,
    example="""
    bad:  opset 19: QuantizeLinear(x, scale, zp: int4)
    good: opset 21: QuantizeLinear(x, scale, zp: int4)
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    upgrade_repairs=True,
    examples=[
        Example(
            "q-zero-point-int32",
            ModelSpec("qdq", Q, 21, zp_type=DT.INT32),
            ModelSpec("qdq", Q, 21),
        ),
    ],
)
def zero_point_type(ctx: QDQView) -> Iterator[Finding]:
    yield from _role_type(ctx, "zero_point_types", ctx.zero_point, "zero point")


@rule(
    "QL304",
    "zero-point-type-mismatch",
    ERROR,
    summary="DequantizeLinear's zero point has a different type than x.",
    explanation="""
    DequantizeLinear computes (x - zero_point) * scale with x and the zero point of the same
    type (type parameter T). A zero point of another type is rejected by ONNX's checker and
    by ONNX Runtime, and would be subtracted with a different meaning.
    """,
    example="""
    bad:  DequantizeLinear(x: int8, scale, zp: uint8)
    good: DequantizeLinear(x: int8, scale, zp: int8)
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    examples=[
        Example(
            "dq-zero-point-other-type",
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8, zp_type=DT.UINT8),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8),
        ),
    ],
)
def zero_point_type_mismatch(ctx: QDQView) -> Iterator[Finding]:
    x, zp = ctx.x, ctx.zero_point
    if ctx.is_quantize or x is None or zp is None or x.dtype is None or zp.dtype is None:
        return
    if x.dtype not in ctx.version.x_types:  # QL301 says it; "store it as FLOAT" would mislead
        return
    if x.dtype != zp.dtype:
        yield ctx.report(
            f"zero point {zp.describe()} has type {zp.dtype.name} but x {x.describe()} is "
            f"{x.dtype.name}",
            f"store the zero point as {x.dtype.name}",
        )


@rule(
    "QL305",
    "scale-type-mismatch",
    ERROR,
    summary="QuantizeLinear-19/21 (and com.microsoft) need the scale type to equal the x type.",
    explanation="""
    In QuantizeLinear 19 and 21, x and the scale share one type parameter; a float16 x with
    a float32 scale is invalid there (opset 23 lets them differ). com.microsoft
    QuantizeLinear has the same constraint. ONNX's checker and ONNX Runtime refuse it.
    """,
    example="""
    bad:  opset 21: QuantizeLinear(x: float16, scale: float32, zp)
    good: opset 21: QuantizeLinear(x: float16, scale: float16, zp)  # or opset 23
    """,
    versions="ai.onnx QuantizeLinear 19-22, com.microsoft QuantizeLinear 1",
    upgrade_repairs=True,
    examples=[
        Example(
            "q-scale-not-x-type",
            ModelSpec("qdq", Q, 21, x_type=DT.FLOAT16, scale_type=DT.FLOAT),
            ModelSpec("qdq", Q, 21, x_type=DT.FLOAT16, scale_type=DT.FLOAT16),
        ),
    ],
)
def scale_type_mismatch(ctx: QDQView) -> Iterator[Finding]:
    x, scale = ctx.x, ctx.scale
    if not ctx.version.scale_matches_x or x is None or scale is None:
        return
    if x.dtype not in ctx.version.x_types:  # unknown, or QL301 says it
        return
    if scale.dtype is not None and x.dtype != scale.dtype:
        hint = f"store the scale as {x.dtype.name}"
        if not ctx.domain:
            hint += " or run `qlrewrite upgrade --opset 23` (mixed types allowed there)"
        yield ctx.report(
            f"scale {scale.describe()} is {scale.dtype.name} but x {x.describe()} is "
            f"{x.dtype.name}; {ctx.version_label} needs them equal",
            hint,
        )


def _dtype_name(value: int) -> str:
    try:
        return ir.DataType(value).name
    except ValueError:
        return f"{value} (not a data type)"


@rule(
    "QL306",
    "output-dtype",
    ERROR,
    summary="output_dtype names a type the operator cannot output, or contradicts the zero point.",
    explanation="""
    QuantizeLinear-21+ `output_dtype` must be one of its quantized types and, when a zero
    point is given, equal to the zero point's type. DequantizeLinear-23+ `output_dtype` must
    be float32, float16 or bfloat16. Anything else is an invalid model: the output type
    cannot be inferred and runtimes refuse it.
    """,
    example="""
    bad:  QuantizeLinear(x, scale, zp: uint8, output_dtype=INT8)
    good: QuantizeLinear(x, scale, zp: int8, output_dtype=INT8)  # or drop output_dtype
    """,
    versions="ai.onnx QuantizeLinear 21+, DequantizeLinear 23+",
    examples=[
        Example(
            "q-output-dtype-vs-zero-point",
            ModelSpec("qdq", Q, 21, attrs={"output_dtype": int(DT.INT8)}),
            ModelSpec("qdq", Q, 21, attrs={"output_dtype": int(DT.UINT8)}),
        ),
    ],
)
def output_dtype(ctx: QDQView) -> Iterator[Finding]:
    if "output_dtype" not in ctx.version.attributes:
        return
    value = ctx.int_attr("output_dtype")
    if not value:
        return
    allowed = ctx.version.output_types
    try:
        dtype = ir.DataType(value)
    except ValueError:
        dtype = None
    if dtype is None or dtype not in allowed:
        yield ctx.report(
            f"output_dtype={_dtype_name(value)} is not an output type of {ctx.version_label}",
            f"use one of: {_names(allowed)}",
        )
        return
    zp = ctx.zero_point
    if zp is None or not ctx.version.output_dtype_matches_zero_point:
        return
    if zp.dtype is not None and zp.dtype != dtype:
        yield ctx.report(
            f"output_dtype={dtype.name} but the zero point {zp.describe()} is "
            f"{zp.dtype.name}; they must be equal",
            f"drop output_dtype or store the zero point as {dtype.name}",
        )


@rule(
    "QL307",
    "scale-needs-output-dtype",
    ERROR,
    summary="A float8e8m0 scale on DequantizeLinear needs output_dtype.",
    explanation="""
    Without output_dtype, DequantizeLinear's output takes the scale's type. A float8e8m0
    scale (opset 24+) is not a valid output type, so the output type is undefined unless
    output_dtype names float32, float16 or bfloat16.
    """,
    example="""
    bad:  DequantizeLinear(x: float4e2m1, scale: float8e8m0, block_size=32)
    good: DequantizeLinear(x: float4e2m1, scale: float8e8m0, block_size=32, output_dtype=FLOAT)
    """,
    versions="ai.onnx DequantizeLinear 24+",
    examples=[
        Example(
            "e8m0-without-output-dtype",
            ModelSpec("qdq", DQ, 24, scale_type=DT.FLOAT8E8M0, out_type=None),
            ModelSpec("qdq", DQ, 24, scale_type=DT.FLOAT8E8M0, attrs={"output_dtype": 1}),
            ort=False,
        ),
    ],
)
def scale_needs_output_dtype(ctx: QDQView) -> Iterator[Finding]:
    scale = ctx.scale
    if scale is None or scale.dtype not in ctx.version.scale_needs_output_dtype:
        return
    if not ctx.int_attr("output_dtype"):
        yield ctx.report(
            f"scale {scale.describe()} is {scale.dtype.name} and output_dtype is not set",
            "add output_dtype=1 (FLOAT), 10 (FLOAT16) or 16 (BFLOAT16)",
        )


@rule(
    "QL308",
    "output-type-mismatch",
    ERROR,
    summary="The declared type of the output differs from the type the operator produces.",
    explanation="""
    The output type follows from the inputs: the zero point's type (or output_dtype, else
    uint8) for QuantizeLinear; float32 (opset 10/13), the scale's type (19/21) or
    output_dtype (23+) for DequantizeLinear. A value_info or graph output that declares
    another type is a contradiction: ONNX's checker rejects it and consumers get data of a
    type they did not expect.
    """,
    example="""
    bad:  opset 19: y: float32 = DequantizeLinear(x: int8, scale: float16)
    good: opset 19: y: float16 = DequantizeLinear(x: int8, scale: float16)
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    examples=[
        Example(
            "dq-output-declared-int8",
            ModelSpec("qdq", DQ, 21, out_type=DT.INT8),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def output_type_mismatch(ctx: QDQView) -> Iterator[Finding]:
    out = ctx.output
    if out is None or out.dtype is None:
        return
    derived = ctx.output_type
    if derived is not None and derived != out.dtype:
        yield ctx.report(
            f"output {out.describe()} is declared {out.dtype.name} but {ctx.version_label} "
            f"produces {derived.name}",
            f"declare the output as {derived.name} (or fix the input types)",
        )


@rule(
    "QL309",
    "precision-not-float",
    WARNING,
    summary="QuantizeLinear's precision attribute names a type that is not a float type.",
    explanation="""
    `precision` (opset 23+) is the type the division x / scale is computed in. Only
    float32, float16 and bfloat16 make sense; another value has no defined meaning and
    runtimes disagree about it.
    """,
    example="""
    bad:  QuantizeLinear(x, scale, zp, precision=3)   # INT8
    good: QuantizeLinear(x, scale, zp, precision=1)   # FLOAT
    """,
    versions="ai.onnx QuantizeLinear 23+",
    examples=[
        Example(
            "precision-int8",
            ModelSpec("qdq", Q, 23, attrs={"precision": 3}),
            ModelSpec("qdq", Q, 23, attrs={"precision": 1}),
        ),
    ],
)
def precision_not_float(ctx: QDQView) -> Iterator[Finding]:
    if "precision" not in ctx.version.attributes:
        return
    value = ctx.int_attr("precision")
    if value and value not in {int(t) for t in opsets.FLOAT_TYPES}:
        yield ctx.report(
            f"precision={_dtype_name(value)} is not a float type",
            "use precision=1 (FLOAT), 10 (FLOAT16) or 16 (BFLOAT16), or drop it",
        )
