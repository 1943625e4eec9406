"""`qlrewrite info`: what Q/DQ a model holds."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from qlrewrite import model_io
from qlrewrite.cli._common import debug_option, human_bytes, out_console, run_command
from qlrewrite.source import source_of
from qlrewrite.summary import model_summary
from qlrewrite.weightless import weightless_from_source

__all__ = ["info_command"]


@click.command(
    "info",
    epilog="""\b
Examples:
  qlrewrite info model.onnx
  qlrewrite info model.onnx --format json | jq '.qdq'
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@debug_option
@run_command
def info_command(model: Path, fmt: str) -> None:
    """Summarise a model's Q/DQ nodes, opsets and initializers (reads no weights)."""
    loaded = model_io.load(model)
    # Just loaded: type inference can run on a copy of the file's nodes.
    source = source_of(loaded)
    weightless = weightless_from_source(source.proto, max_inline_bytes=0) if source else None
    summary = {"path": str(model), **model_summary(loaded, weightless=weightless)}
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    # A pipe or file gets the whole table: rich would squeeze it to 80 columns.
    console = out_console if out_console.is_terminal else Console(highlight=False, width=200)
    opsets = ", ".join(f"{d} {v}" for d, v in summary["opset_imports"].items())
    init = summary["initializers"]
    console.print(f"[bold]{escape(str(model))}[/bold]")
    console.print(f"IR version {summary['ir_version']}; opsets: {opsets}")
    console.print(
        f"{summary['graphs']} graph, {summary['subgraphs']} subgraph(s), "
        f"{summary['functions']} function(s); "
        f"{init['count']} initializer(s), {human_bytes(init['bytes'])}"
        + (" (external data)" if init["external_data"] else "")
    )
    for group in summary["custom_quant"]:
        console.print(
            f"{group['nodes']} custom quantization node(s) {group['domain']} "
            f"{group['op_type']} ({group['producer']}; not QuantizeLinear / DequantizeLinear: "
            "qlrewrite does not check or rewrite them)"
        )
    if not summary["qdq"]:
        console.print("No QuantizeLinear / DequantizeLinear nodes.")
        return
    console.print(f"{summary['qdq_nodes']} Q/DQ node(s):")
    table = Table()
    for column in ("domain", "op", "version", "x type", "scale type", "granularity", "constant"):
        table.add_column(column, no_wrap=True)
    table.add_column("nodes", justify="right")
    table.add_column("const bytes", justify="right", no_wrap=True)
    for row in summary["qdq"]:
        table.add_row(
            row["domain"],
            row["op_type"],
            str(row["version"]) if row["version"] is not None else "none",
            row["x_type"],
            row["scale_type"],
            row["granularity"],
            "yes" if row["constant"] else "no",
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        )
    console.print(table)
