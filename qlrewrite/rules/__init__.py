"""Check rules for the quantized operators: one unit per rule, one module per code family.

Codes are stable and grouped: QL1xx structure, QL2xx attributes, QL3xx element types,
QL4xx granularity and shapes, QL5xx constant values, QL6xx model hygiene, QL7xx the
target runtime (only with ``--target``), QL9xx suppressions. The modules are grouped by
the node kind they read, a folder each: ``qdq/`` (Q/DQ; a rule there may also read the
other kinds), ``weight_only/``, ``qoperator/``, ``model/`` (the model as a whole) and
``targets/`` (``--target``); each module is named for its concern (``qdq/shapes.py``)
and its docstring opens with the codes it holds (``QL401-QL412:``), which no other
module claims. There, :func:`rule` declares the unit (code, docs, check, fix, examples);
``qlrewrite rules CODE`` names the module.
:data:`RULES` is the catalogue that ``qlrewrite rules`` prints and :data:`CHECKS` holds
the units the check and fix passes run.

Adding a rule:

1. Take the next free code of its family; it goes in the module of its node kind and
   concern, whose docstring's codes you extend (a new concern gets a new module in its
   kind's folder, imported below).
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
   fails when it drifts); ``pytest tests/rules/test_rule_units.py -k QLnnn`` runs the unit.
"""

from __future__ import annotations

from qlrewrite.rules import model, qdq, qoperator, targets, weight_only  # noqa: F401 (register)
from qlrewrite.rules.registry import CHECKS, RULES, Example, Fix, FixContext, RuleCheck, rule

__all__ = ["CHECKS", "RULES", "Example", "Fix", "FixContext", "RuleCheck", "rule"]

_rules, _checks = sorted(RULES.items()), sorted(CHECKS.items())
RULES.clear()
RULES.update(_rules)
CHECKS.clear()
CHECKS.update(_checks)
