"""The pass manager: a command's passes run in order on one model, each handed the run's
context, each returning its typed result.

Built on onnx_ir's :class:`~onnx_ir.passes.PassManager` (one step, no early stop): the
passes run as onnx_ir runs them (pre- and post-conditions, the in-place contract), and
:class:`RunPassManager` adds what a command needs: the :class:`~qlrewrite.passes.context.RunContext`
handed to each :class:`~qlrewrite.passes.context.ContextPass` and advanced after it, each
pass's own result kept (:class:`RunResult`), and a refusal or usage error raised inside a
pass reaching the caller as itself. The questions asked of a list of passes (which
findings it repairs, whether ONNX Runtime's implied imports must be added first) and of
a result (its summary, repairs and warnings) are answered here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from qlrewrite.errors import QlrewriteError
from qlrewrite.passes.context import ContextPass, RunContext
from qlrewrite.passes.imports import ImpliedImportsPass
from qlrewrite.passes.results import RepairsFindings, RewritePassResult

__all__ = [
    "RunPassManager",
    "RunResult",
    "pass_name",
    "repaired_by",
    "repairs_of",
    "run_passes",
    "summary_of",
    "warnings_of",
    "with_implied_imports",
]


@dataclasses.dataclass
class RunResult(ir.passes.PassResult):
    """What a :class:`RunPassManager` returns: the model, whether a pass changed it, and
    each pass's own result in order."""

    results: list[ir.passes.PassResult] = dataclasses.field(default_factory=list)


class RunPassManager(ir.passes.PassManager):
    """onnx_ir's pass manager, run once over ``passes`` with the run's ``context``."""

    def __init__(self, passes: Sequence[ir.passes.PassBase], context: RunContext) -> None:
        super().__init__(passes, steps=1, early_stop=False)
        self.context = context

    def call(self, model: ir.Model) -> RunResult:
        """Each pass on the model the one before it returned (the context's model)."""
        if self.context.model is not model:
            raise ValueError("the run context describes another model")
        results = []
        for rewrite_pass in self.passes:
            result = _unwrapped(rewrite_pass, self.context)
            results.append(result)
            self.context.advance(rewrite_pass, result)
        modified = any(r.modified for r in results)
        return RunResult(self.context.model, modified, results)


def run_passes(
    model: ir.Model, passes: Sequence[ir.passes.PassBase], context: RunContext
) -> tuple[ir.Model, list[ir.passes.PassResult]]:
    """Run ``passes`` in order on ``model``: the resulting model and each pass's result.

    Each :class:`~qlrewrite.passes.context.ContextPass` gets ``context`` (the run's:
    the input check's, or :meth:`RunContext.fresh`; its ``model`` must be ``model``),
    which follows the passes.
    A :class:`~qlrewrite.errors.QlrewriteError` raised inside a pass (a refusal, a usage
    error) reaches the caller as itself, not wrapped in onnx_ir's PassError.
    """
    if context.model is not model:
        raise ValueError("the run context describes another model")
    if not passes:
        return model, []
    done = RunPassManager(passes, context).call(model)
    return done.model, done.results


def _unwrapped(rewrite_pass: ir.passes.PassBase, context: RunContext) -> ir.passes.PassResult:
    """One pass on the context's model; a QlrewriteError inside it raised as itself."""
    try:
        return _run_one(rewrite_pass, context)
    except (ir.passes.PassError, ir.passes.InvariantError) as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, QlrewriteError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from exc


def _run_one(rewrite_pass: ir.passes.PassBase, context: RunContext) -> ir.passes.PassResult:
    """``rewrite_pass`` on the context's model, handed the context if it reads one."""
    if not isinstance(rewrite_pass, ContextPass):
        return rewrite_pass(context.model)
    with rewrite_pass.handed(context):
        return rewrite_pass(context.model)


def with_implied_imports(
    passes: Sequence[ir.passes.PassBase], implied: Mapping[str, int]
) -> list[ir.passes.PassBase]:
    """``passes``, after an :class:`~qlrewrite.passes.imports.ImpliedImportsPass` when the
    model uses domains without importing them whose version ONNX Runtime implies
    (``implied``: :func:`~qlrewrite.toolkit.implied_imports` of the model) and no pass
    repairs what that pass repairs (``check --fix`` repairs it itself): the output imports
    what ONNX Runtime read."""
    if not implied or repaired_by(passes) & set(ImpliedImportsPass.repairs_rules):
        return list(passes)
    return [ImpliedImportsPass(), *passes]


def repaired_by(passes: Sequence[ir.passes.PassBase]) -> set[str]:
    """The rule codes whose findings one of ``passes`` declares it repairs."""
    return {code for p in passes if isinstance(p, RepairsFindings) for code in p.repairs_rules}


def summary_of(result: ir.passes.PassResult) -> dict[str, int]:
    """What a pass changed, counted (``{}`` for a pass of onnx_ir's own)."""
    return result.summary if isinstance(result, RewritePassResult) else {}


def repairs_of(result: ir.passes.PassResult) -> list[tuple[str, str, str]]:
    """The findings a pass repaired (``check --fix``): (code, where, what)."""
    return result.changes if isinstance(result, RewritePassResult) else []


def warnings_of(result: ir.passes.PassResult) -> list[Any]:
    """What a pass warned of."""
    return result.warnings if isinstance(result, RewritePassResult) else []


def pass_name(p: ir.passes.PassBase) -> str:
    """A pass's name in reports: its ``name``, else its class's."""
    return getattr(p, "name", type(p).__name__)
