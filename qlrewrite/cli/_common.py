"""What every command shares: consoles, error handling, progress, rewrite options."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from qlrewrite.checking.render import finding_lines
from qlrewrite.cli._debug import debug_enabled, debug_option
from qlrewrite.errors import EXIT_INPUT, InputError, QlrewriteError, Terminated
from qlrewrite.text import escape
from qlrewrite.verify.release_env import parse_release
from qlrewrite.verify.verify import (
    VERIFY_TIMEOUT,
    Verification,
    VerificationFailed,
    VerifyOptions,
    parse_input_shape,
)

if TYPE_CHECKING:  # imported when a rewrite runs (every pass): info and check do not pay
    from qlrewrite.pipeline.flow import RewriteResult

__all__ = [
    "RewriteCommand",
    "RewriteOptions",
    "debug_enabled",
    "debug_option",
    "err_console",
    "for_people",
    "human_bytes",
    "in_ci",
    "input_shape_option",
    "out_console",
    "output_format_option",
    "print_verification",
    "progress",
    "rewrite_options",
    "run_command",
    "run_rewrite",
    "show_progress",
    "verify_from",
    "verify_option_list",
]

F = TypeVar("F", bound=Callable[..., Any])

out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, exit_code: int) -> None:
    """Print one error line on stderr and exit."""
    click.echo(f"qlrewrite: error: {escape(message)}", err=True)
    sys.exit(exit_code)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """While a command runs, SIGINT and SIGTERM raise (KeyboardInterrupt, Terminated):
    every staged file is removed on the way out. Only in the main thread (where Python
    runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_command(func: F) -> F:
    """Turn QlrewriteError into one line on stderr and its exit code; never a traceback.

    onnx_ir's warnings about malformed models (logged, not raised) are shown only with
    --debug: the command reports what matters in its own words.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = debug_enabled()
        logging.getLogger("onnx_ir").setLevel(logging.NOTSET if debug else logging.ERROR)
        try:
            with _signals_unwind():
                return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Terminated:
            fail("terminated", 128 + signal.SIGTERM)
        except QlrewriteError as exc:
            if debug:
                traceback.print_exc()
            fail(exc.cli_message(), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Exception as exc:  # a bug or an input nothing anticipated
            if debug:
                traceback.print_exc()
            detail = str(exc).strip().splitlines()
            text = detail[0] if detail else type(exc).__name__
            fail(f"{type(exc).__name__}: {text} (run with --debug for details)", EXIT_INPUT)
        return None

    return wrapper  # type: ignore[return-value]


def in_ci() -> bool:
    """A CI job (``CI`` set, as GitHub Actions, GitLab and most CI services set it, and not
    ``0`` / ``false``): plain output even on a terminal, no progress bars."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def for_people(console: Console) -> bool:
    """Output to ``console`` is read by a person: a terminal, not CI."""
    return console.is_terminal and not in_ci()


def show_progress(quiet: bool = False) -> bool:
    """Progress bars only for people: stderr is a terminal, not CI, not quiet."""
    return not quiet and sys.stderr.isatty() and not in_ci()


class ProgressBar:
    """A progress bar on stderr for work of a known total (or nothing, when disabled).

    A bar whose total is not known yet stays hidden until an update gives it one: no
    pulsing bar without a real measure of progress.
    """

    def __init__(self, description: str, total: int | None, *, enabled: bool) -> None:
        self._description = description
        self._enabled = enabled
        self._bar: Progress | None = None
        self._task: Any = None
        self._done = 0
        self._bytes = 0
        if enabled and total is not None:
            self._start(total)

    def _start(self, total: int) -> None:
        self._bar = Progress(
            TextColumn("{task.description} {task.completed}/{task.total} {task.fields[item]}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task(self._description, total=total, item="")

    def stop(self) -> None:
        """Remove the bar (it is transient)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def advance(self) -> None:
        """One more item done."""
        if self._bar is not None:
            self._bar.advance(self._task)

    def update(self, completed: int, total: int | None, item: str = "") -> None:
        """``completed`` of ``total`` done; ``item`` is shown after the count."""
        if self._bar is None and self._enabled and total is not None:
            self._start(total)
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, total=total, item=item)

    def on_tensor_saved(self, tensor: Any, info: Any) -> None:
        """A :data:`qlrewrite.io.model_io.SaveCallback`: one more tensor written (counted,
        as onnx_ir calls it from worker threads out of index order), with the bytes
        written so far."""
        self._done += 1
        self._bytes += int(getattr(tensor, "nbytes", 0) or 0)
        self.update(self._done, info.total, f"tensors, {human_bytes(self._bytes)}")


@contextlib.contextmanager
def progress(description: str, total: int | None, enabled: bool) -> Iterator[ProgressBar]:
    """A transient progress bar on stderr when ``enabled`` (see :func:`show_progress`),
    shown once its total is known (``total``, or the first :meth:`ProgressBar.update`)."""
    bar = ProgressBar(description, total, enabled=enabled)
    try:
        yield bar
    finally:
        bar.stop()


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
    return shapes


@dataclasses.dataclass(frozen=True)
class RewriteOptions:
    """What every rewriting command was asked, besides its own options."""

    output: Path | None = None
    in_place: bool = False
    dry_run: bool = False
    report_path: Path | None = None
    external_data: bool | None = None
    quiet: bool = False
    verify: VerifyOptions | None = None


_VERIFY_DETAILS = (
    "verify_runs",
    "seed",
    "input_shape",
    "verify_tolerance",
    "verify_timeout",
    "verify_memory",
    "verify_on",
)

#: ``--verify=SCOPE``: what each scope runs (``--verify`` alone is ``all``).
VERIFY_SCOPES = {"all": "--verify", "semantics": "--verify-semantics"}


class RewriteCommand(click.Command):
    """A rewriting command: reads ``--verify=semantics`` (click's flags take no value)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        return super().parse_args(ctx, [*map(_verify_scope, args[:end]), *args[end:]])


def _verify_scope(arg: str) -> str:
    """``--verify=semantics`` -> ``--verify-semantics``; other arguments as given."""
    if not arg.startswith("--verify="):
        return arg
    scope = arg.partition("=")[2]
    if scope not in VERIFY_SCOPES:
        raise click.UsageError(
            f"--verify={scope}: --verify takes no value (semantics and deployment), "
            "or =semantics (only the semantic proof)"
        )
    return VERIFY_SCOPES[scope]


def _rewrite_options_from(kwargs: dict[str, Any]) -> RewriteOptions:
    """Pop the shared options out of a command's keyword arguments."""
    verify = verify_from(kwargs)
    fields = {
        f.name: kwargs.pop(f.name) for f in dataclasses.fields(RewriteOptions) if f.name != "verify"
    }
    return RewriteOptions(**fields, verify=verify)


class FiniteRange(click.FloatRange):
    """A float range that refuses NaN and infinity (NaN passes every comparison of a
    range: ``--verify-timeout nan`` was an internal error, ``inf`` no time limit)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class _FirstNameOption(click.Option):
    """An option whose help names only its first spelling: the others are hidden aliases
    (``--format`` of ``--output-format``), accepted but not advertised."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        aliases, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = aliases


def output_format_option(
    choices: Sequence[str], help_text: str, default: str | None = "text"
) -> Callable[[F], F]:
    """``--output-format`` (one spelling on every command; ``--format`` is its hidden
    alias), handed to the command as ``output_format``."""
    return click.option(
        "--output-format",
        "--format",
        "output_format",
        cls=_FirstNameOption,
        type=click.Choice(list(choices)),
        default=default,
        show_default=default is not None,
        help=help_text,
    )


def input_shape_option(help_text: str) -> Callable[[F], F]:
    """``--input-shape NAME=D1,D2,...`` (repeatable), read as ``{name: shape}``."""
    return click.option(
        "--input-shape",
        multiple=True,
        metavar="NAME=D1,D2,...",
        callback=_input_shapes,
        help=help_text,
    )


def verify_option_list() -> list[Callable[[F], F]]:
    """--verify and its details (runs, seed, input shapes, tolerance, time limit), as click
    options."""
    return [
        click.option(
            "--verify",
            is_flag=True,
            help="Run the input and the output in ONNX Runtime on generated inputs, twice. "
            "Semantics (optimizations off): write nothing (exit 1) if an output differs "
            "beyond the rewrite's stated bound or ORT cannot run them. Deployment (ORT's "
            "default session): warn of output differences, latency, integer kernels lost. "
            "--verify=semantics: only the first (needs: pip install 'qlrewrite[verify]').",
        ),
        click.option("--verify-semantics", is_flag=True, hidden=True),
        click.option(
            "--verify-runs",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            metavar="N",
            help="Number of generated input sets for --verify.",
        ),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Seed of the --verify input generator.",
        ),
        input_shape_option("Shape of an input with unknown dimensions, for --verify (repeatable)."),
        click.option(
            "--verify-tolerance",
            type=FiniteRange(min=0),
            default=None,
            metavar="ABS",
            help="With --verify, accept outputs that differ by at most ABS (reported).",
        ),
        click.option(
            "--verify-timeout",
            type=FiniteRange(min=0, min_open=True),
            default=VERIFY_TIMEOUT,
            show_default=True,
            metavar="SECONDS",
            help="With --verify, give up after SECONDS: unverifiable, nothing written.",
        ),
        memory_option("--verify-memory", "With --verify, "),
        click.option(
            "--verify-on",
            multiple=True,
            metavar="RELEASE",
            callback=_releases,
            help="Also run the output in this exact runtime release (ort==1.16.3, "
            "openvino==2026.4; repeatable; implies --verify): loads, runs, kernels formed, "
            "latency, difference to the original in the installed ONNX Runtime. Not "
            "running there fails the verification. The release's environment is made on "
            "first use from the package registry and cached (~/.cache/qlrewrite/runtimes).",
        ),
    ]


def _releases(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> tuple[str, ...]:
    try:
        return tuple(str(parse_release(v)) for v in value)
    except InputError as exc:
        raise click.BadParameter(str(exc)) from None


def memory_option(name: str, prefix: str = "") -> Callable[[F], F]:
    """A runtime child's memory limit in GiB (default: 3/4 of the machine's memory), read
    as bytes."""
    return click.option(
        name,
        type=FiniteRange(min=0, min_open=True),
        default=None,
        metavar="GIB",
        callback=lambda ctx, param, value: None if value is None else int(value * 2**30),
        help=f"{prefix}the runtime's child process may allocate GIB (default: 3/4 of the "
        "memory); beyond it, it stops with the limit named.",
    )


def verify_from(kwargs: dict[str, Any]) -> VerifyOptions | None:
    """Pop --verify and its details out of a command's keyword arguments (the details
    without --verify are a usage error)."""
    details = {name: kwargs.pop(name) for name in _VERIFY_DETAILS}
    semantics_only = kwargs.pop("verify_semantics")
    if kwargs.pop("verify") or semantics_only or details["verify_on"]:
        return VerifyOptions(
            deployed=not semantics_only,
            runs=details["verify_runs"],
            seed=details["seed"],
            input_shapes=details["input_shape"],
            tolerance=details["verify_tolerance"],
            timeout=details["verify_timeout"],
            memory=details["verify_memory"],
            releases=details["verify_on"],
        )
    ctx = click.get_current_context()
    given = [
        n
        for n in _VERIFY_DETAILS
        if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT)
    ]
    if given:
        raise click.UsageError(f"--{given[0].replace('_', '-')} needs --verify")
    return None


def rewrite_options(func: F) -> F:
    """The options every rewriting command shares, handed to the command as one
    ``options: RewriteOptions`` keyword argument (for :func:`run_rewrite`)."""
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
        *verify_option_list(),
        debug_option,
    ]

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        options = _rewrite_options_from(kwargs)
        return func(*args, options=options, **kwargs)

    for option in reversed(options):
        command = option(command)
    return command  # type: ignore[return-value]


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def _print_findings(findings: Sequence[Any], limit: int = 20) -> None:
    """The findings behind a refusal, repeated ones grouped (at most ``limit`` lines)."""
    lines = finding_lines(findings, every="`qlrewrite check --show-all`")
    for line in lines[:limit]:
        click.echo(f"  {escape(line)}", err=True)
    if len(lines) > limit:
        click.echo(f"  ... and {len(lines) - limit} more line(s)", err=True)


def run_rewrite(
    model: Path,
    passes: Sequence[Any],
    *,
    command: str,
    options: RewriteOptions,
    max_size: int | None = None,
) -> RewriteResult:
    """Run a rewriting command's passes through :func:`qlrewrite.pipeline.rewrite`.

    Prints the summary on stderr (unless quiet) and on a refusal the findings behind it
    before the error line (exit 1); the pipeline writes the ``--report`` JSON.
    """
    from qlrewrite.pipeline.flow import rewrite
    from qlrewrite.pipeline.refusals import FindingsRefusal

    try:
        enabled = show_progress(options.quiet)
        with progress("writing", None, enabled) as bar:
            result = rewrite(
                model,
                passes,
                command=command,
                output=options.output,
                in_place=options.in_place,
                dry_run=options.dry_run,
                external_data=options.external_data,
                max_size=max_size,
                verify=options.verify,
                on_tensor_saved=bar.on_tensor_saved if enabled else None,
                report_path=options.report_path,
            )
    except FindingsRefusal as exc:
        _print_findings(exc.report.errors)
        raise
    except VerificationFailed as exc:  # the error line says why; the differences here
        print_verification(exc.verification, failed=True)
        raise
    if not options.quiet:
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
        f"{verb} {escape(str(target))} in {result.seconds:.2f} s",
        markup=False,
    )
    for warning in result.warnings:
        err_console.print(
            f"  warning: {escape(str(getattr(warning, 'message', warning)))}", markup=False
        )
    if result.verification is not None:
        print_verification(result.verification)


def print_verification(verification: Verification, *, failed: bool = False) -> None:
    """The ``--verify`` lines on stderr: the verification's line and each differing
    output's (once each: a failed one's reason is the error line's, not repeated here),
    then the deployment's."""
    if failed and verification.reason:
        return
    click.echo(f"  verify: {verification.describe(outputs=False)}", err=True)
    for output in verification.outputs:
        if not output.exact:
            click.echo(f"    {escape(str(output.name))}: {escape(output.describe())}", err=True)
    deployment = verification.deployment
    if deployment is not None:
        head, *rest = deployment.lines()
        warning = "warning: " if deployment.differs else ""
        click.echo(f"  {warning}verify {escape(head)}", err=True)
        for line in rest:
            click.echo(f"    {escape(line)}", err=True)
    for release in verification.releases:
        head, *rest = release.lines()
        click.echo(f"  verify {escape(head)}", err=True)
        for line in rest:
            click.echo(f"    {escape(line)}", err=True)
