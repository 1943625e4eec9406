"""`qlrewrite info`: what Q/DQ, weight-only (MatMulNBits, GatherBlockQuantized) and
QOperator / dynamic (QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft QLinear*, ...)
nodes a model holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
  qlrewrite info llm.onnx --format json | jq '.weight_only[] | {K, N, bits, nodes}'
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
    """Summarise a model's Q/DQ and weight-only nodes (MatMulNBits, GatherBlockQuantized),
    opsets and initializers (reads no weights).

    QOperator / dynamic nodes (QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft
    QLinear*, QGemm, ...) are listed with the type and granularity of each quantized
    tensor (per-tensor, or per-channel weights) and the Q/DQ form `convert --to onnx`
    writes for them."""
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
    implied = "".join(
        f"; {d} not imported (ONNX Runtime reads it as {v})"
        for d, v in summary["implied_imports"].items()
    )
    console.print(f"IR version {summary['ir_version']}; opsets: {opsets}{implied}")
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
    if not any(summary[k] for k in ("qdq", "weight_only", "qoperator", "left_alone")):
        console.print(
            "No quantized nodes (QuantizeLinear / DequantizeLinear, MatMulNBits, "
            "GatherBlockQuantized, QLinear* / QOperator, MatMulInteger / dynamic)."
        )
        return
    if summary["qdq"]:
        console.print(f"{summary['qdq_nodes']} Q/DQ node(s):")
        console.print(_qdq_table(summary["qdq"]))
    if summary["weight_only"]:
        console.print(f"{summary['weight_only_nodes']} weight-only node(s):")
        console.print(_weight_only_table(summary["weight_only"]))
    if summary["qoperator"]:
        console.print(f"{summary['qoperator_nodes']} QOperator / dynamic node(s):")
        console.print(_qoperator_table(summary["qoperator"]))
    for group in summary["left_alone"]:
        console.print(
            f"{group['nodes']} quantized node(s) {group['domain']} {group['op_type']} left "
            f"alone (not checked or converted): {escape(group['reason'])}"
        )


def _qoperator_table(rows: list[dict[str, Any]]) -> Table:
    table = Table()
    for column in ("domain", "op", "quantization (name type granularity)", "Q/DQ form"):
        table.add_column(column, no_wrap=column != "Q/DQ form")
    table.add_column("nodes", justify="right")
    table.add_column("const bytes", justify="right", no_wrap=True)
    for row in rows:
        form = row["float_op"] if not row["refusal"] else f"none: {row['refusal']}"
        table.add_row(
            row["domain"],
            f"{row['op_type']}-{_text(row['version'], 'none')}",
            "; ".join(row["quantization"]),
            escape(form),
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        )
    return table


def _qdq_table(rows: list[dict[str, Any]]) -> Table:
    table = Table()
    for column in ("domain", "op", "version", "x type", "scale type", "granularity", "constant"):
        table.add_column(column, no_wrap=True)
    table.add_column("nodes", justify="right")
    table.add_column("const bytes", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            row["domain"],
            row["op_type"],
            _text(row["version"], "none"),
            row["x_type"],
            row["scale_type"],
            row["granularity"],
            "yes" if row["constant"] else "no",
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        )
    return table


def _weight_only_table(rows: list[dict[str, Any]]) -> Table:
    table = Table()
    columns = ("op", "weight", "bits", "block", "K x N / shape", "zero points", "scale type",
               "accuracy", "constant")  # fmt: skip
    for column in columns:
        table.add_column(column, no_wrap=True)
    table.add_column("nodes", justify="right")
    table.add_column("const bytes", justify="right", no_wrap=True)
    for row in rows:
        if row["shape"] is not None:
            size = " x ".join(_text(d) for d in row["shape"])
            size += f" (axis {_text(row['quantize_axis'])})"
        else:
            size = f"{_text(row['K'])} x {_text(row['N'])}"
        table.add_row(
            f"{row['op_type']}-{_text(row['version'], 'none')}",
            row["weight_type"],
            _text(row["bits"], "-"),
            _text(row["block_size"]),
            size,
            row["zero_points"],
            row["scale_type"],
            _text(row["accuracy_level"], "-"),
            "yes" if row["constant"] else "no",
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        )
    return table


def _text(value: Any, missing: str = "?") -> str:
    return missing if value is None else str(value)
