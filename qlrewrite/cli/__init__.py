"""The `qlrewrite` command line: a click group; each command lives in its own module,
imported only when that command runs (``--version`` and ``--help`` import none, nor
onnx, onnx_ir or NumPy: a pre-commit hook pays start-up on every call)."""

from __future__ import annotations

import gc
import importlib
import platform
from collections.abc import Iterator, Mapping
from typing import Any

import click

from qlrewrite._version import __version__
from qlrewrite.cli._debug import debug_option
from qlrewrite.cli._deferred_imports import defer_sympy
from qlrewrite.io.limits import LIMITS, Limits

defer_sympy()  # the command line's start-up only: a library import gets sympy as it is

__all__ = ["COMMANDS", "main"]

#: Each command: its module, its click command, and its one-line summary as ``--help``
#: lists it (tests/cli/test_cli_basics.py checks it against the command's own).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "info": (
        "info",
        "info_command",
        "Summarise a model's Q/DQ and weight-only nodes (MatMulNBits, GatherBlockQuantized), "
        "opsets and initializers (reads no weights).",
    ),
    "check": (
        "check",
        "check_command",
        "Check every quantized node (Q/DQ, MatMulNBits, GatherBlockQuantized, QOperator) "
        "against its opset's rules and, with --target, against what a runtime accepts.",
    ),
    "rules": (
        "rules",
        "rules_command",
        "List the check rules, or explain rule CODE (a code or a name) with an example; a "
        "code prefix (QL4, as --select takes it) lists the rules it names.",
    ),
    "fold": (
        "fold",
        "fold_command",
        "Constant-fold QuantizeLinear / DequantizeLinear of constant inputs.",
    ),
    "convert": (
        "convert",
        "convert_command",
        "Convert every QuantizeLinear / DequantizeLinear to the ai.onnx or com.microsoft domain, "
        "or Q/DQ groups to QLinear operators (--to qoperator).",
    ),
    "upgrade": (
        "upgrade",
        "upgrade_command",
        "Convert the model to ai.onnx opset N with ONNX's version converter.",
    ),
    "downgrade": (
        "downgrade",
        "downgrade_command",
        "Lower the model to ai.onnx opset N, exactly, or refuse naming what N cannot hold.",
    ),
    "retarget": (
        "retarget",
        "retarget_command",
        "Rewrite the Q/DQ form exactly for a runtime that takes only some of it.",
    ),
    "half": (
        "half",
        "half_command",
        "Convert float32 to float16 / bfloat16 keeping the Q/DQ nodes valid.",
    ),
    "integer-io": (
        "integer_io",
        "integer_io_command",
        "Make the model take and return its quantized type, or float again.",
    ),
    "compare": (
        "compare",
        "compare_command",
        "Run two models on the same inputs and compare their outputs per runtime.",
    ),
}


class _LazyCommands(Mapping[str, click.Command]):
    """The group's commands by name; a command's module is imported on first lookup."""

    def __getitem__(self, name: str) -> click.Command:
        module, attribute, _ = COMMANDS[name]
        return getattr(importlib.import_module(f"qlrewrite.cli.{module}"), attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class _Group(click.Group):
    """Loads a command's module when that command runs; lists each command with its whole
    one-line summary (click cuts them to the width) without loading any."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands()  # type: ignore[assignment]

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, summary) for name, (_, _, summary) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


#: The distributions the rules, the rewrites and --verify depend on, and what for.
#: Allocations between two young collections while a command runs (default 700).
_GC_YOUNG = 100_000

_DEPENDENCIES = (("onnx", ""), ("onnx-ir", ""), ("onnxruntime", " (for --verify)"))


def version_lines() -> list[str]:
    """``qlrewrite, version X`` then one line per dependency, read from the installed
    distributions' metadata (nothing is imported)."""
    import importlib.metadata  # 20 ms: only --version reads it

    lines = [f"qlrewrite, version {__version__}"]
    for name, use in _DEPENDENCIES:
        try:
            lines.append(f"  {name} {importlib.metadata.version(name)}{use}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"  {name} not installed{use}")
    lines.append(f"  Python {platform.python_version()}")
    return lines


def _print_version(ctx: click.Context) -> None:
    click.echo("\n".join(version_lines()))
    ctx.exit(0)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Examples:
  qlrewrite info model.onnx
  qlrewrite check models/ --format sarif -o qlrewrite.sarif
  qlrewrite fold model.onnx -o model.folded.onnx
  qlrewrite convert model.onnx --to onnx
  qlrewrite upgrade model.onnx --opset 23

Exit codes: 0 ok, 1 findings or refusal, 2 usage error or unreadable input.
""",
)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _print_version(ctx) if value else None,
    help="Show the version, and those of onnx, onnx-ir and onnxruntime, and exit.",
)
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=Limits.max_nodes,
    show_default=True,
    metavar="N",
    help="Refuse a model with more nodes (all graphs and functions together).",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=Limits.max_depth,
    show_default=True,
    metavar="N",
    help="Refuse subgraphs nested, or functions calling functions, deeper than N.",
)
@debug_option
@click.pass_context
def main(ctx: click.Context, max_nodes: int, max_depth: int) -> None:
    """Validate, constant-fold, convert and upgrade quantized (QDQ) ONNX models."""
    token = LIMITS.set(Limits(max_nodes=max_nodes, max_depth=max_depth))
    ctx.call_on_close(lambda: LIMITS.reset(token))
    # A loaded graph is hundreds of thousands of objects that live for the whole run:
    # the cyclic collector's default pace (every 700 allocations) rescans them again and
    # again (a fifth of check's time at 10,000 nodes). A command collects less often.
    thresholds = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG, *thresholds[1:])
    ctx.call_on_close(lambda: gc.set_threshold(*thresholds))
