"""What the ONNX Runtime / OpenVINO target rules (:mod:`qlrewrite.rules.targets.ort`) share:
the words for the releases measured and what they did (:func:`named_releases`,
:func:`measured_outcome`), whether a form was measured right everywhere
(:func:`measured_right`), and the QDQ node groups beyond a
weight pattern that QL703 / QL706 look up: the activation-only groups ONNX Runtime fuses or
drops and the bias of a QDQ Conv / Gemm (:func:`groups_of`, :func:`group_findings`)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite.findings import Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.registry import TargetNode
from qlrewrite.rules.targets.padding import PADS, padding_movable
from qlrewrite.targets.forms import bias_key, family_key
from qlrewrite.targets.spec import Target
from qlrewrite.targets.tables import Divergence, Table

__all__ = [
    "group_findings",
    "groups_of",
    "measured_outcome",
    "measured_right",
    "named_releases",
]


def named_releases(target: Target, refusing: list[Table]) -> str:
    """``ORT 1.31.1`` for a one-release target, else the refusing releases of the range:
    ``ORT 1.15.1, 1.16.3 (of ort>=1.15)``."""
    if len(target.table_names) == 1:
        return refusing[0].label
    runtime = refusing[0].label.rsplit(" ", 1)[0]
    return f"{runtime} {', '.join(t.release for t in refusing)} (of {target.spec})"


def measured_outcome(found: list[tuple[Table, Divergence]]) -> str:
    """What the releases were measured to do: other values (the largest relative
    difference), and the failure at run where there was one."""
    diffs = [d.max_rel_diff for _, d in found if d.max_rel_diff is not None]
    errors = [d.error for _, d in found if d.error]
    wrong = any(d.outcome == "miscomputes" for _, d in found)
    against = found[-1][1].against
    if not wrong:
        runs = "runs it" if against == "ORT_DISABLE_ALL" else "computes it"
        return f"fails at run where {against} {runs}: {errors[-1] if errors else '?'}"
    off = f", up to {max(diffs):.0%} of the largest output off" if diffs else ""
    text = f"computes other values than with {against} (measured{off})"
    return f"{text}; at other shapes it fails at run: {errors[-1]}" if errors else text


def measured_right(target: Target, key: str) -> bool:
    """Whether every release of the target ran ``key`` and matched ORT_DISABLE_ALL and the
    ONNX reference where they were compared (and at least one of them was)."""
    rows = [t.forms.get(key) for t in target.tables]
    return all(
        isinstance(r, dict)
        and r.get("runs")
        and {r.get("optimized"), r.get("reference")} - {None} == {"matches"}
        for r in rows
    )


def groups_of(ctx: TargetNode) -> list[tuple[ir.Node, str]]:
    """The activation-only QDQ node groups (:data:`~qlrewrite.targets.forms.FAMILY_OPS`)
    whose first quantized input the DequantizeLinear gives, and the QDQ Conv / Gemm whose
    bias it gives, each with its table key. A DequantizeLinear feeding several nodes (or a
    graph output too) is in each one's group: ONNX Runtime duplicates it for each
    (EnsureUniqueDQForNodeUnit; measured with a per-channel Add whose DequantizeLinear also
    feeds a Relu or a graph output: refused at load as alone in 1.15.1, 1.20.1, 1.31.1)."""
    outputs = ctx.view.node.outputs
    value = outputs[0] if outputs else None
    groups = []
    for op in value.consumers() if value is not None else ():
        key = bias_key(ctx.view, op)
        if key is None and _first_dequantized(op) is value:  # one finding per group
            key = family_key(ctx.view, op)
        if key is not None:
            groups.append((op, key))
    return groups


def _first_dequantized(op: ir.Node) -> ir.Value | None:
    """``op``'s first input a DequantizeLinear gives (None: none)."""
    for value in op.inputs:
        producer = value.producer() if value is not None else None
        if producer is not None and producer.op_type == "DequantizeLinear":
            return value
    return None


def _optimizer_refusals(target: Target, key: str) -> list[tuple[Table, Divergence]]:
    """The releases whose default session refused ``key`` at load or run where an
    ORT_DISABLE_ALL session ran it, as divergences."""
    found = []
    for runtime in target.tables:
        refusal = runtime.refusal(key)
        if refusal is not None and refusal.unoptimized == "runs":
            found.append((runtime, Divergence("fails at load", None, refusal.error)))
    return found


def group_findings(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    """QL706 on an activation-only QDQ node group: what the releases' default sessions
    computed otherwise, failed at run on, or refused where ORT_DISABLE_ALL ran it."""
    for op, key in groups_of(ctx):
        yield from _group_miscomputes(ctx, op, key)


def _group_miscomputes(ctx: TargetNode[QDQView], op: ir.Node, key: str) -> Iterator[Finding]:
    """QL706 on one group: its measured divergences and optimizer-only refusals."""
    found = [(t, d) for t in ctx.target.tables if (d := t.divergence(key)) is not None]
    found += _optimizer_refusals(ctx.target, key)
    if not found:
        return
    order = {t.name: i for i, t in enumerate(ctx.target.tables)}
    found.sort(key=lambda pair: order[pair[0].name])
    who = named_releases(ctx.target, [t for t, _ in found])
    by = f"with {who}'s default optimizations" if ctx.target.runtime == "ort" else f"in {who}"
    role = "bias" if " bias: " in key else "activation"
    yield ctx.report(
        f"{by} the quantized {op.op_type} this {role} feeds {_what_of_group(found)}",
        _family_ways_out(ctx.target, key),
        attribute=PADS if _move_padding(ctx.target, key) and padding_movable(ctx.view, op) else "",
    )


def _what_of_group(found: list[tuple[Table, Divergence]]) -> str:
    """:func:`_what`, with the refusals at load ORT_DISABLE_ALL does not share."""
    loads = [d for _, d in found if d.outcome == "fails at load"]
    if len(loads) < len(found):
        return measured_outcome([(t, d) for t, d in found if d.outcome != "fails at load"])
    return f"is refused when loaded, where ORT_DISABLE_ALL runs it: {loads[-1].error}"


#: A family key's input form and output type (:func:`~qlrewrite.targets.forms.family_key`).
_FAMILY_FORM = re.compile(
    r"input=(?P<head>\S+ \S+ opset=\d+) (?P<type>\w+) (?P<scale>scale=\w+) "
    r"(?P<granularity>[\w-]+) output=(?P<output>\w+)"
)


def _family_variant(key: str, qtype: str | None) -> str:
    """``key`` with its input quantized per tensor (and, given ``qtype``, its input and
    output of that type)."""

    def replace(match: re.Match[str]) -> str:
        head, scale = match.group("head"), match.group("scale")
        input_type = qtype or match.group("type")
        output = qtype or match.group("output")
        return f"input={head} {input_type} {scale} per-tensor output={output}"

    return _FAMILY_FORM.sub(replace, key, count=1)


#: A padded AveragePool counting its padding (:func:`~qlrewrite.targets.forms.family_key`).
_COUNTED_PADS = " pads=counted zero_point=nonzero"


def _padding_variants(key: str) -> list[tuple[str, str]]:
    """The form of an AveragePool that counts its padding with a zero point not 0, quantized
    with a zero point of 0 instead."""
    if not key.endswith(_COUNTED_PADS):
        return []
    unpadded = key.removesuffix(_COUNTED_PADS)
    return [(unpadded + " pads=counted zero_point=zero", "with a zero point of 0")]


def _move_padding(target: Target, key: str) -> str:
    """``; or pad the integers ...`` when the unpadded AveragePool of ``key`` (one counting
    its padding with a zero point not 0) is measured right: the padding done on the
    quantized tensor gives the same values by the ONNX spec (the zero point dequantizes to
    0)."""
    if not key.endswith(_COUNTED_PADS):
        return ""
    if not measured_right(target, key.removesuffix(_COUNTED_PADS)):
        return ""
    return (
        "; or move the padding before the DequantizeLinear (a Pad of the integers whose "
        "value is the zero point: the same values) and drop the AveragePool's pads "
        "(check --fix does it)"
    )


def _family_ways_out(target: Target, key: str) -> str:
    """Ways out of a family pattern: the activation quantized per tensor, or as uint8 per
    tensor (same opset and domain), offered when the tables measured that form to match
    ORT_DISABLE_ALL in every release of the target; or an ORT_DISABLE_ALL session."""
    forms: list[str] = []
    seen = {key}
    variants = [(_family_variant(key, None), "per tensor")]
    variants.append((_family_variant(key, "UINT8"), "as uint8 per tensor"))
    variants += _padding_variants(key)
    for form, label in variants:
        if form not in seen and measured_right(target, form):
            forms.append(label)
        seen.add(form)
    if target.runtime != "ort":
        moved = _move_padding(target, key)
        if not forms:
            return (
                moved.removeprefix("; or ")
                or "no measured form of this group runs right there: keep it in float"
            )
        return (
            f"quantize this activation {' or '.join(forms)} (measured to run right there)" + moved
        )
    session = "create the session with graph_optimization_level=ORT_DISABLE_ALL"
    if not forms:
        return session
    return (
        f"quantize this activation {' or '.join(forms)} (measured to match ORT_DISABLE_ALL "
        f"in these releases); or {session}"
    )
