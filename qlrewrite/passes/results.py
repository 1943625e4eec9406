"""What every rewriting pass returns: :class:`RewritePassResult`, the base of the typed
:class:`~onnx_ir.passes.PassResult` subclasses (as onnxscript's ``FoldConstantsResult``),
and the marks of a pass that repairs findings or converts custom operators.

Each pass family holds its own result type beside its pass (``FoldResult`` in
:mod:`qlrewrite.passes.fold.fold_pass`, ``NBitsResult`` in
:mod:`qlrewrite.passes.nbits.to_onnx`, ...); their names are still read from here, as
before (``from qlrewrite.passes.results import FoldResult``), each imported when asked.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import onnx_ir as ir

from qlrewrite.verify.bound import EXACT_BOUND, Bound

__all__ = ["ConvertsCustomOps", "RepairsFindings", "RewritePassResult"]

#: Each family's result type, and the module that holds it: read from here on first use
#: (the families import this module for their base, so it imports none of them).
_FAMILIES = {
    "ConvertResult": "qlrewrite.passes.convert.domain",
    "DowngradeResult": "qlrewrite.passes.downgrade.downgrade_pass",
    "FixResult": "qlrewrite.passes.fix",
    "FoldResult": "qlrewrite.passes.fold.fold_pass",
    "HalfResult": "qlrewrite.passes.half.half_pass",
    "ImportsResult": "qlrewrite.passes.imports",
    "IntegerIOResult": "qlrewrite.passes.integer_io.to_integer",
    "NBitsResult": "qlrewrite.passes.nbits.to_onnx",
    "QOperatorResult": "qlrewrite.passes.convert.qoperator_to_qdq",
    "RetargetResult": "qlrewrite.passes.retarget.retarget_pass",
    "UpgradeResult": "qlrewrite.passes.upgrade",
}


@dataclasses.dataclass
class RewritePassResult(ir.passes.PassResult):
    """A rewrite's result: the model, whether it changed, counts of what changed (the
    summary line and ``--report``'s ``changes``) and warnings for the reader."""

    summary: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Strings, or objects with ``message`` and ``to_json()``.
    warnings: list[Any] = dataclasses.field(default_factory=list)
    #: What ``--verify`` accepts: exact, or a stated bound and why ONNX Runtime's outputs
    #: may differ (see :class:`qlrewrite.verify.bound.Bound`).
    verify_bound: Bound = EXACT_BOUND
    #: The findings it repaired, one ``(code, where, what)`` per repair, in the order
    #: made (``check --diff`` prints them; ``check --fix`` counts them per code).
    changes: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)


class ConvertsCustomOps:
    """Mixin of a pass that converts other producers' custom quantization operators
    (:mod:`qlrewrite.qdq.custom_ops`): the pipeline does not refuse an input for the
    ``(domain, op_type)`` pairs in ``custom_ops``."""

    custom_ops: frozenset[tuple[str, str]] = frozenset()


class RepairsFindings:
    """Mixin of a pass that repairs input findings: the pipeline does not refuse an input
    for error findings of ``repairs_rules`` (the output is checked again in full), and
    adds no pass of its own for them (:func:`qlrewrite.pipeline.with_implied_imports`).
    What a pass repairs is read from the rules' declarations (their ``Fix`` and
    ``upgrade_repairs``), never listed a second time."""

    @property
    def repairs_rules(self) -> tuple[str, ...]:
        """The codes of the rules whose findings the pass repairs (a pass states them as a
        class attribute, an attribute set when made, or a property read when asked)."""
        return ()


def __getattr__(name: str) -> Any:
    """A family's result type by its old path (``qlrewrite.passes.results.FoldResult``)."""
    home = _FAMILIES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_FAMILIES])
