"""QL708: a Pad with the constant 0 before an AveragePool that does not count padding, which
ONNX Runtime 1.20's PadFusion folds into the pool wrongly (the padded zeros then go
uncounted), read from the measured tables; its exact fix counts the padding on a pool that
has none of its own."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite.findings import ERROR, SAFE, Finding
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, Fix, TargetModel, rule
from qlrewrite.rules.targets.ort_groups import measured_outcome, named_releases
from qlrewrite.targets.forms import pad_pool_key
from qlrewrite.targets.tables import Divergence, Table
from qlrewrite.toolkit import iter_graphs

#: The attribute a QL708 finding its fix repairs names.
_COUNTED = "count_include_pad"


def _uncounted_pools(model: ir.Model) -> list[tuple[ir.Node, str]]:
    """The AveragePools of ``model`` that do not count padding after a Pad of 0, each with
    its table key."""
    found = []
    for scope in iter_graphs(model):
        for node in scope.graph:
            key = pad_pool_key(node, scope.opset(""))
            if key is not None and key.endswith(" count_include_pad=0"):
                found.append((node, key))
    return found


def _count_padding(model: ir.Model) -> str | None:
    """QL708's fix: count_include_pad=1 on each such pool. Exact by the ONNX spec: the pool
    pads nothing itself, so the attribute changes nothing; the fused pool is then right."""
    pools = [pool for pool, _ in _uncounted_pools(model)]
    for pool in pools:
        pool.attributes[_COUNTED] = ir.AttrInt64(_COUNTED, 1)
    names = ", ".join(p.name or "(unnamed)" for p in pools)
    return f"count_include_pad=1 on {names}" if pools else None


@rule(
    "QL708",
    "target-pad-pool-fusion",
    ERROR,
    summary="ONNX Runtime 1.20 folds a Pad of 0 into the AveragePool after it and computes "
    "the pool wrongly when the pool does not count padding (measured against "
    "ORT_DISABLE_ALL).",
    explanation="""
    ONNX Runtime 1.20's PadFusion folds a Pad (constant 0, spatial axes) into the
    AveragePool that reads it, as the pool's own pads, without looking at
    count_include_pad: with count_include_pad=0 the padded zeros, which the graph counts
    (they are data after an explicit Pad), are then left out of the average. Measured by
    the probe (`tools/probe/drive.py`, the Pad -> AveragePool pair, float): ORT 1.20.1's
    default session computes it about 50% of the largest output off, every other release
    1.15.1 to 1.32.0 and OpenVINO 2026.4.1 right. It is not a quantization bug: NNCF
    3.4.0's outputs of a CNN with a Pad before an AveragePool (Q/DQ on the Pad's input
    only) were 35-136% off in 1.20.1. The fix sets count_include_pad=1 on the pool: it
    pads nothing itself, so by the ONNX spec the attribute changes nothing, and 1.20's
    fused pool then counts the padding (measured right).
    """,
    example="""
    bad:  Pad(0) -> AveragePool(count_include_pad=0)     (--target ort==1.20)
    good: Pad(0) -> AveragePool(count_include_pad=1)
    """,
    versions="--target ort / openvino",
    scope="target-model",
    needs_version=False,
    fix=Fix(
        SAFE,
        """
        Sets count_include_pad=1 on each such AveragePool (`check --fix --target
        ort==1.20`): it has no pads of its own, so the values are the same by the ONNX
        spec; ONNX Runtime's outputs stay bit-identical where it computed them right, and
        1.20's fused pool becomes right.
        """,
        applies=lambda finding: finding.attribute == _COUNTED,
        model=_count_padding,
    ),
    examples=[
        Example(
            "pad-before-uncounted-pool-on-1.20",
            ModelSpec("pad_pool", 0, quantized=True),
            ModelSpec("pad_pool", 1, quantized=True),
            targets=("ort==1.20",),
        ),
    ],
)
def target_pad_pool_fusion(ctx: TargetModel) -> Iterator[Finding]:
    wrong: dict[ir.Node, list[tuple[Table, Divergence]]] = {}
    for pool, key in _uncounted_pools(ctx.context.model):
        for table in ctx.target.tables:
            divergence = table.divergence(key)
            if divergence is not None:
                wrong.setdefault(pool, []).append((table, divergence))
    if not wrong:
        return
    pools = list(wrong)
    found = max(wrong.values(), key=len)
    who = named_releases(ctx.target, [t for t, _ in found])
    names = ", ".join(p.name or "(unnamed)" for p in pools[:3])
    more = f" and {len(pools) - 3} more" if len(pools) > 3 else ""
    yield ctx.report(
        f"{who} folds the Pad before AveragePool {names}{more} into the pool, which "
        f"leaves the padding uncounted: the pool {measured_outcome(found)}",
        "set count_include_pad=1 on the pool: it pads nothing itself, so the values are "
        "the same by the ONNX spec and the fused pool is right (check --fix does it)",
        attribute=_COUNTED,
    )
