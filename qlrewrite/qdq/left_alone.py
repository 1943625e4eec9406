"""Quantized nodes qlrewrite recognises but neither checks nor rewrites, named in one place
for ``check``, ``info`` and every rewrite's summary ("3 quantized node(s) of kinds not
checked: com.microsoft QOrderedMatMul x3").

The kinds and why they are left alone are the table
:data:`qlrewrite.opsets.QUANTIZED_LEFT_ALONE` (site kind
:data:`qlrewrite.qdq.sites.LEFT_ALONE`); this module only counts and words them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq.kinds import LEFT_ALONE, QOPERATOR, iter_sites
from qlrewrite.qdq.sites import QuantizedSite
from qlrewrite.toolkit import iter_graphs, normalize_domain

__all__ = [
    "UncheckedGroup",
    "describe_unchecked",
    "group_sites",
    "left_as_they_are",
    "not_folded",
    "unchecked_groups",
]


@dataclasses.dataclass(frozen=True)
class UncheckedGroup:
    """The nodes of one quantized (domain, op) qlrewrite leaves alone, and why."""

    domain: str
    op_type: str
    nodes: int
    reason: str

    def to_json(self) -> dict[str, object]:
        """``{"domain", "op_type", "nodes", "reason"}``."""
        return dataclasses.asdict(self)


def unchecked_groups(model: ir.Model) -> list[UncheckedGroup]:
    """The quantized nodes of ``model`` (every graph and function) of kinds qlrewrite
    does not check or rewrite, per (domain, op), in the order first met."""
    return group_sites(iter_sites(model, (LEFT_ALONE,)))


def group_sites(sites: Iterable[QuantizedSite]) -> list[UncheckedGroup]:
    """``sites`` of kind :data:`~qlrewrite.qdq.sites.LEFT_ALONE` per (domain, op) (a walk
    that found them already, as ``check``'s, passes them here)."""
    counts: dict[tuple[str, str], int] = {}
    for site in sites:
        key = (site.domain, site.node.op_type)
        counts[key] = counts.get(key, 0) + 1
    return [
        UncheckedGroup(domain, op, count, opsets.QUANTIZED_LEFT_ALONE[(domain, op)])
        for (domain, op), count in counts.items()
    ]


def describe_unchecked(groups: list[UncheckedGroup], what: str = "checked") -> str:
    """``3 quantized node(s) of kinds not checked: com.microsoft QOrderedMatMul x3`` (with
    ``what`` = "rewritten" for the rewrites)."""
    total = sum(g.nodes for g in groups)
    kinds = ", ".join(f"{g.domain} {g.op_type} x{g.nodes}" for g in groups)
    return f"{total} quantized node(s) of kinds not {what}: {kinds}"


def not_folded(model: ir.Model) -> str | None:
    """What ``fold`` does not look at in ``model``: its QOperator / dynamic nodes, whose
    quantized weights are inputs of integer kernels (None when it has none). Counted, not
    read: no operator version is looked up."""
    count = sum(
        1
        for scope in iter_graphs(model)
        for node in scope.graph
        if (normalize_domain(node.domain), node.op_type) in QOPERATOR.ops
    )
    if not count:
        return None
    return (
        f"{count} QOperator / dynamic node(s) not folded: their quantized weights are inputs "
        "of integer kernels (`qlrewrite convert --to onnx` rewrites them as Q/DQ, which fold "
        "then folds)"
    )


def left_as_they_are(
    unchecked: list[UncheckedGroup], model: ir.Model, *, folding: bool = False
) -> list[str]:
    """Warnings naming what a rewrite leaves as it was: the quantized nodes of kinds
    qlrewrite neither checks nor rewrites (``unchecked``: the input check's groups), and
    when ``folding`` the QOperator nodes (:func:`not_folded`)."""
    notes = []
    if unchecked:
        notes.append(f"{describe_unchecked(unchecked, 'checked or rewritten')}; left as they are")
    if folding and (folds_not := not_folded(model)) is not None:
        notes.append(folds_not)
    return notes
