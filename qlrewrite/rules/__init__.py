"""Check rules for QuantizeLinear / DequantizeLinear, grouped by concern.

Codes are stable and grouped: QL1xx structure, QL2xx attributes, QL3xx element types,
QL4xx granularity and shapes, QL5xx constant values, QL6xx model hygiene, QL9xx
suppressions. Each rule is a small function registered with :func:`rule`; :data:`RULES`
is the catalogue that ``qlrewrite rules`` prints and :data:`CHECKS` holds the functions
the check pass runs.
"""

from __future__ import annotations

from qlrewrite.rules import (  # noqa: F401 (imported to register their rules)
    attributes,
    gather_block,
    hygiene,
    matmul_nbits,
    qoperator,
    shapes,
    structure,
    suppressions,
    types,
    values,
    weight_only,
)
from qlrewrite.rules.registry import CHECKS, RULES, RuleCheck, rule

__all__ = ["CHECKS", "RULES", "RuleCheck", "rule"]

for _table in (RULES, CHECKS):
    _items = sorted(_table.items())
    _table.clear()
    _table.update(_items)  # type: ignore[arg-type]
