"""Quantized nodes qlrewrite does not check or rewrite (com.microsoft QOrdered*,
MatMulInteger16, QMoE, ...) are named in check, info and every rewrite's summary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import qlrewrite
from qlrewrite.cli import main

MS = "com.microsoft"


def _model(path: Path) -> Path:
    """A Q -> DQ pair (checked) and two com.microsoft MatMulInteger16 nodes (left alone)."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq"),
        helper.make_node("MatMulInteger16", ["a", "b"], ["c"], name="m1", domain=MS),
        helper.make_node("MatMulInteger16", ["a", "b"], ["d"], name="m2", domain=MS),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.uint8), "zp"),
    ]
    int16 = onnx.TensorProto.INT16
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("a", int16, [2, 2]),
            helper.make_tensor_value_info("b", int16, [2, 2]),
        ],
        [
            helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("c", onnx.TensorProto.INT32, [2, 2]),
            helper.make_tensor_value_info("d", onnx.TensorProto.INT32, [2, 2]),
        ],
        initializer=inits,
    )
    imports = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]
    onnx.save(helper.make_model(graph, opset_imports=imports, ir_version=10), path)
    return path


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def test_check_names_them_in_text_json_and_the_summary(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx")
    code, out, _ = _run("check", path)
    assert code == 0
    assert f"{path}: 2 quantized node(s) of kinds not checked: {MS} MatMulInteger16 x2" in out
    assert out.splitlines()[-1].endswith("; 2 quantized node(s) of kinds not checked")
    assert "2 quantized node(s):" in out.splitlines()[-1]  # the Q and the DQ were checked
    code, out, _ = _run("check", path, "--format", "json")
    (entry,) = json.loads(out)["files"]
    assert entry["unchecked"] == [
        {
            "domain": MS,
            "op_type": "MatMulInteger16",
            "nodes": 2,
            "reason": "16-bit integer MatMul without scales; no ai.onnx form",
        }
    ]
    assert [g.op_type for g in qlrewrite.check(path).unchecked] == ["MatMulInteger16"]


def test_rewrites_and_info_name_them(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx")
    warning = f"2 quantized node(s) of kinds not checked or rewritten: {MS} MatMulInteger16 x2"
    for command in (["fold"], ["upgrade", "--opset", "23"]):
        code, _, err = _run(*command, path, "--dry-run")
        assert code == 0 and warning in err, err
    code, out, _ = _run("info", path)
    assert code == 0 and "MatMulInteger16" in out and "left alone" in out
    assert f"2 quantized node(s) of kinds not checked or rewritten: {MS} MatMulInteger16 x2:" in out


def test_fold_says_it_does_not_fold_qoperator_nodes(tmp_path: Path) -> None:
    from qoperator_models import build

    path = tmp_path / "conv.onnx"
    onnx.save(build("QLinearConv"), path)
    code, _, err = _run("fold", path, "--dry-run")
    assert code == 0 and "fold: nothing to change" in err
    assert "1 QOperator / dynamic node(s) not folded" in err and "convert --to onnx" in err


def test_ort_bnb4_quantizer_output_is_named(tmp_path: Path) -> None:
    """ONNX Runtime's own MatMulBnb4Quantizer (NF4) writes com.microsoft MatMulBnb4."""
    bnb4 = pytest.importorskip("onnxruntime.quantization.matmul_bnb4_quantizer")
    weight = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    quantizer = bnb4.MatMulBnb4Quantizer(
        model, quant_type=bnb4.MatMulBnb4Quantizer.NF4, block_size=32
    )
    quantizer.process()
    path = tmp_path / "bnb4.onnx"
    onnx.save(quantizer.model.model, path)
    code, out, _ = _run("check", path)
    assert code == 0
    assert f"1 quantized node(s) of kinds not checked: {MS} MatMulBnb4 x1" in out
    (group,) = qlrewrite.check(path).unchecked
    assert "NF4" in group.reason
