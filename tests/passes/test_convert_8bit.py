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
from qlrewrite.errors import InputError

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
    # the report's keys stay the same for machines: the count is there, 0
    assert "8-bit weight" not in err and report["changes"]["NBitsFromOnnxPass"] == {
        "matmul_nbits_made": 1,
        "gather_block_quantized_made": 0,
        "8bit_weights_left": 0,
    }


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


def _blocked_or_half(dtype: int, *, blocked: bool, half: bool) -> onnx.ModelProto:
    """x [8, 64] times an int8 / uint8 [64, 64] weight with a zero point, blocked by 32
    along K (``blocked``) or per column, its scale float16 (``half``) or float32."""
    rng = np.random.default_rng(1)
    low, high, np_type = (-128, 128, np.int8) if dtype == TensorProto.INT8 else (0, 256, np.uint8)
    scale_shape, attrs = ([K // 32, N], {"axis": 0, "block_size": 32}) if blocked else ([N], {})
    float_type = np.float16 if half else np.float32
    inits = [
        numpy_helper.from_array(rng.integers(low, high, (K, N)).astype(np_type), "w"),
        numpy_helper.from_array(np.full(scale_shape, 0.01, float_type), "ws"),
        numpy_helper.from_array(rng.integers(low, high, scale_shape).astype(np_type), "wz"),
    ]
    attrs.setdefault("axis", 1)
    elem = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="wdq", **attrs),
            helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm"),
        ],
        "g",
        [helper.make_tensor_value_info("x", elem, [8, K])],
        [helper.make_tensor_value_info("y", elem, [8, N])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.UINT8])
@pytest.mark.parametrize(("blocked", "half"), [(True, False), (False, True), (True, True)])
def test_8bit_weights_com_microsoft_cannot_hold_become_matmul_nbits(
    tmp_path: Path, dtype: int, blocked: bool, half: bool
) -> None:
    """com.microsoft's DequantizeLinear has no block_size, and a float16 one changes ORT's
    outputs: left as it is, such a weight refused the whole conversion (exit 1, 'has no
    blocked quantization' / '--allow-float16'), which made it MatMulNBits before 8-bit
    weights were left. It is made MatMulNBits without the flag, and not counted as left."""
    code, err, report = _convert(tmp_path, _blocked_or_half(dtype, blocked=blocked, half=half))
    assert code == 0, err
    assert _ops(tmp_path / "o.onnx") == ["MatMulNBits"]
    changes = report["changes"]["NBitsFromOnnxPass"]
    assert changes["matmul_nbits_made"] == 1 and changes["8bit_weights_left"] == 0
    assert "8-bit weight" not in err


def test_mixed_widths_count_only_the_8bit_weights_left(tmp_path: Path) -> None:
    """4-bit, blocked 8-bit and per-column 8-bit weights in one model: the per-column one
    alone stays DequantizeLinear (com.microsoft's, which ORT fuses), and the counts say so."""
    first = _weight_matmul(4, quantized_activation=False)
    second = _blocked_or_half(TensorProto.UINT8, blocked=True, half=False)
    third = _weight_matmul(8, quantized_activation=False)
    nodes, inits = list(first.graph.node), list(first.graph.initializer)
    for index, part in enumerate((second, third), start=1):
        renamed = {name: f"{name}{index}" for name in ("w", "ws", "wz", "wf", "wdq", "mm", "y")}
        renamed["x"] = "y" if index == 1 else "y1"
        for node in part.graph.node:
            node.input[:] = [renamed.get(name, name) for name in node.input]
            node.output[:] = [renamed[name] for name in node.output]
            node.name = renamed[node.name]
        for tensor in part.graph.initializer:
            tensor.name = renamed[tensor.name]
        nodes += part.graph.node
        inits += part.graph.initializer
    first.graph.ClearField("node")
    first.graph.node.extend(nodes)
    first.graph.ClearField("initializer")
    first.graph.initializer.extend(inits)
    first.graph.output[0].name = "y2"
    onnx.checker.check_model(first, full_check=True)
    code, err, report = _convert(tmp_path, first)
    assert code == 0, err
    written = onnx.load(tmp_path / "o.onnx")
    kinds = [(node.domain, node.op_type) for node in written.graph.node]
    assert kinds == [
        ("com.microsoft", "MatMulNBits"),
        ("com.microsoft", "MatMulNBits"),
        ("com.microsoft", "DequantizeLinear"),
        ("", "MatMul"),
    ]
    changes = report["changes"]["NBitsFromOnnxPass"]
    assert changes["matmul_nbits_made"] == 2 and changes["8bit_weights_left"] == 1
    assert "1 8-bit weight(s) left" in err


@pytest.mark.parametrize("flag", [["--include-8bit"], ["--accuracy-level", "4"]])
def test_com_microsoft_options_with_to_onnx_are_a_usage_error(
    tmp_path: Path, flag: list[str]
) -> None:
    """They shape the MatMulNBits --to com.microsoft makes: --to onnx ignored them and
    exited 0, as if they had been applied."""
    source = tmp_path / "m.onnx"
    onnx.save(_weight_matmul(8, quantized_activation=False), source)
    out = tmp_path / "o.onnx"
    result = CliRunner().invoke(
        main, ["convert", str(source), "--to", "onnx", *flag, "-o", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert f"{flag[0]} applies to --to com.microsoft" in result.stderr
    assert not out.exists()


def test_the_api_refuses_them_too() -> None:
    model = _weight_matmul(8, quantized_activation=False)
    with pytest.raises(InputError, match=r"apply to com\.microsoft"):
        qlrewrite.convert(model, "onnx", include_8bit=True)
    with pytest.raises(InputError, match=r"apply to com\.microsoft"):
        qlrewrite.convert(model, "onnx", accuracy_level=4)
    with pytest.raises(TypeError, match="include_8bit must be a bool"):
        qlrewrite.convert(model, "com.microsoft", include_8bit="no")  # type: ignore[arg-type]
