"""`convert --to com.microsoft` leaves 8-bit weights as DequantizeLinear -> MatMul unless
--include-8bit: ONNX Runtime fuses those itself (MatMulIntegerToFloat with a quantized
activation, its own MatMulNBits at accuracy_level 4 without) and an 8-bit MatMulNBits at
accuracy_level 0 ran 2-35x slower (benchmarks/convert_8bit.py, ORT 1.31.1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import qlrewrite
from qlrewrite.cli import main

K = N = 64


def _weight_matmul(bits: int, *, quantized_activation: bool) -> onnx.ModelProto:
    """A [8, 64] float (or Q -> DQ) activation times a per-column DequantizeLinear of a
    constant int8 or int4 [64, 64] weight, opset 21."""
    rng = np.random.default_rng(0)
    low, high = (-127, 128) if bits == 8 else (-8, 8)
    values = rng.integers(low, high, (K, N)).astype(np.int8)
    dtype = TensorProto.INT8 if bits == 8 else TensorProto.INT4
    inits = [
        helper.make_tensor("w", dtype, [K, N], values.flatten().tolist()),
        numpy_helper.from_array(np.full(N, 0.01, np.float32), "ws"),
    ]
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], name="wdq", axis=1)]
    a = "x"
    if quantized_activation:
        inits += [
            numpy_helper.from_array(np.array(0.02, np.float32), "as"),
            numpy_helper.from_array(np.array(128, np.uint8), "az"),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"], name="q"),
            helper.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"], name="dq"),
        ]
        a = "xd"
    nodes.append(helper.make_node("MatMul", [a, "wf"], ["y"], name="mm"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, N])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _convert(tmp_path: Path, model: onnx.ModelProto, *args: str) -> tuple[int, str, dict]:
    source, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, source)
    argv = ["convert", str(source), "--to", "com.microsoft", "-o", str(out), *args]
    result = CliRunner().invoke(main, [*argv, "--report", str(report)])
    return result.exit_code, result.stderr, json.loads(report.read_text())


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(path).graph.node]


@pytest.mark.parametrize("quantized_activation", [False, True])
def test_8bit_weights_stay_dequantize_linear_by_default(
    tmp_path: Path, quantized_activation: bool
) -> None:
    model = _weight_matmul(8, quantized_activation=quantized_activation)
    code, err, report = _convert(tmp_path, model)
    assert code == 0, err
    assert "MatMulNBits" not in _ops(tmp_path / "o.onnx")
    assert "DequantizeLinear" in _ops(tmp_path / "o.onnx") or quantized_activation
    assert "1 8-bit weight(s) left as DequantizeLinear -> MatMul" in err
    assert "--include-8bit converts them" in err
    assert report["changes"]["NBitsFromOnnxPass"]["8bit_weights_left"] == 1


def test_include_8bit_converts_them(tmp_path: Path) -> None:
    code, err, report = _convert(
        tmp_path, _weight_matmul(8, quantized_activation=False), "--include-8bit"
    )
    assert code == 0, err
    assert _ops(tmp_path / "o.onnx") == ["MatMulNBits"]
    assert (
        "8-bit weight" not in err
        and "8bit_weights_left" not in report["changes"]["NBitsFromOnnxPass"]
    )


def test_4bit_weights_convert_without_the_flag(tmp_path: Path) -> None:
    code, err, report = _convert(tmp_path, _weight_matmul(4, quantized_activation=False))
    assert code == 0, err
    assert _ops(tmp_path / "o.onnx") == ["MatMulNBits"]
    assert report["changes"]["NBitsFromOnnxPass"]["matmul_nbits_made"] == 1 and "8-bit" not in err


def test_the_api_takes_the_same_choice() -> None:
    model = _weight_matmul(8, quantized_activation=False)
    kept = qlrewrite.convert(model, "com.microsoft")
    assert [node.op_type for node in kept.graph] == ["DequantizeLinear", "MatMul"]
    made = qlrewrite.convert(model, "com.microsoft", include_8bit=True)
    assert [node.op_type for node in made.graph] == ["MatMulNBits"]
