"""The fix machinery of ``qlrewrite check --fix``: apply the rules' own fixes.

Each rule declares its repair beside its check (:class:`~qlrewrite.rules.registry.Fix`
in the rule's module, e.g. QL406's in :mod:`qlrewrite.rules.qdq.shapes`); the registry
marks each finding the fix can repair (``Finding.fix``: "safe" or "unsafe"), deciding
from the finding's fields. This module sits above the rules: :func:`fix_passes` takes
the findings :func:`~qlrewrite.findings.fixable` allows, and :class:`FixPass` finds them
again by running each rule on each node, so it repairs exactly what the check reports;
``wanted`` narrows that to the findings reported (not suppressed).

A rule whose fix is an upgrade (QL201 ``axis`` / QL402 below opset 13: the opset-12
per-axis DequantizeLinear that ONNX Runtime's quantizer writes) gets the upgrade's passes
first: :func:`qlrewrite.passes.commands.fix_passes` composes them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import onnx_ir as ir

from qlrewrite.findings import Finding, fixable
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.results import FixResult, RepairsFindings
from qlrewrite.qdq import NodeView, QuantizedSite, node_views
from qlrewrite.rules import CHECKS
from qlrewrite.rules.registry import Fix, FixContext, RuleCheck
from qlrewrite.toolkit import FreshNames

__all__ = ["FIXES", "FixPass", "finding_key", "fixable"]

#: code -> the rule's fix, for every rule that has one (read from the registry).
FIXES: Mapping[str, Fix] = {code: c.fix for code, c in CHECKS.items() if c.fix is not None}

Key = tuple[str, str, str, str]  # rule, graph, node name, first output name


def finding_key(finding: Finding) -> Key:
    """What identifies a finding's node across a re-check of the same model."""
    return (finding.rule, finding.graph, finding.node, finding.output)


Planned = tuple[QuantizedSite, NodeView, Finding]


class FixPass(ContextPass, ir.passes.InPlacePass, RepairsFindings):
    """Apply the fixes of ``codes`` to the findings ``wanted`` accepts (default: all).

    The :class:`~qlrewrite.passes.results.FixResult` lists what changed, one
    ``(code, where, what)`` per repair, for ``--diff``, and counts them per code.
    """

    needs = frozenset({"inference"})  # the rules read it, as in the check
    repairs_rules: tuple[str, ...] = ()  # the codes asked for, set when made

    def __init__(
        self, codes: Collection[str], wanted: Callable[[Finding], bool] | None = None
    ) -> None:
        super().__init__()
        self.codes = frozenset(codes)
        self.repairs_rules = tuple(sorted(self.codes))
        self.wanted = wanted or (lambda _finding: True)

    def call(self, model: ir.Model) -> FixResult:
        result = FixResult(model, False)
        units = [CHECKS[c] for c in sorted(self.codes) if c in FIXES]
        node_units = [u for u in units if u.fix is not None and u.fix.node is not None]
        memos: dict[str, dict[Any, Any]] = {u.rule.code: {} for u in node_units}
        done: set[tuple[int, str]] = set()
        names = FreshNames(model)
        for site, view, finding in self._planned(model, node_units):
            if (id(site.node), finding.rule) in done:
                continue
            node_fix = FIXES[finding.rule].node
            context = FixContext(model, site, view, finding, memos[finding.rule], names)
            change = node_fix(context) if node_fix is not None else None
            if change is not None:
                done.add((id(site.node), finding.rule))
                where = f"{site.ref}/{site.node.name or '<' + site.node.op_type + '>'}"
                _record(result, finding.rule, where, change)
        for unit in units:
            model_fix = unit.fix.model if unit.fix is not None else None
            change = model_fix(model) if model_fix is not None else None
            if change is not None:
                _record(result, unit.rule.code, "model", change)
        result.modified = bool(result.changes)
        return result

    def _planned(self, model: ir.Model, units: Sequence[RuleCheck]) -> list[Planned]:
        """Every finding of ``units`` that a fix can repair and ``wanted`` accepts."""
        planned: list[Planned] = []
        if not units:
            return planned
        kinds = tuple({id(k): k for unit in units for k in unit.kinds}.values())
        inference = self.context(model).inference
        for site, views in node_views(model, inference=inference, kinds=kinds):
            for unit in units:
                for view in views[:1]:  # a function node: its first call site
                    if not unit.runs_on(site.kind, view.row is not None):
                        continue
                    planned.extend(
                        (site, view, f)
                        for f in unit.func(view)
                        if f.fix is not None and self.wanted(f)
                    )
        return planned


def _record(result: FixResult, code: str, where: str, what: str) -> None:
    result.changes.append((code, where, what))
    result.summary[code] = result.summary.get(code, 0) + 1
