"""`qlrewrite check`: validate every quantized node (Q/DQ, MatMulNBits, GatherBlockQuantized)
of models and folders of models."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from qlrewrite import atomic, model_io, output_guard, pipeline, project, render
from qlrewrite.cli import _check_views
from qlrewrite.cli._common import (
    debug_enabled,
    debug_option,
    err_console,
    out_console,
    progress,
    run_command,
    show_progress,
    verify_from,
    verify_option_list,
)
from qlrewrite.config import Settings, settings_for
from qlrewrite.errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK
from qlrewrite.escape import escape
from qlrewrite.findings import Report, fixable
from qlrewrite.project import enabled_codes

__all__ = ["check_command"]


def _verify_options(func: Callable[..., object]) -> Callable[..., object]:
    """--verify and its details, for --fix."""
    for option in reversed(verify_option_list()):
        func = option(func)
    return func


@click.command(
    "check",
    epilog="""\b
Examples:
  qlrewrite check model.onnx
  qlrewrite check models/ --strict --jobs 4
  qlrewrite check models/ --format sarif -o qlrewrite.sarif
  qlrewrite check models/ --format github          # annotations in GitHub Actions
  qlrewrite check model.onnx --select QL4 --ignore QL406,QL5
  qlrewrite check model.onnx --format json | jq '.files[].findings[].rule'
  qlrewrite check models/ --isolated               # no configuration file
  qlrewrite check models/ --diff                   # what --fix would change
  qlrewrite check model.onnx --fix --verify        # writes model.fix.onnx, proven in ORT
  qlrewrite check models/ --fix --in-place --unsafe-fixes

\b
Configuration: [tool.qlrewrite] in pyproject.toml, or qlrewrite.toml, found from each
model's folder upwards (keys: select, extend-select, ignore, strict, exclude,
per-file-ignores, per-node-ignores, output-format); the command line overrides it.

\b
Exit codes: 0 no error findings (warnings allowed); 1 at least one error finding
(with --strict: any finding); 2 usage error, or a model that could not be read or a
folder without .onnx files (the other models are still checked and reported; 2 wins
over 1). `qlrewrite rules` lists the rules.
""",
)
@click.argument(
    "models", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="MODEL_OR_DIR..."
)
@click.option(
    "--output-format",
    "--format",
    "fmt",
    type=click.Choice(render.FORMATS),
    default=None,
    help="Output format (text: tables on a terminal, one line per finding otherwise; default: "
    "output-format of the configuration, else text). --format is the same option.",
)
@click.option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Only these rule codes or prefixes (comma separated, repeatable), e.g. QL4,QL501; "
    "replaces the configuration's select.",
)
@click.option(
    "--extend-select",
    multiple=True,
    metavar="CODES",
    help="Rule codes or prefixes added to the selection.",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="CODES",
    help="Skip these rule codes or prefixes (the more specific of select/ignore wins).",
)
@click.option(
    "--strict/--no-strict",
    default=None,
    help="Exit 1 on warnings too (default: strict of the configuration, else off).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Use this configuration file (a qlrewrite.toml, or a pyproject.toml with "
    "[tool.qlrewrite]) for every model, instead of searching.",
)
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option(
    "--force-exclude",
    is_flag=True,
    help="Apply exclude to models named on the command line too (for pre-commit).",
)
@click.option(
    "--show-all",
    is_flag=True,
    help="Print every finding (by default findings repeated on many nodes print as a group).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Check N models at a time in worker processes (default: the usable cores).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to this file (atomically) instead of stdout.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line.")
@click.option(
    "--exit-zero",
    is_flag=True,
    help="Exit 0 even with findings (an unreadable model is still exit 2).",
)
@click.option(
    "--statistics",
    is_flag=True,
    help="Print the number of findings per rule instead of the findings (text or json).",
)
@click.option(
    "--show-settings",
    is_flag=True,
    help="Print each model's configuration file and resolved settings; check nothing.",
)
@click.option(
    "--show-files", is_flag=True, help="Print the models that would be checked; check nothing."
)
@click.option(
    "--fix",
    is_flag=True,
    help="Repair the findings that have a safe fix (ONNX Runtime's outputs stay "
    "bit-identical), write the model (default <stem>.fix.onnx beside it) and report "
    "what remains.",
)
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    help="With --fix / --diff, also apply the unsafe fixes (`qlrewrite rules` lists them).",
)
@click.option(
    "--diff",
    is_flag=True,
    help="Print what --fix would change, node by node; write nothing (exit 1 if anything "
    "would change).",
)
@click.option("--in-place", is_flag=True, help="With --fix, overwrite the models.")
@click.option(
    "--fix-output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --fix and one model: write the fixed model here.",
)
@_verify_options
@debug_option
@run_command
def check_command(  # noqa: PLR0917 (one parameter per click option)
    models: tuple[Path, ...],
    fmt: str | None,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    strict: bool | None,
    config_file: Path | None,
    isolated: bool,
    force_exclude: bool,
    show_all: bool,
    jobs: int | None,
    output: Path | None,
    quiet: bool,
    exit_zero: bool,
    statistics: bool,
    show_settings: bool,
    show_files: bool,
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    in_place: bool,
    fix_output: Path | None,
    **verify_args: object,
) -> None:
    """Check every QuantizeLinear / DequantizeLinear node, and com.microsoft MatMulNBits /
    GatherBlockQuantized, against its opset's rules.

    Reads no weights: a model of any size checks in about a second. With --fix, the
    findings that have a safe fix are repaired through the same path as the rewriting
    commands (refusals, atomic write, --verify).
    """
    verify = verify_from(verify_args)
    if config_file is not None and isolated:
        raise click.UsageError("--config and --isolated: give one of them")
    _check_fix_options(fix, diff, in_place, fix_output, verify is not None, len(models))
    selection = _selection(select, ignore, extend_select, strict)
    found = project.collect_models(
        models, config=config_file, isolated=isolated, force_exclude=force_exclude
    )
    run_settings = settings_for(Path.cwd(), config=config_file, isolated=isolated)
    fmt = fmt or run_settings.output_format or "text"
    _show(found, selection, fmt, show_files=show_files, show_settings=show_settings)
    if statistics and fmt not in {"text", "json"}:
        raise click.UsageError("--statistics prints text or json, not " + fmt)
    targets = [t for t in found if isinstance(t, project.Target)]
    fixing = _Fixing(fix, diff, unsafe_fixes, fix_output, in_place, verify, output)
    with contextlib.ExitStack() as stack:
        reads = _files_read(targets, config_file, run_settings, writes=output or fix)
        pending = _pending_report(stack, output, reads)
        checked, reports = _check_found(found, targets, selection, jobs, quiet=quiet)
        reports, refused = _fix_stage(fixing, targets, checked, reports, selection, reads, quiet)
        if statistics:
            _print_statistics(reports, fmt, pending)
        else:
            codes = _listed_codes(targets, selection)
            _print_reports(reports, fmt, pending, quiet=quiet, show_all=show_all, codes=codes)
    if fmt == "text" and not quiet and not statistics:
        _print_fixable(reports, unsafe_fixes)
    sys.exit(_exit_code(reports, _strictness(targets, selection), refused, exit_zero))


def _pending_report(
    stack: contextlib.ExitStack, output: Path | None, reads: list[Path]
) -> atomic.PendingFile | None:
    """``-o``: the report file, refused if it is a file the run reads."""
    if output is None:
        return None
    output_guard.refuse_if_read(output, reads, "-o")
    return stack.enter_context(atomic.PendingFile(output))


def _selection(
    select: tuple[str, ...], ignore: tuple[str, ...], extend: tuple[str, ...], strict: bool | None
) -> project.Selection:
    """The command line's rule selection; a wrong code is a usage error (exit 2) here."""
    selection = project.Selection(select, ignore, extend, strict)
    enabled_codes(Settings(), selection, Path())
    return selection


@dataclasses.dataclass(frozen=True)
class _Fixing:
    """What ``--fix`` / ``--diff`` were asked to do."""

    fix: bool
    diff: bool
    unsafe: bool
    output: Path | None
    in_place: bool
    verify: Any
    report: Path | None  # -o


def _fix_stage(  # noqa: PLR0917 (the run's state, passed on as it is)
    fixing: _Fixing,
    targets: Sequence[project.Target],
    checked: Sequence[Report],
    reports: list[Report],
    selection: project.Selection,
    reads: list[Path],
    quiet: bool,
) -> tuple[list[Report], bool]:
    """``--fix`` / ``--diff``: refuse shared or protected outputs first, fix each model,
    print the diff (and exit) or return the reports after the fixes and whether a fix
    was refused."""
    if not (fixing.fix or fixing.diff):
        return reports, False
    if fixing.fix:
        to_fix = [
            t
            for t, r in zip(targets, checked, strict=True)
            if fixable(r.findings, unsafe=fixing.unsafe)
        ]
        _refuse_fix_outputs(to_fix, fixing, reads)
    options = {"unsafe": fixing.unsafe, "output": fixing.output, "in_place": fixing.in_place,
               "dry_run": fixing.diff, "verify": fixing.verify}  # fmt: skip
    outcomes = _fix_all(targets, checked, options, quiet=quiet)
    refused = any(o.refused for o in outcomes)
    if fixing.diff:
        _print_diff(outcomes, quiet=quiet)
        changed = any(o.changes for o in outcomes)
        sys.exit(_diff_exit(reports, _strictness(targets, selection), changed or refused))
    return _after_fixes(reports, targets, outcomes, selection), refused


def _listed_codes(
    targets: Sequence[project.Target], selection: project.Selection
) -> frozenset[str]:
    """The rules checked on some model (SARIF lists them); the command line's selection
    when no model was found."""
    if not targets:
        return enabled_codes(Settings(), selection, Path())
    return frozenset().union(*(enabled_codes(t.settings, selection, t.path) for t in targets))


def _check_found(
    found: Sequence[project.Target | Report],
    targets: Sequence[project.Target],
    selection: project.Selection,
    jobs: int | None,
    *,
    quiet: bool,
) -> tuple[list[Report], list[Report]]:
    """The reports of the models checked, and every report in the order found (files
    that could not be read too), then the unused suppressions'."""
    checked = _check_all(targets, selection, jobs, quiet=quiet)
    by_target = iter(checked)
    reports = [t if isinstance(t, Report) else next(by_target) for t in found]
    reports += project.unused_suppressions(targets, checked, selection)
    return checked, reports


def _check_all(
    targets: Sequence[project.Target],
    selection: project.Selection,
    jobs: int | None,
    *,
    quiet: bool,
) -> list[Report]:
    """Check ``targets`` (worker processes with ``jobs`` > 1), a progress bar on a terminal."""
    enabled = show_progress(quiet) and len(targets) > 1
    with progress("checking", len(targets), enabled) as bar:
        return project.check_targets(
            targets,
            selection,
            jobs=jobs or project.default_jobs(),
            debug=debug_enabled(),
            advance=bar.advance,
        )


def _exit_code(reports: Sequence[Report], strict_of: Any, refused: bool, exit_zero: bool) -> int:
    """2 an unreadable input, 1 findings (or a refused fix), else 0; ``--exit-zero``
    turns 1 into 0, never 2."""
    code = project.exit_code(reports, strict=strict_of)
    code = max(code, EXIT_FINDINGS) if refused and code != EXIT_INPUT else code
    return EXIT_OK if exit_zero and code == EXIT_FINDINGS else code


def _show(
    found: Sequence[project.Target | Report],
    selection: project.Selection,
    fmt: str,
    *,
    show_files: bool,
    show_settings: bool,
) -> None:
    """``--show-files`` / ``--show-settings``: print, then exit (nothing is checked)."""
    if show_files and show_settings:
        raise click.UsageError("--show-files and --show-settings: give one of them")
    if show_files:
        sys.exit(_check_views.show_files(found))
    if show_settings:
        sys.exit(_check_views.show_settings(found, selection, fmt))


def _print_statistics(
    reports: Sequence[Report], fmt: str, pending: atomic.PendingFile | None
) -> None:
    """``--statistics``: findings per rule (unreadable models said on stderr)."""
    for report in reports:
        if report.load_error:
            click.echo(f"qlrewrite: error: {escape(report.path or '')}: "
                       f"{escape(report.load_error)}", err=True)  # fmt: skip
    rows = _check_views.statistics(reports)
    if fmt == "json":
        _emit(json.dumps(rows, indent=2) + "\n", pending)
    else:
        _emit(_check_views.statistics_text(rows), pending)


def _diff_exit(reports: Sequence[Report], strict_of: Any, changed: bool) -> int:
    """``--diff`` keeps the exit codes of ``check``: an unreadable input (shown on stderr)
    is 2, a remaining error finding or a change to make is 1."""
    for report in reports:
        if report.load_error:
            click.echo(f"qlrewrite: error: {escape(report.path or '')}: "
                       f"{escape(report.load_error)}", err=True)  # fmt: skip
    code = project.exit_code(reports, strict=strict_of)
    return code if code == EXIT_INPUT else max(code, EXIT_FINDINGS if changed else EXIT_OK)


def _files_read(
    targets: Sequence[project.Target], config: Path | None, settings: Settings, *, writes: Any
) -> list[Path]:
    """Every file the run reads: the models, their external data, the configuration
    files that apply to them (an output may replace none of them); [] unless the run
    ``writes`` (-o or --fix: reading every model's proto twice costs time)."""
    if not writes:
        return []
    reads = [read for t in targets for read in model_io.files_read_by(t.path)]
    configs = [config, settings.path, *(t.settings.path for t in targets)]
    return reads + sorted({Path(c) for c in configs if c is not None})


def _refuse_fix_outputs(
    targets: Sequence[project.Target], fixing: _Fixing, reads: list[Path]
) -> None:
    """Before anything is written: no fixed model (or its data file) written over the
    report, no two models fixed into one file, and no fix written over a file the run
    reads (another model, its data, a configuration file)."""
    output, in_place = fixing.output, fixing.in_place
    pairs = [(t.path, pipeline.resolve_output(t.path, output, in_place, "fix")) for t in targets]
    if not in_place:  # in place, each model replaces itself (the rewrite checks its reads)
        output_guard.refuse_shared_outputs(pairs)
    if fixing.report is not None:
        label = "--fix-output" if output is not None else "the fixed model"
        fixed = [pipeline.model_output(f"{label} of {src}", out) for src, out in pairs]
        report = output_guard.Output("the report (-o)", fixing.report)
        output_guard.refuse_colliding([*fixed, report])
    if in_place:
        return
    for source, target in pairs:
        own = set(model_io.files_read_by(source))
        flag = "--fix-output" if output is not None else f"the fix of {source} into"
        output_guard.refuse_if_read(target, [r for r in reads if r not in own], flag)


def _check_fix_options(  # noqa: PLR0917 (the options, as given)
    fix: bool, diff: bool, in_place: bool, fix_output: Path | None, verify: bool, models: int
) -> None:
    if fix and diff:
        raise click.UsageError("--fix and --diff: give one of them")
    for flag, given in (("--in-place", in_place), ("--fix-output", fix_output is not None),
                        ("--verify", verify)):  # fmt: skip
        if given and not fix and not (diff and flag == "--verify"):
            raise click.UsageError(f"{flag} needs --fix")
    if fix_output is not None and models != 1:
        raise click.UsageError("--fix-output takes one model; use --in-place for several")


def _fix_all(
    targets: Sequence[project.Target],
    reports: Sequence[Report],
    options: dict,
    *,
    quiet: bool,
) -> list[project.FixOutcome]:
    """Fix each model that has fixable findings, one at a time; say what happened."""
    outcomes = []
    for target, report in zip(targets, reports, strict=True):
        outcome = project.fix_target(target, report, **options)
        if outcome is None:
            continue
        outcomes.append(outcome)
        if outcome.refused:
            click.echo(
                f"qlrewrite: {escape(str(target.path))}: fix refused: {escape(outcome.refused)}",
                err=True,
            )
        elif outcome.output is not None and not quiet:
            counts = ", ".join(f"{c} x{n}" for c, n in _count_codes(outcome.changes).items())
            line = f"fixed {target.path} -> {outcome.output}: {len(outcome.changes)} change(s)"
            err_console.print(escape(line + (f" [{counts}]" if counts else "")), markup=False)
        if outcome.verification is not None:
            click.echo(f"  verify: {outcome.verification.describe()}", err=True)
    return outcomes


def _count_codes(changes: Sequence[tuple[str, str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for code, _, _ in changes:
        counts[code] = counts.get(code, 0) + 1
    return counts


def _print_diff(outcomes: Sequence[project.FixOutcome], *, quiet: bool) -> None:
    """``--diff``: per model, one line per change (code, where, what), then a count."""
    lines = []
    for outcome in outcomes:
        if not outcome.changes:
            continue
        path = escape(str(outcome.path))
        lines += [f"--- {path}", f"+++ {path} (fixed)"]
        lines += [
            f"  {code} {escape(where)}: {escape(what)}" for code, where, what in outcome.changes
        ]
    if lines:
        click.echo("\n".join(lines))
    if not quiet:
        changes = sum(len(o.changes) for o in outcomes)
        models = sum(1 for o in outcomes if o.changes)
        err_console.print(f"{changes} change(s) would be made to {models} model(s)")


def _after_fixes(
    reports: list[Report],
    targets: Sequence[project.Target],
    outcomes: Sequence[project.FixOutcome],
    selection: project.Selection,
) -> list[Report]:
    """The reports with each fixed model replaced by its output's report (what remains)."""
    written = {str(o.path): o.output for o in outcomes if o.output is not None}
    settings = {str(t.path): t.settings for t in targets}
    replaced = []
    for report in reports:
        output = written.get(str(report.path))
        if output is None:
            replaced.append(report)
            continue
        target = project.Target(Path(output), settings[str(report.path)])
        replaced.append(project.check_one(target, selection))
    return replaced


def _print_fixable(reports: Sequence[Report], unsafe: bool) -> None:
    """``N fixable with --fix`` (and how many more with --unsafe-fixes) on stderr."""
    findings = [f for r in reports for f in r.findings]
    safe = len(fixable(findings))
    more = len(fixable(findings, unsafe=True)) - safe
    if not safe and not more:
        return
    if unsafe:
        safe, more = safe + more, 0
    line = f"{safe} fixable with --fix" + (" --unsafe-fixes" if unsafe else "") if safe else ""
    if more:
        extra = f"{more} more with --fix --unsafe-fixes"
        line = f"{line} ({extra})" if line else f"{more} fixable with --fix --unsafe-fixes"
    err_console.print(line)


def _strictness(targets: Sequence[project.Target], selection: project.Selection):
    """Per report: --strict / --no-strict, else the strict of the model's configuration
    (of the configuration itself for its report: QL901 on its entries)."""
    settings = {str(t.settings.path): t.settings for t in targets if t.settings.path}
    settings |= {str(t.path): t.settings for t in targets}

    def strict(report: Report) -> bool:
        if selection.strict is not None:
            return selection.strict
        found = settings.get(str(report.path))
        return bool(found.strict) if found is not None else False

    return strict


def _print_reports(
    reports: Sequence[Report],
    fmt: str,
    pending: atomic.PendingFile | None,
    *,
    quiet: bool,
    show_all: bool,
    codes: frozenset[str],
) -> None:
    """Render ``reports`` to stdout, or into ``pending`` (committed) for ``-o``."""
    reports = [render.escaped_report(r) for r in reports]
    output = pending.path if pending is not None else None
    to_terminal = output is None and out_console.is_terminal
    for report in reports:  # errors on stderr (a text report file keeps its line too)
        if report.load_error:
            click.echo(f"qlrewrite: error: {report.path}: {report.load_error}", err=True)
    if fmt == "text" and to_terminal:
        render.print_text_tables(
            reports, out_console, summary=not quiet, show_all=show_all, load_errors=False
        )
    elif fmt == "text":
        lines = render.text_lines(
            reports, summary=not quiet, show_all=show_all, load_errors=output is not None
        )
        text = "\n".join(lines)
        _emit(text + "\n" if text else "", pending)
    else:
        _emit(render.render(reports, fmt, codes=codes), pending)
    if output is not None and not quiet:
        line = f"{render.summary_line(reports)}; report written to {escape(str(output))}"
        err_console.print(line, markup=False)


def _emit(text: str, pending: atomic.PendingFile | None) -> None:
    if pending is None:
        click.echo(text, nl=False)
    else:
        pending.write(text)
        pending.commit()
