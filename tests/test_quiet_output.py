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
from onnx import TensorProto, helper, numpy_helper
from test_cli_terminal import ANSI, run_on_terminal

from qlrewrite.cli import main

_TARGETS = {
    "tensorrt": ["--target", "tensorrt"],
    "qnn": ["--target", "qnn"],
    "ort==1.16": ["--target", "ort==1.16"],
    "all three": ["--target", "tensorrt", "--target", "qnn", "--target", "ort==1.16"],
}


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _qdq(nodes: list, inits: list, x: str, name: str, zp: int) -> str:
    """QuantizeLinear -> DequantizeLinear of activation ``x`` (uint8, zero point ``zp``)."""
    inits += [_init(f"{name}_s", np.float32(0.05)), _init(f"{name}_zp", np.uint8(zp))]
    nodes.append(
        helper.make_node(
            "QuantizeLinear", [x, f"{name}_s", f"{name}_zp"], [f"{name}_q"], name=f"{name}_Q"
        )
    )
    nodes.append(
        helper.make_node(
            "DequantizeLinear",
            [f"{name}_q", f"{name}_s", f"{name}_zp"],
            [f"{name}_dq"],
            name=f"{name}_DQ",
        )
    )
    return f"{name}_dq"


def _conv(nodes: list, inits: list, x: str, name: str, *, cin: int, cout: int) -> str:
    """DQ(int8 weight), DQ(int32 bias) -> Conv -> Relu -> Q/DQ: six nodes."""
    rng = np.random.default_rng(len(nodes))
    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    inits += [
        _init(f"{name}_w", w),
        _init(f"{name}_ws", np.float32(0.01)),
        _init(f"{name}_b", rng.integers(-500, 500, cout).astype(np.int32)),
        _init(f"{name}_bs", np.float32(0.0005)),
    ]
    nodes += [
        helper.make_node(
            "DequantizeLinear", [f"{name}_w", f"{name}_ws"], [f"{name}_wf"], name=f"{name}_wDQ"
        ),
        helper.make_node(
            "DequantizeLinear", [f"{name}_b", f"{name}_bs"], [f"{name}_bf"], name=f"{name}_bDQ"
        ),
        helper.make_node(
            "Conv",
            [x, f"{name}_wf", f"{name}_bf"],
            [f"{name}_c"],
            name=f"{name}_Conv",
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"], name=f"{name}_Relu"),
    ]
    return _qdq(nodes, inits, f"{name}_r", f"{name}_out", 0)


def cnn26() -> onnx.ModelProto:
    """A 26-node QDQ CNN as ONNX Runtime's quantizer writes one (uint8 activations with
    zero points, int8 weights, int32 biases), at opset 21 and IR 10: three Conv blocks, a
    Flatten and a MatMul classifier."""
    nodes: list = []
    inits: list = []
    x = _qdq(nodes, inits, "x", "x", 128)
    x = _conv(nodes, inits, x, "c1", cin=3, cout=8)
    x = _conv(nodes, inits, x, "c2", cin=8, cout=8)
    x = _conv(nodes, inits, x, "c3", cin=8, cout=4)
    nodes.append(helper.make_node("Flatten", [x], ["flat0"], name="Flatten"))
    flat = _qdq(nodes, inits, "flat0", "flat", 0)
    inits += [
        _init("fc_w", np.ones((4 * 8 * 8, 10), np.int8)),
        _init("fc_ws", np.float32(0.02)),
    ]
    nodes.append(helper.make_node("DequantizeLinear", ["fc_w", "fc_ws"], ["fc_wf"], name="fc_wDQ"))
    nodes.append(helper.make_node("MatMul", [flat, "fc_wf"], ["fc_y"], name="fc_MatMul"))
    inits.append(_init("fc_b", np.zeros(10, np.float32)))
    nodes.append(helper.make_node("Add", ["fc_y", "fc_b"], ["y"], name="fc_Add"))
    graph = helper.make_graph(
        nodes,
        "cnn26",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


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
