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
from qlrewrite.findings import Finding, Report
from qlrewrite.qdq import QuantizedSite, iter_sites, site_view
from qlrewrite.rules import RULES
from qlrewrite.rules.selection import parse_codes

__all__ = [
    "IGNORE_KEY",
    "STALE_RULE",
    "apply_suppressions",
    "unused_entry_findings",
]

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
    prefixes, unknown = [], []
    for entry in codes:
        for raw in _SPLIT.split(entry.strip()):
            try:
                prefixes += parse_codes([raw], IGNORE_KEY)
            except InputError:
                unknown.append(raw)
    return prefixes, unknown


#: Codes read from one ``qlrewrite:ignore`` value; the rest is one finding, not work.
MAX_CODES = 64
#: Unknown codes reported one by one per node; the rest are counted in one finding.
MAX_UNKNOWN_REPORTED = 5

_Key = tuple[str, str, str, str, str]


def _matches_key(finding: Finding, key: str) -> bool:
    names = [n for n in (finding.node, finding.output) if n]
    return any(fnmatch.fnmatchcase(name, key) for name in names)


def _site_key(site: QuantizedSite) -> _Key:
    node = site.node
    return (str(site.ref), node.name or "", _first_output(node), node.op_type, node.domain)


def _finding_key(finding: Finding) -> _Key | None:
    """The node a finding is about, or None for a finding about the model or a tensor
    (those are never suppressed by a node's suppression)."""
    if not finding.op_type:
        return None
    return (finding.graph, finding.node, finding.output, finding.op_type, finding.domain)


def _read_ignore(model: ir.Model, site: QuantizedSite, value: str) -> tuple[_Entry, list[Finding]]:
    """The entry of a node's ``qlrewrite:ignore`` and its QL901 findings for unknown codes
    (bounded: at most :data:`MAX_CODES` read, :data:`MAX_UNKNOWN_REPORTED` named)."""
    raws = _SPLIT.split(value.strip(), maxsplit=MAX_CODES)
    rest = raws[MAX_CODES:]
    prefixes, unknown = _parse(raws[:MAX_CODES])
    if not value.strip():
        prefixes = [""]
    stale = [
        _finding(model, site, f"{IGNORE_KEY} names unknown rule code '{_short(u)}'")
        for u in unknown[:MAX_UNKNOWN_REPORTED]
    ]
    if len(unknown) > MAX_UNKNOWN_REPORTED:
        more = len(unknown) - MAX_UNKNOWN_REPORTED
        stale.append(_finding(model, site, f"{IGNORE_KEY} names {more} more unknown rule codes"))
    if rest:
        stale.append(
            _finding(
                model,
                site,
                f"{IGNORE_KEY} holds more than {MAX_CODES} codes; only the "
                f"first {MAX_CODES} are read",
            )
        )
    return _Entry(IGNORE_KEY, prefixes, node=site.node), stale


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def apply_suppressions(
    report: Report,
    model: ir.Model,
    per_node_ignores: Mapping[str, Sequence[str]],
    enabled: Collection[str],
) -> Report:
    """``report`` with the findings a suppression accepts moved to ``.suppressed``.

    A suppression accepts only findings about the node it names: findings about the model
    or a tensor are never accepted, and a node's ``qlrewrite:ignore`` accepts a finding
    only when no other Q/DQ node shares its graph, name, output and op (then the finding
    cannot be told apart and stays). ``enabled``: the rule codes checked; a suppression is
    judged stale (QL901, when enabled) only for codes of enabled rules. A node's
    ``qlrewrite:ignore`` is judged here; ``per_node_ignores`` entries are judged over the
    run (:func:`unused_entry_findings`) from what the report records:
    ``.matched_suppressions`` (the keys that named a node), ``.judged_suppressions`` and
    ``.used_suppressions`` (``(key, prefix)`` pairs judged here, and those that accepted a
    finding).
    """
    sites: dict[_Key, list[QuantizedSite]] = {}
    for site in iter_sites(model):
        sites.setdefault(_site_key(site), []).append(site)
    keyed = [
        _Entry(f"per-node-ignores '{key}'", _parse(codes)[0], key=key)
        for key, codes in per_node_ignores.items()
    ]
    stale: list[Finding] = []
    by_node: dict[int, _Entry] = {}
    for site in (s for group in sites.values() for s in group):
        value = site.node.metadata_props.get(IGNORE_KEY)
        if value is not None:
            by_node[id(site.node)], unknown = _read_ignore(model, site, value)
            stale += unknown
    if not keyed and not by_node:
        return report
    named, matched_keys = _named(sites, keyed)
    kept, suppressed = [], list(report.suppressed)
    for finding in report.findings:
        accepted = _accept(finding, _candidates(finding, sites, named, by_node))
        (suppressed if accepted and finding.rule != STALE_RULE else kept).append(finding)
    judging = STALE_RULE in enabled
    stale = stale + _stale(model, sites, by_node, enabled) if judging else []
    return dataclasses.replace(
        report,
        findings=kept + stale,
        suppressed=suppressed,
        matched_suppressions=frozenset(matched_keys),
        judged_suppressions=frozenset(
            (entry.key, prefix)
            for entry in keyed
            if judging and entry.key in matched_keys
            for prefix in entry.prefixes
            if any(c.startswith(prefix) for c in enabled)
        ),
        used_suppressions=frozenset((e.key, p) for e in keyed for p in e.used),
    )


def _named(
    sites: Mapping[_Key, list[QuantizedSite]], keyed: Sequence[_Entry]
) -> tuple[dict[int, list[_Entry]], set[str]]:
    """id(node) -> the per-node-ignores entries naming it, and the keys that named one."""
    named: dict[int, list[_Entry]] = {}
    matched: set[str] = set()
    for group in sites.values():
        for site in group:
            probe = Finding(
                "",
                RULES[STALE_RULE].severity,
                "",
                node=site.node.name or "",
                output=_first_output(site.node),
            )
            for entry in keyed:
                if entry.key is not None and _matches_key(probe, entry.key):
                    matched.add(entry.key)
                    named.setdefault(id(site.node), []).append(entry)
    return named, matched


def _candidates(
    finding: Finding,
    sites: Mapping[_Key, list[QuantizedSite]],
    named: Mapping[int, list[_Entry]],
    by_node: Mapping[int, _Entry],
) -> list[_Entry]:
    """The suppressions that may accept ``finding``: those of the one node it is about."""
    key = _finding_key(finding)
    group = sites.get(key, []) if key is not None else []
    if len(group) != 1:  # about no node, or about one of several nodes alike
        # per-node-ignores name nodes by name: every node alike is named alike
        return list(named.get(id(group[0].node), [])) if group else []
    node = group[0].node
    own = [by_node[id(node)]] if id(node) in by_node else []
    return [*named.get(id(node), []), *own]


def _accept(finding: Finding, candidates: Sequence[_Entry]) -> bool:
    accepted = False
    for entry in candidates:
        for prefix in entry.prefixes:
            if finding.rule.startswith(prefix):
                entry.used.add(prefix)
                accepted = True
    return accepted


def _stale(
    model: ir.Model,
    sites: Mapping[_Key, list[QuantizedSite]],
    by_node: Mapping[int, _Entry],
    enabled: Collection[str],
) -> list[Finding]:
    """QL901 for each prefix of a node's ``qlrewrite:ignore`` that accepted nothing."""
    stale = []
    for site in (s for group in sites.values() for s in group):
        own = by_node.get(id(site.node))
        if own is None:
            continue
        stale.extend(
            _finding(model, site, f"{own.source}: {prefix or 'ALL'} suppresses nothing here")
            for prefix in own.prefixes
            if prefix not in own.used and any(c.startswith(prefix) for c in enabled)
        )
    return stale


def _finding(model: ir.Model, site: QuantizedSite, message: str) -> Finding:
    return site_view(model, site).finding_of(
        RULES[STALE_RULE], message, "remove the suppression (or the codes that no longer match)"
    )


def unused_entry_findings(
    per_node_ignores: Mapping[str, Sequence[str]],
    reports: Sequence[Report],
    where: str | None = None,
    *,
    judge_keys: bool = True,
) -> list[Finding]:
    """QL901 once per ``per-node-ignores`` entry unused in the whole run: a key that named
    no Q/DQ node of ``reports`` (only with ``judge_keys``: QL901 was enabled for some of
    them), or whose codes judged in some model accepted no finding in any.

    ``reports``: every model checked under the entries (each read: a model that could not
    be read may hold the node, so its caller judges nothing); ``where``: the
    configuration file that holds them (None: the entries were given to one check).
    """
    matched = frozenset().union(*(r.matched_suppressions for r in reports))
    judged = frozenset().union(*(r.judged_suppressions for r in reports))
    used = frozenset().union(*(r.used_suppressions for r in reports))
    checked = _checked(len(reports), where)
    findings = []
    for key, codes in per_node_ignores.items():
        entry = f"per-node-ignores '{key}' = {list(codes)}"
        if key not in matched:
            if judge_keys:
                message = f"{entry} names no Q/DQ node of {checked}"
                findings.append(_entry_finding(message, _RENAME))
            continue
        unused = sorted({p for k, p in judged - used if k == key})
        if unused:
            named = ", ".join(p or "ALL" for p in unused)
            message = f"{entry}: {named} suppressed nothing in {checked}"
            findings.append(_entry_finding(message, _REMOVE))
    return findings


_RENAME = "remove the entry, or rename it after the node (or its output) it was for"
_REMOVE = "remove the entry (or the codes that no longer match)"


def _checked(models: int, where: str | None) -> str:
    """``the 3 models checked with pyproject.toml`` / ``the model checked``."""
    what = "the model checked" if models == 1 else f"the {models} models checked"
    return f"{what} with {where}" if where else what


def _entry_finding(message: str, hint: str) -> Finding:
    """A QL901 finding about a configuration entry (no node, no graph)."""
    return Finding(
        rule=STALE_RULE, severity=RULES[STALE_RULE].severity, message=message, hint=hint, graph=""
    )


def _first_output(node: ir.Node) -> str:
    return (node.outputs[0].name or "") if node.outputs else ""
