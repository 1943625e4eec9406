"""QL310-QL313: element types of the com.microsoft weight-only operators (MatMulNBits,
GatherBlockQuantized), read from their :class:`~qlrewrite.opsets.WeightOnlyVersion` rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, WARNING, Finding
from qlrewrite.qdq import MATMUL_NBITS, WEIGHT_ONLY, WeightOnlyView
from qlrewrite.rules.common import WEIGHT_ONLY_VERSIONS, type_names, weight_storage, weight_type
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []

_FP8: dict[str, Any] = {"data_type": DT.FLOAT8E4M3FN, "data_shape": (8, 32), "bits": None}


@rule(
    "QL310",
    "weight-only-type",
    ERROR,
    summary="An input or output of MatMulNBits / GatherBlockQuantized has a type its "
    "schema does not allow.",
    explanation="""
    MatMulNBits: A, scales, bias and Y are float32, float16 or bfloat16; B is uint8;
    zero_points uint8 (packed) or a float type; g_idx int32. GatherBlockQuantized: data is
    int4, uint4, uint8, float8 or float4e2m1; indices int32 or int64; scales and the output
    float32, float16 or bfloat16. ONNX Runtime refuses other types when it loads the model.
    """,
    example="""
    bad:  MatMulNBits(A: float, B: int8, ...)
    good: MatMulNBits(A: float, B: uint8, ...)
    """,
    versions=WEIGHT_ONLY_VERSIONS,
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "b-int8",
            ModelSpec("matmul_nbits", b_type=DT.INT8),
            ModelSpec("matmul_nbits"),
        ),
    ],
)
def weight_only_type(ctx: WeightOnlyView) -> Iterator[Finding]:
    row = ctx.version
    views = [*zip(row.inputs, ctx.inputs, strict=False), (row.output, ctx.output)]
    for spec, view in views:
        if view is None or view.dtype is None:
            continue
        allowed = row.type_params[spec.type_param]
        if view.dtype not in allowed:
            yield ctx.report(
                f"{spec.name} {view.describe()} is {view.dtype.name}; {row.label} takes "
                f"{type_names(allowed)}",
                f"give {spec.name} one of {type_names(allowed)}",
            )


@rule(
    "QL311",
    "weight-only-type-mismatch",
    ERROR,
    summary="Inputs that share a type (A, scales, bias and Y of MatMulNBits; data and "
    "zero_points, scales and output of GatherBlockQuantized) differ.",
    explanation="""
    MatMulNBits computes in the type of A: its scales, bias and output have that same type.
    GatherBlockQuantized's zero points have the type of data, and its output the type of
    scales. ONNX Runtime refuses a node whose types disagree when it loads the model.
    """,
    example="""
    bad:  MatMulNBits(A: float16, B, scales: float, ...)
    good: MatMulNBits(A: float16, B, scales: float16, ...)
    """,
    versions=WEIGHT_ONLY_VERSIONS,
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "scales-float16",
            ModelSpec("matmul_nbits", scale_type=DT.FLOAT16),
            ModelSpec("matmul_nbits", scale_type=DT.FLOAT16, a_type=DT.FLOAT16),
        ),
    ],
)
def weight_only_type_mismatch(ctx: WeightOnlyView) -> Iterator[Finding]:
    row = ctx.version
    first: dict[str, tuple[str, ir.DataType]] = {}
    views = [*zip(row.inputs, ctx.inputs, strict=False), (row.output, ctx.output)]
    for spec, view in views:
        if view is None or view.dtype is None or view.dtype not in row.types_of(spec.name):
            continue
        seen = first.setdefault(spec.type_param, (spec.name, view.dtype))
        if seen[1] != view.dtype:
            yield ctx.report(
                f"{spec.name} is {view.dtype.name} but {seen[0]} is {seen[1].name}; "
                f"{row.op_type} needs them of one type",
                f"give {spec.name} the type {seen[1].name}",
            )


@rule(
    "QL312",
    "zero-point-float-type",
    WARNING,
    summary="MatMulNBits' zero points are in a float type other than A's.",
    explanation="""
    Zero points of MatMulNBits are either packed uint8 or, unpacked, "same type as A"
    (schema text). The type constraint itself lets them be any float type, and ONNX
    Runtime 1.31's CPU kernel converts them and computes the right values, but the kernels'
    input check (matmul_nbits_helper.h) asks for the scales' type, so other builds and
    providers may refuse the node.
    """,
    example="""
    warn: MatMulNBits(A: float, B, scales: float, zero_points: float16, ...)
    good: MatMulNBits(A: float, B, scales: float, zero_points: float, ...)
    """,
    versions="com.microsoft MatMulNBits 1",
    kinds=(MATMUL_NBITS,),
    examples=[
        Example(
            "zero-point-float16",
            ModelSpec("matmul_nbits", zp="float", zp_type=DT.FLOAT16),
            ModelSpec("matmul_nbits", zp="float"),
        ),
    ],
)
def zero_point_float_type(ctx: WeightOnlyView) -> Iterator[Finding]:
    zp, a = ctx.operand("zero_points"), ctx.operand("A")
    if zp is None or a is None or zp.dtype is None or a.dtype is None:
        return
    if zp.dtype in opsets.FLOAT_TYPES and zp.dtype != a.dtype:
        yield ctx.report(
            f"zero_points {zp.describe()} is {zp.dtype.name}, A is {a.dtype.name}",
            f"store the zero points as {a.dtype.name} (or packed uint8)",
        )


@rule(
    "QL313",
    "zero-point-not-allowed",
    ERROR,
    summary="GatherBlockQuantized of float8 / float4 data has a zero point.",
    explanation="""
    float8 and float4 data is quantized symmetrically: dequantization is data * scale, and
    the schema forbids a zero_points input. ONNX Runtime refuses the model when it loads
    it; a converter that applied the zero point would compute other values.
    """,
    example="""
    bad:  GatherBlockQuantized(data: float8e4m3fn, indices, scales, zero_points)
    good: GatherBlockQuantized(data: float8e4m3fn, indices, scales)
    """,
    versions="com.microsoft GatherBlockQuantized 1",
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "float8-zero-point",
            ModelSpec("gather_block_quantized", **_FP8, zp=True),
            ModelSpec("gather_block_quantized", **_FP8),
        ),
    ],
)
def zero_point_not_allowed(ctx: WeightOnlyView) -> Iterator[Finding]:
    storage, dtype = weight_storage(ctx), weight_type(ctx)
    zp = ctx.operand("zero_points")
    if storage is None or dtype is None or zp is None:
        return
    if storage.zero_point == "none":
        yield ctx.report(
            f"zero_points {zp.describe()} given for {dtype.name} {ctx.version.weight}",
            "remove the zero point: float8 / float4 data is symmetric",
        )
