"""`info` on QOperator and dynamic models written by ONNX Runtime's quantizer."""

from __future__ import annotations

import json

import onnx
from click.testing import CliRunner
from ort_quantized import quantized

from qlrewrite.cli import main


def _info(tmp_path, config: str, *args: str) -> str:
    path = tmp_path / f"{config}.onnx"
    onnx.save_model(quantized(config), path)
    result = CliRunner().invoke(main, ["info", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_info_lists_qoperator_nodes_with_their_quantization(tmp_path) -> None:
    summary = json.loads(_info(tmp_path, "cnn-qop-s8s8-per-channel", "--format", "json"))
    groups = {g["op_type"]: g for g in summary["qoperator"]}
    assert set(groups) == {"QLinearConv", "QLinearMatMul", "QLinearAdd", "QGemm"}
    assert groups["QLinearConv"]["nodes"] == 2
    assert groups["QLinearConv"]["quantization"] == [
        "x INT8 per-tensor",
        "w INT8 per-channel(axis 0)",
        "y INT8 per-tensor",
    ]
    assert groups["QGemm"]["quantization"][1] == "B INT8 per-channel(axis 0)"  # transB=1
    assert groups["QLinearMatMul"]["quantization"][1] == "b INT8 per-channel(axis -1)"
    assert groups["QLinearAdd"]["domain"] == "com.microsoft"
    assert summary["qoperator_nodes"] == 5 and summary["qdq_nodes"] == 2


def test_info_text_per_tensor_uint8(tmp_path) -> None:
    text = _info(tmp_path, "mlp-qop-u8s8")
    assert "QOperator / dynamic node(s)" in text
    assert "a UINT8 per-tensor; b UINT8 per-tensor; y UINT8 per-tensor" in text
    assert "QLinearSoftmax-1" in text


def test_info_dynamic_says_what_is_not_converted(tmp_path) -> None:
    summary = json.loads(_info(tmp_path, "mlp-dynamic-per-channel", "--format", "json"))
    groups = {g["op_type"]: g for g in summary["qoperator"]}
    assert groups["MatMulInteger"]["quantization"] == [
        "A UINT8 per-tensor",
        "B INT8 per-channel(axis -1)",
    ]
    assert groups["DynamicQuantizeLinear"]["quantization"] == ["y UINT8 per-tensor"]


def test_info_reports_left_alone_ops_with_reason(tmp_path) -> None:
    node = onnx.helper.make_node(
        "QOrderedMatMul", ["a", "s", "b", "s", "s"], ["y"], domain="com.microsoft"
    )
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.INT8, [2, 2]) for n in ("a", "b")]
        + [onnx.helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT8, [2, 2])],
    )
    imports = [onnx.helper.make_opsetid("", 13), onnx.helper.make_opsetid("com.microsoft", 1)]
    model = onnx.helper.make_model(graph, opset_imports=imports)
    path = tmp_path / "ordered.onnx"
    onnx.save_model(model, path)
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == 0
    assert "QOrderedMatMul left alone" in result.output and "CUDA-only" in result.output
