"""The rewrite of a model file, as every rewriting command runs it (:func:`rewrite`):
load, decide the outputs, rewrite (:mod:`qlrewrite.pipeline.in_memory`), stage, verify,
commit, report."""

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

import onnx_ir as ir

from qlrewrite.errors import InputError, Refusal
from qlrewrite.io import atomic, model_io, tensors
from qlrewrite.io.output_plan import OutputPlan, Snapshot, plan_outputs
from qlrewrite.passes.manager import repairs_of
from qlrewrite.pipeline.in_memory import rewrite_model
from qlrewrite.verify.compare import verify_both
from qlrewrite.verify.verify import (
    Verification,
    VerificationFailed,
    Verifier,
    VerifyOptions,
    output_steps,
)

__all__ = ["RewriteResult", "rewrite"]


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
    loaded = _load_input(input_path)
    if external_data is None and loaded.external:  # decided on the input: a pass may
        external_data = True  # replace every external tensor
    plan = plan_outputs(
        input_path,
        loaded.reads,
        command=command,
        output=Path(output) if output else None,
        in_place=in_place,
        report=Path(report_path) if report_path is not None else None,
    )
    with contextlib.ExitStack() as stack:
        pending = stack.enter_context(atomic.PendingFile(plan.report)) if plan.report else None
        asked = (dry_run, external_data, max_size, verify, on_tensor_saved)
        run = _Run(command, plan, *asked, pending, loaded, started, only_if_repaired)
        result = _rewrite_guarded(loaded.model, passes, run)
        if pending is not None:
            pending.commit()
    return result


class _Input(NamedTuple):
    """The input of a rewrite as loaded (:func:`_load_input`)."""

    model: ir.Model
    reads: list[Path]  # the files it reads, the model file first
    snapshot: Snapshot  # of those files (the model file's taken before reading it)
    bytes: int  # of its initializers (from their shapes)
    external: bool  # whether an initializer is in an external data file


def _load_input(input_path: Path) -> _Input:
    """The input model, the files it reads and their snapshot, and its size; refused when
    unwritable."""
    as_read = Snapshot.of([Path(os.path.realpath(input_path))])  # before reading it
    model = model_io.load(input_path)
    if (problem := model_io.unwritable(model)) is not None:
        raise InputError(f"{input_path}: not a valid ONNX model ({problem})")
    reads = model_io.files_read(model)
    size, external = tensors.initializer_bytes(model), tensors.uses_external_data(model)
    return _Input(model, reads, Snapshot.of(reads, earlier=as_read), size, external)


def _rewrite_guarded(
    model: ir.Model, passes: Sequence[ir.passes.PassBase], run: _Run
) -> RewriteResult:
    """:func:`_rewrite_loaded`, with a failure while another run replaced the input (its
    lazily read data vanished) said as that."""
    try:
        return _rewrite_loaded(model, passes, run)
    except Exception:
        if run.loaded.snapshot.changed() is None:
            raise
        run.loaded.snapshot.refuse_if_changed(run.input_path)
        raise


@dataclasses.dataclass(frozen=True)
class _Run:
    """What one :func:`rewrite` call was asked, and what it set up before the passes."""

    command: str
    plan: OutputPlan  # every file the run writes
    dry_run: bool
    external_data: bool | None
    max_size: int | None
    verify: VerifyOptions | None
    on_tensor_saved: model_io.SaveCallback | None
    pending: atomic.PendingFile | None  # the --report, staged
    loaded: _Input  # the input as read (its files' snapshot, its size)
    started: float
    only_if_repaired: bool = False

    @property
    def input_path(self) -> Path:
        """The input model's file."""
        return self.plan.input

    @property
    def target(self) -> Path:
        """The output model's file."""
        return self.plan.target


def _writes(
    run: _Run, results: Sequence[ir.passes.PassResult], verifier: Verifier | None
) -> tuple[bool, Verifier | None]:
    """Whether the run writes its output, and the verifier still to run: on
    ``only_if_repaired``, neither when no pass repaired a finding."""
    if run.only_if_repaired and not any(repairs_of(r) for r in results):
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
    out = rewrite_model(model, passes, command=command, source=input_path, verifier=verifier)
    model, results, serialized = out.model, out.results, out.serialized
    changes, warnings = out.changes(), out.all_warnings()
    bytes_after = _refuse_over_max_size(model, run.max_size)
    writes, verifier = _writes(run, results, verifier)

    def result() -> RewriteResult:
        return RewriteResult(
            command=command,
            input=input_path,
            output=target if writes else None,
            written=writes,
            dry_run=dry_run,
            changes=changes,
            bytes_before=run.loaded.bytes,
            bytes_after=bytes_after,
            seconds=time.perf_counter() - run.started,
            model=model,
            warnings=warnings,
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
            keep=run.plan.keep,
            unchanged=lambda: run.loaded.snapshot.refuse_if_changed(run.input_path),
        )
    elif verifying:
        _save_to_temporary(save, run.target.name)


def _save_to_temporary(save: Callable[[Path], None], name: str) -> None:
    """``--dry-run --verify``: the model is staged in a temporary folder, then removed."""
    with tempfile.TemporaryDirectory(prefix="qlrewrite-verify-") as folder:
        save(Path(folder) / name)


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
