"""QL2xx: attributes that exist in the version in force, with the right type; the
attributes of the com.microsoft weight-only operators (QL203-QL207)."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite import opsets
from qlrewrite.findings import ERROR, UNSAFE, Finding
from qlrewrite.qdq import WEIGHT_ONLY, NodeView, WeightOnlyView
from qlrewrite.rules.common import (
    FP_TYPES_TEXT,
    PER_AXIS_OPSET,
    WEIGHT_ONLY_VERSIONS,
    weight_storage,
    weight_type,
)
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import ALL_KINDS, Example, Fix, rule

__all__: list[str] = []


def _first_version_with(domain: str, op_type: str, name: str) -> int | None:
    for row in opsets.versions(domain, op_type):
        if name in row.attributes:
            return row.since
    return None


def _upgrade_brings_it(finding: Finding) -> bool:
    """QL201's fix applies: an ai.onnx node below opset 13 with an attribute that exists
    from 13 (``axis``: what onnxruntime.quantization writes for per_channel=True)."""
    return (
        finding.domain == ""
        and finding.opset is not None
        and finding.opset < PER_AXIS_OPSET
        and _first_version_with("", finding.op_type, finding.attribute) == PER_AXIS_OPSET
    )


@rule(
    "QL201",
    "unknown-attribute",
    ERROR,
    summary="The node has an attribute that its operator version does not define.",
    explanation="""
    Each version of QuantizeLinear / DequantizeLinear defines its own attributes: `axis`
    from opset 13, `saturate` from 19, `block_size` and QuantizeLinear's `output_dtype` from
    21, DequantizeLinear's `output_dtype` and QuantizeLinear's `precision` from 23;
    com.microsoft Q/DQ know only `axis`; MatMulNBits has K, N, bits, block_size,
    accuracy_level and weight_prepacked, GatherBlockQuantized bits, block_size, gather_axis
    and quantize_axis. An attribute the version does not define is rejected by
    ONNX's checker and by ONNX Runtime, and its intent is silently lost by tools that ignore
    it. A common case: onnxruntime.quantization with per_channel=True on an opset-12 model
    writes DequantizeLinear nodes with `axis`, which neither ONNX nor ONNX Runtime loads.
    """,
    example="""
    bad:  opset 12: DequantizeLinear(w_q, w_scale, w_zp, axis=0)
    good: opset 13: DequantizeLinear(w_q, w_scale, w_zp, axis=0)  # qlrewrite upgrade --opset 13
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    kinds=ALL_KINDS,
    fix=Fix(
        UNSAFE,
        """
        Below opset 13, an `axis` on DequantizeLinear (as ONNX Runtime's quantizer writes for
        per_channel=True) is repaired by upgrading the model to opset 13, as `qlrewrite
        upgrade --opset 13`. Unsafe: every node's op version changes, and ONNX Runtime does
        not load the input to compare.
        """,
        applies=_upgrade_brings_it,
        upgrade_opset=PER_AXIS_OPSET,
    ),
    examples=[
        Example(
            "axis-at-opset-12",
            ModelSpec("qdq", DQ, 12, x_type=DT.INT8, attrs={"axis": 0}),
            ModelSpec("qdq", DQ, 13, x_type=DT.INT8, attrs={"axis": 0}),
        ),
    ],
)
def unknown_attribute(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.version
    for name, attr in ctx.attributes.items():
        if name in row.attributes:
            continue
        since = _first_version_with(ctx.domain, ctx.op_type, name)
        message = f"attribute '{name}' (= {attr.value!r}) does not exist in {ctx.version_label}"
        if since is not None and since > row.since:
            message += f"; it exists from opset {since}"
            hint = f"run `qlrewrite upgrade --opset {since}`, or remove the attribute"
            if name == "axis" and not ctx.domain:
                message += (
                    " (onnxruntime.quantization writes this for per_channel=True on a model"
                    " below opset 13)"
                )
        elif ctx.domain == opsets.MS_DOMAIN and ctx.op_type in opsets.WEIGHT_ONLY_OPS:
            hint = f"remove it: {ctx.op_type} has {', '.join(row.attributes)}"
        elif ctx.domain == opsets.MS_DOMAIN:
            hint = "remove it: com.microsoft Q/DQ know only 'axis'"
            if name == "block_size":
                hint += "; blocked quantization needs ai.onnx opset 21 (`qlrewrite convert`)"
        else:
            hint = f"remove the attribute; {ctx.op_type} has no '{name}'"
        yield ctx.report(message, hint, attribute=name)


@rule(
    "QL202",
    "attribute-type",
    ERROR,
    summary="An attribute has the wrong type (all attributes of the quantized ops are integers).",
    explanation="""
    `axis`, `saturate`, `block_size`, `output_dtype` and `precision` are INT attributes,
    and so is every attribute of MatMulNBits and GatherBlockQuantized (`K`, `N`, `bits`,
    ...).
    An attribute of another type (a float, a list, a string) is rejected by ONNX's checker;
    runtimes that read it with the wrong type either fail or read garbage.
    """,
    example="""
    bad:  DequantizeLinear(x, s, zp, axis=1.0)   # FLOAT attribute
    good: DequantizeLinear(x, s, zp, axis=1)
    """,
    versions="ai.onnx 13+, com.microsoft 1",
    kinds=ALL_KINDS,
    examples=[
        Example(
            "float-axis",
            ModelSpec("qdq", DQ, 21, attrs={"axis": 1.0}),
            ModelSpec("qdq", DQ, 21, attrs={"axis": 1}),
        ),
    ],
)
def attribute_type(ctx: NodeView) -> Iterator[Finding]:
    for name, attr in ctx.attributes.items():
        spec = ctx.version.attributes.get(name)
        if spec is not None and attr.type != spec[0]:
            yield ctx.report(
                f"attribute '{name}' is {attr.type.name}, {ctx.version_label} wants {spec[0].name}",
                f"write '{name}' as an integer attribute",
                attribute=name,
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
