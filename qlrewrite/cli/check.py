"""`qlrewrite check`: validate every quantized node (Q/DQ, MatMulNBits, GatherBlockQuantized)
of models and folders of models."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from qlrewrite.checking import project, render
from qlrewrite.checking.config import Settings, settings_for
from qlrewrite.checking.formats import DEFAULT_FORMAT, FORMATS, RenderOptions, output_format
from qlrewrite.checking.formats.concise import fixable_phrase
from qlrewrite.checking.project import enabled_codes
from qlrewrite.cli import _check_views
from qlrewrite.cli._common import (
    RewriteCommand,
    debug_enabled,
    debug_option,
    err_console,
    for_people,
    out_console,
    output_format_option,
    print_verification,
    progress,
    run_command,
    show_progress,
    verify_from,
    verify_option_list,
)
from qlrewrite.findings import Report
from qlrewrite.io import atomic, model_io, output_plan
from qlrewrite.io.reading import STDIN
from qlrewrite.targets.runtimes import DOCUMENTED
from qlrewrite.text import escape

if TYPE_CHECKING:  # --fix imports it (and the pipeline, every pass) when given
    from qlrewrite.pipeline import fix_files as check_fix
    from qlrewrite.pipeline.fix_files import FixOptions

__all__ = ["check_command"]


def _verify_options(func: Callable[..., object]) -> Callable[..., object]:
    """--verify and its details, for --fix."""
    for option in reversed(verify_option_list()):
        func = option(func)
    return func


@click.command(
    "check",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite check model.onnx
  qlrewrite check models/ --strict --jobs 4
  qlrewrite check models/ --output-format sarif -o qlrewrite.sarif
  qlrewrite check models/ --output-format github   # annotations in GitHub Actions
  qlrewrite check model.onnx --select QL4 --ignore QL406,QL5
  cat model.onnx | qlrewrite check -              # - reads the model from stdin
  qlrewrite check model.onnx --output-format json | jq '.files[].findings[].rule'
  qlrewrite check models/ --isolated               # no configuration file
  qlrewrite check model.onnx --target ort==1.16 --target tensorrt   # deployable there?
  qlrewrite check models/ --diff                   # what --fix would change
  qlrewrite check model.onnx --fix --verify        # writes model.fix.onnx, proven in ORT
  qlrewrite check models/ --fix --in-place --unsafe-fixes

\b
Configuration: [tool.qlrewrite] in pyproject.toml, or qlrewrite.toml, found from each
model's folder upwards (keys: select, extend-select, ignore, strict, exclude,
per-file-ignores, per-node-ignores, output-format, target); the command line overrides
it.

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
@output_format_option(
    list(FORMATS),
    "Output format: "
    + "; ".join(f"{f.name}: {f.summary}" for f in FORMATS.values())
    + f" (default: output-format of the configuration, else {DEFAULT_FORMAT}).",
    default=None,
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
    "--target",
    multiple=True,
    metavar="SPEC",
    help="Also check what this runtime refuses (repeatable; QL7xx rules): ort (the installed "
    "release), ort==1.20, ort>=1.17 (flagged if any release in the range refuses), openvino, "
    f"{', '.join(DOCUMENTED)} (documented only). Replaces the configuration's target.",
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
def check_command(**given: Any) -> None:
    """Check every quantized node (Q/DQ, MatMulNBits, GatherBlockQuantized, QOperator) against
    its opset's rules and, with --target, against what a runtime accepts.

    Reads no weights: a model of any size checks in about a second. --fix repairs the
    findings that have a safe fix through the rewriting commands' path (atomic, --verify).
    """
    run = _parse(given)
    find = run.find
    found = project.collect_models(
        find.models, config=find.config, isolated=find.isolated, force_exclude=find.force_exclude
    )
    run_settings = settings_for(Path.cwd(), config=run.find.config, isolated=run.find.isolated)
    fmt = _format(run.show, run_settings.output_format)
    show = dataclasses.replace(run.show, fmt=fmt)
    _show(found, run.selection, show)
    _check_statistics_format(fmt, show.statistics)
    targets = [t for t in found if isinstance(t, project.Target)]
    strict = project.strictness(targets, run.selection)
    with contextlib.ExitStack() as stack:
        writes = show.output is not None or run.fixing is not None
        reads = _files_read(targets, find.config, run_settings, writes=writes)
        pending = _pending_report(stack, show.output, reads)
        checked, reports = _check_found(found, targets, run.selection, find.jobs, quiet=show.quiet)
        refused = False
        if run.fixing is not None:
            reports, refused = _fix_stage(run, targets, checked, reports, reads)
        _print_result(reports, targets, run.selection, show, pending)
    if _fixable_line_wanted(show) and not refused:  # a refused fix advertises no --fix
        _print_fixable(reports, run.fixing is not None and run.fixing.unsafe)
    sys.exit(project.exit_code(reports, strict=strict, refused=refused, exit_zero=show.exit_zero))


@dataclasses.dataclass(frozen=True)
class _Find:
    """Which models, under which configuration: the arguments, --config, --isolated,
    --force-exclude and --jobs."""

    models: tuple[Path, ...]
    config: Path | None
    isolated: bool
    force_exclude: bool
    jobs: int | None


@dataclasses.dataclass(frozen=True)
class _Show:
    """What is printed, and how: the format, -o, --quiet, --show-all, --statistics,
    --show-files, --show-settings and --exit-zero."""

    fmt: str | None
    output: Path | None
    quiet: bool
    show_all: bool
    statistics: bool
    show_files: bool
    show_settings: bool
    exit_zero: bool


@dataclasses.dataclass(frozen=True)
class _CheckRun:
    """The command line, parsed: ``fixing`` is None without --fix / --diff."""

    find: _Find
    selection: project.Selection
    show: _Show
    fixing: FixOptions | None


def _fields(cls: type, given: dict[str, Any]) -> Any:
    """``cls`` built from the click parameters named as its fields."""
    return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls)})


def _parse(given: dict[str, Any]) -> _CheckRun:
    """The options of one ``check`` run, grouped; usage errors (exit 2) raised here."""
    verify = verify_from(given)
    find = _fields(_Find, {**given, "config": given["config_file"]})
    show = _fields(_Show, {**given, "fmt": given["output_format"]})
    if find.config is not None and find.isolated:
        raise click.UsageError("--config and --isolated: give one of them")
    if show.show_files and show.show_settings:
        raise click.UsageError("--show-files and --show-settings: give one of them")
    fix, diff = given["fix"], given["diff"]
    in_place, output = given["in_place"], given["fix_output"]
    _check_fix_options(fix, diff, in_place, output, verify is not None, len(find.models))
    if (fix or diff) and any(str(m) == STDIN for m in find.models):
        raise click.UsageError("--fix and --diff rewrite model files: give a path, not - (stdin)")
    fixing = None
    if fix or diff:
        from qlrewrite.pipeline.fix_files import FixOptions

        unsafe = given["unsafe_fixes"]
        fixing = FixOptions(
            unsafe, output, in_place, diff=diff, verify=verify, targets=tuple(given["target"])
        )
    codes = (given["select"], given["ignore"], given["extend_select"])
    selection = _selection(*codes, given["strict"], given["target"])
    return _CheckRun(find, selection, show, fixing)


def _print_result(
    reports: Sequence[Report],
    targets: Sequence[project.Target],
    selection: project.Selection,
    show: _Show,
    pending: atomic.PendingFile | None,
) -> None:
    """The reports (or --statistics) to stdout, or into ``pending`` for ``-o``."""
    fmt = show.fmt or DEFAULT_FORMAT
    if show.statistics:
        _print_statistics(reports, fmt, pending)
        return
    codes = _listed_codes(targets, selection)
    _print_reports(reports, fmt, pending, quiet=show.quiet, show_all=show.show_all, codes=codes)


def _format(show: _Show, configured: str | None) -> str:
    """The output format: the command line's, else the configuration's, else the default.
    A configured format never breaks another flag: ``--statistics`` with a configured
    format that has no statistics (github, sarif...) prints the default's."""
    if show.fmt is not None:
        return show.fmt
    if configured is None or (show.statistics and output_format(configured).statistics is None):
        return DEFAULT_FORMAT
    return configured


def _check_statistics_format(fmt: str, statistics: bool) -> None:
    """``--statistics`` only in the formats that print it."""
    if statistics and output_format(fmt).statistics is None:
        shown = " or ".join(f.name for f in FORMATS.values() if f.statistics is not None)
        raise click.UsageError(f"--statistics prints {shown}, not {fmt}")


def _pending_report(
    stack: contextlib.ExitStack, output: Path | None, reads: list[Path]
) -> atomic.PendingFile | None:
    """``-o``: the report file, refused if it is a file the run reads."""
    if output is None:
        return None
    output_plan.refuse_if_read(output, reads, "-o")
    return stack.enter_context(atomic.PendingFile(output))


def _selection(
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    extend: tuple[str, ...],
    strict: bool | None,
    target: tuple[str, ...] = (),
) -> project.Selection:
    """The command line's rule selection; a wrong code or target is a usage error (exit 2)
    here."""
    from qlrewrite.targets.spec import parse_targets

    selection = project.Selection(select, ignore, extend, strict, target)
    enabled_codes(Settings(), selection, Path())
    parse_targets(target)
    return selection


def _fix_stage(
    run: _CheckRun,
    targets: Sequence[project.Target],
    checked: Sequence[Report],
    reports: list[Report],
    reads: list[Path],
) -> tuple[list[Report], bool]:
    """``--fix`` / ``--diff``: refuse shared or protected outputs first, fix each model,
    print the diff (and exit) or return the reports after the fixes and whether a fix
    was refused."""
    from qlrewrite.pipeline import fix_files as check_fix

    fixing = run.fixing
    assert fixing is not None
    check_fix.refuse_fix_outputs(targets, checked, fixing, reads, report=run.show.output)
    quiet = run.show.quiet
    outcomes = check_fix.fix_targets(
        targets, checked, fixing, on_outcome=lambda o: _print_outcome(o, quiet)
    )
    refused = any(o.refused for o in outcomes)
    if fixing.diff:
        _print_diff(outcomes, quiet=quiet)
        _print_load_errors(reports)
        changed = any(o.changes for o in outcomes) or refused
        sys.exit(project.diff_exit_code(reports, changed=changed))
    return check_fix.fixed_reports(reports, targets, outcomes, run.selection), refused


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


def _show(
    found: Sequence[project.Target | Report], selection: project.Selection, show: _Show
) -> None:
    """``--show-files`` / ``--show-settings``: print, then exit (nothing is checked)."""
    if show.show_files:
        sys.exit(_check_views.show_files(found))
    if show.show_settings:
        sys.exit(_check_views.show_settings(found, selection, show.fmt or "text"))


def _print_statistics(
    reports: Sequence[Report], fmt: str, pending: atomic.PendingFile | None
) -> None:
    """``--statistics``: findings per rule (unreadable models said on stderr)."""
    _print_load_errors(reports)
    statistics = output_format(fmt).statistics
    assert statistics is not None  # refused before the check
    _emit(statistics(_check_views.statistics(reports)), pending)


def _print_load_errors(reports: Sequence[Report]) -> None:
    """One line on stderr per model that could not be read."""
    for report in reports:
        if report.load_error:
            click.echo(
                f"qlrewrite: error: {escape(report.path or '')}: {escape(report.load_error)}",
                err=True,
            )


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


def _check_fix_options(  # noqa: PLR0917 (the options, as given)
    fix: bool, diff: bool, in_place: bool, fix_output: Path | None, verify: bool, models: int
) -> None:
    if fix and diff:
        raise click.UsageError("--fix and --diff: give one of them")
    for flag, given in (
        ("--in-place", in_place),
        ("--fix-output", fix_output is not None),
        ("--verify", verify),
    ):
        if given and not fix and not (diff and flag == "--verify"):
            raise click.UsageError(f"{flag} needs --fix")
    if fix_output is not None and models != 1:
        raise click.UsageError("--fix-output takes one model; use --in-place for several")


def _print_outcome(outcome: check_fix.FixOutcome, quiet: bool) -> None:
    """What happened to one model's fix: refused (why), or written (how many changes)."""
    path = escape(str(outcome.path))
    if outcome.refused:
        click.echo(f"qlrewrite: {path}: fix refused: {escape(outcome.refused)}", err=True)
    elif outcome.output is not None and not quiet:
        counts = ", ".join(f"{c} x{n}" for c, n in _count_codes(outcome.changes).items())
        line = f"fixed {outcome.path} -> {outcome.output}: {len(outcome.changes)} change(s)"
        err_console.print(escape(line + (f" [{counts}]" if counts else "")), markup=False)
    if outcome.verification is not None:
        print_verification(outcome.verification)


def _count_codes(changes: Sequence[tuple[str, str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for code, _, _ in changes:
        counts[code] = counts.get(code, 0) + 1
    return counts


def _print_diff(outcomes: Sequence[check_fix.FixOutcome], *, quiet: bool) -> None:
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


def _fixable_line_wanted(show: _Show) -> bool:
    """The text formats' ``N fixable with --fix`` line on stderr: not with --quiet or
    --statistics, nor after the concise terminal view (its ``Found`` line says it)."""
    if show.quiet or show.statistics or show.fmt not in (DEFAULT_FORMAT, "full"):
        return False
    return not (show.fmt == DEFAULT_FORMAT and show.output is None and for_people(out_console))


def _print_fixable(reports: Sequence[Report], unsafe: bool) -> None:
    """``N fixable with --fix`` (and how many more with --unsafe-fixes) on stderr."""
    line = fixable_phrase([f for r in reports for f in r.findings], unsafe=unsafe)
    if line:
        err_console.print(line)


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
    to_terminal = output is None and for_people(out_console)
    for report in reports:  # errors on stderr (a text report file keeps its line too)
        if report.load_error:
            click.echo(f"qlrewrite: error: {report.path}: {report.load_error}", err=True)
    emitter = output_format(fmt)
    options = RenderOptions(codes, not quiet, show_all, load_errors=output is not None)
    if emitter.terminal is not None and to_terminal:
        emitter.terminal(reports, out_console, options)
    else:
        _emit(emitter.render(reports, options), pending)
    if output is not None and not quiet:
        line = f"{render.summary_line(reports)}; report written to {escape(str(output))}"
        err_console.print(line, markup=False)


def _emit(text: str, pending: atomic.PendingFile | None) -> None:
    if pending is None:
        click.echo(text, nl=False)
    else:
        pending.write(text)
        pending.commit()
