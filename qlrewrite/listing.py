"""Messages naming many nodes: identical reasons grouped, a bounded list of names.

A refusal of 40 nodes for 2 reasons reads ``38 nodes ('a' in main, 'b' in main, 'c' in
main, ...): reason; 2 nodes (...): other reason``, not 40 repetitions of the reasons.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["grouped"]


def grouped(items: Iterable[tuple[str, Iterable[str]]], names: int = 3) -> str:
    """``(where, reasons)`` pairs as one line: the nodes with the same reasons (in the
    order met) grouped as ``N nodes (a, b, c, ...): reason; reason``, at most ``names``
    names each; a node alone reads ``where (reason; reason)``."""
    groups: dict[str, list[str]] = {}
    for where, reasons in items:
        groups.setdefault("; ".join(dict.fromkeys(reasons)), []).append(where)
    parts = []
    for reasons, wheres in groups.items():
        if len(wheres) == 1:
            parts.append(f"{wheres[0]} ({reasons})")
            continue
        named = ", ".join(wheres[:names]) + (", ..." if len(wheres) > names else "")
        parts.append(f"{len(wheres)} nodes ({named}): {reasons}")
    return "; ".join(parts)
