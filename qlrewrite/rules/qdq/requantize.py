"""QL507: a requantization between two Q/DQ pairs (Q1 -> DQ1 -> Q2 -> DQ2 with different
parameters), which ONNX Runtime's default session collapses into one pair."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import WARNING, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.common import constant_params
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__ = ["HINT", "requantization"]

#: The zero point types ORT's DoubleQDQPairsRemover handles, with their ranges.
_RANGES = {ir.DataType.UINT8: (0, 255), ir.DataType.INT8: (-128, 127)}

_Params = tuple[float, float, ir.DataType]  # scale (float32), zero point, zero point type


def _only_use(value: ir.Value | None, op: str) -> ir.Node | None:
    """The one node reading ``value`` when it is an ``op`` and ``value`` is no graph output."""
    if value is None or value.is_graph_output():
        return None
    users = [use.node for use in value.uses()]
    return users[0] if len(users) == 1 and users[0].op_type == op else None


def _params(ctx: QDQView, node: ir.Node) -> _Params | None:
    """The scalar constant float32 scale and uint8 / int8 zero point of a Q/DQ ``node``."""
    read = constant_params(ctx, node)
    if read is None:
        return None
    scale, zero = read
    assert scale.array is not None and zero.array is not None  # (read)
    if scale.dtype != ir.DataType.FLOAT or zero.dtype not in _RANGES:
        return None
    if scale.array.size != 1 or zero.array.size != 1:
        return None
    return float(np.float32(scale.array.ravel()[0])), float(zero.array.ravel()[0]), zero.dtype


def _pairs(ctx: QDQView) -> tuple[_Params, _Params] | None:
    """The parameters of the two pairs when ``ctx`` is DQ1 of Q1 -> DQ1 -> Q2 -> DQ2, each
    pair's Q and DQ alike, every link read by its next node only (ORT's pattern)."""
    node = ctx.node
    if ctx.is_quantize or not node.inputs or not node.outputs:
        return None
    source = node.inputs[0]
    q1 = source.producer() if source is not None else None
    q2 = _only_use(node.outputs[0], "QuantizeLinear")
    dq2 = _only_use(q2.outputs[0], "DequantizeLinear") if q2 is not None else None
    if q1 is None or q1.op_type != "QuantizeLinear" or q2 is None or dq2 is None:
        return None
    if _only_use(source, "DequantizeLinear") is not node:
        return None
    first, second = _params(ctx, q1), _params(ctx, q2)
    if first is None or first != _params(ctx, node) or second != _params(ctx, dq2):
        return None
    return (first, second) if second is not None else None


def _collapsed(first: _Params, second: _Params) -> tuple[float, int]:
    """The one pair ORT puts in their place: the two ranges' intersection on the type's
    grid, computed in float32 as DoubleQDQPairsRemover does."""
    low, high = _RANGES[first[2]]
    f32 = np.float32
    real_min = max(f32(low - z) * f32(s) for s, z, _ in (first, second))
    real_max = min(f32(high - z) * f32(s) for s, z, _ in (first, second))
    scale = f32(real_max - real_min) / f32(high - low)
    return float(scale), int(np.round(f32(low) - real_min / scale))


@rule(
    "QL507",
    "requantize-collapsed",
    WARNING,
    summary="Q -> DQ -> Q -> DQ requantizes with other parameters; ONNX Runtime drops it.",
    explanation="""
    Two Q/DQ pairs in a row whose parameters differ (a requantization: the values are
    rounded to the first pair's grid, then to the second's) are replaced by ONNX Runtime's
    default session (DoubleQDQPairsRemover) with one pair whose range is the intersection of
    the two and whose step is that range / 255: the values come out on that grid, not the
    second pair's. Measured, default session against ORT_DISABLE_ALL, uint8 and int8, every
    release 1.15.1 to 1.32.0: scale 0.05 then 0.5 gives values on the 0.05 grid, off by up
    to 0.25 (half the second step); scale 0.05 then 0.1: 0.05; zero point 128 then 100
    (scale 0.05): 0.042. ORT leaves the chain alone when a link has another reader or is a
    graph output, or the parameters are equal.
    """,
    example="""
    warn: Q(x, 0.05, 128) -> DQ(0.05, 128) -> Q(0.5, 128) -> DQ(0.5, 128)
    good: Q(x, 0.5, 128) -> DQ(0.5, 128)            # one quantization, if that was meant
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    examples=[
        Example(
            "scale-0.05-then-0.5",
            ModelSpec("qdq_requantized", 0.5),
            ModelSpec("qdq_requantized", 0.05),
        ),
        Example(
            "zero-point-128-then-100",
            ModelSpec("qdq_requantized", 0.05, 100),
            ModelSpec("qdq_requantized", 0.5, consumers=2),
        ),
    ],
)
def requantize_collapsed(ctx: QDQView) -> Iterator[Finding]:
    message = requantization(ctx)
    if message is not None:
        yield ctx.report(message, HINT)


#: The way out QL507 and QL731 name.
HINT = (
    "quantize once with the parameters meant, or run ONNX Runtime with "
    "disabled_optimizers=['DoubleQDQPairsRemover'] (computes the graph as written)"
)


def requantization(ctx: QDQView) -> str | None:
    """What QL507 (and QL731 for ``--target ort``) says of DQ1 of Q1 -> DQ1 -> Q2 -> DQ2 with
    different parameters (None: not such a chain)."""
    found = _pairs(ctx)
    if found is None or found[0] == found[1]:
        return None
    first, second = found
    scale, zero = _collapsed(first, second)
    return (
        f"'{ctx.node.outputs[0].name}' is requantized from scale {first[0]:.6g}, zero point "
        f"{first[1]:g} to {second[0]:.6g}, {second[1]:g}: ONNX Runtime's default session "
        f"replaces the four nodes with one pair (scale {scale:.6g}, zero point {zero}: the "
        "ranges' intersection in the type's steps), losing the requantization"
    )
