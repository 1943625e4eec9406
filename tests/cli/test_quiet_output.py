"""Quiet by default (issue 43 item 3, issue 41 item 5): `check --target` on a 26-node CNN
reads in a screen, on an 80- and a 120-column terminal and in a log: one short line per
finding or group, a rule's hint once per run, TensorRT / QNN findings name their table
row and `qlrewrite rules CODE` cites the document; a folder of float models gives one
short QL607 line each; a refused `check --fix` advertises no --fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from cnn_models import cnn26
from onnx import TensorProto, helper, numpy_helper
from test_cli_terminal import ANSI, run_on_terminal

from qlrewrite.cli import main

SNAPSHOTS = Path(__file__).parent / "snapshots"

_TARGETS = {
    "tensorrt": ["--target", "tensorrt"],
    "qnn": ["--target", "qnn"],
    "ort==1.16": ["--target", "ort==1.16"],
    "all three": ["--target", "tensorrt", "--target", "qnn", "--target", "ort==1.16"],
}


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    model = cnn26()
    assert len(model.graph.node) == 26
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("target", list(_TARGETS))
def test_target_findings_fit_a_terminal(cnn_path: Path, columns: int, target: str) -> None:
    code, raw = run_on_terminal("check", str(cnn_path), *_TARGETS[target], columns=columns)
    out = ANSI.sub("", raw)
    lines = [line for line in out.split("\n") if line.strip()]
    assert code == (0 if target == "qnn" else 1), out  # QNN's findings are warnings
    assert all(len(line) <= columns for line in lines), out
    assert len(lines) < 40, out
    assert "https://" not in out  # the citation lives in `qlrewrite rules CODE`


@pytest.mark.parametrize("columns", [80, 120])
def test_target_findings_on_a_terminal_snapshot(tmp_path: Path, columns: int) -> None:
    """The whole default output of the three targets' rules, exactly as a terminal
    ``columns`` wide shows it (tests/cli/snapshots/cnn26_targets_COLUMNS.txt): a changed
    message, grouping or wrap shows here as a diff to review."""
    onnx.save(cnn26(), tmp_path / "cnn.onnx")
    args = ["check", "cnn.onnx", *_TARGETS["all three"]]
    code, raw = run_on_terminal(*args, columns=columns, cwd=tmp_path, stderr=False)
    expected = (SNAPSHOTS / f"cnn26_targets_{columns}.txt").read_text()
    assert code == 1
    assert ANSI.sub("", raw) == expected


@pytest.mark.parametrize("target", list(_TARGETS))
def test_target_findings_in_a_log_are_short(cnn_path: Path, target: str) -> None:
    """The plain lines CI logs get (no terminal: nothing wraps): each finding's line,
    hint included once per rule, stays under 300 characters; the groups say how many."""
    result = CliRunner().invoke(main, ["check", str(cnn_path), *_TARGETS[target]])
    lines = result.stdout.splitlines()
    assert result.exit_code == (0 if target == "qnn" else 1), result.output
    assert len(lines) < 40 and len(result.stdout) < 4000, result.stdout
    place = len(str(cnn_path))
    assert all(len(line) - place < 280 for line in lines), result.stdout  # 581 before
    assert "https://" not in result.stdout
    hints = [line.split("(hint: ", 1)[1] for line in lines if "(hint: " in line]
    assert len(hints) == len(set(hints)), result.stdout  # a hint once per run


def test_tensorrt_finding_names_its_row_and_rules_cites_the_document(cnn_path: Path) -> None:
    result = CliRunner().invoke(main, ["check", str(cnn_path), "--target", "tensorrt"])
    assert "source: tensorrt docs, zero_point)" in result.stdout
    rules = CliRunner().invoke(main, ["rules", "QL711"]).stdout
    assert "Documented (tensorrt docs, zero_point): https://github.com/onnx/onnx-tensorrt" in rules


def test_a_folder_of_float_models_gives_one_short_line_each(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "g", [value("x", TensorProto.FLOAT, [2])], [value("y", TensorProto.FLOAT, [2])]
    )
    for i in range(3):
        onnx.save(helper.make_model(graph), tmp_path / f"float{i}.onnx")
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and len(lines) == 4, result.stdout
    assert all("QL607" in line and len(line) < 130 + len(str(tmp_path)) for line in lines[:3]), (
        result.stdout
    )
    assert "(hint: " in lines[0] and "(hint: " not in lines[1] + lines[2]


def test_a_refused_fix_advertises_no_fix(tmp_path: Path) -> None:
    """QL403 (an error no fix repairs) beside QL406 (a safe fix): the fix is refused, and
    no ``fixable with --fix`` line follows."""
    inits = [
        numpy_helper.from_array(np.zeros((4, 3), np.int8), "w1"),
        numpy_helper.from_array(np.ones(5, np.float32), "s1"),
        numpy_helper.from_array(np.zeros(2, np.int8), "w2"),
        numpy_helper.from_array(np.ones(1, np.float32), "s2"),
        numpy_helper.from_array(np.array(0, np.int8), "z2"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w1", "s1"], ["y1"], name="dq1", axis=0),
        helper.make_node("DequantizeLinear", ["w2", "s2", "z2"], ["y2"], name="dq2"),
    ]
    outputs = [
        helper.make_tensor_value_info("y1", TensorProto.FLOAT, [4, 3]),
        helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2]),
    ]
    graph = helper.make_graph(nodes, "g", [], outputs, inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    checked = CliRunner().invoke(main, ["check", str(path), "--select", "QL4"])
    assert "1 fixable with --fix" in checked.output  # advertised before a fix is tried
    result = CliRunner().invoke(main, ["check", str(path), "--fix", "--select", "QL4"])
    assert result.exit_code == 1
    assert "fix refused" in result.stderr, result.output
    assert "fixable with --fix" not in result.output
