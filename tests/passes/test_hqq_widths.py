"""Issue 42 item 4: HQQ MatMulNBits (zero points in the scale type) at every width ONNX
Runtime computes. Measured with tools/probe/hqq_float_zero_points.py (CPU provider,
optimizations off, A = identity so the output is the weight): 4 bits computed as
``q * scale - scale * zp`` (each product rounded to float32) by 1.18 to 1.32, 2 bits by
1.27 to 1.32 (1.15 to 1.26 refuse them); 8 bits refused by every release 1.15 to 1.32.
Expected values are ONNX Runtime's outputs on the original model (installed: 1.31.1)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from qlrewrite.cli import main

sys.path.insert(0, str(Path(__file__).parents[2] / "tools" / "probe"))
from hqq_float_zero_points import hqq_model

K, N, BLOCK = 64, 8, 16


def _hqq(bits: int, opset: int = 25) -> onnx.ModelProto:
    """A MatMulNBits of ``bits`` with float32 zero points (values not on the integer grid),
    as the probe builds it, with 3 rows of A."""
    model, *_ = hqq_model(bits, K, N, BLOCK, opset)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 3
    return model


def _run(path: Path) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a = np.random.default_rng(0).standard_normal((3, K)).astype(np.float32)
    return ort.InferenceSession(str(path), options).run(None, {"a": a})[0]


def _weight(path: Path) -> np.ndarray:
    """The model's weight: its output on the identity."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = onnx.load(path)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = K
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = K
    session = ort.InferenceSession(model.SerializeToString(), options)
    return session.run(None, {"a": np.eye(K, dtype=np.float32)})[0]


def test_2_bit_float_zero_points_convert_as_ort_computes_them(tmp_path: Path) -> None:
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 27):
        pytest.skip("ONNX Runtime computes 2-bit float zero points from 1.27 on")
    source, out = tmp_path / "hqq2.onnx", tmp_path / "c.onnx"
    onnx.save_model(_hqq(2), source)
    result = CliRunner().invoke(main, ["convert", "--to", "onnx", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    ops = [n.op_type for n in onnx.load(out).graph.node]
    assert "MatMulNBits" not in ops and ops[0] == "DequantizeLinear", ops
    np.testing.assert_array_equal(_weight(out).view(np.uint32), _weight(source).view(np.uint32))
    # the MatMul sums in another order than MatMulNBits: its stated bound, not bits
    np.testing.assert_allclose(_run(out), _run(source), rtol=1e-5, atol=1e-5)


def test_8_bit_float_zero_points_are_refused_saying_ort_refuses_them(tmp_path: Path) -> None:
    source, out = tmp_path / "hqq8.onnx", tmp_path / "c.onnx"
    onnx.save_model(_hqq(8, opset=21), source)
    result = CliRunner().invoke(main, ["convert", "--to", "onnx", str(source), "-o", str(out)])
    assert result.exit_code == 1 and not out.exists()
    assert "8-bit zero points in the scale type" in result.output + result.stderr
    assert "refuses them" in result.output + result.stderr
