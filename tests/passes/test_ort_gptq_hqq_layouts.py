"""The MatMulNBits layouts ONNX Runtime's PyTorch-based weight-only quantizers write
(``MatMulNBitsQuantizer`` with ``HQQWeightOnlyQuantConfig`` / ``GPTQWeightOnlyQuantConfig``,
ORT 1.32), rebuilt here in code (no PyTorch):

- HQQ: 4 bits, block 32 / 64 / 128, **flat** float32 scales ``[N * k_blocks]`` and **flat
  float32 zero points** ``[N * k_blocks]`` (fractional values), com.microsoft 1 imported.
  ORT computes ``q * scale - scale * zp``, which no DequantizeLinear reproduces.
- GPTQ: 4 bits, scales ``[N, k_blocks]``, packed uint8 zero points ``[N, ceil(k_blocks / 2)]``
  when asymmetric, no com.microsoft import; at block 128 and K = 128 one block per column.

What ONNX Runtime computes is asserted from ONNX Runtime itself (the node run on A = identity).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from nbits_weights import matmul_nbits_model
from onnx import numpy_helper

from qlrewrite.checking.checker import check_path
from qlrewrite.cli import main

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
K, N = 128, 16


def _hqq(block_size: int) -> onnx.ModelProto:
    """HQQ's layout: flat float scales and flat float zero points, ai.onnx 17 + com.microsoft 1."""
    rng = np.random.default_rng(block_size)
    model = matmul_nbits_model(
        rng,
        n=N,
        k=K,
        bits=4,
        block_size=block_size,
        zero_points=False,
        flat_scales=True,
        opset=17,
    )
    k_blocks = K // block_size
    scales = (rng.random(N * k_blocks) * 0.02 + 0.005).astype(np.float32)  # HQQ's: positive
    zp = (rng.random(N * k_blocks) * 8 + 3.5).astype(np.float32)  # fractional, about 3.6..11
    graph = model.graph
    graph.initializer[1].CopyFrom(numpy_helper.from_array(scales, "scales"))
    graph.initializer.append(numpy_helper.from_array(zp, "zpf"))
    graph.node[0].input.append("zpf")
    graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    return model


def _gptq(block_size: int, symmetric: bool) -> onnx.ModelProto:
    """GPTQ's layout: 2-D scales, packed uint8 zero points or none, no com.microsoft import."""
    rng = np.random.default_rng(block_size + symmetric)
    model = matmul_nbits_model(
        rng, n=N, k=K, bits=4, block_size=block_size, zero_points=not symmetric, opset=17
    )
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    del model.opset_import[:]
    model.opset_import.append(onnx.helper.make_opsetid("", 17))
    return model


def _session(model: onnx.ModelProto):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _ort_weight(model: onnx.ModelProto) -> np.ndarray:
    """ONNX Runtime's dequantized weight [K, N]: the node run on A = identity."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = K
    return _session(model).run(None, {"A": np.eye(K, dtype=np.float32)})[0]


def _cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("block_size", [32, 64, 128])
def test_hqq_float_zero_points_check_info_and_fold(tmp_path: Path, block_size: int) -> None:
    model = _hqq(block_size)
    weight = _ort_weight(model)  # ORT loads and runs it
    path = _save(model, tmp_path / "m.onnx")
    assert check_path(path).findings == []
    code, out = _cli("info", path, "--format", "json")
    (row,) = json.loads(out)["weight_only"]
    assert (row["zero_points"], row["scale_type"], row["block_size"]) == (
        "FLOAT",
        "FLOAT",
        block_size,
    )
    assert (row["K"], row["N"], row["bits"], row["accuracy_level"]) == (K, N, 4, 0)

    folded = tmp_path / "f.onnx"
    code, out = _cli("fold", "--dequantize-weights", path, "-o", folded, "--verify")
    assert code == 0 and "verify: exact" in out and "matmul nbits converted 1" in out, out
    result = onnx.load(folded)
    assert [n.op_type for n in result.graph.node] == ["MatMul"]
    (init,) = [t for t in result.graph.initializer if t.name == result.graph.node[0].input[1]]
    np.testing.assert_array_equal(
        numpy_helper.to_array(init).view(np.uint32), weight.view(np.uint32)
    )


@pytest.mark.parametrize("block_size", [32, 128])
def test_hqq_float_zero_points_other_rewrites(tmp_path: Path, block_size: int) -> None:
    """Kept as MatMulNBits (exact) by the rewrites that keep weight-only nodes."""
    path = _save(_hqq(block_size), tmp_path / "m.onnx")
    for args in (["convert", "--to", MS], ["upgrade", "--opset", "21"], ["fold"]):
        out_path = tmp_path / "out.onnx"
        code, out = _cli(*args, path, "-o", out_path, "--verify")
        assert code == 0 and "verify: exact" in out, (args, out)
        assert [n.op_type for n in onnx.load(out_path).graph.node] == ["MatMulNBits"]


def _standard_weight(model: onnx.ModelProto) -> np.ndarray:
    """The float weight a converted HQQ model computes (the Sub's output) in ORT."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    (sub,) = [n for n in model.graph.node if n.op_type == "Sub"]
    model.graph.output.append(onnx.helper.make_tensor_value_info(sub.output[0], 1, None))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = K
    return _session(model).run(None, {"A": np.eye(K, dtype=np.float32)})[1]


@pytest.mark.parametrize("block_size", [32, 64, 128])
def test_hqq_to_standard_onnx_weight_is_ort_s_bit_for_bit(tmp_path: Path, block_size: int) -> None:
    """DequantizeLinear(q, scale) - scale * zp repeated per block: the float32 weight ORT's
    MatMulNBits computes (q * scale - scale * zp, each product rounded), bit for bit; the
    outputs within the MatMul summation-order bound --verify states."""
    opset21 = _hqq(block_size)
    opset21.opset_import[0].version = 21
    weight = _ort_weight(opset21)
    path21 = _save(opset21, tmp_path / "m21.onnx")
    code, out = _cli("convert", "--to", "onnx", path21, "-o", tmp_path / "c.onnx", "--verify")
    assert code == 0 and "verify:" in out, out
    converted = onnx.load(tmp_path / "c.onnx")
    ops = [n.op_type for n in converted.graph.node]
    assert ops[0] == "DequantizeLinear" and ops[-2:] == ["Sub", "MatMul"], ops
    assert {o.domain for o in converted.opset_import} == {""}
    np.testing.assert_array_equal(
        _standard_weight(converted).view(np.uint32), weight.view(np.uint32)
    )
    source = _save(_hqq(block_size), tmp_path / "m.onnx")
    upgrade = ["upgrade", "--opset", "21", "--convert-weight-only", source]
    code, out = _cli(*upgrade, "-o", tmp_path / "u.onnx", "--verify")
    assert code == 0 and "matmul nbits converted 1" in out, out


def test_hqq_float16_zero_points_stay_refused(tmp_path: Path) -> None:
    model = _hqq(32)
    model.opset_import[0].version = 21
    zp = model.graph.initializer[-1]
    zp.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(zp).astype(np.float16), zp.name))
    code, out = _cli(
        "convert", "--to", "onnx", _save(model, tmp_path / "m.onnx"), "-o", tmp_path / "c.onnx"
    )
    assert code != 0 and "only computed by ONNX Runtime for 2 and 4 bits and float32" in out, out
    assert not (tmp_path / "c.onnx").exists()


@pytest.mark.parametrize(("block_size", "symmetric"), [(32, False), (128, True)])
def test_gptq_layout_every_rewrite_is_exact(
    tmp_path: Path, block_size: int, symmetric: bool
) -> None:
    model = _gptq(block_size, symmetric)
    weight = _ort_weight(model)
    path = _save(model, tmp_path / "m.onnx")
    assert [(f.rule, f.severity) for f in check_path(path).findings] == [("QL103", "warning")]
    commands = (
        ["fold"],
        ["fold", "--dequantize-weights"],
        ["convert", "--to", MS],
        ["upgrade", "--opset", "21"],
        ["upgrade", "--opset", "21", "--convert-weight-only"],
    )
    for args in commands:
        out_path = tmp_path / "out.onnx"
        code, out = _cli(*args, path, "-o", out_path, "--verify")
        assert code == 0 and "verify: exact" in out, (args, out)
        float_only = "--dequantize-weights" in args  # QL607 says the output is a float model
        assert _cli("check", out_path, "--strict", "--ignore", "QL607")[0] == 0
        assert _cli("check", out_path, "--strict")[0] == (1 if float_only else 0)
    converted = onnx.load(tmp_path / "out.onnx")  # upgrade --convert-weight-only: DQ -> MatMul
    assert [n.op_type for n in converted.graph.node] == ["DequantizeLinear", "MatMul"]
    converted.graph.output.append(
        onnx.helper.make_tensor_value_info(
            converted.graph.node[0].output[0], onnx.TensorProto.FLOAT, None
        )
    )
    converted.graph.input[0].type.tensor_type.shape.dim[0].dim_value = K
    dequantized = _session(converted).run(None, {"A": np.eye(K, dtype=np.float32)})[1]
    # equal values: the identity product turns DequantizeLinear's -0.0 (0 * a negative
    # scale) into +0.0, so the bits of zeros cannot be compared this way
    np.testing.assert_array_equal(dequantized, weight)
