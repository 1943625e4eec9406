"""``--select`` / ``--ignore``: which rules run, by code or code prefix, as ruff does."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from qlrewrite.errors import InputError
from qlrewrite.findings import Report
from qlrewrite.rules.registry import RULES

__all__ = ["filter_report", "select_rules"]


def select_rules(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> frozenset[str]:
    """The rule codes enabled by ``select`` / ``ignore`` codes or prefixes, as ruff does.

    No ``select`` means every rule that is not opt-in (``ALL`` too); an opt-in rule needs a
    select entry of at least its category (``QL5``, ``QL504``). When a code matches both
    lists, the longer (more specific) prefix wins; on a tie ``ignore`` wins. An entry that
    matches no rule code raises InputError naming it.
    """
    selected = _prefixes(select, "--select")
    ignored = _prefixes(ignore, "--ignore")
    enabled = set()
    for code, entry in RULES.items():
        shortest = 3 if entry.opt_in else 0  # "QL5" names the category; "", "QL" do not
        best_select = max(
            (len(p) for p in selected if code.startswith(p) and len(p) >= shortest), default=-1
        )
        if not selected and not entry.opt_in:
            best_select = 0
        best_ignore = max((len(p) for p in ignored if code.startswith(p)), default=-1)
        if best_select >= 0 and best_select > best_ignore:
            enabled.add(code)
    return frozenset(enabled)


def _prefixes(entries: Iterable[str], option: str) -> list[str]:
    prefixes = []
    for entry in entries:
        for raw in entry.split(","):
            prefix = raw.strip().upper()
            if not prefix:
                continue
            if prefix == "ALL":
                prefix = ""
            elif not any(code.startswith(prefix) for code in RULES):
                raise InputError(f"{option}: unknown rule code or prefix '{raw.strip()}'")
            prefixes.append(prefix)
    return prefixes


def filter_report(report: Report, codes: Collection[str]) -> Report:
    """``report`` keeping only the findings of rules in ``codes``."""
    if all(f.rule in codes for f in report.findings):
        return report
    return dataclasses.replace(report, findings=[f for f in report.findings if f.rule in codes])
