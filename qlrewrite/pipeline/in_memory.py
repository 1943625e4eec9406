"""What every rewrite does between reading and writing, for the command line and the
Python API alike (:func:`rewrite_model`): check the input, run the passes, validate the
output."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import onnx
import onnx_ir as ir

from qlrewrite.errors import QlrewriteError, Refusal
from qlrewrite.findings import Report
from qlrewrite.io.source import source_of
from qlrewrite.io.weightless import weightless_from_source, weightless_proto
from qlrewrite.passes.context import RunContext
from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorResult, measured_bound
from qlrewrite.passes.manager import (
    pass_name,
    run_passes,
    summary_of,
    warnings_of,
    with_implied_imports,
)
from qlrewrite.pipeline.refusals import refuse_input
from qlrewrite.pipeline.validate import (
    check_rules,
    checker_problem,
    runtime_only_ops,
    validate_output,
)
from qlrewrite.qdq.inference import Inference, declared
from qlrewrite.qdq.left_alone import left_as_they_are
from qlrewrite.qdq.untouched import Checked
from qlrewrite.toolkit import MAIN, implied_imports
from qlrewrite.verify.verify import EXACT_BOUND, Verifier

__all__ = ["Rewritten", "rewrite_model"]


class Rewritten(NamedTuple):
    """A checked rewrite (:func:`rewrite_model`)."""

    model: ir.Model
    results: list[ir.passes.PassResult]
    serialized: onnx.ModelProto  # weightless_proto(model): checked, then saved from
    warnings: list[str]  # of the output check
    notes: list[str]  # what the command leaves as it was
    passes: list[ir.passes.PassBase]  # as run (the implied imports' pass first, if added)

    def changes(self) -> dict[str, dict[str, int]]:
        """Per pass (by name), the counts of what it changed: the summary line's and
        ``--report``'s ``changes``."""
        pairs = zip(self.passes, self.results, strict=True)
        return {pass_name(p): summary_of(r) for p, r in pairs}

    def all_warnings(self) -> list[Any]:
        """Every warning, in the order the command prints them: the output check's, the
        passes', then what the command left as it was."""
        return [*self.warnings, *(w for r in self.results for w in warnings_of(r)), *self.notes]


def rewrite_model(
    model: ir.Model,
    passes: Sequence[ir.passes.PassBase],
    *,
    command: str,
    source: Path | None = None,
    verifier: Verifier | None = None,
) -> Rewritten:
    """What every rewrite does between reading and writing, for the command line and the
    Python API alike: refuse an input with error findings no pass repairs
    (:class:`FindingsRefusal`) or another producer's custom quantization, run ``passes``
    (after the imports ONNX Runtime implies), and refuse an output that ONNX's checker or
    our check rejects (serialized once, weights left out: the save writes from the same
    proto). ``source``: the input's path, for messages (None: "model")."""
    context, runtime_ops, notes = _check_input(model, source, passes, command)
    unchanged = context.unchanged  # the input as read: names the cause of a checker error
    checked = context.checked
    implied = implied_imports(model)  # what ONNX Runtime reads the model as importing
    passes = with_implied_imports(passes, implied)
    try:
        model, results = run_passes(context.model, passes, context)
    except Exception as exc:  # a pass tripped on the input: name it if onnx.checker does
        _refuse_invalid_input(exc, unchanged, source, runtime_ops)
        raise
    if verifier is not None:
        verifier.expect_differences(results)
        _expect_measured(verifier, model, results)
    serialized = weightless_proto(model)
    warnings = validate_output(
        model,
        source,
        unchanged,
        runtime_ops=runtime_ops,
        weightless=serialized,
        checked=checked,
    )
    return Rewritten(model, results, serialized, warnings, notes, passes)


def _refuse_invalid_input(
    exc: Exception,
    unchanged: onnx.ModelProto | None,
    source: Path | None,
    runtime_ops: frozenset[str],
) -> None:
    """A pass that failed on an input onnx.checker rejects (a cycle: a node reading its
    own output) is that input's fault: one line naming the checker's complaint, not the
    pass's internal error. A refusal or usage error stays as it was."""
    if isinstance(exc, QlrewriteError) or unchanged is None:
        return
    problem = checker_problem(unchanged, runtime_ops)
    if problem is not None:
        where = f"{source}: " if source else ""
        raise Refusal(
            f"{where}the input model is invalid (onnx.checker: {problem}); nothing written"
        ) from exc


def _expect_measured(
    verifier: Verifier, model: ir.Model, results: Sequence[ir.passes.PassResult]
) -> None:
    """``--verify`` after a QOperator conversion also compares each converted node's
    output inside both models, and decides on the differences measured there."""
    converted = [r for r in results if isinstance(r, QOperatorResult) and r.differences]
    others = [
        r
        for r in results
        if not isinstance(r, QOperatorResult) and not getattr(r, "verify_bound", EXACT_BOUND).exact
    ]
    if not converted or others or converted[0].verify_bound.relative is not None:
        return  # float sums in another order (a rule-free difference): the stated bound
    result = converted[0]
    probes = [o.name for node in model.graph for o in node.outputs if o.name]
    verifier.expect_measured(probes, functools.partial(measured_bound, model, result))


def _check_input(
    model: ir.Model, input_path: Path | None, passes: Sequence[ir.passes.PassBase], command: str
) -> tuple[RunContext, frozenset[str], list[str]]:
    """Refuse an input the rewrite cannot take (another producer's custom quantization,
    an error finding no pass repairs); return the run's context (the input's inference
    and weight-free proto as read, handed to the passes: each is made once per run), the
    input's ops that ONNX does not define (:func:`runtime_only_ops`) and the notes on what
    the command leaves alone."""
    # The model is as loaded: shape inference can run on a copy of the file's nodes.
    source = source_of(model)
    unchanged = weightless_from_source(source.proto) if source is not None else None
    inference = Inference(model, unchanged)
    runtime_ops = runtime_only_ops(model)
    found = check_rules(model, input_path, inference)
    report = refuse_input(found, passes, str(input_path or "model"))
    checked = _node_facts(unchanged, inference, found) if unchanged is not None else None
    context = RunContext(model, inference, unchanged, checked=checked)
    notes = left_as_they_are(report.unchecked, model, folding=command == "fold")
    return context, runtime_ops, notes


def _node_facts(unchanged: onnx.ModelProto, inference: Inference, report: Report) -> Checked:
    """What the input check judged (the nodes with a finding are always checked again):
    the input as read and its types, compared with the output's when it is checked."""
    types = inference.known(MAIN) if inference.ran else declared(unchanged.graph)
    flagged = frozenset(f.output for f in report.findings if f.output)
    return Checked(unchanged, types, flagged)
