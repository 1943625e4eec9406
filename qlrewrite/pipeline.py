"""The path every rewriting command takes: load, check, rewrite, check again, save.

A command builds a list of onnx_ir passes and hands it to :func:`rewrite`. Nothing is
written when the input has error findings (other than those a pass declares it
repairs, see :func:`unrepaired`), when the rewritten model would fail ONNX's
checker or our check, when it would exceed ``max_size``, when ``verify`` finds that
ONNX Runtime computes something else with it (or cannot run it), or on ``dry_run``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import onnx
import onnx_ir as ir

from qlrewrite.checking.untouched import Checked, untouched
from qlrewrite.errors import InputError, QlrewriteError, Refusal
from qlrewrite.findings import Finding, Report
from qlrewrite.io import atomic, model_io, output_guard, tensors
from qlrewrite.io.output_guard import Snapshot
from qlrewrite.io.source import source_of
from qlrewrite.io.weightless import (
    weightless_from_source,
    weightless_proto,
)
from qlrewrite.passes.context import ContextPass, RunContext
from qlrewrite.passes.imports import ImpliedImportsPass
from qlrewrite.passes.qoperator_to_qdq import measured_bound
from qlrewrite.passes.results import (
    ConvertsCustomOps,
    QOperatorResult,
    RepairsFindings,
    RewritePassResult,
)
from qlrewrite.qdq.custom_ops import custom_quant_groups, describe
from qlrewrite.qdq.inference import Inference, tables_of
from qlrewrite.qdq.left_alone import describe_unchecked, not_folded
from qlrewrite.toolkit import MAIN, implied_imports, normalize_domain, onnx_opset
from qlrewrite.verify.compare import output_steps, verify_both
from qlrewrite.verify.verify import (
    EXACT_BOUND,
    Verification,
    VerificationFailed,
    Verifier,
    VerifyOptions,
)

__all__ = [
    "FindingsRefusal",
    "RewriteResult",
    "Rewritten",
    "default_output",
    "model_output",
    "refuse_errors",
    "resolve_output",
    "rewrite",
    "rewrite_model",
    "unrepaired",
    "with_implied_imports",
]


class FindingsRefusal(Refusal):
    """Refused because a model (input or rewritten) has error findings: ``.findings``
    are they, ``.report`` the whole check."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report

    @property
    def findings(self) -> list[Finding]:
        """The error findings that refused the model."""
        return list(self.report.errors)


def refuse_errors(report: Report, where: str, what: str = "error finding(s)") -> None:
    """Raise :class:`FindingsRefusal` when ``report`` has error findings: one line with
    ``where``, their count (``what`` they are) and their codes."""
    if report.errors:
        codes = ", ".join(dict.fromkeys(f.rule for f in report.errors))
        raise FindingsRefusal(
            f"{where}: {len(report.errors)} {what}; nothing written ({codes}: run "
            "`qlrewrite check` for details)",
            report,
        )


@dataclasses.dataclass
class RewriteResult:
    """What a rewrite did; ``to_json`` is the ``--report`` document."""

    command: str
    input: Path
    output: Path | None
    written: bool
    dry_run: bool
    changes: dict[str, Any]
    bytes_before: int
    bytes_after: int
    seconds: float
    model: ir.Model = dataclasses.field(repr=False)
    warnings: list[Any] = dataclasses.field(default_factory=list)
    verification: Verification | None = None
    target: Path | None = None  # where the output goes (or would go, on a dry run)
    #: What each pass returned, in order (typed: see qlrewrite.passes.results).
    pass_results: list[ir.passes.PassResult] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "version": 1,
            "command": self.command,
            "input": str(self.input),
            "output": str(self.output) if self.output else None,
            "written": self.written,
            "dry_run": self.dry_run,
            "changes": self.changes,
            "initializer_bytes": {"before": self.bytes_before, "after": self.bytes_after},
            "seconds": round(self.seconds, 3),
            "warnings": [w.to_json() if hasattr(w, "to_json") else str(w) for w in self.warnings],
            "verify": self.verification.to_json() if self.verification else None,
        }


def default_output(input_path: Path, command: str) -> Path:
    """``<stem>.<command>.onnx`` beside the input; a stem too long for the file system's
    names is shortened as data file names are (:func:`~qlrewrite.io.atomic.fitted_stem`)."""
    suffix = f".{command}.onnx"
    folder = input_path.absolute().parent
    stem = atomic.fitted_stem(input_path.stem, folder, len(os.fsencode(suffix)))
    return input_path.with_name(stem + suffix)


def resolve_output(input_path: Path, output: Path | None, in_place: bool, command: str) -> Path:
    """Where to write: refuses to touch the input unless ``in_place``, and a name the
    file system cannot hold."""
    if in_place:
        if output is not None and not model_io.same_file(output, input_path):
            raise InputError("--in-place and -o name different files; give one of them")
        return input_path
    target = output if output is not None else default_output(input_path, command)
    atomic.refuse_long_name(target, "the output")
    if target.exists() and model_io.same_file(target, input_path):
        raise InputError(
            f"{target}: the output is the input; use --in-place to overwrite the input"
        )
    return target


def _check(
    model: ir.Model,
    path: Path | None,
    inference: Inference,
    unchanged: frozenset[str] = frozenset(),
) -> Report:
    from qlrewrite.checking.checker import check_model  # imports every rule: only when rewriting

    where = str(path) if path else None
    return check_model(model, path=where, inference=inference, unchanged=unchanged)


def rewrite(
    input_path: str | Path,
    passes: Sequence[ir.passes.PassBase],
    *,
    command: str,
    output: str | Path | None = None,
    in_place: bool = False,
    dry_run: bool = False,
    external_data: bool | None = None,
    max_size: int | None = None,
    verify: VerifyOptions | None = None,
    on_tensor_saved: model_io.SaveCallback | None = None,
    report_path: str | Path | None = None,
    only_if_repaired: bool = False,
) -> RewriteResult:
    """Load ``input_path``, run ``passes``, validate, and save (unless ``dry_run``, or
    ``only_if_repaired`` and no pass result lists ``changes``: ``check --fix``).

    ``on_tensor_saved`` is called after each tensor written to external data (progress).

    ``report_path``: where the JSON of :meth:`RewriteResult.to_json` goes. It is refused
    up front if it names a file the input reads, the output or the output's data file,
    or cannot be created; it is staged before the output is moved into place and moved
    into place right after it (a refusal writes nothing, a failed verification writes
    only the report).

    With ``verify``, the staged output is run against the input in ONNX Runtime before it
    is moved into place (also on ``dry_run``, in a temporary folder); a difference raises
    :class:`~qlrewrite.verify.verify.VerificationFailed` and nothing is written.
    """
    started = time.perf_counter()
    input_path = Path(input_path)
    target = resolve_output(input_path, Path(output) if output else None, in_place, command)
    model, reads, snapshot = _load_input(input_path, target, in_place)
    with contextlib.ExitStack() as stack:
        pending = _pending_report(stack, report_path, reads, target)
        run = _Run(
            command,
            input_path,
            target,
            dry_run,
            external_data,
            max_size,
            verify,
            on_tensor_saved,
            [] if in_place else reads,
            pending,
            snapshot,
            started,
            only_if_repaired,
        )
        result = _rewrite_guarded(model, passes, run)
        if pending is not None:
            pending.commit()
    return result


def _load_input(
    input_path: Path, target: Path, in_place: bool
) -> tuple[ir.Model, list[Path], Snapshot]:
    """The input model, the files it reads, and their snapshot (the model file's taken
    before reading it); refused when unwritable or when the output would overwrite it."""
    as_read = Snapshot.of([Path(os.path.realpath(input_path))])  # before reading it
    model = model_io.load(input_path)
    if (problem := model_io.unwritable(model)) is not None:
        raise InputError(f"{input_path}: not a valid ONNX model ({problem})")
    reads = model_io.files_read(model)
    _refuse_overwriting_input(reads, target, in_place)
    return model, reads, Snapshot.of(reads, earlier=as_read)


def _pending_report(
    stack: contextlib.ExitStack,
    report_path: str | Path | None,
    reads: Sequence[Path],
    target: Path,
) -> atomic.PendingFile | None:
    """The staged ``--report`` file (None without one), refused up front if it names a
    file the input reads, the output or its data file."""
    if report_path is None:
        return None
    _refuse_report_path(Path(report_path), reads, target)
    return stack.enter_context(atomic.PendingFile(Path(report_path)))


def _rewrite_guarded(
    model: ir.Model, passes: Sequence[ir.passes.PassBase], run: _Run
) -> RewriteResult:
    """:func:`_rewrite_loaded`, with a failure while another run replaced the input (its
    lazily read data vanished) said as that."""
    try:
        return _rewrite_loaded(model, passes, run)
    except Exception:
        if run.snapshot.changed() is None:
            raise
        run.snapshot.refuse_if_changed(run.input_path)
        raise


@dataclasses.dataclass(frozen=True)
class _Run:
    """What one :func:`rewrite` call was asked, and what it set up before the passes."""

    command: str
    input_path: Path
    target: Path
    dry_run: bool
    external_data: bool | None
    max_size: int | None
    verify: VerifyOptions | None
    on_tensor_saved: model_io.SaveCallback | None
    keep: Sequence[Path]  # data files the replaced output's cleanup leaves
    pending: atomic.PendingFile | None  # the --report
    snapshot: Snapshot  # the input's files as read
    started: float
    only_if_repaired: bool = False


def _writes(
    run: _Run, results: Sequence[ir.passes.PassResult], verifier: Verifier | None
) -> tuple[bool, Verifier | None]:
    """Whether the run writes its output, and the verifier still to run: on
    ``only_if_repaired``, neither when no pass repaired a finding."""
    if run.only_if_repaired and not any(_repairs(r) for r in results):
        return False, None
    return not run.dry_run, verifier


def _verifier(input_path: Path, model: ir.Model, verify: VerifyOptions | None) -> Verifier | None:
    """The ``--verify`` hook: ONNX Runtime runs in a child process (it may crash on a
    model); made before the passes run, so its usage errors come first."""
    if verify is None:
        return None
    if verify.deployed:  # read on the input, before the passes change it
        steps = tuple(sorted(output_steps(model).items()))
        verify = dataclasses.replace(verify, output_steps=steps)
    return Verifier(input_path, model, verify, run=verify_both)


def _rewrite_loaded(
    model: ir.Model, passes: Sequence[ir.passes.PassBase], run: _Run
) -> RewriteResult:
    command, input_path, target, dry_run = run.command, run.input_path, run.target, run.dry_run
    pending, verify, external_data = run.pending, run.verify, run.external_data
    verifier = _verifier(input_path, model, verify)
    bytes_before = tensors.initializer_bytes(model)
    # decided on the input: a pass may replace every external tensor
    if external_data is None and tensors.uses_external_data(model):
        external_data = True
    out = rewrite_model(model, passes, command=command, source=input_path, verifier=verifier)
    model, results, serialized, checker_warnings, notes, passes = out
    bytes_after = _refuse_over_max_size(model, run.max_size)
    writes, verifier = _writes(run, results, verifier)

    def result() -> RewriteResult:
        return RewriteResult(
            command=command,
            input=input_path,
            output=target if writes else None,
            written=writes,
            dry_run=dry_run,
            changes={_pass_name(p): _summary(r) for p, r in zip(passes, results, strict=True)},
            bytes_before=bytes_before,
            bytes_after=bytes_after,
            seconds=time.perf_counter() - run.started,
            model=model,
            warnings=[*checker_warnings, *(w for r in results for w in _warnings(r)), *notes],
            verification=verifier.result if verifier is not None else None,
            target=target,
            pass_results=results,
        )

    def before_commit(staged: Path) -> None:
        if verifier is not None:
            try:
                verifier(staged)
            except VerificationFailed as exc:
                _report_refused(pending, command, input_path, exc)
                raise
        if pending is not None and writes:
            pending.write(_json(result().to_json()))  # staged: moved in after the output

    save = functools.partial(
        model_io.save,
        model,
        external_data=external_data,
        before_commit=before_commit,
        weightless=serialized,
    )
    _write_or_stage(run, save, writes=writes, verifying=verifier is not None)
    done = result()
    if pending is not None and not writes:
        pending.write(_json(done.to_json()))
    return done


def _write_or_stage(
    run: _Run, save: Callable[..., object], *, writes: bool, verifying: bool
) -> None:
    """Write the output; or, not writing but verifying, save it to a temporary folder
    (the verification runs on it before that folder goes)."""
    if writes:
        save(
            run.target,
            callback=run.on_tensor_saved,
            keep=run.keep,
            unchanged=lambda: run.snapshot.refuse_if_changed(run.input_path),
        )
    elif verifying:
        _save_to_temporary(save, run.target.name)


class Rewritten(NamedTuple):
    """A checked rewrite (:func:`rewrite_model`)."""

    model: ir.Model
    results: list[ir.passes.PassResult]
    serialized: onnx.ModelProto  # weightless_proto(model): checked, then saved from
    warnings: list[str]  # of the output check
    notes: list[str]  # what the command leaves as it was
    passes: list[ir.passes.PassBase]  # as run (the implied imports' pass first, if added)


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
    context, notes = _check_input(model, source, passes, command)
    passes = with_implied_imports(model, passes)
    unchanged = context.unchanged  # the input as read: names the cause of a checker error
    checked = context.checked
    runtime_ops = runtime_only_ops(context.model)
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
    problem = _checker_problem(unchanged, runtime_ops)
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


def _save_to_temporary(save: Callable[[Path], None], name: str) -> None:
    """``--dry-run --verify``: the model is staged in a temporary folder, then removed."""
    with tempfile.TemporaryDirectory(prefix="qlrewrite-verify-") as folder:
        save(Path(folder) / name)


def _check_input(
    model: ir.Model, input_path: Path | None, passes: Sequence[ir.passes.PassBase], command: str
) -> tuple[RunContext, list[str]]:
    """Refuse an input the rewrite cannot take (another producer's custom quantization,
    an error finding no pass repairs); return the run's context (the input's inference
    and weight-free proto as read, handed to the passes: each is made once per run) and
    the notes on what the command leaves alone."""
    _refuse_custom_quant(model, input_path, passes)
    # The model is as loaded: shape inference can run on a copy of the file's nodes.
    source = source_of(model)
    unchanged = weightless_from_source(source.proto) if source is not None else None
    inference = Inference(model, unchanged)
    found = _check(model, input_path, inference)
    checked = _node_facts(unchanged, inference, found) if unchanged is not None else None
    report = unrepaired(found, passes)
    refuse_errors(report, str(input_path or "model"))
    context = RunContext(model, inference, unchanged, checked=checked)
    return context, _not_looked_at(report, model, command)


def _node_facts(unchanged: onnx.ModelProto, inference: Inference, report: Report) -> Checked:
    """What the input check judged (the nodes with a finding are always checked again):
    the input as read and its types, compared with the output's when it is checked."""
    types = inference.table(MAIN) if inference.ran else tables_of(unchanged).get(MAIN, {})
    flagged = frozenset(f.output for f in report.findings if f.output)
    return Checked(unchanged, types, flagged)


def _refuse_custom_quant(
    model: ir.Model, input_path: Path | None, passes: Sequence[ir.passes.PassBase]
) -> None:
    """Refuse a model with another producer's custom quantization operators that no pass
    of the run converts."""
    converted = {pair for p in passes if isinstance(p, ConvertsCustomOps) for pair in p.custom_ops}
    groups = [g for g in custom_quant_groups(model) if (g.domain, g.op_type) not in converted]
    if groups:
        raise Refusal(
            f"{input_path or 'model'}: {describe(groups)}: custom operators that ONNX Runtime "
            "runs only with the producer's custom-op library; qlrewrite rewrites standard "
            "QuantizeLinear / DequantizeLinear only; nothing written"
        )


def _refuse_over_max_size(model: ir.Model, max_size: int | None) -> int:
    """The bytes of the output's initializers; refused if they would exceed ``--max-size``
    (decided on the shapes, before anything is computed or written)."""
    bytes_after = tensors.initializer_bytes(model)
    if max_size is not None and bytes_after > max_size:
        raise Refusal(
            f"the output's initializers would take {bytes_after} bytes, above --max-size "
            f"{max_size}; nothing written"
        )
    return bytes_after


def _report_refused(
    pending: atomic.PendingFile | None, command: str, input_path: Path, exc: VerificationFailed
) -> None:
    """The ``--report`` of a run that --verify refused: why nothing was written."""
    if pending is not None:
        pending.write(
            _json(
                {
                    "version": 1,
                    "command": command,
                    "input": str(input_path),
                    "written": False,
                    "error": str(exc),
                    "verify": exc.verification.to_json(),
                }
            )
        )
        pending.commit()


def _json(document: Any) -> str:
    return json.dumps(document, indent=2) + "\n"


def _refuse_overwriting_input(reads: Sequence[Path], target: Path, in_place: bool) -> None:
    """The output may not be a file the input reads (its external data, Constant-node
    data, attribute data, anywhere); in place, the input model itself is the output."""
    for read in reads[0 if not in_place else 1 :]:
        if model_io.same_file(target, read):
            raise InputError(
                f"{target}: the output would overwrite the input's external data "
                "(a file the input reads)"
            )


def _refuse_report_path(report: Path, reads: Sequence[Path], target: Path) -> None:
    """The report may not replace the input, a file it reads, the output or its data."""
    atomic.refuse_long_name(report, "the report")
    if model_io.same_file(report, reads[0]):
        raise InputError(f"{report}: the report would overwrite the input model")
    if any(model_io.same_file(report, read) for read in reads[1:]):
        raise InputError(
            f"{report}: the report would overwrite the input's external data "
            "(a file the input reads)"
        )
    output_guard.refuse_colliding(
        [model_output("the output", target), output_guard.Output("the report", report)]
    )


def model_output(label: str, path: Path) -> output_guard.Output:
    """A model a run writes, as :func:`~qlrewrite.io.output_guard.refuse_colliding` compares
    it: its file and the names its external data file may take."""
    folder = path.absolute().parent
    return output_guard.Output(
        label, path, data=lambda name: atomic.is_data_name(name, path.name, folder)
    )


def unrepaired(report: Report, passes: Sequence[ir.passes.PassBase]) -> Report:
    """``report`` without the error findings that one of ``passes`` repairs.

    A :class:`~qlrewrite.passes.results.RepairsFindings` pass lists the rule codes it
    repairs (for example the upgrade fixes attributes newer than the input's opset); the
    rewritten model is checked again in full, so an input finding that was not actually
    repaired still refuses.
    """
    repaired = _repaired_by(passes)
    if not repaired:
        return report
    kept = [f for f in report.findings if f.severity != "error" or f.rule not in repaired]
    return dataclasses.replace(report, findings=kept)


def with_implied_imports(
    model: ir.Model, passes: Sequence[ir.passes.PassBase]
) -> list[ir.passes.PassBase]:
    """``passes``, after an :class:`~qlrewrite.passes.imports.ImpliedImportsPass` when the
    model uses com.microsoft without importing it and no pass repairs what that pass
    repairs (``check --fix`` repairs it itself): the output imports what ONNX Runtime
    read."""
    implied = set(ImpliedImportsPass.repairs_rules)
    if _repaired_by(passes) & implied or not implied_imports(model):
        return list(passes)
    return [ImpliedImportsPass(), *passes]


def _repaired_by(passes: Sequence[ir.passes.PassBase]) -> set[str]:
    """The rule codes whose findings one of ``passes`` declares it repairs."""
    return {code for p in passes if isinstance(p, RepairsFindings) for code in p.repairs_rules}


def run_passes(
    model: ir.Model,
    passes: Sequence[ir.passes.PassBase],
    context: RunContext | None = None,
) -> tuple[ir.Model, list[ir.passes.PassResult]]:
    """Run ``passes`` in order on ``model``: the resulting model and each pass's result.

    Each :class:`~qlrewrite.passes.context.ContextPass` gets ``context`` (one for the
    run when not given; its ``model`` must be ``model``), which follows the passes.
    A :class:`~qlrewrite.errors.QlrewriteError` raised inside a pass (a refusal, a usage
    error) reaches the caller as itself, not wrapped in onnx_ir's PassError.
    """
    context = context if context is not None else RunContext.fresh(model)
    if context.model is not model:
        raise ValueError("the run context describes another model")
    results = []
    for rewrite_pass in passes:
        try:
            result = _run_one(rewrite_pass, context)
        except (ir.passes.PassError, ir.passes.InvariantError) as exc:
            cause: BaseException | None = exc
            while cause is not None and not isinstance(cause, QlrewriteError):
                cause = cause.__cause__
            if cause is None:
                raise
            raise cause from exc
        results.append(result)
        context.advance(rewrite_pass, result)
    return context.model, results


def _run_one(rewrite_pass: ir.passes.PassBase, context: RunContext) -> ir.passes.PassResult:
    """``rewrite_pass`` on the context's model, handed the context if it reads one."""
    if not isinstance(rewrite_pass, ContextPass):
        return rewrite_pass(context.model)
    with rewrite_pass.handed(context):
        return rewrite_pass(context.model)


def _summary(result: ir.passes.PassResult) -> dict[str, int]:
    return result.summary if isinstance(result, RewritePassResult) else {}


def _not_looked_at(report: Report, model: ir.Model, command: str) -> list[str]:
    """Warnings naming what the command leaves as it was: quantized nodes of kinds
    qlrewrite neither checks nor rewrites, and for fold the QOperator nodes."""
    notes = []
    if report.unchecked:
        words = describe_unchecked(report.unchecked, "checked or rewritten")
        notes.append(f"{words}; left as they are")
    if command == "fold" and (folds_not := not_folded(model)) is not None:
        notes.append(folds_not)
    return notes


def _repairs(result: ir.passes.PassResult) -> list[tuple[str, str, str]]:
    """The findings a pass repaired (``check --fix``): (code, where, what)."""
    return result.changes if isinstance(result, RewritePassResult) else []


def _warnings(result: ir.passes.PassResult) -> list[Any]:
    return result.warnings if isinstance(result, RewritePassResult) else []


def validate_output(
    model: ir.Model,
    source: Path | None = None,
    original: onnx.ModelProto | None = None,
    *,
    runtime_ops: frozenset[str] = frozenset(),
    weightless: onnx.ModelProto | None = None,
    checked: Checked | None = None,
) -> list[str]:
    """Refuse a rewritten model that ONNX's checker or our check rejects; return warnings.

    Graph inputs and outputs declared without a shape (as some exporters write them, and
    as ONNX Runtime runs them) do not refuse it: see :func:`_full_check` (a warning).
    ``original``: a weight-free proto of the input; when onnx.checker rejects the output,
    it is checked too, and an input the checker rejects as well is named as the cause.
    ``runtime_ops``: ops of the ONNX domain that ONNX does not define and the input already
    had (:func:`runtime_only_ops`), checked as custom ops. ``weightless``: the
    :func:`~qlrewrite.io.weightless.weightless_proto` of ``model`` as it is now, if the caller
    made it (the save reuses it); it is left as it came. ``checked``: what the input
    check judged of each node (:mod:`qlrewrite.checking.untouched`); the node rules are not run
    again on the nodes the passes left exactly as that check saw them.
    """
    proto = weightless if weightless is not None else weightless_proto(model)
    try:
        warnings, inferred = _full_check(proto, runtime_ops)
    except _CHECKER_ERRORS as exc:
        problem = _checker_problem(original, runtime_ops) if original is not None else None
        if problem is not None:
            where = f"{source}: " if source else ""
            raise Refusal(
                f"{where}the input model is invalid (onnx.checker: {problem}); nothing written"
            ) from exc
        raise Refusal(
            f"the rewritten model would be invalid (onnx.checker: {_first_line(exc)})"
        ) from exc
    inference = Inference(model, inferred=inferred)
    skip = frozenset()
    if checked is not None:
        skip = untouched(checked, proto, inference.table(MAIN))
    report = _check(model, source, inference, skip)
    if report.errors:
        raise FindingsRefusal(
            f"the rewritten model would have {len(report.errors)} error finding(s); "
            "nothing written",
            report,
        )
    return warnings


#: What onnx.checker's full check raises on a model it rejects: ONNX's shape inference
#: raises a plain ValueError for some malformed models ("Invalid tensor data type 0.").
_CHECKER_ERRORS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _checker_problem(proto: onnx.ModelProto, runtime_ops: frozenset[str]) -> str | None:
    """onnx.checker's first complaint about ``proto`` (checked as the output is), or None."""
    try:
        _full_check(proto, runtime_ops)
    except _CHECKER_ERRORS as exc:
        return _first_line(exc)
    return None


def _full_check(
    proto: onnx.ModelProto, runtime_ops: frozenset[str] = frozenset()
) -> tuple[list[str], onnx.ModelProto]:
    """onnx.checker's full check. Main-graph inputs / outputs without a shape get an empty
    one for the structural check only, which requires the field; strict shape inference
    (the rest of the full check) runs without it, as ONNX Runtime does. Nodes of the ONNX
    domain that ONNX does not define and the input already had (``runtime_ops``: ONNX
    Runtime registers a few there, e.g. the SimplifiedLayerNormalization of ONNX Runtime
    GenAI's models) are checked as custom ops. Returns warnings naming both, and the
    inferred proto (the output check reads its types). ``proto`` is left as it came."""
    unknown = [
        n for n in proto.graph.node if n.domain in ("", "ai.onnx") and n.op_type in runtime_ops
    ]
    for node in unknown:
        node.domain = _UNCHECKED_DOMAIN
    if unknown:
        proto.opset_import.append(onnx.helper.make_opsetid(_UNCHECKED_DOMAIN, 1))
    try:
        warnings, inferred = _checked(proto)
    finally:
        for node in unknown:
            node.domain = ""
        if unknown:
            del proto.opset_import[-1]
    if unknown:
        ops = ", ".join(sorted({node.op_type for node in unknown}))
        warnings.append(
            f"{ops}: not ONNX operators (ONNX Runtime defines them in the ONNX domain); "
            "onnx.checker checked them as custom operators"
        )
    return warnings, inferred


_UNCHECKED_DOMAIN = "qlrewrite.qdq.left_alone"


def runtime_only_ops(model: ir.Model) -> frozenset[str]:
    """Ops of the model's main graph in the ONNX domain with no ONNX schema at its opset."""
    opset = onnx_opset(model)
    if opset is None:
        return frozenset()
    found = set()
    for node in model.graph:
        if normalize_domain(node.domain) != "" or node.op_type in found:
            continue
        try:
            onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            found.add(node.op_type)
    return frozenset(found)


def _checked(proto: onnx.ModelProto) -> tuple[list[str], onnx.ModelProto]:
    """onnx.checker's full check as it runs it (the structural check, then strict shape
    inference with type checks), keeping the inferred proto."""
    shapeless = _shapeless_io(proto.graph)
    for info in shapeless:
        info.type.tensor_type.shape.SetInParent()
    onnx.checker.check_model(proto)
    for info in shapeless:
        info.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    if not shapeless:
        return [], inferred
    names = ", ".join(info.name for info in shapeless)
    return [
        f"graph input/output {names} declared without a shape (as in the input); "
        "onnx.checker's full check ran without it"
    ], inferred


def _shapeless_io(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The graph's tensor inputs and outputs declared without a shape."""
    return [
        info
        for info in (*graph.input, *graph.output)
        if info.type.HasField("tensor_type") and not info.type.tensor_type.HasField("shape")
    ]


def _pass_name(p: ir.passes.PassBase) -> str:
    return getattr(p, "name", type(p).__name__)
