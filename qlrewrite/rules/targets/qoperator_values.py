"""QL707: a QOperator node (QLinearConv, QLinearMatMul, com.microsoft QGemm and QLinear*) the
target runtime computes wrong, fails at run on, or refuses as its zero points are, though
it runs the node's form (QL703's one-node model): read from the tables' value-compared
QOperator rows (``tools/probe/qoperator_values.py``: the node fed from a float input and
compared with the ONNX reference evaluator on the same node written as Q/DQ)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QOPERATOR
from qlrewrite.qdq.view import QOperatorView
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, TargetNode, rule
from qlrewrite.rules.targets.ort_groups import named_releases
from qlrewrite.targets.forms import form_of, qoperator_values_key
from qlrewrite.targets.spec import Target
from qlrewrite.targets.tables import Table

__all__ = ["value_verdicts"]

#: OpenVINO's com.microsoft QLinearAdd / QLinearMul whose output range ends where the
#: result goes on are QL752's (measured there beyond the probe's one representative).
_QL752 = frozenset({"QLinearAdd", "QLinearMul"})
#: Refusals the model-level rules already say (QL701: IR version, QL702: opset).
_MODEL_LEVEL = ("ir", "opset")


def _verdict(table: Table, form: str | None, key: str) -> str | None:
    """What ``table``'s release did with the value row ``key`` when it runs ``form``
    (None: it computed it right, it was not measured, or QL703 says the refusal)."""
    if form is not None and table.refusal(form) is not None:
        return None
    refusal = table.refusal(key)
    if refusal is not None:
        if refusal.reason in _MODEL_LEVEL:
            return None
        stage = "when loaded" if refusal.stage == "load" else "at run"
        return f"fails {stage}: {_message(refusal.error)}"
    divergence = table.divergence(key)
    if divergence is None:
        return None
    if divergence.outcome == "fails at run":
        return f"fails at run: {_message(divergence.error)}"
    off = divergence.max_rel_diff
    size = f", {off:.0%} of the largest output off" if off is not None else ""
    return f"computes other values than {divergence.against}{size}"


def _message(error: str) -> str:
    """The runtime's message without ONNX Runtime's preamble naming the probe's node."""
    return re.sub(
        r"^Non-zero status code returned while running \w+ node\. Name:'[^']*' "
        r"Status Message: ",
        "",
        error,
    )


def value_verdicts(target: Target, view: QOperatorView) -> list[tuple[Table, str]]:
    """The releases of ``target`` whose value row of the node ``view`` records a wrong
    result (with what it did), oldest first; [] when none does or nothing was measured.
    Read by ``convert --to qoperator --target`` for the nodes it writes, too."""
    key = qoperator_values_key(view)
    if key is None:
        return []
    form = form_of(view)
    found = [(t, _verdict(t, form, key)) for t in target.tables]
    return [(t, v) for t, v in found if v is not None]


def _ways_out(target: Target, key: str) -> list[str]:
    """The zero points that, changed alone, make the same form one every release of
    ``target`` measured right (``weight zero``, ``output nonzero``)."""
    form, _, mine = key.partition(" zero_points=")
    own = mine.split(",")
    found = []
    for row in sorted({k for t in target.tables for k in t.forms if k.startswith(form + " ")}):
        other = row.partition(" zero_points=")[2].split(",")
        changed = [(a, b) for a, b in zip(own, other, strict=False) if a != b]
        if len(other) != len(own) or len(changed) != 1:
            continue
        if all(row in t.forms and _verdict(t, None, row) is None for t in target.tables):
            found.append(changed[0][1].replace(":", " "))
    return list(dict.fromkeys(found))


@rule(
    "QL707",
    "target-qoperator-values",
    ERROR,
    summary="The target runtime computes this QOperator node wrong, or fails on it, as its "
    "zero points are (measured against the ONNX reference).",
    explanation="""
    The probe (`tools/probe/qoperator_values.py`) feeds each QOperator operator `convert
    --to qoperator` writes (QLinearConv, QLinearMatMul, com.microsoft QGemm, QLinearAdd,
    QLinearMul, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool,
    QLinearLeakyRelu, QLinearSigmoid, QLinearSoftmax) from a float input through
    QuantizeLinear, for every pair of uint8 / int8 types, weights per tensor and per
    channel, and each class of zero points (0, one nonzero value, differing per channel;
    an output's at its type's lowest or highest value), and compares the runtime's output
    with the ONNX reference evaluator on the same node written as Q/DQ (`docs/targets.md`).
    This rule reports the releases that computed the node's form with its zero points more
    than 10% of the largest output off, or failed at run, where QL703's one-node model of
    the form ran: ONNX Runtime 1.15 to 1.26 fail at run on a QLinearConv whose per-channel
    weight zero points differ ("zero point of per-channel filter must be same"), no release
    has a kernel for an int8 activation with uint8 weights, and 1.15 to 1.28 compute an
    int8 QLinearSoftmax whose output saturates at 127 wrong; OpenVINO 2026.4.1 computes a
    uint8 QLinearAveragePool and QLinearLeakyRelu wrong, and a QLinearConcat whose output
    saturates (its QLinearAdd / QLinearMul saturation is QL752's). The hint names the zero
    points that, changed alone, every release measured right; `convert --to qoperator
    --target` leaves such a group as Q/DQ.
    """,
    example="""
    bad:  QLinearConv(w: int8 per channel, w_zero_point [1, -2, 5])   (--target ort==1.15)
    good: QLinearConv(w: int8 per channel, w_zero_point [0, 0, 0])
    """,
    versions="--target ort / openvino",
    scope="target-node",
    needs_version=False,
    kinds=(QOPERATOR,),
    examples=[
        Example(
            "qlinearconv-differing-weight-zero-points",
            ModelSpec(
                "qoperator", "QLinearConv", w_zero_point=ModelSpec("array", [1, -2, 5], DT.INT8)
            ),
            ModelSpec("qoperator", "QLinearConv"),
            targets=("ort==1.15",),
        ),
    ],
)
def target_qoperator_values(ctx: TargetNode[QOperatorView]) -> Iterator[Finding]:
    view = ctx.view
    if not ctx.target.tables:
        return
    if ctx.target.runtime == "openvino" and view.op_type in _QL752:
        return
    found = value_verdicts(ctx.target, view)
    if not found:
        return
    key = qoperator_values_key(view) or ""
    classes = key.partition(" zero_points=")[2].replace(":", " ").replace(",", ", ")
    who = named_releases(ctx.target, [t for t, _ in found])
    right = _ways_out(ctx.target, key)
    hint = (
        f"measured right with the zero point of {' or '.join(right)}"
        if right
        else "no zero points of this form measured right"
    )
    yield ctx.report(
        f"with these zero points ({classes}) {who} {found[-1][1]} (the probe's QOperator "
        "value rows)",
        f"{hint}; or keep the group as Q/DQ (`qlrewrite convert --to qoperator --target "
        f"{ctx.target.spec}` does)",
    )
