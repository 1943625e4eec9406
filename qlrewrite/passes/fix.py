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

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.findings import Finding, fixable
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.imports import ImportsResult
from qlrewrite.passes.results import RepairsFindings, RewritePassResult
from qlrewrite.qdq import NodeView, QuantizedSite, node_views
from qlrewrite.rules import CHECKS
from qlrewrite.rules.registry import Fix, FixContext, RuleCheck, TargetNode
from qlrewrite.toolkit import FreshNames, drop_unused_domain, iter_graphs, normalize_domain

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

__all__ = [
    "FIXES",
    "DropImportPass",
    "FixPass",
    "FixResult",
    "FixingPass",
    "finding_key",
    "fixable",
]


@dataclasses.dataclass
class FixResult(RewritePassResult):
    """:class:`~qlrewrite.passes.fix.FixPass`: repairs per rule code in ``summary``, and
    one ``changes`` entry per repair."""


#: code -> the rule's fix, for every rule that has one (read from the registry).
FIXES: Mapping[str, Fix] = {code: c.fix for code, c in CHECKS.items() if c.fix is not None}

Key = tuple[str, str, str, str]  # rule, graph, node name, first output name


def finding_key(finding: Finding) -> Key:
    """What identifies a finding's node across a re-check of the same model."""
    return (finding.rule, finding.graph, finding.node, finding.output)


Planned = tuple[QuantizedSite, NodeView, Finding]


class FixPass(ContextPass, ir.passes.InPlacePass, RepairsFindings):
    """Apply the fixes of ``codes`` to the findings ``wanted`` accepts (default: all).

    A "target-node" rule's node fix runs on the findings its check gives for ``targets``
    (the runtimes deployed to: none, no such fix runs), as the check found them.
    The :class:`~qlrewrite.passes.fix.FixResult` lists what changed, one
    ``(code, where, what)`` per repair, for ``--diff``, and counts them per code.
    """

    needs = frozenset({"inference"})  # the rules read it, as in the check
    repairs_rules: tuple[str, ...] = ()  # the codes asked for, set when made

    def __init__(
        self,
        codes: Collection[str],
        wanted: Callable[[Finding], bool] | None = None,
        targets: Sequence[Target] = (),
    ) -> None:
        super().__init__()
        self.codes = frozenset(codes)
        self.repairs_rules = tuple(sorted(self.codes))
        self.wanted = wanted or (lambda _finding: True)
        self.targets = tuple(targets)

    def call(self, model: ir.Model) -> FixResult:
        result = FixResult(model, False)
        units = [CHECKS[c] for c in sorted(self.codes) if c in FIXES]
        node_units = [u for u in units if u.fix is not None and u.fix.node is not None]
        memos: dict[str, dict[Any, Any]] = {u.rule.code: {} for u in node_units}
        done: set[tuple[int, str]] = set()
        names = FreshNames(model, nodes=True)
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
                        for f in self._findings(unit, view)
                        if f.fix is not None and self.wanted(f)
                    )
        return planned

    def _findings(self, unit: RuleCheck, view: NodeView) -> list[Finding]:
        """What ``unit`` finds on ``view``: a node rule's check, a "target-node" rule's
        for each of the targets (none: nothing)."""
        if unit.scope != "target-node":
            return list(unit.func(view))
        return [f for target in self.targets for f in unit.func(TargetNode(view, target))]


def _record(result: FixResult, code: str, where: str, what: str) -> None:
    result.changes.append((code, where, what))
    result.summary[code] = result.summary.get(code, 0) + 1


class FixingPass(ContextPass, ir.passes.PassBase, RepairsFindings):
    """A command's pass (``inner``: a downgrade, a retarget, a fold) run by ``check --fix``
    for the target findings of ``codes`` (:class:`~qlrewrite.rules.registry.Rewrite`):
    its result gets one ``changes`` line per code (``what``), so the fix flow sees what
    it repaired; a refusal of ``inner`` refuses the fix (nothing written)."""

    keeps_types = False
    repairs_rules: tuple[str, ...] = ()  # set when made

    def __init__(self, inner: ir.passes.PassBase, codes: Sequence[str], what: str) -> None:
        super().__init__()
        self.inner = inner
        self.repairs_rules = tuple(sorted(set(codes)))
        self.what = what

    @property
    def in_place(self) -> bool:
        return self.inner.in_place

    @property
    def changes_input(self) -> bool:
        return self.inner.changes_input

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        handed = self._handed
        if isinstance(self.inner, ContextPass) and handed is not None and handed.model is model:
            with self.inner.handed(handed):
                result = self.inner(model)
        else:
            result = self.inner(model)
        if isinstance(result, RewritePassResult) and result.modified:
            result.changes.extend((code, "model", self.what) for code in self.repairs_rules)
        return result


class DropImportPass(ir.passes.InPlacePass):
    """Drop the opset import of ``domain`` (not ai.onnx); Refusal naming the nodes that
    use it (the import cannot go while they are there)."""

    def __init__(self, domain: str) -> None:
        super().__init__()
        self.domain = domain

    def call(self, model: ir.Model) -> ImportsResult:
        users = [
            node.name or f"<{node.op_type}>"
            for scope in iter_graphs(model)
            for node in scope.graph
            if normalize_domain(node.domain) == normalize_domain(self.domain)
        ]
        if users:
            shown = ", ".join(users[:5]) + (f" (+{len(users) - 5} more)" if len(users) > 5 else "")
            raise Refusal(
                f"the {self.domain} import is used by {len(users)} node(s) ({shown}): it "
                "cannot be dropped; export the model at an opset the target loads; "
                "nothing written"
            )
        changed = drop_unused_domain(model, self.domain)
        return ImportsResult(model, changed, {"imports_dropped": int(changed)})
