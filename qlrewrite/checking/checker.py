"""`check` as a library: every rule of :mod:`qlrewrite.rules` on every Q/DQ node.

Nodes are found in the main graph, every nested subgraph and every model-local function
(:func:`qlrewrite.qdq.node_views`); a function's nodes are checked once per call site.
Types and shapes come from the model, then from ONNX shape inference on a weight-free
copy; values are read only for small constant scales and zero points. Nothing is
modified.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import onnx
import onnx_ir as ir

from qlrewrite.checking.suppress import STALE_RULE, apply_suppressions, unused_entry_findings
from qlrewrite.errors import InputError
from qlrewrite.findings import Finding, Report
from qlrewrite.io import model_io
from qlrewrite.io.source import source_of
from qlrewrite.io.weightless import weightless_from_source
from qlrewrite.qdq import NodeView, node_views
from qlrewrite.qdq.custom_ops import custom_quant_groups
from qlrewrite.qdq.inference import Inference
from qlrewrite.qdq.kinds import LEFT_ALONE
from qlrewrite.qdq.left_alone import group_sites
from qlrewrite.qdq.lowered import has_lowered_dequantize
from qlrewrite.qdq.sites import QuantizedSite
from qlrewrite.rules import CHECKS, RULES
from qlrewrite.rules.model.hygiene import NO_QUANTIZED_NODE
from qlrewrite.rules.registry import (
    CHECKED_KINDS,
    ModelContext,
    RuleCheck,
    TargetModel,
    TargetNode,
)
from qlrewrite.rules.selection import filter_report, select_rules
from qlrewrite.toolkit import MAIN

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

__all__ = ["check", "check_model", "check_path", "finish_report"]


def check(
    model_or_path: ir.Model | onnx.ModelProto | str | os.PathLike,
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
    targets: Iterable[str] = (),
) -> Report:
    """Check a model (``ir.Model``, ``onnx.ModelProto`` or a path): the findings of the CLI.

    ``select`` / ``ignore`` take rule codes or code prefixes (``"QL4"``), as ``qlrewrite
    check --select/--ignore``; ``targets`` the runtimes deployed to, as ``--target``
    (``"ort==1.16"``, ``"openvino"``: see :mod:`qlrewrite.targets`). Findings accepted by
    ``per_node_ignores`` (node or output name -> codes) or by a node's ``qlrewrite:ignore``
    metadata move to ``.suppressed`` (see :mod:`qlrewrite.checking.suppress`); an entry of
    ``per_node_ignores`` that names no node or suppresses nothing is one QL901 finding. A
    path that cannot be read gives a Report with ``load_error``; a ``ModelProto`` is
    checked as if its file were in the current folder.
    """
    codes = select_rules(select, ignore)
    runtimes = _parse_targets(targets)
    if isinstance(model_or_path, ir.Model):
        model = model_or_path
        source = source_of(model)
        path = str(source.path) if source is not None and source.path is not None else None
        report = check_model(model, path=path, targets=runtimes)
    elif isinstance(model_or_path, onnx.ModelProto):
        try:
            model = model_io.from_proto(model_or_path)
        except InputError as exc:
            return Report(load_error=str(exc).removeprefix("model: "))
        report = check_model(
            model, weightless=weightless_from_source(model_or_path), targets=runtimes
        )
    else:
        report = check_path(
            model_or_path, codes=codes, per_node_ignores=per_node_ignores, targets=runtimes
        )
        return _judge_entries(report, codes, per_node_ignores)
    report = finish_report(report, model, codes, per_node_ignores)
    return _judge_entries(report, codes, per_node_ignores)


def _judge_entries(
    report: Report, codes: Collection[str], per_node_ignores: Mapping[str, Sequence[str]] | None
) -> Report:
    """``report`` with QL901 for the ``per_node_ignores`` entries it left unused: one model
    checked is the whole run."""
    if not per_node_ignores or report.load_error or STALE_RULE not in codes:
        return report
    stale = unused_entry_findings(per_node_ignores, [report])
    return dataclasses.replace(report, findings=[*report.findings, *stale]) if stale else report


def _parse_targets(specs: Iterable[str]) -> tuple[Target, ...]:
    """The targets of ``specs``; :mod:`qlrewrite.targets` is imported only when some are
    given (start-up stays as without it)."""
    specs = tuple(specs)
    if not specs:
        return ()
    from qlrewrite.targets.spec import parse_targets

    return parse_targets(specs)


def finish_report(
    report: Report,
    model: ir.Model,
    codes: Collection[str],
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
) -> Report:
    """``report`` of ``model`` with only the rules in ``codes``, then suppressions applied."""
    return apply_suppressions(filter_report(report, codes), model, per_node_ignores or {}, codes)


def check_path(
    path: str | os.PathLike,
    *,
    codes: Collection[str] | None = None,
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
    targets: Sequence[Target] = (),
    data: bytes | None = None,
) -> Report:
    """Load and check one model file (``data``: its bytes, read from stdin, ``path`` its
    label); an unreadable file gives a Report with ``load_error``.

    Missing or corrupt tensor data is reported as findings (QL6xx), not as an error. The
    error is one line without the path (the Report has it). With ``codes`` (the enabled
    rules) the report is finished as :func:`finish_report` does.
    """
    try:
        if data is not None:
            model = model_io.load_bytes(data, str(path))
        else:
            model = model_io.load(path, check_data=False)
    except InputError as exc:
        return Report(path=str(path), load_error=str(exc).removeprefix(f"{path}: "))
    source = source_of(model)
    weightless = weightless_from_source(source.proto) if source is not None else None
    report = check_model(model, path=str(path), weightless=weightless, targets=targets)
    if codes is None:
        return report
    return finish_report(report, model, codes, per_node_ignores)


def check_model(
    model: ir.Model,
    *,
    path: str | None = None,
    weightless: onnx.ModelProto | None = None,
    inference: Inference | None = None,
    targets: Sequence[Target] = (),
    unchanged: Collection[str] = (),
) -> Report:
    """Every finding of every rule on ``model`` (which is not modified); the target rules
    once per target of ``targets``.

    ``weightless``: a weight-free proto of ``model`` as it is now (from
    :func:`~qlrewrite.io.weightless.weightless_proto` or, for a model just loaded,
    :func:`~qlrewrite.io.weightless.weightless_from_source`), for shape inference; without
    it the model is serialized again if inference is needed. ``inference``: the
    inference of ``model`` as it is now, to use instead (a rewrite's, made once).
    ``unchanged``: first output names of main-graph nodes whose node rules are not run
    again (a rewrite's output check: nodes judged on input and left as they were, see
    :mod:`qlrewrite.qdq.untouched`).
    """
    report = Report(path=path, custom_quant=custom_quant_groups(model))
    model_ctx = ModelContext(model, path)
    for rule_check in CHECKS.values():
        if rule_check.scope == "model":
            report.findings.extend(rule_check.func(model_ctx))
    checks_of = _node_checks()
    seen: set[tuple[str, str, int, str]] = set()
    left_alone = []  # found by the same walk: named, not checked
    every_view: list[NodeView] = []  # kept for the target rules
    kinds = (*CHECKED_KINDS, LEFT_ALONE)
    views_of = node_views(model, weightless=weightless, inference=inference, kinds=kinds)
    for site, views in views_of:
        if site.kind is LEFT_ALONE:
            left_alone.append(site)
            continue
        report.nodes_checked += 1
        if targets:
            every_view.extend(views)
        if _left_as_checked(site, unchanged):
            continue
        for view in views:
            checks = checks_of[id(view.site.kind), view.row is not None]
            report.findings.extend(_node_findings(view, checks, seen))
    report.unchecked = group_sites(left_alone)
    for target in targets:
        report.findings.extend(_target_findings(model_ctx, target, every_view))
    report.findings[:] = _without_superseded(report.findings)
    report.findings.extend(_nothing_quantized(report, left_alone, model))
    return report


def _without_superseded(findings: list[Finding]) -> list[Finding]:
    """``findings`` less the node findings a target rule's finding on the same node replaces
    (:attr:`RuleCheck.supersedes`)."""
    replaced = {
        (code, f.graph, f.node, f.output)
        for f in findings
        if (unit := CHECKS.get(f.rule)) is not None
        for code in unit.supersedes
    }
    if not replaced:
        return findings
    return [f for f in findings if (f.rule, f.graph, f.node, f.output) not in replaced]


def _nothing_quantized(
    report: Report, left_alone: Sequence[object], model: ir.Model
) -> list[Finding]:
    """QL607 when no quantized node of any kind was found in any graph or function (the
    float model, likely): none checked, none left alone, no other producer's operator,
    no dequantized constant a downgrade lowered (:mod:`qlrewrite.qdq.lowered`)."""
    if report.nodes_checked or left_alone or report.custom_quant:
        return []
    if has_lowered_dequantize(model):
        return []
    rule = RULES[NO_QUANTIZED_NODE]
    message = "no quantized node: is this the float model?"
    hint = "`qlrewrite rules QL607` says what was looked for"
    return [Finding(rule=rule.code, severity=rule.severity, message=message, hint=hint)]


def _node_checks() -> dict[tuple[int, bool], list[RuleCheck]]:
    """The node rules that run on a view (:meth:`RuleCheck.runs_on`), decided once per
    checked kind (by identity) and whether a version is in force, not per node."""
    node_checks = [c for c in CHECKS.values() if c.scope == "node"]
    return {
        (id(kind), versioned): [c for c in node_checks if c.runs_on(kind, versioned)]
        for kind in CHECKED_KINDS
        for versioned in (False, True)
    }


def _left_as_checked(site: QuantizedSite, unchanged: Collection[str]) -> bool:
    """A main-graph node named in ``unchanged``: its node rules are not run again."""
    return bool(unchanged) and site.ref == MAIN and site.node.outputs[0].name in unchanged


def _target_findings(
    model_ctx: ModelContext, target: Target, views: list[NodeView]
) -> Iterator[Finding]:
    """The findings of the target rules for one target: the model's, then each node's."""
    for rule_check in CHECKS.values():
        if rule_check.scope == "target-model":
            yield from rule_check.func(TargetModel(model_ctx, target))
    node_checks = [c for c in CHECKS.values() if c.scope == "target-node"]
    seen: set[tuple[str, str, int, str]] = set()
    for view in views:
        checks = [c for c in node_checks if c.runs_on(view.site.kind, view.row is not None)]
        for rule_check in checks:
            for finding in rule_check.func(TargetNode(view, target)):
                key = (finding.rule, finding.graph, id(view.node), finding.message)
                if key not in seen:
                    seen.add(key)
                    yield finding


def _node_findings(
    view: NodeView, checks: list[RuleCheck], seen: set[tuple[str, str, int, str]]
) -> Iterator[Finding]:
    """The findings of ``checks`` on one view of a node, each once per node (a function's
    node seen from several call sites says the same thing once)."""
    for rule_check in checks:
        for finding in rule_check.func(view):
            message = finding.message.replace(view.call_site_note, "", 1)
            key = (finding.rule, finding.graph, id(view.node), message)
            if key not in seen:
                seen.add(key)
                yield finding
