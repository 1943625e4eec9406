"""Check rules for the quantized operators: one unit per rule, one module per code family.

Codes are stable and grouped: QL1xx structure, QL2xx attributes, QL3xx element types,
QL4xx granularity and shapes, QL5xx constant values, QL6xx model hygiene, QL7xx the
target runtime (only with ``--target``), QL9xx suppressions. A rule's module is named
after its codes (``ql4xx_shapes.py``; a more specific ``ql42x_matmul_nbits.py`` holds
QL420-QL429): there, :func:`rule` declares the unit (code, docs, check, fix, examples).
:data:`RULES` is the catalogue that ``qlrewrite rules`` prints and :data:`CHECKS` holds
the units the check and fix passes run.

Adding a rule:

1. Take the next free code of its family; it goes in the module named after it (a new
   block of codes for a new operator gets a new ``qlNNx_<what>.py``, imported below).
2. Write the check, ``(ctx) -> Iterator[Finding]`` with ``ctx`` the view of its
   ``kinds`` (``QDQView`` for the default ``(QDQ,)``, ``WeightOnlyView``,
   ``QOperatorView``, ``NodeView`` for a mix: mypy checks it; the version in force is
   ``ctx.version``, never None; see docs/architecture.md, "Adding a rule"), yielding
   ``ctx.report(message, hint)`` (``attribute=`` names the attribute a finding is about;
   the code and severity are the declaration's, never repeated), and decorate it with
   :func:`rule`: name, severity, summary, explanation (why it matters), example,
   versions, the node ``kinds`` it reads, and ``examples=[Example(label, bad, good)]``:
   models as data, ``ModelSpec("qdq", DQ, 21, scale=0.0)`` (:mod:`.model_spec`), each
   naming a builder of the tests (``tests/model_specs.py`` lists them; they are written
   with onnx.helper in ``tests/example_models.py``, outside the package). When no builder
   writes the model an example needs, add one there: the rule module stays data.
3. A repair, if ONNX Runtime's outputs stay known: ``fix=Fix(SAFE or UNSAFE, summary,
   applies=..., node=... / model=... / upgrade_opset=...)`` beside the check;
   ``applies`` reads the finding's fields, never its text. ``upgrade_repairs=True``
   when a newer opset makes the finding go away (``qlrewrite upgrade`` then takes such
   an input; a ``Fix`` with ``upgrade_opset`` implies it).
4. ``python -m qlrewrite.checking.render docs/rules.md`` regenerates the catalogue page (a test
   fails when it drifts); ``pytest tests/test_rule_units.py -k QLnnn`` runs the unit.
"""

from __future__ import annotations

from qlrewrite.rules import (  # noqa: F401 (imported to register their rules)
    ql1xx_structure,
    ql2xx_attributes,
    ql3xx_types,
    ql4xx_shapes,
    ql5xx_values,
    ql6xx_hygiene,
    ql7xx_targets,
    ql9xx_suppressions,
    ql10x_qoperator_structure,
    ql31x_qoperator_types,
    ql31x_weight_only_types,
    ql42x_matmul_nbits,
    ql43x_gather_block,
    ql44x_qoperator_shapes,
    ql51x_qoperator_values,
    ql61x_graph_order,
    ql71x_tensorrt,
    ql72x_qnn,
)
from qlrewrite.rules.registry import CHECKS, RULES, Example, Fix, FixContext, RuleCheck, rule

__all__ = ["CHECKS", "RULES", "Example", "Fix", "FixContext", "RuleCheck", "rule"]

_rules, _checks = sorted(RULES.items()), sorted(CHECKS.items())
RULES.clear()
RULES.update(_rules)
CHECKS.clear()
CHECKS.update(_checks)
