"""``--select`` / ``--ignore``: which rules run, by code or code prefix, as ruff does."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from qlrewrite.errors import InputError
from qlrewrite.findings import Report
from qlrewrite.rules.registry import RULES

__all__ = ["filter_report", "parse_codes", "select_rules"]


def select_rules(
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    *,
    extend_select: Iterable[str] = (),
    base: Collection[str] | None = None,
) -> frozenset[str]:
    """The rule codes enabled by ``select`` / ``ignore`` codes or prefixes, as ruff does.

    No ``select`` keeps ``base`` (default: every rule that is not opt-in); a ``select``
    starts afresh from what it names (``ALL``: every rule that is not opt-in).
    ``extend_select`` adds to either. An opt-in rule needs a select entry of at least its
    category (``QL5``, ``QL504``). When a code matches both sides, the longer (more
    specific) prefix wins; on a tie ``ignore`` wins. A code no entry matches keeps its
    state in ``base``. Layers stack: the configuration's result is the ``base`` of the
    command line's. An entry that matches no rule code raises InputError naming it.
    """
    selected = parse_codes(select, "select", parameter="select")
    enabling = selected + parse_codes(extend_select, "extend_select", parameter="extend_select")
    ignored = parse_codes(ignore, "ignore", parameter="ignore")
    before = {c for c, e in RULES.items() if not e.opt_in} if base is None else set(base)
    if selected:
        before = set()
    enabled = set()
    for code, entry in RULES.items():
        shortest = 3 if entry.opt_in else 0  # "QL5" names the category; "", "QL" do not
        best_select = max(
            (len(p) for p in enabling if code.startswith(p) and len(p) >= shortest), default=-1
        )
        best_ignore = max((len(p) for p in ignored if code.startswith(p)), default=-1)
        if best_select < 0 and best_ignore < 0:
            if code in before:
                enabled.add(code)
        elif best_select > best_ignore:
            enabled.add(code)
    return frozenset(enabled)


def parse_codes(
    entries: str | Iterable[str], where: str, *, parameter: str | None = None
) -> list[str]:
    """Rule code prefixes from comma-separated entries (``ALL`` is ``""``, every code); a
    single string is one entry, never split into characters.

    Raises InputError starting with ``where`` for an entry that matches no rule code
    (naming ``parameter``, which the command line names as its option).
    """
    prefixes = []
    for entry in [entries] if isinstance(entries, str) else entries:
        for raw in entry.split(","):
            prefix = raw.strip().upper()
            if not prefix:
                continue
            if prefix == "ALL":
                prefix = ""
            elif not any(code.startswith(prefix) for code in RULES):
                raise InputError(
                    f"{where}: unknown rule code or prefix '{raw.strip()}'", parameter=parameter
                )
            prefixes.append(prefix)
    return prefixes


def filter_report(report: Report, codes: Collection[str]) -> Report:
    """``report`` keeping only the findings of rules in ``codes``."""
    if all(f.rule in codes for f in report.findings):
        return report
    return dataclasses.replace(report, findings=[f for f in report.findings if f.rule in codes])
