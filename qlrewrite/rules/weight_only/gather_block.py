"""QL430-QL434: com.microsoft GatherBlockQuantized: data rank, the gather and quantize
axes, and the shapes of scales and zero points against data, bits and block_size."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import GATHER_BLOCK_QUANTIZED, WeightOnlyView
from qlrewrite.qdq.weight_only import GatherBlockForm
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []

_KINDS = (GATHER_BLOCK_QUANTIZED,)
_VERSIONS = "com.microsoft GatherBlockQuantized 1"


def _form(ctx: WeightOnlyView) -> GatherBlockForm | None:
    """The form (None: rank below 2, or attributes other rules report)."""
    form = ctx.weight_layout
    if not isinstance(form, GatherBlockForm) or form.rank < 2:
        return None
    block = form.block_size
    if block == 0 and not form.storage.block_size_zero:
        return None
    if block and (block < ctx.version.min_block_size or block & (block - 1)):
        return None  # QL205 reports it
    return form


def _dims(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


@rule(
    "QL430",
    "gather-block-data-rank",
    ERROR,
    summary="GatherBlockQuantized's data has rank below 2.",
    explanation="""
    The schema text allows data of rank 1, but ONNX Runtime's shape inference requires
    rank 2 or more ("data tensor must have rank > 1") and refuses the model when it loads
    it. An embedding table is [vocabulary, hidden]: gather on one axis, quantize on the
    other.
    """,
    example="""
    bad:  GatherBlockQuantized(data: [4096], indices, scales: [128])
    good: GatherBlockQuantized(data: [32, 128], indices, scales: [32, 4])
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "data-1d",
            ModelSpec("gather_block_quantized", data_shape=(16,), gather_axis=0, quantize_axis=0),
            ModelSpec("gather_block_quantized"),
        ),
    ],
)
def data_rank(ctx: WeightOnlyView) -> Iterator[Finding]:
    data = ctx.operand("data")
    if data is None or data.rank is None:
        return
    if data.rank < 2:
        yield ctx.report(
            f"data {data.describe()} has rank {data.rank}; ONNX Runtime needs rank >= 2",
            "reshape the table to [rows, values] (one row per index)",
        )


@rule(
    "QL431",
    "gather-block-axis",
    ERROR,
    summary="gather_axis or quantize_axis is outside [-r, r-1], or uint8 data has its "
    "axes elsewhere than gather_axis 0 and quantize_axis last.",
    explanation="""
    Both axes must name a dimension of data. uint8 data packs 8 / bits values per byte
    along its last dimension: ONNX Runtime then requires quantize_axis to be the last axis
    and gather_axis 0 (they differ, so rows are gathered whole). It refuses other axes
    when it loads the model (or runs it). int4 / uint4 and float8 / float4 data take any
    axes.
    """,
    example="""
    bad:  GatherBlockQuantized(data: uint8 [64, 32], ..., gather_axis=1, quantize_axis=0)
    good: GatherBlockQuantized(data: uint8 [64, 32], ..., gather_axis=0, quantize_axis=1)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "gather-axis-out-of-range",
            ModelSpec("gather_block_quantized", gather_axis=2),
            ModelSpec("gather_block_quantized", gather_axis=-2),
        ),
    ],
)
def axis(ctx: WeightOnlyView) -> Iterator[Finding]:
    data = ctx.operand("data")
    if data is None or data.rank is None:
        return
    rank = data.rank
    if rank < 1:
        return
    values = ctx.weight_attributes
    out_of_range = False
    for name in ("gather_axis", "quantize_axis"):
        value = values[name]
        if value is not None and not -rank <= value < rank:
            out_of_range = True
            how = "" if name in ctx.attributes else " (the default)"
            yield ctx.report(
                f"{name}={value}{how} is out of range for data {data.describe()}",
                f"set {name} in [{-rank}, {rank - 1}]",
            )
    storage = ctx.version.storage.get(data.dtype) if data.dtype is not None else None
    if out_of_range or storage is None or rank < 2:
        return
    gather, quantize = values["gather_axis"], values["quantize_axis"]
    if storage.gather_axis_zero and gather is not None and gather % rank != 0:
        yield ctx.report(
            f"gather_axis={gather}; uint8 data must be gathered on axis 0",
            "store the table with the gathered axis first",
        )
    if storage.quantize_axis_last and quantize is not None and quantize % rank != rank - 1:
        yield ctx.report(
            f"quantize_axis={quantize}; uint8 data is packed along its last axis ({rank - 1})",
            f"set quantize_axis to {rank - 1} (or -1)",
        )


@rule(
    "QL432",
    "gather-block-scales-shape",
    ERROR,
    summary="GatherBlockQuantized's scales are not data's shape with the quantize axis "
    "divided into blocks.",
    explanation="""
    scales has data's rank: on quantize_axis one entry per block (ceil(values /
    block_size), where uint8 data holds 8 / bits values per byte; one block when
    block_size is 0), on every other axis data's size (float8 / float4 data may also give
    1 there, broadcast). ONNX Runtime refuses other shapes when it loads the model.
    """,
    example="""
    bad:  data: uint8 [32000, 2048] (bits=4, 4096 values), block_size=32, scales: [32000, 64]
    good: scales: [32000, 128]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "scales-blocks",
            ModelSpec("gather_block_quantized", scale_shape=(8, 3)),
            ModelSpec("gather_block_quantized", zp=True),
        ),
    ],
)
def scales_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = _form(ctx)
    data, scales = ctx.operand("data"), ctx.operand("scales")
    if form is None or data is None or scales is None:
        return
    if data.shape is None or scales.shape is None:
        return  # not known (inside a function, data's shape may not be)
    if scales.rank != data.rank:
        yield ctx.report(
            f"scales {scales.describe()} has rank {scales.rank}, data {data.describe()} "
            f"has rank {data.rank}",
            "give scales the rank of data",
        )
        return
    for i, (have, size) in enumerate(zip(scales.shape, data.shape, strict=True)):
        if have is None or size is None:
            continue
        if i == form.quantize_axis:
            want = form.blocks_of(size)
            ok = have == want
        else:
            want = size
            ok = have == size or (form.storage.scale_broadcast and have == 1)
        if not ok:
            what = "the block count on quantize_axis" if i == form.quantize_axis else "data's size"
            yield ctx.report(
                f"scales {scales.describe()} has {have} on axis {i}; {what} is {want} "
                f"(data {data.describe()}, bits={form.bits}, block_size={form.block_size})",
                "give scales data's shape with quantize_axis divided into blocks",
            )
            return


@rule(
    "QL433",
    "gather-block-zero-point-shape",
    ERROR,
    summary="GatherBlockQuantized's zero points do not have the scales' shape (packed "
    "along the quantize axis for uint8 data).",
    explanation="""
    One zero point per scale: the scales' shape, except that uint8 zero points pack
    8 / bits values per byte along quantize_axis (ceil(blocks * bits / 8) there). ONNX
    Runtime refuses other shapes when it loads or runs the model.
    """,
    example="""
    bad:  data: uint8 [32000, 2048], bits=4, scales: [32000, 128], zero_points: [32000, 128]
    good: zero_points: [32000, 64]
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "uint8-zero-point-unpacked",
            ModelSpec("gather_block_quantized", zp=True, zp_shape=(8, 2)),
            ModelSpec("gather_block_quantized", bits=2, data_shape=(8, 8), zp=True),
        ),
    ],
)
def zero_point_shape(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = _form(ctx)
    scales, zp = ctx.operand("scales"), ctx.operand("zero_points")
    if form is None or scales is None or zp is None or scales.shape is None or zp.shape is None:
        return
    if form.storage.zero_point == "none" or scales.rank != form.rank:
        return  # QL313 / QL432
    if zp.rank != scales.rank:
        yield ctx.report(
            f"zero_points {zp.describe()} has rank {zp.rank}, scales has rank {scales.rank}",
            "give zero_points the rank of scales",
        )
        return
    scale_dims = tuple(d for d in scales.shape if d is not None)
    if len(scale_dims) != len(scales.shape):
        return
    want = form.zero_point_shape(scale_dims)
    if any(have is not None and have != w for have, w in zip(zp.shape, want, strict=True)):
        packed = " (packed, 8 / bits per byte)" if form.storage.packed else ""
        yield ctx.report(
            f"zero_points {zp.describe()} should be {_dims(want)}{packed} for scales "
            f"{scales.describe()}",
            f"give zero_points the shape {_dims(want)}",
        )


@rule(
    "QL434",
    "gather-block-empty-table",
    ERROR,
    summary="GatherBlockQuantized's data has no rows along gather_axis: every index is out "
    "of range.",
    explanation="""
    A table with 0 rows on gather_axis has nothing to gather: any index is out of range,
    so only an empty indices tensor has a meaning. ONNX Runtime 1.31 does not check the
    indices of this node: it reads memory outside the table and returns what it found there
    (measured: data [0, 16], indices [3] gives a [3, 32] output of leftover values), where
    Gather fails ("indices element out of data bounds").
    """,
    example="""
    bad:  GatherBlockQuantized(data: uint8 [0, 16], indices, scales: [0, 1], gather_axis=0)
    good: GatherBlockQuantized(data: uint8 [8, 16], indices, scales: [8, 1], gather_axis=0)
    """,
    versions=_VERSIONS,
    kinds=_KINDS,
    examples=[
        Example(
            "no-rows",
            ModelSpec("gather_block_quantized", data_shape=(0, 16)),
            ModelSpec("gather_block_quantized", data_shape=(8, 0)),
        ),
    ],
)
def empty_table(ctx: WeightOnlyView) -> Iterator[Finding]:
    form, data = _form(ctx), ctx.operand("data")
    if form is None or data is None or data.shape is None or data.rank != form.rank:
        return
    if data.shape[form.gather_axis] == 0:
        yield ctx.report(
            f"data {data.describe()} has no rows on gather_axis={form.gather_axis}: every "
            "index is out of range (ONNX Runtime 1.31 reads outside the table)",
            "give the table its rows, or remove the node",
        )
