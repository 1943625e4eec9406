"""The fixes of ``qlrewrite check --fix``: mechanical repairs of findings, one per rule.

A rule declares in the catalogue whether it has a fix (``fix="safe"``: ONNX Runtime's
outputs stay bit-identical, proven with ``--verify`` in the tests; ``fix="unsafe"``: only
with ``--unsafe-fixes``); the repair is here, in :data:`FIXES`, under the same code. A
fix finds its findings by running the rule on each node, so it repairs exactly what the
check reports; ``wanted`` narrows that to the findings reported (not suppressed).

The opset-12 per-axis DequantizeLinear that ONNX Runtime's quantizer writes (QL201
``axis`` / QL402) is repaired by the upgrade to opset 13 (:func:`fix_passes` puts an
:class:`~qlrewrite.passes.upgrade.UpgradePass` first); that changes every node's op
version, so it is unsafe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import SAFE, UNSAFE, Finding, FixKind
from qlrewrite.passes.ir_version import needed_ir_version
from qlrewrite.passes.results import FixResult, RepairsFindings
from qlrewrite.qdq import MS_DOMAIN, NodeView, QuantizedSite, is_constant, node_views

__all__ = ["FIXES", "Fix", "FixPass", "finding_fix", "fix_kind", "fix_passes", "fixable"]

#: The opset that gives Q/DQ per-axis quantization (and the ``axis`` attribute).
PER_AXIS_OPSET = 13

Key = tuple[str, str, str, str]  # rule, graph, node name, first output name


def finding_key(finding: Finding) -> Key:
    """What identifies a finding's node across a re-check of the same model."""
    return (finding.rule, finding.graph, finding.node, finding.output)


@dataclasses.dataclass(frozen=True)
class Fix:
    """The repair of one rule's findings on one node: ``apply`` returns what it changed (a
    line for ``--diff``) or None when it does not apply; ``applies`` says from the finding
    alone whether it can (for the counts of fixable findings)."""

    apply: Callable[[ir.Model, QuantizedSite, NodeView, _Fixer], str | None]
    applies: Callable[[Finding], bool] = lambda _finding: True


def _ql406_scalar(model: ir.Model, site: QuantizedSite, ctx: NodeView, fixer: _Fixer) -> str | None:
    """The [1] one of scale / zero point becomes a scalar (ONNX Runtime: per-tensor both)."""
    node = site.node
    for index in (1, 2):
        if index >= len(node.inputs):
            continue
        value = node.inputs[index]
        view = ctx.inputs[index] if index < len(ctx.inputs) else None
        if value is None or view is None or view.shape != (1,):
            continue
        if not (is_constant(value) and value.const_value is not None and value.producer() is None):
            return None  # a graph input or a Constant node's output: not rewritten here
        scalar = fixer.scalar_of(value, site.graph)
        if scalar is None:
            return None
        node.replace_input_with(index, scalar)
        role = "scale" if index == 1 else "zero point"
        dtype = value.const_value.dtype.name
        if scalar is value:
            return f"{role} '{value.name}' {dtype} [1] -> {dtype} [] (scalar)"
        return f"{role} '{value.name}' {dtype} [1] -> new scalar '{scalar.name}' (shared tensor)"
    return None


def _ql411_axis(model: ir.Model, site: QuantizedSite, ctx: NodeView, fixer: _Fixer) -> str | None:
    """com.microsoft Q/DQ with a 1-D scale and no axis: ONNX Runtime applies axis 1."""
    if site.domain != MS_DOMAIN or "axis" in site.node.attributes:
        return None
    if ctx.x is not None and ctx.x.rank is not None and ctx.x.rank < 2:
        return None  # axis 1 does not exist: nothing ONNX Runtime computes to keep
    site.node.attributes["axis"] = ir.AttrInt64("axis", 1)
    return "axis made explicit: axis=1 (what ONNX Runtime applies to a 1-D scale)"


def _import_ms(model: ir.Model, site: QuantizedSite, ctx: NodeView, fixer: _Fixer) -> str | None:
    """A com.microsoft node whose graph does not import the domain: import version 1 in the
    model (main graph and its subgraphs, QL103) or in the function holding it (QL106)."""
    if site.domain != MS_DOMAIN:
        return None  # which ai.onnx version was meant cannot be known
    root = site.ref.root.function
    owner = model if root is None else _function(model, root)
    if owner is None or MS_DOMAIN in owner.opset_imports:
        return None  # already added for an earlier node
    owner.opset_imports[MS_DOMAIN] = 1
    where = "model" if root is None else "function"
    return f"{where} opset import added: com.microsoft 1"


def _function(model: ir.Model, ref: tuple[str, str]) -> ir.Function | None:
    return next((f for f in model.functions.values() if (f.domain, f.name) == ref), None)


def _upgraded(model: ir.Model, site: QuantizedSite, ctx: NodeView, fixer: _Fixer) -> str | None:
    """Repaired by the UpgradePass that :func:`fix_passes` runs first (nothing to do here)."""
    return None


#: code -> its fix; the catalogue's ``fix`` says which are safe (a test keeps both in step).
def _below_per_axis_opset(finding: Finding) -> bool:
    """An ai.onnx node below opset 13 whose rule says the upgrade to 13 repairs it."""
    return (
        finding.domain == ""
        and finding.opset is not None
        and finding.opset < PER_AXIS_OPSET
        and f"upgrade --opset {PER_AXIS_OPSET}" in finding.hint
    )


FIXES: dict[str, Fix] = {
    "QL103": Fix(_import_ms),
    "QL106": Fix(_import_ms, lambda f: f.domain == MS_DOMAIN),
    "QL201": Fix(_upgraded, _below_per_axis_opset),
    "QL402": Fix(_upgraded, _below_per_axis_opset),
    "QL406": Fix(_ql406_scalar),
    "QL411": Fix(_ql411_axis),
    "QL601": Fix(_upgraded),  # once per model, in FixPass.call
}
#: Repaired by upgrading to opset 13 (the ``axis`` DequantizeLinear got at opset 13).
UPGRADE_FIXES = ("QL201", "QL402")


def fix_kind(code: str) -> FixKind | None:
    """What the catalogue says of ``code``'s fix."""
    from qlrewrite.rules import RULES

    rule = RULES.get(code)
    return rule.fix if rule is not None else None


def finding_fix(finding: Finding) -> FixKind | None:
    """The fix ``check --fix`` has for this finding ("safe" / "unsafe"), or None."""
    kind = fix_kind(finding.rule)
    return kind if kind is not None and FIXES[finding.rule].applies(finding) else None


def fixable(findings: Iterable[Finding], *, unsafe: bool = False) -> list[Finding]:
    """The findings ``--fix`` (with ``unsafe``: ``--fix --unsafe-fixes``) would repair."""
    allowed = (SAFE, UNSAFE) if unsafe else (SAFE,)
    return [f for f in findings if fix_kind(f.rule) in allowed and FIXES[f.rule].applies(f)]


class _Fixer:
    """What fixes share within one model: the scalar copies of shared [1] tensors."""

    def __init__(self) -> None:
        self._scalars: dict[int, ir.Value | None] = {}

    def scalar_of(self, value: ir.Value, graph: ir.Graph | ir.Function) -> ir.Value | None:
        """``value`` as a scalar: reshaped in place when only Q/DQ scale / zero point slots
        read it, else one new scalar initializer beside it (made once)."""
        if id(value) in self._scalars:
            return self._scalars[id(value)]
        scalar = self._make_scalar(value, graph)
        self._scalars[id(value)] = scalar
        return scalar

    @staticmethod
    def _make_scalar(value: ir.Value, graph: ir.Graph | ir.Function) -> ir.Value | None:
        if not isinstance(graph, ir.Graph) or value.name not in graph.initializers:
            return None  # an outer-scope initializer: left alone
        tensor = value.const_value
        array = np.asarray(tensor.numpy()).reshape(())
        # Reshaped in place only when every reader is a Q/DQ scale / zero point slot whose
        # counterpart is a scalar too: no other node sees the shape change, and no Q/DQ
        # gets a new scalar-vs-[1] pair (a Q sharing the [1] scale with a [1] zero point).
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
        name = _unique_name(graph, f"{value.name}_scalar")
        scalar = ir.Value(name=name, shape=ir.Shape([]), type=value.type)
        scalar.const_value = ir.Tensor(array, name=name)
        graph.register_initializer(scalar)
        return scalar


def _is_scalar_or_absent(node: ir.Node, index: int) -> bool:
    """Input ``index`` of ``node`` is omitted or a known scalar."""
    if index >= len(node.inputs) or node.inputs[index] is None:
        return True
    value = node.inputs[index]
    shape = value.shape
    if shape is None and value.const_value is not None:
        shape = value.const_value.shape
    return shape is not None and len(shape) == 0


def _unique_name(graph: ir.Graph, base: str) -> str:
    taken = set(graph.initializers) | {v.name for v in graph.inputs}
    taken |= {v.name for node in graph for v in node.outputs}
    name, index = base, 1
    while name in taken:
        name, index = f"{base}_{index}", index + 1
    return name


class FixPass(ir.passes.InPlacePass, RepairsFindings):
    """Apply the fixes of ``codes`` to the findings ``wanted`` accepts (default: all).

    The :class:`~qlrewrite.passes.results.FixResult` lists what changed, one
    ``(code, where, what)`` per repair, for ``--diff``, and counts them per code.
    """

    def __init__(
        self, codes: Collection[str], wanted: Callable[[Finding], bool] | None = None
    ) -> None:
        super().__init__()
        self.codes = frozenset(codes)
        self.repairs_rules = tuple(sorted(self.codes))
        self.wanted = wanted or (lambda _finding: True)

    def call(self, model: ir.Model) -> FixResult:
        from qlrewrite.rules import CHECKS

        result = FixResult(model, False)

        node_codes = [c for c in sorted(self.codes) if c in CHECKS and c not in UPGRADE_FIXES]
        node_codes = [c for c in node_codes if c != "QL601"]
        planned: list[tuple[QuantizedSite, NodeView, Finding]] = []
        kinds = tuple({id(k): k for c in node_codes for k in CHECKS[c].kinds}.values())
        for site, contexts in node_views(model, kinds=kinds):
            for code in node_codes:
                check = CHECKS[code]
                for ctx in contexts[:1]:  # a function node: its first call site
                    if site.kind not in check.kinds or (check.needs_version and ctx.row is None):
                        continue
                    planned.extend((site, ctx, f) for f in check.func(ctx) if self.wanted(f))
        fixer = _Fixer()
        done: set[tuple[int, str]] = set()
        for site, ctx, finding in planned:
            if (id(site.node), finding.rule) in done:
                continue
            change = FIXES[finding.rule].apply(model, site, ctx, fixer)
            if change is not None:
                done.add((id(site.node), finding.rule))
                where = f"{site.ref}/{site.node.name or '<' + site.node.op_type + '>'}"
                _record(result, finding.rule, where, change)
        if "QL601" in self.codes:
            before = model.ir_version
            after = needed_ir_version(model)
            if after > before:
                model.ir_version = after
                _record(result, "QL601", "model", f"ir_version {before} -> {after}")
        result.modified = bool(result.changes)
        return result


def _record(result: FixResult, code: str, where: str, what: str) -> None:
    result.changes.append((code, where, what))
    result.summary[code] = result.summary.get(code, 0) + 1


def fix_passes(findings: Sequence[Finding], *, unsafe: bool = False) -> list[ir.passes.PassBase]:
    """The passes that repair ``findings`` (those :func:`fixable` allows); [] if none.

    Findings of :data:`UPGRADE_FIXES` (``unsafe`` only, below opset 13) put an upgrade to
    opset 13 first.
    """
    from qlrewrite.passes.upgrade import UpgradePass

    chosen = fixable(findings, unsafe=unsafe)
    if not chosen:
        return []
    keys = {finding_key(f) for f in chosen}
    codes = {f.rule for f in chosen}
    passes: list[ir.passes.PassBase] = []
    if codes & set(UPGRADE_FIXES):
        passes.append(UpgradePass(PER_AXIS_OPSET))
    passes.append(FixPass(codes, lambda f: finding_key(f) in keys))
    return passes
