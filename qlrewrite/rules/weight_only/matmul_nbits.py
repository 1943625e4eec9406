"""QL420-QL427: shapes of com.microsoft MatMulNBits' inputs against K, N, bits and
block_size (QL427: zero points in ORT 1.16's one-stream layout, with its fix)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import onnx_ir as ir

from qlrewrite.findings import ERROR, UNSAFE, WARNING, Finding
from qlrewrite.kernels.nbits import MatMulNBitsLayout
from qlrewrite.qdq import MATMUL_NBITS, ValueView, WeightOnlyView
from qlrewrite.rules.common import layout_attrs, matmul_nbits_layout
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, Fix, FixContext, rule

__all__: list[str] = []

_KINDS = (MATMUL_NBITS,)
_VERSIONS = "com.microsoft MatMulNBits 1"


def _shape_text(shapes: Sequence[tuple[int, ...]]) -> str:
    return " or ".join("[" + ", ".join(str(d) for d in shape) + "]" for shape in shapes)


def _mismatch(view: ValueView | None, shapes: Sequence[tuple[int, ...]]) -> bool:
    """True when ``view``'s shape is known and is none of ``shapes`` (unknown dims match)."""
    if view is None or view.shape is None:
        return False
    return not any(
        len(shape) == len(view.shape)
        and all(d is None or d == want for d, want in zip(view.shape, shape, strict=True))
        for shape in shapes
    )


def _shape_finding(
    ctx: WeightOnlyView, name: str, shapes: Sequence[tuple[int, ...]], why: str
) -> Iterator[Finding]:
    view = ctx.operand(name)
    if view is not None and _mismatch(view, shapes):
        yield ctx.report(
            f"{name} {view.describe()} should be {_shape_text(shapes)} ({why})",
            f"give {name} the shape {_shape_text(shapes[:1])}, or fix the attributes",
        )


@rule(
    "QL420",
    "matmul-nbits-a-shape",
    ERROR,
    summary="MatMulNBits' A is a scalar, or its last dimension differs from K.",
    explanation="""
    MatMulNBits multiplies A [..., K] by the weight matrix [K, N], giving [..., N]. A
    scalar A, or a last dimension other than K, cannot be multiplied: ONNX Runtime's shape
    inference refuses the model when it loads it (or the run fails, for a dimension known
    only then).
    """,
    example="""
    bad:  MatMulNBits(A: [1, 2048], B, scales, K=4096, N=4096, block_size=32)
    good: MatMulNBits(A: [1, 4096], B, scales, K=4096, N=4096, block_size=32)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "a-last-dim",
            ModelSpec("matmul_nbits", a_shape=[2, 16]),
            ModelSpec("matmul_nbits", a_shape=[2, 3, 32]),
        ),
    ],
)
def a_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    values = ctx.weight_attributes
    a, k = ctx.operand("A"), values.get("K")
    if a is None or a.shape is None or k is None:
        return
    if a.rank == 0:
        yield ctx.report(f"A {a.describe()} is a scalar", "give A rank >= 1")
    elif a.shape[-1] is not None and a.shape[-1] != k:
        yield ctx.report(
            f"A {a.describe()} has last dimension {a.shape[-1]}, K={k}",
            "set K to A's last dimension (the weight's input features)",
        )


@rule(
    "QL421",
    "matmul-nbits-b-shape",
    ERROR,
    summary="MatMulNBits' B is not [N, ceil(K / block_size), block_size * bits / 8].",
    explanation="""
    B holds the quantized weights, transposed and packed: one row per output feature (N),
    one block of `block_size` values along K per entry, each block packed into
    block_size * bits / 8 bytes. Any other shape means the attributes and the data
    disagree; ONNX Runtime fails when it runs the node (or when it prepacks the weights at
    load), and a converter would read the weights at the wrong offsets.
    """,
    example="""
    bad:  B: [4096, 128, 32] with K=4096, N=4096, bits=4, block_size=32   # blob is 16
    good: B: [4096, 128, 16]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "b-rows",
            ModelSpec("matmul_nbits", b_shape=(7, 2, 8)),
            ModelSpec("matmul_nbits"),
        ),
    ],
)
def b_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = matmul_nbits_layout(ctx)
    if form is not None:
        yield from _shape_finding(ctx, "B", [form.b_shape], layout_attrs(form))


@rule(
    "QL422",
    "matmul-nbits-scales-shape",
    ERROR,
    summary="MatMulNBits' scales are not [N, ceil(K / block_size)] (or that many in 1-D).",
    explanation="""
    Every block of every output feature has one scale: [N, k_blocks] with k_blocks =
    ceil(K / block_size). Older models store the same values as 1-D [N * k_blocks], which
    ONNX Runtime still accepts. Other shapes fail when the node runs.
    """,
    example="""
    bad:  scales: [4096, 64] with K=4096, N=4096, block_size=32
    good: scales: [4096, 128]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "scales-blocks",
            ModelSpec("matmul_nbits", scale_shape=(8, 3)),
            ModelSpec("matmul_nbits", scale_shape=(16,)),
        ),
    ],
)
def scales_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = matmul_nbits_layout(ctx)
    if form is not None:
        yield from _shape_finding(ctx, "scales", form.scales_shapes, layout_attrs(form))


@rule(
    "QL423",
    "matmul-nbits-zero-point-shape",
    ERROR,
    summary="MatMulNBits' zero points do not have the shape of their format (packed uint8 "
    "or float).",
    explanation="""
    uint8 zero points are packed like B: bits-wide values, low bits first, so each output
    feature takes ceil(k_blocks * bits / 8) bytes: [N, ceil(k_blocks * bits / 8)] or 1-D.
    Zero points in a float type are not packed: [N, k_blocks] or 1-D. ONNX Runtime fails
    when the node runs on any other shape; a converter would read the wrong zero points.
    """,
    example="""
    bad:  zero_points: uint8 [4096, 128] with K=4096, bits=4, block_size=32  # not packed
    good: zero_points: uint8 [4096, 64]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "zero-point-packed-1d",
            ModelSpec("matmul_nbits", zp="packed1d", zp_shape=(16,)),
            ModelSpec("matmul_nbits", zp="packed1d"),
        ),
    ],
)
def zero_point_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = matmul_nbits_layout(ctx)
    zp = ctx.operand("zero_points")
    if form is None or zp is None or zp.dtype is None:
        return
    packed = zp.dtype.name == "UINT8"
    if packed and _one_stream(zp, form):
        return  # QL427's
    why = f"{'packed uint8' if packed else zp.dtype.name}, {layout_attrs(form)}"
    yield from _shape_finding(ctx, "zero_points", form.zero_point_shapes(packed), why)


@rule(
    "QL424",
    "matmul-nbits-g-idx-shape",
    ERROR,
    summary="MatMulNBits' g_idx is not [K] (or K rounded up to whole blocks).",
    explanation="""
    g_idx (deprecated, from GPTQ act-order) gives the block of each of the K input
    features: [K], or [ceil(K / block_size) * block_size]. ONNX Runtime fails when the node
    runs on any other shape.
    """,
    example="""
    bad:  g_idx: [4095] with K=4096
    good: g_idx: [4096]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "g-idx-short",
            ModelSpec("matmul_nbits", g_idx=True, g_idx_shape=(31,)),
            ModelSpec("matmul_nbits", g_idx=True),
        ),
    ],
)
def g_idx_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = matmul_nbits_layout(ctx)
    if form is not None:
        yield from _shape_finding(ctx, "g_idx", form.g_idx_shapes, layout_attrs(form))


@rule(
    "QL425",
    "matmul-nbits-bias-shape",
    ERROR,
    summary="MatMulNBits' bias is not [N].",
    explanation="""
    The bias adds one value per output feature. ONNX Runtime's shape inference refuses any
    other shape when it loads the model.
    """,
    example="""
    bad:  bias: [1, 4096] with N=4096
    good: bias: [4096]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "bias-2d",
            ModelSpec("matmul_nbits", bias=True, bias_shape=(1, 8)),
            ModelSpec("matmul_nbits", bias=True),
        ),
    ],
)
def bias_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    n = ctx.weight_attributes.get("N")
    if n is not None and n >= 0:
        yield from _shape_finding(ctx, "bias", [(n,)], f"N={n}")


@rule(
    "QL426",
    "matmul-nbits-empty-weight",
    WARNING,
    summary="MatMulNBits with K=0 or N=0: an empty weight.",
    explanation="""
    With K=0 the weight has no input features and ONNX Runtime 1.31 computes zeros (plus
    the bias); with N=0 the output [..., 0] is empty. Both run, but the node does no work,
    and qlrewrite's conversions leave it as it is (`convert --to onnx` and `fold
    --dequantize-weights` refuse it, naming the node): usually an export that lost its
    weight.
    """,
    example="""
    warn: MatMulNBits(A: [2, 0], B: [8, 0, 8], scales: [8, 0], K=0, N=8, bits=4, block_size=16)
    good: MatMulNBits(A: [2, 32], B: [8, 2, 8], scales: [8, 2], K=32, N=8, bits=4, block_size=16)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "k-0",
            ModelSpec("matmul_nbits", k=0, a_shape=[2, 0]),
            ModelSpec("matmul_nbits"),
        ),
    ],
)
def empty_weight(ctx: WeightOnlyView) -> Iterator[Finding]:
    values = ctx.weight_attributes
    empty = [f"{name}=0" for name in ("K", "N") if values.get(name) == 0]
    if empty:
        yield ctx.report(
            f"{' and '.join(empty)}: the weight is empty (the node computes "
            f"{'zeros' if values.get('N') != 0 else 'an empty output'})",
            "re-export the model with its weight, or remove the node",
        )


def _one_stream(zero_points: ValueView, form: MatMulNBitsLayout) -> bool:
    """Packed uint8 zero points of the one-stream size (1-D, no padding per column)."""
    stream = form.zero_point_stream
    return stream is not None and zero_points.shape == (stream,)


def _stream_of(view: WeightOnlyView) -> tuple[MatMulNBitsLayout, ValueView] | None:
    form, zp = matmul_nbits_layout(view), view.operand("zero_points")
    if form is None or zp is None or zp.dtype != ir.DataType.UINT8:
        return None
    return (form, zp) if _one_stream(zp, form) else None


def repack_zero_points(fix: FixContext) -> str | None:
    """QL427's fix: the same zero points in the schema's layout, one padded row per column
    (a constant zero_points no other node reads; else not fixed)."""
    found = _stream_of(fix.view) if isinstance(fix.view, WeightOnlyView) else None
    index, inputs = fix.site.kind.roles["zero_point"], fix.site.node.inputs
    value = inputs[index] if index < len(inputs) else None
    if found is None or value is None or value.const_value is None or len(value.uses()) != 1:
        return None
    rows = found[0].zero_points_from_stream(value.const_value.numpy())
    value.const_value = ir.Tensor(rows, name=value.name)
    value.shape = ir.Shape(rows.shape)
    n, width = rows.shape
    return f"zero points '{value.name}' re-packed into {n} rows of {width} bytes"


@rule(
    "QL427",
    "matmul-nbits-zero-points-one-stream",
    ERROR,
    summary="MatMulNBits' packed zero points are one stream over all columns (ORT 1.16's "
    "layout), not one padded row per column.",
    explanation="""
    The schema packs uint8 zero points per output column: ceil(k_blocks x bits / 8) bytes
    each, the last half empty for an odd count of 4-bit blocks. ONNX Runtime 1.16's
    MatMul4BitsQuantizer wrote them as one stream over all N columns, without that
    padding: fewer bytes, ceil(N x k_blocks x bits / 8). ORT 1.16.3 reads that stream (its
    kernel's layout, see QL732); 1.17.3 to 1.22.1 read past it and compute other values
    (measured K=48, block_size=16, N=4: 10.5 off on outputs of at most 7.3, optimizations
    off); 1.23 and later refuse the node. The fix writes the same zero points in the
    schema's layout.
    """,
    example="""
    bad:  zero_points: uint8 [6] with K=48, N=4, bits=4, block_size=16   # 12 nibbles in a row
    good: zero_points: uint8 [4, 2]                                       # 3 nibbles + 1 pad each
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    fix=Fix(
        UNSAFE,
        """
        Re-packs the zero points into one row per column, each padded to a whole byte
        (the values unchanged), when they are an initializer only this node reads. Unsafe:
        ORT 1.17-1.22 then compute the values the producer meant, and ORT 1.16 no longer
        does (QL732).
        """,
        node=repack_zero_points,
    ),
    examples=[
        Example(
            "one-stream-3-blocks",
            ModelSpec("matmul_nbits", k=48, zp="packed1d", zp_shape=(12,)),
            ModelSpec("matmul_nbits", k=48, zp="packed1d"),
        ),
    ],
)
def zero_points_one_stream(ctx: WeightOnlyView) -> Iterator[Finding]:
    found = _stream_of(ctx)
    if found is not None:
        form, zp = found
        yield ctx.report(
            f"zero_points {zp.describe()} are one stream over the {form.N} columns (ORT "
            f"1.16's layout; the schema's is [{form.N}, {form.zero_point_row}], "
            f"{layout_attrs(form)}): ORT 1.17-1.22 compute other values, 1.23+ refuse it",
            "re-pack them one row per column: `qlrewrite check --fix --unsafe-fixes "
            "--select QL427` (exact)",
        )
