"""`qlrewrite check`: validate every Q/DQ node of models and folders of models."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import click

from qlrewrite import model_io, project, render
from qlrewrite.cli import _common
from qlrewrite.cli._common import (
    debug_option,
    err_console,
    out_console,
    progress,
    run_command,
    show_progress,
)
from qlrewrite.config import Settings, settings_for
from qlrewrite.errors import InputError
from qlrewrite.findings import Report
from qlrewrite.project import enabled_codes

__all__ = ["check_command"]


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    folder = path.absolute().parent
    if not folder.is_dir():
        raise InputError(f"{path}: output folder does not exist")
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


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
    "--format",
    "fmt",
    type=click.Choice(render.FORMATS),
    default=None,
    help="Output format (text: tables on a terminal, one line per finding otherwise; default: "
    "output-format of the configuration, else text).",
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
) -> None:
    """Check every QuantizeLinear / DequantizeLinear node against its opset's rules.

    Reads no weights: a model of any size checks in about a second.
    """
    selection = project.Selection(select, ignore, extend_select, strict)
    enabled_codes(Settings(), selection, Path())  # a wrong code on the command line: exit 2
    found = project.collect_models(
        models, config=config_file, isolated=isolated, force_exclude=force_exclude
    )
    run_settings = settings_for(Path.cwd(), config=config_file, isolated=isolated)
    fmt = fmt or run_settings.output_format or "text"
    targets = [t for t in found if isinstance(t, project.Target)]
    if output is not None and any(model_io.same_file(t.path, output) for t in targets):
        raise InputError(f"-o {output} names a model being checked; choose another file")
    enabled = show_progress(quiet) and len(targets) > 1
    with progress("checking", len(targets), enabled) as advance:
        checked = project.check_targets(
            targets,
            selection,
            jobs=jobs or project.default_jobs(),
            debug=bool(_common._state["debug"]),
            advance=advance,
        )
    by_target = iter(checked)
    reports = [t if isinstance(t, Report) else next(by_target) for t in found]
    reports += project.unused_suppressions(targets, checked, selection)
    _print_reports(reports, fmt, output, quiet=quiet, show_all=show_all)
    strict_of = _strictness(targets, selection)
    sys.exit(project.exit_code(reports, strict=strict_of))


def _strictness(targets: Sequence[project.Target], selection: project.Selection):
    """Per report: --strict / --no-strict, else the strict of the model's configuration."""
    settings = {str(t.path): t.settings for t in targets}

    def strict(report: Report) -> bool:
        if selection.strict is not None:
            return selection.strict
        found = settings.get(str(report.path))
        return bool(found.strict) if found is not None else False

    return strict


def _print_reports(
    reports: Sequence[Report], fmt: str, output: Path | None, *, quiet: bool, show_all: bool
) -> None:
    to_terminal = output is None and out_console.is_terminal
    if fmt != "text" or output is not None:  # the report goes to a tool or a file: tell people
        for report in reports:
            if report.error:
                click.echo(f"qlrewrite: error: {report.path}: {report.error}", err=True)
    if fmt == "text" and to_terminal:
        render.print_text_tables(reports, out_console, summary=not quiet, show_all=show_all)
    elif fmt == "text":
        text = "\n".join(render.text_lines(reports, summary=not quiet, show_all=show_all))
        _emit(text + "\n" if text else "", output)
    else:
        _emit(render.render(reports, fmt), output)
    if output is not None and not quiet:
        err_console.print(f"{render.summary_line(reports)}; report written to {output}")


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
    else:
        _write_atomic(output, text)
