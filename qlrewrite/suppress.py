"""Accepting findings on one node: ``per-node-ignores`` and a node's ``qlrewrite:ignore``.

Two sources, both keyed by something that survives a re-export better than a position:

- ``per-node-ignores`` in the configuration: a node name or the name of its first output
  (or a glob of either) -> rule codes or prefixes;
- a ``qlrewrite:ignore`` entry in a Q/DQ node's ``metadata_props`` (read only: qlrewrite
  never writes it): codes or prefixes, comma or space separated; empty means every rule.

Suppressed findings leave ``Report.findings`` for ``Report.suppressed`` (counted in the
summary). A suppression that accepts nothing on a node it names is rule QL901, as ruff's
RUF100; a ``per-node-ignores`` key that names no node of any checked model is reported
by :func:`unmatched_keys` once per configuration.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

import onnx_ir as ir

from qlrewrite.errors import InputError
from qlrewrite.findings import WARNING, Finding, Report
from qlrewrite.qdq import QuantizedSite, iter_sites, site_view

__all__ = ["IGNORE_KEY", "STALE_RULE", "apply_suppressions", "unused_key_finding"]

IGNORE_KEY = "qlrewrite:ignore"
STALE_RULE = "QL901"
_SPLIT = re.compile(r"[\s,]+")


@dataclasses.dataclass
class _Entry:
    """One suppression: where it was written, the prefixes it accepts, what it applies to."""

    source: str  # for messages: "per-node-ignores 'key'" or "qlrewrite:ignore"
    prefixes: list[str]
    key: str | None = None  # per-node-ignores key
    node: ir.Node | None = None  # qlrewrite:ignore: the node holding it
    used: set[str] = dataclasses.field(default_factory=set)  # prefixes that accepted one


def _parse(codes: Iterable[str]) -> tuple[list[str], list[str]]:
    """Prefixes ("" for ALL) as :func:`~qlrewrite.rules.selection.parse_codes` reads them
    (spaces separate too), and the entries that match no rule code."""
    from qlrewrite.rules.selection import parse_codes

    prefixes, unknown = [], []
    for entry in codes:
        for raw in _SPLIT.split(entry.strip()):
            try:
                prefixes += parse_codes([raw], IGNORE_KEY)
            except InputError:
                unknown.append(raw)
    return prefixes, unknown


def _matches_key(finding: Finding, key: str) -> bool:
    names = [n for n in (finding.node, finding.output) if n]
    return any(fnmatch.fnmatchcase(name, key) for name in names)


def apply_suppressions(
    report: Report,
    model: ir.Model,
    per_node_ignores: Mapping[str, Sequence[str]],
    enabled: Collection[str],
) -> Report:
    """``report`` with the findings a suppression accepts moved to ``.suppressed``.

    ``.matched_suppressions`` gets the ``per_node_ignores`` keys that named a node.
    ``enabled``: the rule codes checked; a suppression is judged stale (QL901, when
    enabled) only for codes of enabled rules, on a node it names.
    """
    sites = {(str(s.ref), s.node.name or "", _first_output(s.node)): s for s in iter_sites(model)}
    entries: list[_Entry] = []
    for key, codes in per_node_ignores.items():
        entries.append(_Entry(f"per-node-ignores '{key}'", _parse(codes)[0], key=key))
    stale: list[Finding] = []
    by_node: dict[int, _Entry] = {}
    for site in sites.values():
        value = site.node.metadata_props.get(IGNORE_KEY)
        if value is None:
            continue
        prefixes, unknown = _parse([value])
        if not value.strip():
            prefixes = [""]
        entry = _Entry(IGNORE_KEY, prefixes, node=site.node)
        entries.append(entry)
        by_node[id(site.node)] = entry
        stale.extend(
            _finding(model, site, f"{IGNORE_KEY} names unknown rule code '{u}'") for u in unknown
        )
    if not entries:
        return report
    kept, suppressed = [], list(report.suppressed)
    matched_keys: set[str] = set()
    named: dict[int, list[_Entry]] = {}  # id(node) -> the per-node entries naming it
    for site in sites.values():
        probe = Finding("", WARNING, "", node=site.node.name or "", output=_first_output(site.node))
        for entry in entries:
            if entry.key is not None and _matches_key(probe, entry.key):
                matched_keys.add(entry.key)
                named.setdefault(id(site.node), []).append(entry)
    for finding in report.findings:
        site = sites.get((finding.graph, finding.node, finding.output))
        candidates = list(named.get(id(site.node), [])) if site is not None else []
        if site is not None and id(site.node) in by_node:
            candidates.append(by_node[id(site.node)])
        accepted = False
        for entry in candidates:
            for prefix in entry.prefixes:
                if finding.rule.startswith(prefix):
                    entry.used.add(prefix)
                    accepted = True
        (suppressed if accepted and finding.rule != STALE_RULE else kept).append(finding)
    if STALE_RULE in enabled:
        for site in sites.values():
            own = by_node.get(id(site.node))
            for entry in [*named.get(id(site.node), []), *([own] if own else [])]:
                stale.extend(
                    _finding(
                        model, site, f"{entry.source}: {prefix or 'ALL'} suppresses nothing here"
                    )
                    for prefix in entry.prefixes
                    if prefix not in entry.used and any(c.startswith(prefix) for c in enabled)
                )
    else:
        stale = []
    return dataclasses.replace(
        report,
        findings=kept + stale,
        suppressed=suppressed,
        matched_suppressions=frozenset(matched_keys),
    )


def _finding(model: ir.Model, site: QuantizedSite, message: str) -> Finding:
    return site_view(model, site).finding(
        STALE_RULE, WARNING, message, "remove the suppression (or the codes that no longer match)"
    )


def unused_key_finding(key: str, codes: Sequence[str], config: str) -> Finding:
    """QL901 for a ``per-node-ignores`` key that named no node of any model checked."""
    return Finding(
        rule=STALE_RULE,
        severity=WARNING,
        message=f"per-node-ignores '{key}' = {list(codes)} names no Q/DQ node of the models "
        f"checked with {config}",
        hint="remove the entry, or rename it after the node (or its output) it was for",
        graph="",
    )


def _first_output(node: ir.Node) -> str:
    return (node.outputs[0].name or "") if node.outputs else ""
