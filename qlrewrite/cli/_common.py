"""What every command shares: consoles, error handling, progress, rewrite options."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from qlrewrite import model_io, pipeline
from qlrewrite.errors import EXIT_INPUT, InputError, QlrewriteError
from qlrewrite.pipeline import RewriteResult
from qlrewrite.render import finding_line
from qlrewrite.verify import Verification, VerificationFailed, VerifyOptions, parse_input_shape

__all__ = [
    "debug_option",
    "err_console",
    "human_bytes",
    "out_console",
    "progress",
    "rewrite_options",
    "run_command",
    "run_rewrite",
    "show_progress",
]

F = TypeVar("F", bound=Callable[..., Any])

out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

_state = {"debug": bool(os.environ.get("QLREWRITE_DEBUG"))}


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        _state["debug"] = True


def debug_option(func: F) -> F:
    """``--debug``: show tracebacks instead of one-line errors."""
    return click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="Show the full traceback on errors.",
    )(func)


def fail(message: str, exit_code: int) -> None:
    """Print one error line on stderr and exit."""
    click.echo(f"qlrewrite: error: {message}", err=True)
    sys.exit(exit_code)


def run_command(func: F) -> F:
    """Turn QlrewriteError into one line on stderr and its exit code; never a traceback.

    onnx_ir's warnings about malformed models (logged, not raised) are shown only with
    --debug: the command reports what matters in its own words.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        logging.getLogger("onnx_ir").setLevel(logging.NOTSET if _state["debug"] else logging.ERROR)
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except QlrewriteError as exc:
            if _state["debug"]:
                traceback.print_exc()
            fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Exception as exc:  # a bug or an input nothing anticipated
            if _state["debug"]:
                traceback.print_exc()
            detail = str(exc).strip().splitlines()
            text = detail[0] if detail else type(exc).__name__
            fail(f"{type(exc).__name__}: {text} (run with --debug for details)", EXIT_INPUT)
        return None

    return wrapper  # type: ignore[return-value]


def show_progress(quiet: bool = False) -> bool:
    """Progress bars only for people: stderr is a terminal, not CI, not quiet."""
    return not quiet and sys.stderr.isatty() and not os.environ.get("CI")


@contextlib.contextmanager
def progress(description: str, total: int | None, enabled: bool) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr when ``enabled``; yields a function that advances it."""
    if not enabled:
        yield lambda: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


_VERIFY_KEY = "qlrewrite.verify"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Keep a --verify option in the context: commands need no parameter for it."""
    name = str(param.name)
    ctx.meta.setdefault(_VERIFY_KEY, {})[name] = (value, ctx.get_parameter_source(name))
    return value


def _input_shapes(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> Any:
    shapes: dict[str, tuple[int, ...]] = {}
    for text in values:
        try:
            name, shape = parse_input_shape(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from exc
        if name in shapes:
            raise click.BadParameter(f"input '{name}' is given twice", ctx, param)
        shapes[name] = shape
    return _remember(ctx, param, shapes)


def _verify_from_context() -> VerifyOptions | None:
    """The --verify options of the running command (None without --verify)."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_VERIFY_KEY, {}) if ctx is not None else {}
    if not given.get("verify", (False,))[0]:
        extra = [name for name, (_, source) in given.items()
                 if name != "verify" and source not in (None, ParameterSource.DEFAULT)]  # fmt: skip
        if extra:
            raise click.UsageError(f"--{extra[0].replace('_', '-')} needs --verify")
        return None
    return VerifyOptions(
        runs=given["verify_runs"][0],
        seed=given["seed"][0],
        input_shapes=given["input_shape"][0],
        tolerance=given["verify_tolerance"][0],
    )


def rewrite_options(func: F) -> F:
    """The options every rewriting command shares.

    The --verify options reach :func:`run_rewrite` through the click context, so a
    command's function has no parameter for them.
    """
    options = [
        click.option(
            "-o",
            "--output",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Output model (default: <stem>.<command>.onnx beside the input).",
        ),
        click.option("--in-place", is_flag=True, help="Overwrite the input model."),
        click.option("--dry-run", is_flag=True, help="Say what would change; write nothing."),
        click.option(
            "--report",
            "report_path",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Write a JSON summary of what changed to this file.",
        ),
        click.option(
            "--external-data/--no-external-data",
            default=None,
            help="Force external data on or off (default: as the input, or above 1.8 GB).",
        ),
        click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors."),
        click.option(
            "--verify",
            is_flag=True,
            expose_value=False,
            callback=_remember,
            help="Run the input and the output in ONNX Runtime on generated inputs; write "
            "nothing (exit 1) if an output differs in any bit or ONNX Runtime cannot run "
            "them (needs: pip install 'qlrewrite[verify]').",
        ),
        click.option(
            "--verify-runs",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            metavar="N",
            expose_value=False,
            callback=_remember,
            help="Number of generated input sets for --verify.",
        ),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            expose_value=False,
            callback=_remember,
            help="Seed of the --verify input generator.",
        ),
        click.option(
            "--input-shape",
            multiple=True,
            metavar="NAME=D1,D2,...",
            expose_value=False,
            callback=_input_shapes,
            help="Shape of an input with unknown dimensions, for --verify (repeatable).",
        ),
        click.option(
            "--verify-tolerance",
            type=click.FloatRange(min=0),
            default=None,
            metavar="ABS",
            expose_value=False,
            callback=_remember,
            help="With --verify, accept outputs that differ by at most ABS (reported).",
        ),
        debug_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def _print_findings(findings: Sequence[Any], limit: int = 20) -> None:
    for finding in findings[:limit]:
        click.echo(f"  {finding_line(finding)}", err=True)
    if len(findings) > limit:
        click.echo(f"  ... and {len(findings) - limit} more", err=True)


def run_rewrite(
    model: Path,
    passes: Sequence[Any],
    *,
    command: str,
    output: Path | None,
    in_place: bool,
    dry_run: bool,
    report_path: Path | None,
    external_data: bool | None,
    quiet: bool,
    max_size: int | None = None,
    verify: VerifyOptions | None = None,
) -> RewriteResult:
    """Run a rewriting command's passes through :func:`qlrewrite.pipeline.rewrite`.

    Prints the summary on stderr (unless ``quiet``), writes ``--report`` JSON, and on a
    refusal prints the findings behind it before the error line (exit 1). ``verify``
    defaults to the command's --verify options.
    """
    if verify is None:
        verify = _verify_from_context()
    if report_path is not None and model_io.same_file(report_path, model):
        raise InputError(f"{report_path}: the report would overwrite the input model")
    try:
        result = pipeline.rewrite(
            model,
            passes,
            command=command,
            output=output,
            in_place=in_place,
            dry_run=dry_run,
            external_data=external_data,
            max_size=max_size,
            verify=verify,
        )
    except pipeline.FindingsRefusal as exc:
        _print_findings(exc.report.errors)
        raise
    except VerificationFailed as exc:
        _print_verification(exc.verification)
        if report_path is not None:
            failed = {"version": 1, "command": command, "input": str(model), "written": False,
                      "error": str(exc), "verify": exc.verification.to_json()}  # fmt: skip
            report_path.write_text(json.dumps(failed, indent=2) + "\n")
        raise
    if report_path is not None:
        report_path.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    if not quiet:
        _print_summary(result)
    return result


def _print_summary(result: RewriteResult) -> None:
    changed = ", ".join(
        f"{key.replace('_', ' ')} {value}"
        for summary in result.changes.values()
        for key, value in summary.items()
        if isinstance(value, int) and value
    )
    verb = "would write" if result.dry_run else "wrote"
    target = result.output or result.target
    err_console.print(
        f"{result.command}: {changed or 'nothing to change'}; initializers "
        f"{human_bytes(result.bytes_before)} -> {human_bytes(result.bytes_after)}; "
        f"{verb} {target} in {result.seconds:.2f} s"
    )
    for warning in result.warnings:
        err_console.print(f"  warning: {getattr(warning, 'message', warning)}")
    if result.verification is not None:
        _print_verification(result.verification)


def _print_verification(verification: Verification) -> None:
    click.echo(f"  verify: {verification.describe()}", err=True)
    for output in verification.outputs:
        if not output.exact:
            click.echo(f"    {output.name}: {output.describe()}", err=True)
