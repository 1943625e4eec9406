"""The `qlrewrite` command line: a click group; each command lives in its own module."""

from __future__ import annotations

import importlib.metadata
import platform

import click

from qlrewrite import __version__
from qlrewrite.cli._common import debug_option
from qlrewrite.cli.check import check_command
from qlrewrite.cli.convert import convert_command
from qlrewrite.cli.fold import fold_command
from qlrewrite.cli.info import info_command
from qlrewrite.cli.rules import rules_command
from qlrewrite.cli.upgrade import upgrade_command
from qlrewrite.model_io import LIMITS, Limits

__all__ = ["main"]


class _Group(click.Group):
    """Lists each command with its whole one-line summary (click cuts them to the width)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, command.get_short_help_str(limit=200))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


#: The distributions the rules, the rewrites and --verify depend on, and what for.
_DEPENDENCIES = (("onnx", ""), ("onnx-ir", ""), ("onnxruntime", " (for --verify)"))


def version_lines() -> list[str]:
    """``qlrewrite, version X`` then one line per dependency, read from the installed
    distributions' metadata (nothing is imported)."""
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


# --- command registration (one line per command) ---
main.add_command(info_command)
main.add_command(check_command)
main.add_command(rules_command)
main.add_command(fold_command)
main.add_command(convert_command)
main.add_command(upgrade_command)
# --- end of command registration ---
