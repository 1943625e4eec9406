"""`qlrewrite check`: validate every quantized node (Q/DQ, MatMulNBits, GatherBlockQuantized)
of models and folders of models."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import click

from qlrewrite import atomic, model_io, render
from qlrewrite.cli import _common
from qlrewrite.cli._common import (
    debug_option,
    err_console,
    out_console,
    progress,
    run_command,
    show_progress,
)
from qlrewrite.errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, InputError
from qlrewrite.findings import Report
from qlrewrite.passes.check import check_path, filter_report, select_rules

__all__ = ["check_command", "collect_models", "exit_code"]


def collect_models(paths: Iterable[Path]) -> list[Path | Report]:
    """Model files to check, in order: files as given, folders searched recursively.

    A folder's ``*.onnx`` files come sorted (hidden subfolders skipped); a folder without
    any gives a Report with ``error`` (exit 2: a CI job pointed at nothing is a mistake).
    Files named twice are checked once.
    """
    found: list[Path | Report] = []
    seen: set[str] = set()
    for path in paths:
        if path.is_dir():
            models = _models_under(path)
            if not models:
                found.append(Report(path=str(path), error="no .onnx files in folder"))
            candidates: list[Path] = models
        else:
            candidates = [path]
        for model in candidates:
            key = os.path.realpath(model)
            if key not in seen:
                seen.add(key)
                found.append(model)
    return found


def _models_under(folder: Path) -> list[Path]:
    models = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        models += [Path(root, f) for f in files if f.lower().endswith(".onnx")]
    return sorted(models, key=lambda p: p.parts)


def exit_code(reports: Sequence[Report], *, strict: bool = False) -> int:
    """2 if any model was unreadable, else 1 on an error finding (any with strict), else 0."""
    if any(r.error for r in reports):
        return EXIT_INPUT
    if any(r.errors or (strict and r.findings) for r in reports):
        return EXIT_FINDINGS
    return EXIT_OK


@click.command(
    "check",
    epilog="""\b
Examples:
  qlrewrite check model.onnx
  qlrewrite check models/ --strict
  qlrewrite check models/ --format sarif -o qlrewrite.sarif
  qlrewrite check models/ --format github          # annotations in GitHub Actions
  qlrewrite check model.onnx --select QL4 --ignore QL406,QL5
  qlrewrite check model.onnx --format json | jq '.files[].findings[].rule'

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
    "--format",
    "fmt",
    type=click.Choice(render.FORMATS),
    default="text",
    show_default=True,
    help="Output format (text: tables on a terminal, one line per finding otherwise).",
)
@click.option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Only these rule codes or prefixes (comma separated, repeatable), e.g. QL4,QL501.",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="CODES",
    help="Skip these rule codes or prefixes (the more specific of select/ignore wins).",
)
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to this file (atomically) instead of stdout.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line.")
@debug_option
@run_command
def check_command(  # noqa: PLR0917 (one parameter per click option)
    models: tuple[Path, ...],
    fmt: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    strict: bool,
    output: Path | None,
    quiet: bool,
) -> None:
    """Check every QuantizeLinear / DequantizeLinear node, and com.microsoft MatMulNBits /
    GatherBlockQuantized, against its opset's rules.

    Reads no weights: a model of any size checks in about a second.
    """
    codes = select_rules(select, ignore)
    targets = collect_models(models)
    with contextlib.ExitStack() as stack:
        pending = None
        if output is not None:
            _refuse_input_file(output, [t for t in targets if isinstance(t, Path)])
            pending = stack.enter_context(atomic.PendingFile(output))
        reports = _check_all(targets, codes, quiet)
        _report(reports, fmt, codes, quiet, pending)
    if output is not None and not quiet:
        err_console.print(f"{render.summary_line(reports)}; report written to {output}")
    sys.exit(exit_code(reports, strict=strict))


def _refuse_input_file(output: Path, models: Sequence[Path]) -> None:
    """``-o`` may not name a model being checked nor any file one of them reads."""
    for model in models:
        if any(model_io.same_file(output, read) for read in model_io.files_read_by(model)):
            raise InputError(
                f"-o {output} names a model being checked or a file it reads; choose another file"
            )


def _check_all(
    targets: Sequence[Path | Report], codes: frozenset[str], quiet: bool
) -> list[Report]:
    """A report per target, in order (a progress bar for several files)."""
    reports: list[Report] = []
    files = sum(1 for t in targets if isinstance(t, Path))
    with progress("checking", files, show_progress(quiet) and files > 1) as advance:
        for target in targets:
            if isinstance(target, Report):
                reports.append(target)
                continue
            reports.append(_check_one(target, codes))
            advance()
    return reports


def _report(
    reports: list[Report],
    fmt: str,
    codes: frozenset[str],
    quiet: bool,
    pending: atomic.PendingFile | None,
) -> None:
    """Render ``reports`` to stdout, or into ``pending`` (committed) for ``-o``."""
    output = pending.path if pending is not None else None
    to_terminal = output is None and out_console.is_terminal
    if fmt != "text" or output is not None:  # the report goes to a tool or a file: tell people
        for report in reports:
            if report.error:
                click.echo(f"qlrewrite: error: {report.path}: {report.error}", err=True)
    if fmt == "text" and to_terminal:
        render.print_text_tables(reports, out_console, summary=not quiet)
    elif fmt == "text":
        text = "\n".join(render.text_lines(reports, summary=not quiet))
        _emit(text + "\n" if text else "", pending)
    else:
        _emit(render.render(reports, fmt, codes=codes), pending)


def _check_one(path: Path, codes: frozenset[str]) -> Report:
    """One model's report; a crash of the checker on it is that file's error, not the run's."""
    try:
        return filter_report(check_path(path), codes)
    except Exception as exc:  # a checker bug must not hide the other models' findings
        if _common._state["debug"]:  # --debug: let run_command show the traceback
            raise
        detail = (str(exc).strip().splitlines() or [""])[0]
        return Report(
            path=str(path),
            error=f"internal error while checking ({type(exc).__name__}: {detail}); "
            "run with --debug for the traceback and please report it",
        )


def _emit(text: str, pending: atomic.PendingFile | None) -> None:
    if pending is None:
        click.echo(text, nl=False)
    else:
        pending.write(text)
        pending.commit()
