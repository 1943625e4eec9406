"""QL105, QL203-QL206, QL310-QL313, QL606: the com.microsoft weight-only operators
(MatMulNBits, GatherBlockQuantized): inputs, attributes and element types, read from
their :class:`~qlrewrite.opsets.WeightOnlyVersion` rows."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, WARNING, Finding
from qlrewrite.qdq import MATMUL_NBITS, WEIGHT_ONLY, NodeView
from qlrewrite.rules.registry import rule

__all__: list[str] = []

_VERSIONS = "com.microsoft MatMulNBits 1, GatherBlockQuantized 1"
_FP_TYPES = "float8 / float4"


def _weight_storage(ctx: NodeView) -> opsets.WeightStorage | None:
    view = ctx.operand(ctx.row.weight)
    if view is None or view.dtype is None:
        return None
    return ctx.row.storage.get(view.dtype)


def _names(types: frozenset[ir.DataType]) -> str:
    return ", ".join(sorted(t.name for t in types))


@rule(
    "QL105",
    "weight-only-input-count",
    ERROR,
    summary="A MatMulNBits / GatherBlockQuantized node has too few or too many inputs, or "
    "an empty required input.",
    explanation="""
    MatMulNBits takes A, B and scales, then optionally zero_points, g_idx and bias (3 to 6
    inputs; an empty name skips an optional one). GatherBlockQuantized takes data, indices
    and scales, then optionally zero_points (3 or 4). ONNX Runtime refuses any other count,
    and an empty name in a required slot, when it loads the model.
    """,
    example="""
    bad:  MatMulNBits(A, B)                                # no scales
    good: MatMulNBits(A, B, scales, "", "", bias)          # zero_points and g_idx skipped
    """,
    versions=_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def weight_only_input_count(ctx: NodeView) -> Iterator[Finding]:
    low, high = ctx.row.input_range
    count = len(ctx.node.inputs)
    names = [o.name for o in ctx.row.inputs]
    if not low <= count <= high:
        yield ctx.finding(
            "QL105",
            ERROR,
            f"has {count} inputs; {ctx.op_type} takes {low} to {high} ({', '.join(names)})",
            f"give the node {', '.join(names[:low])} and optionally {', '.join(names[low:])}",
        )
        return
    missing = [
        o.name
        for o, value in zip(ctx.row.inputs, ctx.node.inputs, strict=False)
        if not o.optional and value is None
    ]
    if missing:
        yield ctx.finding(
            "QL105",
            ERROR,
            f"required input {' and '.join(missing)} is empty",
            "connect the missing input; only " + ", ".join(names[low:]) + " may be empty",
        )


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
)
def required_attribute(ctx: NodeView) -> Iterator[Finding]:
    missing = sorted(set(ctx.row.required) - set(ctx.attributes))
    if missing:
        yield ctx.finding(
            "QL203",
            ERROR,
            f"required attribute {', '.join(missing)} is missing ({ctx.row.label})",
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
    versions=_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def weight_bits(ctx: NodeView) -> Iterator[Finding]:
    storage = _weight_storage(ctx)
    bits = ctx.weight_attributes["bits"]
    if storage is None or bits is None or not storage.bits or bits in storage.bits:
        return
    dtype = ctx.operand(ctx.row.weight).dtype  # type: ignore[union-attr]
    *head, last = [str(b) for b in sorted(storage.bits)]
    allowed = f"{', '.join(head)} or {last}" if head else last
    how = "" if "bits" in ctx.attributes else " (the default)"
    yield ctx.finding(
        "QL204",
        ERROR,
        f"bits={bits}{how}; {ctx.row.weight} of type {dtype.name} takes {allowed}",
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
    versions=_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def weight_block_size(ctx: NodeView) -> Iterator[Finding]:
    block = ctx.weight_attributes["block_size"]
    if block is None:
        return
    minimum = ctx.row.min_block_size
    if block >= minimum and block & (block - 1) == 0:
        return
    storage = _weight_storage(ctx)
    if block == 0 and storage is not None and storage.block_size_zero:
        return
    how = "" if "block_size" in ctx.attributes else " (the default)"
    zero_ok = any(storage.block_size_zero for storage in ctx.row.storage.values())
    zero = f", or 0 for {_FP_TYPES} data" if zero_ok else ""
    yield ctx.finding(
        "QL205",
        ERROR,
        f"block_size={block}{how} is not a power of two >= {minimum}{zero}",
        "quantize again with block_size 16, 32, 64, 128 or 256",
    )


@rule(
    "QL206",
    "accuracy-level",
    ERROR,
    summary="MatMulNBits' accuracy_level is outside 0-4.",
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
)
def accuracy_level(ctx: NodeView) -> Iterator[Finding]:
    levels = ctx.row.accuracy_levels
    value = ctx.weight_attributes.get("accuracy_level")
    if levels and value is not None and value not in levels:
        yield ctx.finding(
            "QL206",
            ERROR,
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
)
def weight_dimension_negative(ctx: NodeView) -> Iterator[Finding]:
    values = ctx.weight_attributes
    for name in ("K", "N"):
        value = values.get(name)
        if name in ctx.row.attributes and value is not None and value < 0:
            yield ctx.finding(
                "QL207", ERROR, f"{name}={value} is negative", f"set {name} to the weight's size"
            )


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
    versions=_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def weight_only_type(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.row
    views = [*zip(row.inputs, ctx.inputs, strict=False), (row.output, ctx.output)]
    for spec, view in views:
        if view is None or view.dtype is None:
            continue
        allowed = row.type_params[spec.type_param]
        if view.dtype not in allowed:
            yield ctx.finding(
                "QL310",
                ERROR,
                f"{spec.name} {view.describe()} is {view.dtype.name}; {row.label} takes "
                f"{_names(allowed)}",
                f"give {spec.name} one of {_names(allowed)}",
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
    versions=_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def weight_only_type_mismatch(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.row
    first: dict[str, tuple[str, ir.DataType]] = {}
    views = [*zip(row.inputs, ctx.inputs, strict=False), (row.output, ctx.output)]
    for spec, view in views:
        if view is None or view.dtype is None or view.dtype not in row.types_of(spec.name):
            continue
        seen = first.setdefault(spec.type_param, (spec.name, view.dtype))
        if seen[1] != view.dtype:
            yield ctx.finding(
                "QL311",
                ERROR,
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
)
def zero_point_float_type(ctx: NodeView) -> Iterator[Finding]:
    zp, a = ctx.operand("zero_points"), ctx.operand("A")
    if zp is None or a is None or zp.dtype is None or a.dtype is None:
        return
    if zp.dtype in opsets.FLOAT_TYPES and zp.dtype != a.dtype:
        yield ctx.finding(
            "QL312",
            WARNING,
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
)
def zero_point_not_allowed(ctx: NodeView) -> Iterator[Finding]:
    storage = _weight_storage(ctx)
    zp = ctx.operand("zero_points")
    if storage is not None and storage.zero_point == "none" and zp is not None:
        dtype = ctx.operand(ctx.row.weight).dtype  # type: ignore[union-attr]
        yield ctx.finding(
            "QL313",
            ERROR,
            f"zero_points {zp.describe()} given for {dtype.name} {ctx.row.weight}",
            "remove the zero point: float8 / float4 data is symmetric",
        )


@rule(
    "QL606",
    "onnxruntime-cpu-unsupported",
    WARNING,
    summary="A valid MatMulNBits / GatherBlockQuantized form that ONNX Runtime's CPU "
    "provider cannot run.",
    explanation="""
    Some forms the schemas allow have no CPU kernel in ONNX Runtime 1.31: MatMulNBits with
    a block_size above 256 (refused at load), 8-bit MatMulNBits with float zero points or
    with g_idx (refused at run: its unpacked path handles 2 and 4 bits only), 2-bit
    MatMulNBits with both float zero points and g_idx, and bfloat16 activations, scales or
    zero points (no kernel). The model may run on other providers (CUDA, WebGPU)
    but not on CPU, where `--verify` runs it.
    """,
    example="""
    warn: MatMulNBits(A, B, scales, zero_points: float, K=64, N=64, bits=8, block_size=32)
    good: MatMulNBits(A, B, scales, zero_points: uint8 (packed), ..., bits=8, block_size=32)
    """,
    versions=_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def onnxruntime_cpu_unsupported(ctx: NodeView) -> Iterator[Finding]:
    for reason in _cpu_limits(ctx):
        yield ctx.finding(
            "QL606",
            WARNING,
            f"ONNX Runtime's CPU provider cannot run it: {reason}",
            "fine for other providers; for CPU, write the supported form",
        )


def _cpu_limits(ctx: NodeView) -> Iterator[str]:
    row = ctx.row
    values = ctx.weight_attributes
    block = values.get("block_size")
    valid = block is not None and block >= row.min_block_size and block & (block - 1) == 0
    if row.cpu_block_sizes and valid and block not in row.cpu_block_sizes:
        sizes = ", ".join(str(b) for b in sorted(row.cpu_block_sizes))
        yield f"block_size={block} (it runs {sizes})"
    if ctx.op_type == "MatMulNBits":
        zp = ctx.operand("zero_points")
        float_zp = zp is not None and zp.dtype in opsets.FLOAT_TYPES
        g_idx = ctx.operand("g_idx") is not None
        bits = values.get("bits")
        if bits == 8 and float_zp:
            yield "8 bits with float zero points (pack them as uint8)"
        if bits == 8 and g_idx:
            yield "8 bits with g_idx"
        if bits == 2 and float_zp and g_idx:
            yield "2 bits with float zero points and g_idx"
    for name in ("A", "scales", "zero_points"):
        view = ctx.operand(name)
        if view is not None and view.dtype == ir.DataType.BFLOAT16:
            yield f"{name} is BFLOAT16 (no CPU kernel)"
            return
