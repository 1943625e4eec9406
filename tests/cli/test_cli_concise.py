"""`check` on a terminal prints ruff's concise lines (issue 33, item 3): one coloured line
per finding ``path:graph:node: CODE [*] message``, wrapped between words (never inside a
name that fits a line), then ``Found N errors (M fixable with --fix).`` and the summary
line; the table is ``--output-format full``; CI=true gets the plain log lines even on a
terminal. Snapshots at 80 and 120 columns, as a person sees them (a pseudo-terminal)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from qdq_models import DQ, qdq_model
from rich.console import Console
from test_cli_terminal import ANSI, run_on_terminal

from qlrewrite.checking.formats import RenderOptions
from qlrewrite.checking.formats.concise import print_concise
from qlrewrite.cli import main
from qlrewrite.findings import Finding, Report

LONG_NODE = "model.layers.0.self_attn.q_proj.weight_DequantizeLinear"


def _models(folder: Path) -> Path:
    """Three models: an error (QL403) on a node with a long name, a warning with a safe
    fix (QL406, opt-in) and a warning without (QL501)."""
    models = folder / "models"
    models.mkdir()
    error = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})
    error.graph.node[0].name = LONG_NODE
    onnx.save(error, models / "attention.onnx")
    fixable = qdq_model(DQ, 21, scale_shape=(1,), zp_shape=())
    fixable.graph.node[0].name = "dq_scalar"
    onnx.save(fixable, models / "embed.onnx")
    warning = qdq_model(DQ, 21, scale=0.0)
    warning.graph.node[0].name = "zero_scale_DQ"
    onnx.save(warning, models / "head.onnx")
    return models


def _on_terminal(cwd: Path, *args: str, columns: int, ci: str | None = None) -> tuple[int, str]:
    """``qlrewrite ARGS`` in ``cwd`` with stdout on a pseudo-terminal ``columns`` wide
    (stderr elsewhere: no progress bar): the exit code and what the terminal received."""
    env = {"CI": ci} if ci is not None else None
    return run_on_terminal(*args, columns=columns, cwd=cwd, stderr=False, env=env)


AT_80 = """\
models/attention.onnx:main:
    model.layers.0.self_attn.q_proj.weight_DequantizeLinear: QL403 per-axis
    scale 'scale' (FLOAT [5]) has 5 elements but x 'x' (UINT8 [4, 3]) has 4 on
    axis 0
models/embed.onnx:main:dq_scalar: QL406 [*] zero point 'zp' (UINT8 []) and scale
    'scale' (FLOAT [1]) differ in rank
models/head.onnx:main:zero_scale_DQ: QL501 scale 'scale' (FLOAT []) has 1
    value(s) that are zero, NaN or infinite: [0.0]
Found 1 error and 2 warnings (1 fixable with --fix).
checked 3 file(s), 3 quantized node(s): 1 error(s), 2 warning(s) [QL403 x1,
    QL406 x1, QL501 x1]
"""

AT_120 = "".join(
    [
        "models/attention.onnx:main:model.layers.0.self_attn.q_proj.weight_DequantizeLinear: "
        "QL403 per-axis scale 'scale' (FLOAT\n",
        "    [5]) has 5 elements but x 'x' (UINT8 [4, 3]) has 4 on axis 0\n",
        "models/embed.onnx:main:dq_scalar: QL406 [*] zero point 'zp' (UINT8 []) and scale "
        "'scale' (FLOAT [1]) differ in rank\n",
        "models/head.onnx:main:zero_scale_DQ: QL501 scale 'scale' (FLOAT []) has 1 value(s) "
        "that are zero, NaN or infinite: [0.0]\n",
        "Found 1 error and 2 warnings (1 fixable with --fix).\n",
        "checked 3 file(s), 3 quantized node(s): 1 error(s), 2 warning(s) [QL403 x1, QL406 x1, "
        "QL501 x1]\n",
    ]
)


@pytest.mark.parametrize(("columns", "expected"), [(80, AT_80), (120, AT_120)])
def test_concise_lines_on_a_terminal_snapshot(tmp_path: Path, columns: int, expected: str) -> None:
    _models(tmp_path)
    code, raw = _on_terminal(
        tmp_path, "check", "models", "--extend-select", "QL406", columns=columns
    )
    out = ANSI.sub("", raw)
    assert code == 1 and out == expected
    assert all(len(line) <= columns for line in out.splitlines())
    assert any(LONG_NODE in line for line in out.splitlines())  # the name is never split
    assert "\x1b[1;31mQL403" in raw and "\x1b[1;33mQL501" in raw  # error red, warning yellow
    assert "\x1b[36m[*]" in raw  # the safe fix marked in cyan


def test_ci_on_a_terminal_gets_the_plain_lines(tmp_path: Path) -> None:
    _models(tmp_path)
    code, raw = _on_terminal(tmp_path, "check", "models", columns=80, ci="true")
    lines = raw.replace("\r", "").splitlines()
    assert code == 1 and "\x1b[" not in raw and "Found" not in raw and "┏" not in raw
    assert lines[0].startswith(
        f"models/attention.onnx: QL403 error: DequantizeLinear '{LONG_NODE}'"
    )
    assert lines[-1].startswith("checked 3 file(s), 3 quantized node(s)")
    piped = subprocess.run(
        [sys.executable, "-m", "qlrewrite", "check", "models"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert piped.stdout.splitlines() == lines  # what a pipe gets
    code, raw = _on_terminal(tmp_path, "check", "models", columns=80, ci="false")
    assert "Found 1 error and 1 warning." in ANSI.sub("", raw)  # CI=false: a person


@pytest.mark.parametrize("option", ["--output-format", "--format"])
def test_full_keeps_the_table_on_a_terminal(tmp_path: Path, option: str) -> None:
    _models(tmp_path)
    code, raw = _on_terminal(tmp_path, "check", "models", option, "full", columns=120)
    out = ANSI.sub("", raw)
    assert code == 1 and "┏" in out and "hint" in out and "Found" not in out
    assert "give one scale per slice" in out
    (tmp_path / "qlrewrite.toml").write_text('output-format = "full"\n')
    assert "┏" in ANSI.sub("", _on_terminal(tmp_path, "check", "models", columns=120)[1])
    runner = CliRunner()
    full = runner.invoke(main, ["check", str(tmp_path / "models"), "--isolated", option, "full"])
    text = runner.invoke(main, ["check", str(tmp_path / "models"), "--isolated"])
    assert full.stdout == text.stdout and full.exit_code == text.exit_code == 1  # a pipe


def _finding(node: str, fix: str | None = None) -> Finding:
    return Finding(
        "QL501",
        "warning",
        f"DequantizeLinear '{node}' in main: scale 's' is 0",
        node=node,
        op_type="DequantizeLinear",
        fix=fix,
    )


def _concise(reports: list[Report], width: int, **options: bool) -> str:
    console = Console(force_terminal=True, width=width, record=True, color_system=None)
    print_concise(reports, console, RenderOptions(**options))
    return console.export_text()


def test_similar_findings_group_and_nothing_found_passes() -> None:
    report = Report(path="m.onnx", findings=[_finding(f"dq{i}") for i in range(8)])
    out = _concise([report], 80).splitlines()
    assert out[:2] == [
        "m.onnx:main:dq0: QL501 scale 's' is 0",
        "m.onnx:main:dq0: QL501 7 more like the line above, on dq1, dq2, dq3, ...",
    ]
    assert len(_concise([report], 80, show_all=True).splitlines()) == 8 + 2
    assert _concise([Report(path="m.onnx", nodes_checked=3)], 80).splitlines()[0] == (
        "All checks passed!"
    )
    unnamed = Finding(
        "QL501", "warning", "DequantizeLinear (unnamed) in main: x", op_type="DequantizeLinear"
    )
    assert _concise([Report(path="m.onnx", findings=[unnamed])], 80).startswith(
        "m.onnx:main:<DequantizeLinear>: QL501 DequantizeLinear (unnamed) in main: x"
    )


def test_a_word_wider_than_the_line_is_folded_never_cut() -> None:
    node = "n" * 150
    out = _concise([Report(path="m.onnx", findings=[_finding(node)])], 60, summary=False)
    lines = out.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert lines[0] == "m.onnx:main:"  # broken after the graph, then the name folded
    whole = f"m.onnx:main:{node}: QL501 scale 's' is 0"
    assert "".join("".join(line.split()) for line in lines) == "".join(whole.split())


def test_the_docs_show_the_80_column_snapshot() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "commands" / "check.md").read_text()
    block = re.search(r"  ```text\n((?:  .*\n)+?)  ```\n", page)
    assert block is not None
    assert "".join(line[2:] + "\n" for line in block.group(1).splitlines()) == AT_80
