"""QL708: a Pad with the constant 0 before an AveragePool, which ONNX Runtime 1.20's
PadFusion folds into the pool wrongly when the pool does not count padding, and OpenVINO
computes wrongly when the Pad's data is dequantized with a zero point not 0, read from the
measured tables; the exact fix where one is measured right (count the padding on a pool that
has none of its own)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite.findings import ERROR, SAFE, Finding
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, Fix, TargetModel, rule
from qlrewrite.rules.targets.ort_groups import measured_outcome, measured_right, named_releases
from qlrewrite.targets.forms import pad_pool_key
from qlrewrite.targets.spec import Target
from qlrewrite.targets.tables import Divergence, Table
from qlrewrite.toolkit import iter_graphs

#: The attribute a QL708 finding its fix repairs names.
_COUNTED = "count_include_pad"


def _pad_pools(model: ir.Model) -> list[tuple[ir.Node, str]]:
    """The AveragePools of ``model`` after a Pad of 0, each with its table key."""
    found = []
    for scope in iter_graphs(model):
        for node in scope.graph:
            key = pad_pool_key(node, scope.opset(""))
            if key is not None:
                found.append((node, key))
    return found


def _counted(key: str) -> str:
    """``key`` with the padding counted (count_include_pad=1)."""
    return key.replace(" count_include_pad=0 ", " count_include_pad=1 ")


def _count_padding(model: ir.Model) -> str | None:
    """QL708's fix: count_include_pad=1 on each pool that does not count padding after a Pad
    of 0. Exact by the ONNX spec: the pool pads nothing itself, so the attribute changes
    nothing; ONNX Runtime 1.20's fused pool then counts the padding."""
    pools = [pool for pool, key in _pad_pools(model) if " count_include_pad=0 " in key]
    for pool in pools:
        pool.attributes[_COUNTED] = ir.AttrInt64(_COUNTED, 1)
    names = ", ".join(p.name or "(unnamed)" for p in pools)
    return f"count_include_pad=1 on {names}" if pools else None


def _way_out(target: Target, key: str) -> tuple[str, str]:
    """The hint and the fix attribute: counting the padding where that form is measured
    right in every release of ``target``; else a zero point of 0 where that is."""
    counted = _counted(key)
    if counted != key and measured_right(target, counted):
        return (
            "set count_include_pad=1 on the pool: it pads nothing itself, so the values are "
            "the same by the ONNX spec, and that form is measured right there (check --fix "
            "does it)",
            _COUNTED,
        )
    zero = key.replace("input=dq-nonzero", "input=dq-zero")
    if zero != key and measured_right(target, zero):
        return "quantize the Pad's input with a zero point of 0 (measured right there)", ""
    return "keep the Pad and the pool in float (dequantize after the pool)", ""


@rule(
    "QL708",
    "target-pad-pool-fusion",
    ERROR,
    summary="The target computes a Pad of 0 before an AveragePool wrongly: ONNX Runtime "
    "1.20's PadFusion when the pool does not count padding, OpenVINO after a zero point "
    "not 0 (measured).",
    explanation="""
    The probe (`tools/probe/drive.py`: the Pad -> AveragePool pair at ai.onnx 11 to 28, the
    padding counted or not, the Pad's data float or dequantized with a zero point of 128 or
    0) measures two bugs. ONNX Runtime 1.20's PadFusion folds a Pad (constant 0, spatial
    axes) into the AveragePool that reads it, as the pool's own pads, without looking at
    count_include_pad: with count_include_pad=0 the padded zeros, which the graph counts
    (they are data after an explicit Pad), go uncounted: 1.20.1's default session about
    56% of the largest output off at opsets 11-20 (Pad-21 is not fused), every other
    release 1.15.1 to 1.32.0 right. It is not a quantization bug: NNCF 3.4.0's outputs of a
    CNN with a Pad before an AveragePool were 7-136% off in 1.20.1. OpenVINO 2026.4.1
    moves a dequantization past the Pad (directly, or through a MaxPool, Relu, Reshape or
    Transpose on the way) and pads the integers with 0, so a zero point not 0 becomes a
    padded value other than 0: tens of percent off (NNCF's "mixed" preset outputs 12-78%).
    The fix sets count_include_pad=1 on the pool where that form is measured right in every
    release of the target (ONNX Runtime 1.20): the pool pads nothing itself, so by the ONNX
    spec the attribute changes nothing. For OpenVINO the hint names the measured way out
    (a zero point of 0).
    """,
    example="""
    bad:  Pad(0) -> AveragePool(count_include_pad=0)     (--target ort==1.20)
    good: Pad(0) -> AveragePool(count_include_pad=1)
    bad:  DQ(zero point 128) -> Pad(0) -> AveragePool    (--target openvino)
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
    wrong: dict[str, tuple[list[ir.Node], list[tuple[Table, Divergence]]]] = {}
    for pool, key in _pad_pools(ctx.context.model):
        found = [(t, d) for t in ctx.target.tables if (d := t.divergence(key)) is not None]
        if found:
            wrong.setdefault(key, ([], found))[0].append(pool)
    for key, (pools, found) in wrong.items():
        who = named_releases(ctx.target, [t for t, _ in found])
        names = ", ".join(p.name or "(unnamed)" for p in pools[:3])
        more = f" and {len(pools) - 3} more" if len(pools) > 3 else ""
        hint, attribute = _way_out(ctx.target, key)
        yield ctx.report(
            f"in {who} the AveragePool {names}{more} after its Pad of 0 {measured_outcome(found)}",
            hint,
            attribute=attribute,
        )
