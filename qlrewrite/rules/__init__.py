"""Check rules for the quantized operators: one unit per rule, one module per code family.

Codes are stable and grouped: QL1xx structure, QL2xx attributes, QL3xx element types,
QL4xx granularity and shapes, QL5xx constant values, QL6xx model hygiene, QL9xx
suppressions. A rule's module is named after its codes (``ql4xx_shapes.py``; a more
specific ``ql42x_matmul_nbits.py`` holds QL420-QL429): there, :func:`rule` declares the
unit (code, docs, check, fix, examples). :data:`RULES` is the catalogue that ``qlrewrite
rules`` prints and :data:`CHECKS` holds the units the check and fix passes run.
"""

from __future__ import annotations

from qlrewrite.rules import (  # noqa: F401 (imported to register their rules)
    ql1xx_structure,
    ql2xx_attributes,
    ql3xx_types,
    ql4xx_shapes,
    ql5xx_values,
    ql6xx_hygiene,
    ql9xx_suppressions,
    ql31x_weight_only_types,
    ql42x_matmul_nbits,
    ql43x_gather_block,
    qoperator,
)
from qlrewrite.rules.registry import CHECKS, RULES, Example, Fix, FixContext, RuleCheck, rule

__all__ = ["CHECKS", "RULES", "Example", "Fix", "FixContext", "RuleCheck", "rule"]

for _table in (RULES, CHECKS):
    _items = sorted(_table.items())
    _table.clear()
    _table.update(_items)  # type: ignore[arg-type]
