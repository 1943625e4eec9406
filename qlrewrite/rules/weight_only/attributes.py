"""QL203-QL207: the attributes of the com.microsoft weight-only operators (MatMulNBits,
GatherBlockQuantized): required ones, bits, block_size, accuracy_level, dimensions."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite import opsets
from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import WEIGHT_ONLY, WeightOnlyView
from qlrewrite.rules.common import (
    FP_TYPES_TEXT,
    WEIGHT_ONLY_VERSIONS,
    weight_storage,
    weight_type,
)
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


@rule(
    "QL203",
    "required-attribute",
    ERROR,
    summary="A required attribute of MatMulNBits (K, N, block_size) is missing.",
    explanation="""
    MatMulNBits has no default for K, N and block_size: they give the shape of the weight
    matrix and of its blocks. ONNX's checker and ONNX Runtime refuse a node without them.
    """,
    example="""
    bad:  MatMulNBits(A, B, scales, K=4096, N=4096, bits=4)
    good: MatMulNBits(A, B, scales, K=4096, N=4096, bits=4, block_size=32)
    """,
    versions="com.microsoft MatMulNBits 1",
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "no-block-size",
            ModelSpec("matmul_nbits", drop_attrs=["block_size"]),
            ModelSpec("matmul_nbits"),
        ),
    ],
)
def required_attribute(ctx: WeightOnlyView) -> Iterator[Finding]:
    missing = sorted(set(ctx.version.required) - set(ctx.attributes))
    if missing:
        yield ctx.report(
            f"required attribute {', '.join(missing)} is missing ({ctx.version.label})",
            "add the attribute(s); they have no default",
        )


@rule(
    "QL204",
    "weight-bits",
    ERROR,
    summary="bits is not a width the weight type supports (2, 4 or 8 for uint8; 4 for "
    "int4 / uint4).",
    explanation="""
    `bits` says how many bits each quantized weight takes. MatMulNBits and uint8
    GatherBlockQuantized data pack 2, 4 or 8 bits per value; int4 / uint4 data must say 4.
    (For float8 / float4 data it is ignored.) ONNX Runtime refuses other values when it
    loads the model, and a converter reading the weights with another width would unpack
    garbage.
    """,
    example="""
    bad:  MatMulNBits(A, B, scales, K=64, N=64, bits=3, block_size=32)
    good: MatMulNBits(A, B, scales, K=64, N=64, bits=4, block_size=32)
    """,
    versions=WEIGHT_ONLY_VERSIONS,
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "bits-3",
            ModelSpec("matmul_nbits", bits=3, b_shape=(8, 2, 6)),
            ModelSpec("matmul_nbits", bits=2),
        ),
    ],
)
def weight_bits(ctx: WeightOnlyView) -> Iterator[Finding]:
    storage, dtype = weight_storage(ctx), weight_type(ctx)
    bits = ctx.weight_attributes["bits"]
    if storage is None or dtype is None or bits is None or not storage.bits:
        return
    if bits in storage.bits:
        return
    *head, last = [str(b) for b in sorted(storage.bits)]
    allowed = f"{', '.join(head)} or {last}" if head else last
    how = "" if "bits" in ctx.attributes else " (the default)"
    yield ctx.report(
        f"bits={bits}{how}; {ctx.version.weight} of type {dtype.name} takes {allowed}",
        f"set bits to {allowed}, the width the weights were packed with",
    )


@rule(
    "QL205",
    "weight-block-size",
    ERROR,
    summary="block_size is not a power of two of at least 16 (0 allowed for float8 / "
    "float4 GatherBlockQuantized data).",
    explanation="""
    Both operators quantize their weights in blocks along one axis, each block with its own
    scale and zero point. ONNX Runtime's schemas and kernels require a power of two, at
    least 16 (16, 32, 64, 128, ...); GatherBlockQuantized of float8 / float4 data also
    takes 0, one block over the whole axis. ONNX Runtime refuses any other value when it
    loads the model.
    """,
    example="""
    bad:  MatMulNBits(A, B, scales, K=96, N=64, bits=4, block_size=48)
    good: MatMulNBits(A, B, scales, K=96, N=64, bits=4, block_size=32)
    """,
    versions=WEIGHT_ONLY_VERSIONS,
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "block-24",
            ModelSpec("matmul_nbits", block_size=24),
            ModelSpec("matmul_nbits", block_size=32),
        ),
    ],
)
def weight_block_size(ctx: WeightOnlyView) -> Iterator[Finding]:
    block = ctx.weight_attributes["block_size"]
    if block is None:
        return
    minimum = ctx.version.min_block_size
    if block >= minimum and block & (block - 1) == 0:
        return
    storage = weight_storage(ctx)
    if block == 0 and storage is not None and storage.block_size_zero:
        return
    how = "" if "block_size" in ctx.attributes else " (the default)"
    zero_ok = any(storage.block_size_zero for storage in ctx.version.storage.values())
    zero = f", or 0 for {FP_TYPES_TEXT} data" if zero_ok else ""
    yield ctx.report(
        f"block_size={block}{how} is not a power of two >= {minimum}{zero}",
        "quantize again with block_size 16, 32, 64, 128 or 256",
    )


@rule(
    "QL206",
    "accuracy-level",
    ERROR,
    summary="MatMulNBits' accuracy_level is outside "
    f"{opsets.ACCURACY_LEVELS[0]}-{opsets.ACCURACY_LEVELS[-1]}.",
    explanation="""
    accuracy_level says how far ONNX Runtime may lower the precision of A while computing:
    0 unset, 1 float32, 2 float16, 3 bfloat16, 4 int8 (A quantized blockwise). The schema
    defines nothing else. ONNX Runtime 1.31's CPU provider clamps other values into 0-4 and
    runs the model, so the node computes with a precision its author did not write; other
    tools reject it.
    """,
    example="""
    bad:  MatMulNBits(A, B, scales, K=64, N=64, block_size=32, accuracy_level=7)
    good: MatMulNBits(A, B, scales, K=64, N=64, block_size=32, accuracy_level=4)
    """,
    versions="com.microsoft MatMulNBits 1",
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "accuracy-7",
            ModelSpec("matmul_nbits", attrs={"accuracy_level": 7}),
            ModelSpec("matmul_nbits", attrs={"accuracy_level": 4}),
        ),
    ],
)
def accuracy_level(ctx: WeightOnlyView) -> Iterator[Finding]:
    levels = ctx.version.accuracy_levels
    value = ctx.weight_attributes.get("accuracy_level")
    if levels and value is not None and value not in levels:
        yield ctx.report(
            f"accuracy_level={value} is not one of {min(levels)}-{max(levels)}",
            "use 0 (float math, the default) or 4 (int8 A, fastest on CPU)",
        )


@rule(
    "QL207",
    "weight-dimension-negative",
    ERROR,
    summary="MatMulNBits' K or N is negative.",
    explanation="""
    K (input features) and N (output features) give the weight matrix's shape; a negative
    value has no meaning. ONNX Runtime fails to load the model.
    """,
    example="""
    bad:  MatMulNBits(A, B, scales, K=-64, N=64, block_size=32)
    good: MatMulNBits(A, B, scales, K=64, N=64, block_size=32)
    """,
    versions="com.microsoft MatMulNBits 1",
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "n-negative",
            ModelSpec("matmul_nbits", n=-8, b_shape=(8, 2, 8), scale_shape=(8, 2)),
            ModelSpec("matmul_nbits"),
        ),
    ],
)
def weight_dimension_negative(ctx: WeightOnlyView) -> Iterator[Finding]:
    values = ctx.weight_attributes
    for name in ("K", "N"):
        value = values.get(name)
        if name in ctx.version.attributes and value is not None and value < 0:
            yield ctx.report(f"{name}={value} is negative", f"set {name} to the weight's size")
