"""QL401-QL412: granularity and shapes: axis, per-tensor, per-axis and blocked scales."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, TypeGuard

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, SAFE, UNSAFE, WARNING, Finding
from qlrewrite.qdq import Dims, QDQView, ValueView, is_constant
from qlrewrite.rules.common import PER_AXIS_OPSET
from qlrewrite.rules.model_spec import DQ, MS, ModelSpec, Q
from qlrewrite.rules.registry import Example, Fix, FixContext, rule
from qlrewrite.toolkit import FreshNames

__all__: list[str] = []


def _per_tensor_shape(shape: Dims | None) -> bool:
    """Scalar, or 1-D of one element (ORT and the reference treat it as per-tensor)."""
    return shape in ((), (1,))


def _axis_used(ctx: QDQView) -> bool:
    """True when the axis matters: blocked, or a 1-D scale of known length other than 1."""
    scale = ctx.scale
    if scale is None or scale.shape is None or ctx.version.scalar_only:
        return False
    if ctx.block_size > 0:
        return True
    return scale.rank == 1 and scale.shape[0] is not None and scale.shape[0] != 1


def _axis_in_range(ctx: QDQView) -> int | None:
    """The axis normalized to [0, r) when x's rank is known and the axis is valid."""
    x = ctx.x
    if x is None or x.rank is None:
        return None
    axis = ctx.axis
    return axis % x.rank if -x.rank <= axis < x.rank else None


class _Blocked(NamedTuple):
    """A blocked node whose scale has x's rank, with its axis in range."""

    scale: ValueView
    x: ValueView
    axis: int
    scale_dims: Dims
    x_dims: Dims


def _blocked(ctx: QDQView) -> _Blocked | None:
    """The blocked node's scale, x and axis; None when not blocked or not known enough
    to check."""
    scale, x = ctx.scale, ctx.x
    if ctx.block_size <= 0 or scale is None or x is None:
        return None
    if scale.shape is None or x.shape is None or len(scale.shape) != len(x.shape):
        return None
    axis = _axis_in_range(ctx)
    return None if axis is None else _Blocked(scale, x, axis, scale.shape, x.shape)


@rule(
    "QL401",
    "axis-out-of-range",
    ERROR,
    summary="The axis of a per-axis or blocked node is outside [-r, r-1] for x of rank r.",
    explanation="""
    A per-axis (1-D scale) or blocked node applies its scale along `axis`, which must name a
    dimension of x. The default axis is 1, so a 1-D scale on a 1-D x without an explicit
    axis is out of range too. ONNX Runtime fails at run time; the reference evaluator may
    broadcast silently and produce wrong values.
    """,
    example="""
    bad:  DequantizeLinear(x: [64], scale: [64], zp: [64])          # default axis=1
    good: DequantizeLinear(x: [64], scale: [64], zp: [64], axis=0)
    """,
    versions="ai.onnx 13+, com.microsoft 1",
    examples=[
        Example(
            "default-axis-on-1d",
            ModelSpec("qdq", DQ, 21, x_shape=(4,), scale_shape=(4,)),
            ModelSpec("qdq", DQ, 21, x_shape=(4,), scale_shape=(4,), attrs={"axis": 0}),
        ),
    ],
)
def axis_out_of_range(ctx: QDQView) -> Iterator[Finding]:
    x = ctx.x
    if x is None or x.rank is None or not _axis_used(ctx):
        return
    axis = ctx.axis
    if not -x.rank <= axis < x.rank:
        how = "" if "axis" in ctx.attributes else " (the default)"
        yield ctx.report(
            f"axis={axis}{how} is out of range for x {x.describe()} of rank {x.rank}",
            f"set axis to the quantized dimension, in [{-x.rank}, {x.rank - 1}]",
        )


@rule(
    "QL402",
    "opset10-scalar-only",
    ERROR,
    summary="At opset 10 (up to 12) the scale and zero point must be scalars.",
    explanation="""
    QuantizeLinear-10 and DequantizeLinear-10 are per-tensor only: there is no axis and the
    scale and zero point are scalars. Per-axis quantization needs opset 13. ONNX Runtime
    happens to run a per-axis DequantizeLinear-10, other runtimes and converters do not, so
    the model means different things in different tools.
    """,
    example="""
    bad:  opset 12: DequantizeLinear(w: [64, 3], scale: [64], zp: [64])
    good: opset 13: DequantizeLinear(w, scale, zp, axis=0)   # qlrewrite upgrade --opset 13
    """,
    versions="ai.onnx 10-12",
    fix=Fix(
        UNSAFE,
        """
        Below opset 13, a per-axis scale is repaired by upgrading the model to opset 13 (as
        for QL201). Unsafe for the same reason.
        """,
        applies=lambda f: f.domain == "" and f.opset is not None and f.opset < PER_AXIS_OPSET,
        upgrade_opset=PER_AXIS_OPSET,
    ),
    examples=[
        Example(
            "opset12-per-axis",
            ModelSpec("qdq", DQ, 12, x_shape=(3, 4), scale_shape=(4,)),
            ModelSpec("qdq", DQ, 12, x_shape=(3, 4), scale_shape=(1,)),
        ),
    ],
)
def opset10_scalar_only(ctx: QDQView) -> Iterator[Finding]:
    if not ctx.version.scalar_only:
        return
    for role, view in (("scale", ctx.scale), ("zero point", ctx.zero_point)):
        if view is not None and view.shape is not None and not _per_tensor_shape(view.shape):
            yield ctx.report(
                f"{role} {view.describe()} is not a scalar; {ctx.version_label} is per-tensor only",
                "per-axis quantization needs opset 13: run `qlrewrite upgrade --opset 13`",
            )


@rule(
    "QL403",
    "per-axis-scale-length",
    ERROR,
    summary="A per-axis scale's length differs from x's dimension on the axis.",
    explanation="""
    A 1-D scale of length L quantizes x per slice along `axis`, so L must equal
    x.shape[axis]. Otherwise ONNX Runtime fails at run time and the reference evaluator
    broadcasts (a scale of 3 on a dimension of 1 silently gives an output of the wrong
    shape).
    """,
    example="""
    bad:  DequantizeLinear(w: [64, 3], scale: [3], zp: [3], axis=0)
    good: DequantizeLinear(w: [64, 3], scale: [64], zp: [64], axis=0)
    """,
    versions="ai.onnx 13+, com.microsoft 1",
    examples=[
        Example(
            "scale-length",
            ModelSpec("qdq", DQ, 21, scale_shape=(5,), attrs={"axis": 0}),
            ModelSpec("qdq", DQ, 21, scale_shape=(4,), attrs={"axis": 0}),
        ),
    ],
)
def per_axis_scale_length(ctx: QDQView) -> Iterator[Finding]:
    scale, x = ctx.scale, ctx.x
    if scale is None or x is None or scale.shape is None or x.shape is None:
        return
    if ctx.block_size > 0 or not _axis_used(ctx) or scale.rank != 1:
        return
    axis = _axis_in_range(ctx)
    if axis is None or x.shape[axis] is None:
        return
    if scale.shape[0] != x.shape[axis]:
        yield ctx.report(
            f"per-axis scale {scale.describe()} has {scale.shape[0]} elements but x "
            f"{x.describe()} has {x.shape[axis]} on axis {ctx.axis}",
            f"give one scale per slice ({x.shape[axis]}) or set axis to the right dimension",
        )


def _known(shape: Dims | None) -> TypeGuard[tuple[int, ...]]:
    return shape is not None and all(d is not None for d in shape)


@rule(
    "QL404",
    "zero-point-shape",
    ERROR,
    summary="The zero point's shape differs from the scale's shape.",
    explanation="""
    The zero point is given per scale element: it has the scale's shape. A zero point that
    only broadcasts to it is accepted by some tools and refused by others (ONNX Runtime
    checks it at run time), so the model is not portable and its meaning is unclear.
    (A scalar against a 1-element 1-D tensor is only QL406, a warning.)
    """,
    example="""
    bad:  DequantizeLinear(w, scale: [64], zp: [1], axis=0)
    good: DequantizeLinear(w, scale: [64], zp: [64], axis=0)
    """,
    versions="ai.onnx 13+, com.microsoft 1 (10-12: QL402)",
    examples=[
        Example(
            "zero-point-shape",
            ModelSpec("qdq", DQ, 21, scale_shape=(4,), zp_shape=(2,), attrs={"axis": 0}),
            ModelSpec("qdq", DQ, 21, scale_shape=(4,), zp_shape=(4,), attrs={"axis": 0}),
        ),
    ],
)
def zero_point_shape(ctx: QDQView) -> Iterator[Finding]:
    scale, zp = ctx.scale, ctx.zero_point
    if scale is None or zp is None or not _known(scale.shape) or not _known(zp.shape):
        return
    if scale.shape == zp.shape or (_per_tensor_shape(scale.shape) and _per_tensor_shape(zp.shape)):
        return
    if ctx.version.scalar_only:
        return  # QL402 reports it
    yield ctx.report(
        f"zero point {zp.describe()} does not have the shape of scale {scale.describe()}",
        f"store the zero point with shape {list(scale.shape)}",
    )


@rule(
    "QL405",
    "scale-rank-needs-block-size",
    ERROR,
    summary="A scale of rank 2 or more without block_size.",
    explanation="""
    Only blocked quantization (block_size > 0, opset 21+) takes a scale with the rank of x.
    Without block_size a scale of rank >= 2 is neither per-tensor nor per-axis; runtimes
    refuse it or broadcast it in ways that differ between tools.
    """,
    example="""
    bad:  DequantizeLinear(w: [64, 128], scale: [64, 4], zp: [64, 4], axis=1)
    good: DequantizeLinear(w: [64, 128], scale: [64, 4], zp: [64, 4], axis=1, block_size=32)
    """,
    versions="ai.onnx 13+, com.microsoft 1 (10-12: QL402)",
    upgrade_repairs=True,
    examples=[
        Example(
            "rank-2-scale",
            ModelSpec("qdq", DQ, 21, scale_shape=(4, 3), attrs={"axis": 0}),
            ModelSpec("qdq", DQ, 21, scale_shape=(4,), attrs={"axis": 0}),
        ),
    ],
)
def scale_rank_needs_block_size(ctx: QDQView) -> Iterator[Finding]:
    scale = ctx.scale
    if scale is None or scale.rank is None or scale.rank < 2 or ctx.block_size != 0:
        return  # a negative block_size is set, and wrong: QL407 says so
    if ctx.version.scalar_only:
        return  # QL402 reports it
    if ctx.version.has_block_size:
        hint = "set block_size (blocked quantization) or use a 1-D per-axis scale"
    elif ctx.domain == opsets.MS_DOMAIN:
        hint = "com.microsoft has no blocked form; use ai.onnx opset 21 with block_size"
    else:
        hint = "blocked quantization needs opset 21: `qlrewrite upgrade --opset 21`"
    yield ctx.report(
        f"scale {scale.describe()} has rank {scale.rank} but block_size is not set",
        hint,
    )


def _scalar_scale_or_zero_point(fix: FixContext) -> str | None:
    """QL406's fix: the [1] one of scale / zero point becomes a scalar (ONNX Runtime:
    per-tensor both)."""
    node, view = fix.site.node, fix.view
    for index in (1, 2):
        if index >= len(node.inputs):
            continue
        value = node.inputs[index]
        value_view = view.inputs[index] if index < len(view.inputs) else None
        if value is None or value_view is None or value_view.shape != (1,):
            continue
        if not (is_constant(value) and value.const_value is not None and value.producer() is None):
            return None  # a graph input or a Constant node's output: not rewritten here
        if id(value) not in fix.memo:  # a shared tensor: one scalar for all its readers
            fix.memo[id(value)] = _scalar_of(value, fix.site.graph, fix.names)
        scalar = fix.memo[id(value)]
        if scalar is None:
            return None
        node.replace_input_with(index, scalar)
        role = "scale" if index == 1 else "zero point"
        dtype = value.const_value.dtype.name
        if scalar is value:
            return f"{role} '{value.name}' {dtype} [1] -> {dtype} [] (scalar)"
        return f"{role} '{value.name}' {dtype} [1] -> new scalar '{scalar.name}' (shared tensor)"
    return None


def _scalar_of(
    value: ir.Value, graph: ir.Graph | ir.Function, names: FreshNames
) -> ir.Value | None:
    """``value`` as a scalar: reshaped in place when only Q/DQ scale / zero point slots read
    it, else one new scalar initializer beside it; None for an outer-scope initializer (or
    one without data)."""
    if not isinstance(graph, ir.Graph) or value.name not in graph.initializers:
        return None
    tensor = value.const_value
    if tensor is None:
        return None
    array = np.asarray(tensor.numpy()).reshape(())
    # Reshaped in place only when every reader is a Q/DQ scale / zero point slot whose
    # counterpart is a scalar too: no other node sees the shape change, and no Q/DQ gets a
    # new scalar-vs-[1] pair (a Q sharing the [1] scale with a [1] zero point).
    in_place = all(
        user.op_type in ("QuantizeLinear", "DequantizeLinear")
        and index in (1, 2)
        and _is_scalar_or_absent(user, 3 - index)
        for user, index in value.uses()
    )
    if in_place and not value.is_graph_output():
        value.const_value = ir.Tensor(array, name=value.name)
        value.shape = ir.Shape([])
        return value
    name = names.fresh(f"{value.name}_scalar")
    scalar = ir.Value(name=name, shape=ir.Shape([]), type=value.type)
    scalar.const_value = ir.Tensor(array, name=name)
    graph.register_initializer(scalar)
    return scalar


def _is_scalar_or_absent(node: ir.Node, index: int) -> bool:
    """Input ``index`` of ``node`` is omitted or a known scalar."""
    value = node.inputs[index] if index < len(node.inputs) else None
    if value is None:
        return True
    if value.shape is not None:
        return len(value.shape) == 0
    tensor = value.const_value
    return tensor is not None and len(tensor.shape) == 0


@rule(
    "QL406",
    "zero-point-scalar-vs-1",
    WARNING,
    summary="One of scale / zero point is a scalar and the other a 1-element 1-D tensor.",
    explanation="""
    Both mean per-tensor and every runtime accepts the pair, but the spec asks for equal
    shapes. ONNX Runtime's own quantizer writes bias DequantizeLinear nodes with a [1] scale
    and a scalar zero point, so the rule is opt-in (`--select QL406`): a tool that needs
    equal shapes can look for them.
    """,
    example="""
    warn: DequantizeLinear(b: int32 [64], scale: [1], zp: [])
    good: DequantizeLinear(b: int32 [64], scale: [], zp: [])
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    fix=Fix(
        SAFE,
        """
        The 1-element [1] scale or zero point becomes a scalar (a new scalar initializer when
        the tensor is shared with other nodes). ONNX Runtime treats both as per-tensor:
        outputs are bit-identical. Not fixed when the tensor is a graph input or a Constant
        node's output.
        """,
        node=_scalar_scale_or_zero_point,
    ),
    opt_in=True,
    examples=[
        Example(
            "scale-1-zero-point-scalar",
            ModelSpec("qdq", DQ, 21, scale_shape=(1,), zp_shape=()),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def zero_point_scalar_vs_1(ctx: QDQView) -> Iterator[Finding]:
    scale, zp = ctx.scale, ctx.zero_point
    if scale is None or zp is None or scale.shape is None or zp.shape is None:
        return
    if {scale.shape, zp.shape} == {(), (1,)}:
        yield ctx.report(
            f"zero point {zp.describe()} and scale {scale.describe()} differ in rank",
            "give both the same shape (both scalars)",
        )


@rule(
    "QL407",
    "block-size-negative",
    ERROR,
    summary="block_size is negative.",
    explanation="""
    block_size is 0 (not blocked) or the positive number of elements sharing one scale
    along the axis. A negative value has no meaning; runtimes refuse it.
    """,
    example="""
    bad:  DequantizeLinear(w, scale, zp, axis=1, block_size=-32)
    good: DequantizeLinear(w, scale, zp, axis=1, block_size=32)
    """,
    versions="ai.onnx 21+",
    examples=[
        Example(
            "negative-block-size",
            ModelSpec("qdq", DQ, 21, scale_shape=(4, 2), attrs={"axis": 1, "block_size": -2}),
            ModelSpec("qdq", DQ, 21, scale_shape=(4, 2), attrs={"axis": 1, "block_size": 2}),
        ),
    ],
)
def block_size_negative(ctx: QDQView) -> Iterator[Finding]:
    if not ctx.version.has_block_size:
        return
    value = ctx.int_attr("block_size")
    if value is not None and value < 0:
        yield ctx.report(
            f"block_size={value} is negative",
            "use 0 (not blocked) or the positive block length",
        )


def _blocked_example(scale_shape: tuple[int, ...], block_size: int = 2) -> ModelSpec:
    """The examples' DequantizeLinear of x [4, 6] blocked along axis 1 by ``block_size``,
    its scale of ``scale_shape``."""
    return ModelSpec(
        "qdq",
        DQ,
        21,
        x_shape=(4, 6),
        scale_shape=scale_shape,
        attrs={"axis": 1, "block_size": block_size},
    )


@rule(
    "QL408",
    "blocked-scale-rank",
    ERROR,
    summary="A blocked scale does not have the rank of x.",
    explanation="""
    With block_size > 0, the scale (and zero point) have x's rank: one entry per block
    along the axis and the full size on every other dimension. Another rank cannot be
    matched to the blocks; ONNX Runtime fails at run time.
    """,
    example="""
    bad:  DequantizeLinear(w: [64, 128], scale: [256], axis=1, block_size=32)
    good: DequantizeLinear(w: [64, 128], scale: [64, 4], axis=1, block_size=32)
    """,
    versions="ai.onnx 21+",
    examples=[
        Example(
            "blocked-rank",
            _blocked_example((6,)),
            _blocked_example((4, 3)),
        ),
    ],
)
def blocked_scale_rank(ctx: QDQView) -> Iterator[Finding]:
    scale, x = ctx.scale, ctx.x
    if ctx.block_size <= 0 or scale is None or x is None:
        return
    if scale.rank is not None and x.rank is not None and scale.rank != x.rank:
        yield ctx.report(
            f"block_size={ctx.block_size} but scale {scale.describe()} has rank {scale.rank} "
            f"and x {x.describe()} has rank {x.rank}",
            "give the scale x's shape with the blocked axis divided into blocks",
        )


@rule(
    "QL409",
    "blocked-scale-dims",
    ERROR,
    summary="A blocked scale differs from x on a dimension other than the blocked axis.",
    explanation="""
    Blocking happens only along `axis`; on every other dimension the scale has x's size.
    A different size there cannot be mapped to elements of x.
    """,
    example="""
    bad:  DequantizeLinear(w: [64, 128], scale: [32, 4], axis=1, block_size=32)
    good: DequantizeLinear(w: [64, 128], scale: [64, 4], axis=1, block_size=32)
    """,
    versions="ai.onnx 21+",
    examples=[
        Example(
            "blocked-dims",
            _blocked_example((2, 3)),
            _blocked_example((4, 3)),
        ),
    ],
)
def blocked_scale_dims(ctx: QDQView) -> Iterator[Finding]:
    blocked = _blocked(ctx)
    if blocked is None:
        return
    scale, x, axis, scale_dims, x_dims = blocked
    bad = [
        i
        for i, (s, d) in enumerate(zip(scale_dims, x_dims, strict=True))
        if i != axis and s is not None and d is not None and s != d
    ]
    if bad:
        yield ctx.report(
            f"scale {scale.describe()} differs from x {x.describe()} on dimension(s) "
            f"{', '.join(map(str, bad))}, which are not the blocked axis {ctx.axis}",
            "match x's size on every dimension except the blocked axis",
        )


@rule(
    "QL410",
    "block-size-range",
    ERROR,
    summary="block_size does not fit the scale's block count on the axis.",
    explanation="""
    With D elements on the axis and S scale entries, the blocks must cover D exactly with
    S blocks, the last one possibly partial: block_size in [ceil(D/S), ceil(D/(S-1)) - 1]
    (block_size >= D when S is 1). Outside that range some scales cover nothing or some
    elements have no scale; the reference evaluator accepts sizes that are too large and
    computes garbage.
    """,
    example="""
    bad:  DequantizeLinear(w: [64, 128], scale: [64, 4], axis=1, block_size=16)
    good: DequantizeLinear(w: [64, 128], scale: [64, 4], axis=1, block_size=32)
    """,
    versions="ai.onnx 21+",
    examples=[
        Example(
            "block-too-small",
            _blocked_example((4, 3), block_size=1),
            _blocked_example((4, 3)),
        ),
    ],
)
def block_size_range(ctx: QDQView) -> Iterator[Finding]:
    blocked = _blocked(ctx)
    if blocked is None:
        return
    axis = blocked.axis
    d, s, b = blocked.x_dims[axis], blocked.scale_dims[axis], ctx.block_size
    if d is None or s is None:
        return
    if s == 0:
        ok, wanted = d == 0, "no blocks for a non-empty axis"
    else:
        low = -(-d // s)
        high = None if s == 1 else -(-d // (s - 1)) - 1
        ok = b >= low and (high is None or b <= high)
        wanted = f"[{low}, {high}]" if high is not None else f">= {low}"
    if not ok:
        yield ctx.report(
            f"block_size={b} does not fit {d} elements on axis {ctx.axis} with {s} scale "
            f"entries (allowed: {wanted})",
            f"use a block_size in {wanted}, or resize the scale to ceil({d}/{b}) on the axis",
        )


def _explicit_axis(fix: FixContext) -> str | None:
    """QL411's fix: com.microsoft Q/DQ with a 1-D scale and no axis: ONNX Runtime applies
    axis 1, written out."""
    node, x = fix.site.node, fix.view.x
    if fix.site.domain != opsets.MS_DOMAIN or "axis" in fix.view.attributes:
        return None
    if x is not None and x.rank is not None and x.rank < 2:
        return None  # axis 1 does not exist: nothing ONNX Runtime computes to keep
    node.attributes["axis"] = ir.AttrInt64("axis", 1)
    return "axis made explicit: axis=1 (what ONNX Runtime applies to a 1-D scale)"


@rule(
    "QL411",
    "com-microsoft-1d-scale-without-axis",
    WARNING,
    summary="A com.microsoft Q/DQ with a 1-D scale and no axis attribute.",
    explanation="""
    The com.microsoft schema says that without `axis` the node is per-tensor with scalar
    scale and zero point, but ONNX Runtime's kernel applies axis 1 to a 1-D scale. Tools
    following the schema and ONNX Runtime then disagree about the result; write the axis.
    """,
    example="""
    warn: com.microsoft.DequantizeLinear(w: [3, 64], scale: [64], zp: [64])
    good: com.microsoft.DequantizeLinear(w: [3, 64], scale: [64], zp: [64], axis=1)
    """,
    versions="com.microsoft 1",
    fix=Fix(
        SAFE,
        """
        Writes axis=1, the axis ONNX Runtime's com.microsoft kernel applies to a 1-D scale:
        outputs are bit-identical.
        """,
        node=_explicit_axis,
    ),
    examples=[
        Example(
            "ms-1d-without-axis",
            ModelSpec("qdq", DQ, 13, domain=MS, scale_shape=(3,)),
            ModelSpec("qdq", DQ, 13, domain=MS, scale_shape=(3,), attrs={"axis": 1}),
        ),
    ],
)
def com_microsoft_1d_scale_without_axis(ctx: QDQView) -> Iterator[Finding]:
    scale = ctx.scale
    if ctx.domain != opsets.MS_DOMAIN or "axis" in ctx.attributes or scale is None:
        return
    if scale.shape is not None and len(scale.shape) == 1 and scale.shape[0] != 1:
        yield ctx.report(
            f"scale {scale.describe()} is 1-D but no axis is given (ONNX Runtime uses axis 1)",
            "write axis explicitly (axis=1 keeps ONNX Runtime's behaviour)",
        )


@rule(
    "QL412",
    "blocked-quantize-empty",
    WARNING,
    summary="A blocked QuantizeLinear whose x is empty at or after its axis: ONNX Runtime "
    "1.31 crashes.",
    explanation="""
    The specification makes the output empty, like x. ONNX Runtime 1.31's CPU kernel of a
    blocked QuantizeLinear divides by the block count or reads past the scale when x has
    a dimension of size 0 at or after the axis, and the whole process dies (measured:
    SIGFPE for x [0, 3] on axis 0 or [4, 0] on axis 1, SIGSEGV for [4, 0] on axis 0; a
    size-0 dimension before the axis runs). DequantizeLinear runs them. `--verify` runs
    ONNX Runtime in a child process and reports such a crash as its reason.
    """,
    example="""
    warn: QuantizeLinear(x: [0, 4], scale: [0, 2], axis=0, block_size=2)
    good: QuantizeLinear(x: [4, 4], scale: [2, 4], axis=0, block_size=2)
    """,
    versions="ai.onnx QuantizeLinear 21+",
    examples=[
        Example(
            "empty-x",
            ModelSpec(
                "qdq", Q, 21, x_shape=(4, 0), scale_shape=(2, 0), attrs={"axis": 0, "block_size": 2}
            ),
            ModelSpec(
                "qdq", Q, 21, x_shape=(4, 4), scale_shape=(2, 4), attrs={"axis": 0, "block_size": 2}
            ),
        ),
    ],
)
def blocked_quantize_empty(ctx: QDQView) -> Iterator[Finding]:
    blocked = _blocked(ctx)
    if not ctx.is_quantize or blocked is None:
        return
    x, axis = blocked.x, blocked.axis
    if 0 in blocked.x_dims[axis:]:
        yield ctx.report(
            f"x {x.describe()} is empty at or after axis {axis}: ONNX Runtime 1.31 crashes "
            "the process running it",
            "drop the node (its output is empty), or run it on another runtime",
        )
