"""QL711-QL714: what TensorRT documents it refuses in a quantized ONNX model, for
``--target tensorrt``. Nothing here was run (TensorRT needs an NVIDIA GPU): each rule cites
the document it comes from (:func:`qlrewrite.targets.tables.documented`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QDQ, QOPERATOR, WEIGHT_ONLY, QDQView
from qlrewrite.rules.common import quantized_type
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import Example, TargetNode, rule
from qlrewrite.targets.tables import Fact, documented

__all__: list[str] = []

_TARGET = ("tensorrt",)


def _fact(ctx: TargetNode, key: str) -> Fact | None:
    """The documented fact ``key`` when the target is TensorRT."""
    return documented("tensorrt")[key] if ctx.target.runtime == "tensorrt" else None


@rule(
    "QL711",
    "tensorrt-zero-point",
    ERROR,
    summary="TensorRT: a Q/DQ zero point other than zero (TensorRT quantizes symmetrically).",
    explanation="""
    TensorRT's ONNX parser imports QuantizeLinear and DequantizeLinear only with zero
    points that are all zero ("x_zero_point must be zero", "y_zero_point must be 0":
    onnx-tensorrt docs/operators.md, Operator Support Matrix; NVIDIA's "Working with
    Quantized Types": TensorRT employs a symmetric quantization scheme). An asymmetric
    uint8 activation (zero point 128 from ONNX Runtime's default quantizer) stops the
    engine build ("TRT only supports symmetric quantization"). Documented, not run. A
    uint8 tensor with zero point 128 everywhere is exactly an int8 tensor with zero point
    0 (the zero-point shift).
    """,
    example="""
    bad:  DequantizeLinear(x: int8, scale, zero_point=3)   (--target tensorrt)
    good: DequantizeLinear(x: int8, scale, zero_point=0)
    """,
    versions="--target tensorrt (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QDQ,),
    examples=[
        Example(
            "zero-point-3",
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8, zp=3),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8, zp=0),
            targets=_TARGET,
        ),
    ],
)
def tensorrt_zero_point(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    fact = _fact(ctx, "zero_point")
    zero_point = ctx.view.zero_point
    if fact is None or zero_point is None or zero_point.array is None:
        return
    values = np.unique(zero_point.array)
    if not np.any(values != 0):
        return
    shown = ", ".join(f"{v:g}" for v in values[:4]) + (", ..." if len(values) > 4 else "")
    uint8_128 = quantized_type(ctx.view) == "UINT8" and values.tolist() == [128]
    hint = (
        "uint8 with zero point 128 is exactly int8 with zero point 0 (the zero-point shift: "
        "`qlrewrite retarget --zero-point signed`)"
        if uint8_128
        else "`qlrewrite retarget --zero-point signed --symmetric` makes zero points 0 where "
        "exact (weights) and names the rest; else quantize symmetrically"
    )
    yield ctx.report(
        f"zero point {shown}: {ctx.target.label} refuses non-zero zero points",
        f"{hint}; source: {fact.cited}",
    )


@rule(
    "QL712",
    "tensorrt-type",
    ERROR,
    summary="TensorRT: a Q/DQ type it does not quantize to (INT8, FP8 E4M3, INT4, FP4 only).",
    explanation="""
    TensorRT's quantized types are INT8, INT4 (weights only), FP8E4M3 and FP4E2M1
    (NVIDIA, "Working with Quantized Types"); its ONNX parser's DequantizeLinear takes
    INT8, FP8 and INT4 (onnx-tensorrt docs/operators.md) and UINT8 only as a network
    input or output. A uint8 or 16-bit activation, an int32 bias DequantizeLinear
    (onnx/onnx-tensorrt#850) or another float8 variant stops the engine build.
    Documented, not run.
    """,
    example="""
    bad:  DequantizeLinear(x: int16, ...)   (--target tensorrt)
    good: DequantizeLinear(x: int8, ...)
    """,
    versions="--target tensorrt (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QDQ,),
    examples=[
        Example(
            "int16",
            ModelSpec("qdq", DQ, 21, x_type=DT.INT16),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8),
            targets=_TARGET,
        ),
    ],
)
def tensorrt_type(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    fact = _fact(ctx, "quantized_types")
    name = quantized_type(ctx.view)
    if fact is None or name is None or name in fact.values["types"]:
        return
    yield ctx.report(
        f"{name.lower()} is not a type {ctx.target.label} quantizes to",
        f"use {', '.join(t.lower() for t in fact.values['types'])}{_rewrite_for(name)}; "
        f"source: {fact.cited}",
    )


def _rewrite_for(type_name: str) -> str:
    """The exact rewrite that removes a type TensorRT refuses, as a hint suffix."""
    if type_name == "INT32":
        return " (`qlrewrite fold --bias-only` folds int32 bias DequantizeLinear exactly)"
    if type_name in ("UINT8", "UINT4", "UINT16"):
        return " (`qlrewrite retarget --zero-point signed` moves unsigned to signed exactly)"
    return ""


def _blocked(block: int) -> ModelSpec:
    """An int4 [2, 128] DequantizeLinear blocked along axis 1 by ``block``."""
    return ModelSpec(
        "qdq",
        DQ,
        21,
        x_type=DT.INT4,
        x_shape=(2, 128),
        scale_shape=(2, 128 // block),
        zp_type=DT.INT4,
        attrs={"axis": 1, "block_size": block},
    )


@rule(
    "QL713",
    "tensorrt-granularity",
    ERROR,
    summary="TensorRT: blocked Q/DQ other than INT4 with blocks of 64 or 128, or INT4 that "
    "is not blocked.",
    explanation="""
    TensorRT quantizes in blocks for INT4 only, and INT4 only in blocks: "INT4
    quantization requires per-block scales. The supported block sizes are {64, 128}"
    (NVIDIA, Quantization Schemes); the Quantize operator takes a scale of the input's
    rank "for block quantization (supported for DataType::kINT4 only)". Documented, not
    run.
    """,
    example="""
    bad:  DequantizeLinear(x: int4, block_size=32)   (--target tensorrt)
    good: DequantizeLinear(x: int4, block_size=64)
    """,
    versions="--target tensorrt (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QDQ,),
    examples=[
        Example(
            "int4-block-32",
            _blocked(32),
            _blocked(64),
            targets=_TARGET,
            ort=False,  # ONNX Runtime's Python API cannot feed int4
        ),
    ],
)
def tensorrt_granularity(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    fact = _fact(ctx, "blocked")
    name = quantized_type(ctx.view)
    if fact is None or name is None:
        return
    blocked = ctx.view.granularity.blocked
    block = ctx.view.block_size
    sizes = fact.values["block_sizes"]
    if blocked and name not in fact.values["types"]:
        problem = f"{name.lower()} in blocks: {ctx.target.label} quantizes in blocks for int4 only"
    elif blocked and block not in sizes:
        problem = f"block_size {block}: {ctx.target.label} takes int4 blocks of {sizes}"
    elif not blocked and name in fact.values["types"] and not ctx.view.is_quantize:
        problem = f"{name.lower()} {ctx.view.granularity}: {ctx.target.label} needs int4 in blocks"
    else:
        return
    yield ctx.report(problem, f"source: {fact.cited}")


@rule(
    "QL714",
    "tensorrt-operator",
    ERROR,
    summary="TensorRT: a QOperator / dynamic or com.microsoft quantized operator its ONNX "
    "parser cannot import.",
    explanation="""
    TensorRT's ONNX parser has no importer for ConvInteger, DynamicQuantizeLinear,
    MatMulInteger, QLinearConv or QLinearMatMul (onnx-tensorrt docs/operators.md:
    Supported = N), and none for com.microsoft operators (QLinear*, QGemm, MatMulNBits,
    GatherBlockQuantized are not in its matrix). TensorRT reads quantization only as
    QuantizeLinear / DequantizeLinear pairs around float operators. Documented, not run.
    `qlrewrite convert --to onnx` rewrites these nodes as Q/DQ exactly.
    """,
    example="""
    bad:  QLinearMatMul(a: uint8, ..., b: int8, ...)   (--target tensorrt)
    good: DequantizeLinear -> MatMul -> QuantizeLinear   (qlrewrite convert --to onnx)
    """,
    versions="--target tensorrt (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QOPERATOR, *WEIGHT_ONLY),
    examples=[
        Example(
            "qlinear-matmul",
            ModelSpec("qoperator", "QLinearMatMul"),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8),
            targets=_TARGET,
        ),
    ],
)
def tensorrt_operator(ctx: TargetNode) -> Iterator[Finding]:
    fact = _fact(ctx, "operators")
    if fact is None:
        return
    view = ctx.view
    if view.domain == "" and view.op_type not in fact.values["unsupported"]:
        return
    yield ctx.report(
        f"{ctx.target.label} cannot import {view.domain_label} {view.op_type}",
        f"qlrewrite convert --to onnx rewrites it as Q/DQ (exact); source: {fact.cited}",
    )
