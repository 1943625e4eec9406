"""`qlrewrite info`: what Q/DQ, weight-only (MatMulNBits, GatherBlockQuantized) and
QOperator / dynamic (QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft QLinear*, ...)
nodes a model holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from qlrewrite.checking.summary import model_summary
from qlrewrite.cli._common import debug_option, human_bytes, out_console, run_command
from qlrewrite.cli._tables import Column, fitted_table
from qlrewrite.io import model_io
from qlrewrite.io.source import source_of
from qlrewrite.io.weightless import weightless_from_source
from qlrewrite.qdq.left_alone import UncheckedGroup, describe_unchecked
from qlrewrite.text import escape

__all__ = ["info_command"]


@click.command(
    "info",
    epilog="""\b
Examples:
  qlrewrite info model.onnx
  qlrewrite info model.onnx --format json | jq '.qdq'
  qlrewrite info llm.onnx --format json | jq '.weight_only[] | {K, N, bits, nodes}'
  qlrewrite info model.onnx --target ort==1.16 --target tensorrt
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
@click.option(
    "--target",
    multiple=True,
    metavar="SPEC",
    help="Also list the nodes this runtime refuses or runs elsewhere (repeatable): ort, "
    "ort==1.20, ort>=1.17, openvino, tensorrt, qnn (the QL7xx rules of check --target).",
)
@debug_option
@run_command
def info_command(model: Path, fmt: str, target: tuple[str, ...]) -> None:
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
    if target:
        summary["targets"] = _target_findings(loaded, target)
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    console = _text_console()
    _print_text(summary, console)
    _print_targets(summary.get("targets", {}), console)


def _target_findings(loaded: Any, specs: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Per target, the QL7xx findings of check --target (what the runtime refuses)."""
    from qlrewrite.checking.checker import check
    from qlrewrite.targets.spec import parse_targets

    found = {}
    for runtime in parse_targets(specs):
        report = check(loaded, select=["QL7"], targets=[runtime.spec])
        found[runtime.label] = [f.to_json() for f in report.findings]
    return found


def _print_targets(targets: dict[str, list[dict[str, Any]]], console: Console) -> None:
    for label, findings in targets.items():
        if not findings:
            _say(console, f"{label}: nothing refused (the QL7xx rules found nothing)")
            continue
        _say(console, f"{label}: {len(findings)} finding(s)", "bold")
        for f in findings:
            _say(console, f"  {f['rule']} {f['severity']}: {f['message']}")


def _text_console() -> Console:
    """The terminal's width, or the width COLUMNS gives; otherwise (a pipe or a file) the
    whole table, which rich would squeeze to 80 columns."""
    if out_console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return out_console
    return Console(highlight=False, width=200)


def _say(console: Console, text: str, style: str = "") -> None:
    """One line of the report: names escaped, never read as markup, wrapped at spaces."""
    console.print(Text(escape(text), style=style), soft_wrap=False)


def _print_header(summary: dict[str, Any], console: Console) -> None:
    """The model's path, its IR version and opsets, counts of graphs and initializers."""
    opsets = ", ".join(f"{d} {v}" for d, v in summary["opset_imports"].items())
    init = summary["initializers"]
    console.print(Text(escape(summary["path"]), style="bold"))  # never broken
    implied = "".join(
        f"; {d} not imported (ONNX Runtime reads it as {v})"
        for d, v in summary["implied_imports"].items()
    )
    _say(console, f"IR version {summary['ir_version']}; opsets: {opsets}{implied}")
    _say(
        console,
        f"{summary['graphs']} graph, {summary['subgraphs']} subgraph(s), "
        f"{summary['functions']} function(s); "
        f"{init['count']} initializer(s), {human_bytes(init['bytes'])}"
        + (" (external data)" if init["external_data"] else ""),
    )
    for group in summary["custom_quant"]:
        _say(
            console,
            f"{group['nodes']} custom quantization node(s) {group['domain']} "
            f"{group['op_type']} ({group['producer']}; not QuantizeLinear / DequantizeLinear: "
            "qlrewrite does not check or rewrite them)",
        )


def _print_text(summary: dict[str, Any], console: Console) -> None:
    """``info`` for people: the header, then a table per family of quantized nodes that
    fits the terminal (the columns left out named below it)."""
    _print_header(summary, console)
    if not any(summary[k] for k in ("qdq", "weight_only", "qoperator", "left_alone")):
        _say(
            console,
            "No quantized nodes (QuantizeLinear / DequantizeLinear, MatMulNBits, "
            "GatherBlockQuantized, QLinear* / QOperator, MatMulInteger / dynamic).",
        )
        return
    tables = (
        ("qdq", "qdq_nodes", "Q/DQ", _qdq_table),
        ("weight_only", "weight_only_nodes", "weight-only", _weight_only_table),
        ("qoperator", "qoperator_nodes", "QOperator / dynamic", _qoperator_table),
    )
    for key, count, label, make in tables:
        if summary[key]:
            table, dropped = make(summary[key], console.width)
            _say(console, f"{summary[count]} {label} node(s):")
            console.print(table)
            if dropped:
                hidden = ", ".join(dropped)
                _say(
                    console, f"(not shown at {console.width} columns: {hidden}; see --format json)"
                )
    if summary["left_alone"]:  # the words check and the rewrites use, then why each
        groups = [
            UncheckedGroup(g["domain"], g["op_type"], g["nodes"], g["reason"])
            for g in summary["left_alone"]
        ]
        _say(console, describe_unchecked(groups, "checked or rewritten") + ":")
    for group in summary["left_alone"]:
        _say(
            console,
            f"{group['nodes']} quantized node(s) {group['domain']} {group['op_type']} left "
            f"alone (not checked or converted): {group['reason']}",
        )


def _qoperator_table(rows: list[dict[str, Any]], width: int) -> tuple[Table, list[str]]:
    columns = [
        Column("domain", drop_rank=2),
        Column("op"),
        Column("quantization (name type granularity)", longest_word=16),
        Column("Q/DQ form", longest_word=16),
        Column("nodes", numeric=True),
        Column("const bytes", numeric=True, drop_rank=1),
    ]
    cells = [
        [
            row["domain"],
            f"{row['op_type']}-{_text(row['version'], 'none')}",
            "; ".join(row["quantization"]),
            row["float_op"] if not row["refusal"] else f"none: {row['refusal']}",
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        ]
        for row in rows
    ]
    return fitted_table(columns, cells, width)


def _qdq_table(rows: list[dict[str, Any]], width: int) -> tuple[Table, list[str]]:
    columns = [
        Column("domain", drop_rank=1),
        Column("op"),
        Column("version", drop_rank=4),
        Column("x type"),
        Column("scale type", drop_rank=2),
        Column("granularity"),
        Column("constant", drop_rank=5),
        Column("nodes", numeric=True),
        Column("const bytes", numeric=True, drop_rank=3),
    ]
    cells = [
        [
            row["domain"],
            row["op_type"],
            _text(row["version"], "none"),
            row["x_type"],
            row["scale_type"],
            row["granularity"],
            "yes" if row["constant"] else "no",
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        ]
        for row in rows
    ]
    return fitted_table(columns, cells, width)


def _size(row: dict[str, Any]) -> str:
    if row["shape"] is not None:
        size = " x ".join(_text(d) for d in row["shape"])
        return size + f" (axis {_text(row['quantize_axis'])})"
    return f"{_text(row['K'])} x {_text(row['N'])}"


def _weight_only_table(rows: list[dict[str, Any]], width: int) -> tuple[Table, list[str]]:
    columns = [
        Column("op"),
        Column("weight"),
        Column("bits", numeric=True),
        Column("block", numeric=True),
        Column("K x N / shape"),
        Column("zero points", drop_rank=2),
        Column("scale type", drop_rank=3),
        Column("accuracy", drop_rank=4),
        Column("constant", drop_rank=5),
        Column("nodes", numeric=True),
        Column("const bytes", numeric=True, drop_rank=1),
    ]
    cells = [
        [
            f"{row['op_type']}-{_text(row['version'], 'none')}",
            row["weight_type"],
            _text(row["bits"], "-"),
            _text(row["block_size"]),
            _size(row),
            row["zero_points"],
            row["scale_type"],
            _text(row["accuracy_level"], "-"),
            "yes" if row["constant"] else "no",
            str(row["nodes"]),
            human_bytes(row["input_bytes"]),
        ]
        for row in rows
    ]
    return fitted_table(columns, cells, width)


def _text(value: Any, missing: str = "?") -> str:
    return missing if value is None else str(value)
