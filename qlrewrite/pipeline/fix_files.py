"""`qlrewrite check --fix` / ``--diff`` as a library: each model's fixable findings
repaired through the rewrite path every command takes, in one run per model.

The passes are :func:`qlrewrite.passes.commands.fix_passes` (read from the rules' own
fixes); :func:`fix_target` runs them once through :func:`qlrewrite.pipeline.flow.rewrite`
(refusals, the output check, atomic write, ``--verify``). ``--diff`` is that run without
writing: the changes come from its pass results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from qlrewrite.checking import project
from qlrewrite.errors import Refusal
from qlrewrite.findings import Finding, Report, fixable
from qlrewrite.io import model_io, output_plan
from qlrewrite.io.output_plan import model_output, resolve_output
from qlrewrite.passes.commands import fix_passes
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.pipeline.flow import rewrite
from qlrewrite.verify.verify import Verification, VerificationFailed, VerifyOptions

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

__all__ = [
    "FixOptions",
    "FixOutcome",
    "fix_target",
    "fix_targets",
    "fixed_reports",
    "refuse_fix_outputs",
]

Change = tuple[str, str, str]  # (code, where, what)


@dataclasses.dataclass(frozen=True)
class FixOptions:
    """What ``check --fix`` / ``--diff`` were asked to do."""

    unsafe: bool = False  # --unsafe-fixes
    output: Path | None = None  # --fix-output (one model)
    in_place: bool = False
    diff: bool = False  # what would change; nothing written
    verify: VerifyOptions | None = None
    #: --target: the runtimes the target findings' fixes rewrite for (empty: each
    #: model's configured ``target``).
    targets: tuple[str, ...] = ()


@dataclasses.dataclass
class FixOutcome:
    """What ``check --fix`` / ``--diff`` did to one model."""

    path: Path
    changes: list[Change]  # in the order applied
    fixable: int  # findings the fixes were for
    output: Path | None = None  # the file written (None: --diff, nothing to change, refused)
    refused: str | None = None  # why nothing was written
    verification: Verification | None = None  # the --verify result, when asked


def fix_target(
    path: Path, report: Report, options: FixOptions, runtimes: Sequence[str] = ()
) -> FixOutcome | None:
    """Repair ``report``'s fixable findings of the model at ``path`` in one run of
    :func:`qlrewrite.pipeline.flow.rewrite` (nothing written when no fix changed anything, or
    on ``options.diff``); None when nothing is fixable or the model was not read.
    ``runtimes``: the ``--target`` specs the target findings' rewrites are for (default:
    ``options.targets``)."""
    if report.load_error:
        return None
    wanted = fixable(report.findings, unsafe=options.unsafe)
    passes = fix_passes(wanted, unsafe=options.unsafe, targets=_parsed(runtimes or options.targets))
    if not passes:
        return None
    outcome = FixOutcome(path, [], len(wanted))
    outcome.refused = _unfixed_refusal(report, wanted)
    if outcome.refused:  # the rewrite would refuse the input: say why in the words of check
        return outcome
    try:
        result = rewrite(
            path,
            passes,
            command="fix",
            output=options.output,
            in_place=options.in_place,
            dry_run=options.diff,
            verify=options.verify,
            only_if_repaired=True,
        )
    except VerificationFailed as exc:
        outcome.refused, outcome.verification = str(exc), exc.verification
        return outcome
    except Refusal as exc:
        outcome.refused = str(exc).removeprefix(f"{path}: ")
        return outcome
    outcome.changes = [
        change
        for r in result.pass_results
        if isinstance(r, RewritePassResult)
        for change in r.changes
    ]
    outcome.output, outcome.verification = result.output, result.verification
    return outcome


def fix_targets(
    targets: Sequence[project.Target],
    reports: Sequence[Report],
    options: FixOptions,
    on_outcome: Callable[[FixOutcome], None] = lambda _outcome: None,
) -> list[FixOutcome]:
    """Fix each model that has fixable findings, one at a time (``reports``: their
    checks, same order); ``on_outcome`` hears each outcome as it is made."""
    outcomes = []
    for target, report in zip(targets, reports, strict=True):
        outcome = fix_target(
            target.path, report, options, options.targets or target.settings.target
        )
        if outcome is not None:
            outcomes.append(outcome)
            on_outcome(outcome)
    return outcomes


def _parsed(specs: Sequence[str]) -> tuple[Target, ...]:
    if not specs:
        return ()
    from qlrewrite.targets.spec import parse_targets

    return parse_targets(tuple(specs))


def _unfixed_refusal(report: Report, wanted: Sequence[Finding]) -> str | None:
    """Why the rewrite would refuse the model: error findings no fix is for (None: none)."""
    fixed = set(wanted)  # findings are hashable: a list here was quadratic in the findings
    unfixed = [f for f in report.errors if f not in fixed]
    if not unfixed:
        return None
    codes = ", ".join(sorted({f.rule for f in unfixed}))
    return f"{len(unfixed)} error finding(s) without a fix ({codes}); nothing written"


def refuse_fix_outputs(
    targets: Sequence[project.Target],
    reports: Sequence[Report],
    options: FixOptions,
    reads: Sequence[Path],
    *,
    report: Path | None = None,
) -> None:
    """Before anything is written: no fixed model (or its data file) written over the
    ``report`` (``-o``), no two models fixed into one file, and no fix written over a
    file the run reads (another model, its data, a configuration file)."""
    if options.diff:
        return
    output, in_place = options.output, options.in_place
    pairs = [
        (t.path, resolve_output(t.path, output, in_place, "fix"))
        for t, r in zip(targets, reports, strict=True)
        if fixable(r.findings, unsafe=options.unsafe)
    ]
    if not in_place:  # in place, each model replaces itself (the rewrite checks its reads)
        output_plan.refuse_shared_outputs(pairs)
    if report is not None:
        label = "--fix-output" if output is not None else "the fixed model"
        fixed = [model_output(f"{label} of {src}", out) for src, out in pairs]
        output_plan.refuse_colliding([*fixed, output_plan.Output("the report (-o)", report)])
    if in_place:
        return
    for source, target in pairs:
        own = set(model_io.files_read_by(source))
        flag = "--fix-output" if output is not None else f"the fix of {source} into"
        output_plan.refuse_if_read(target, [r for r in reads if r not in own], flag)


def fixed_reports(
    reports: Sequence[Report],
    targets: Sequence[project.Target],
    outcomes: Sequence[FixOutcome],
    selection: project.Selection,
) -> list[Report]:
    """``reports`` with each fixed model's replaced by its output's report (what remains);
    a model whose fix was refused keeps its findings, none of them marked fixable."""
    written = {str(o.path): o.output for o in outcomes if o.output is not None}
    refused = {str(o.path) for o in outcomes if o.refused}
    settings = {str(t.path): t.settings for t in targets}
    replaced = []
    for report in reports:
        output = written.get(str(report.path))
        if output is None:
            replaced.append(_unfixable(report) if str(report.path) in refused else report)
            continue
        target = project.Target(Path(output), settings[str(report.path)])
        replaced.append(project.check_one(target, selection))
    return replaced


def _unfixable(report: Report) -> Report:
    """``report`` of a model whose fix was refused: no finding says ``--fix`` repairs it
    (the run just refused to)."""
    findings = [dataclasses.replace(f, fix=None) if f.fix else f for f in report.findings]
    return dataclasses.replace(report, findings=findings)
