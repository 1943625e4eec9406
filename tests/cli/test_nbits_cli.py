"""The commands on MatMulNBits / GatherBlockQuantized models: convert, fold
--dequantize-weights, upgrade, and what --verify says about them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from nbits_weights import gather_block_quantized_model, matmul_nbits_model, session

from qlrewrite.cli import main


def _cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _ops(path: Path) -> list[str]:
    return [n.op_type for n in onnx.load(path).graph.node]


def test_verify_float32_is_exact(tmp_path):
    model = matmul_nbits_model(np.random.default_rng(0), n=32, k=256, bits=4, block_size=32)
    source = _save(tmp_path, model)
    code, out = _cli(
        "convert",
        source,
        "--to",
        "onnx",
        "-o",
        tmp_path / "c.onnx",
        "--verify",
        "--input-shape",
        "A=3,256",
    )
    assert code == 0, out
    assert "verify: exact" in out
    assert _ops(tmp_path / "c.onnx") == ["DequantizeLinear", "MatMul"]


def test_verify_float16_explains_its_tolerance(tmp_path):
    model = matmul_nbits_model(
        np.random.default_rng(1), n=32, k=512, bits=4, block_size=32, scale_dtype=np.float16
    )
    source, report = _save(tmp_path, model), tmp_path / "r.json"
    code, out = _cli(
        "convert",
        source,
        "--to",
        "onnx",
        "-o",
        tmp_path / "c.onnx",
        "--verify",
        "--input-shape",
        "A=4,512",
        "--report",
        report,
    )
    assert code == 0, out
    assert "within tolerance" in out and "float16/bfloat16 MatMulNBits" in out
    assert "Y:" in out and "of the largest |value|" in out  # per-output differences
    verify = json.loads(report.read_text())["verify"]
    assert verify["status"] == "within-tolerance" and verify["relative_tolerance"] == 2e-3
    # an explicit absolute tolerance replaces the explained one
    code, out = _cli(
        "convert",
        source,
        "--to",
        "onnx",
        "-o",
        tmp_path / "d.onnx",
        "--verify",
        "--input-shape",
        "A=4,512",
        "--verify-tolerance",
        "1e-9",
    )
    assert code == 1 and "nothing written" in out
    assert not (tmp_path / "d.onnx").exists()


def test_refusal_exit_code_and_upgrade_converts(tmp_path):
    model = matmul_nbits_model(np.random.default_rng(2), n=8, k=64, bits=4, block_size=16, opset=17)
    source = _save(tmp_path, model)
    code, out = _cli("convert", source, "--to", "onnx", "-o", tmp_path / "c.onnx")
    assert code == 1
    assert "MatMulNBits 'mm'" in out and "upgrade --opset 21" in out
    assert not (tmp_path / "c.onnx").exists()
    assert "upgrade --opset 21 --convert-weight-only" in out
    # upgrade changes the opset only: MatMulNBits stays, and the summary counts it (no pass
    # converts it)
    code, out = _cli(
        "upgrade",
        source,
        "--opset",
        21,
        "-o",
        tmp_path / "k.onnx",
        "--verify",
        "--input-shape",
        "A=2,64",
    )
    assert code == 0, out
    assert _ops(tmp_path / "k.onnx") == ["MatMulNBits"] and "weight only nodes 1" in out
    assert "matmul nbits converted" not in out
    assert {o.domain: o.version for o in onnx.load(tmp_path / "k.onnx").opset_import} == {
        "": 21,
        "com.microsoft": 1,
    }
    code, out = _cli(
        "upgrade",
        source,
        "--opset",
        21,
        "-o",
        tmp_path / "u.onnx",
        "--verify",
        "--input-shape",
        "A=2,64",
        "--convert-weight-only",
    )
    assert code == 0, out
    assert _ops(tmp_path / "u.onnx") == ["DequantizeLinear", "MatMul"]


@pytest.mark.parametrize("external", [False, True])
def test_fold_dequantize_weights(tmp_path, external):
    rng = np.random.default_rng(3)
    model = matmul_nbits_model(rng, n=16, k=96, bits=8, block_size=32, bias=True)
    source = tmp_path / "m.onnx"
    onnx.save(
        model,
        source,
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
    )
    out = tmp_path / "f.onnx"
    code, text = _cli(
        "fold", source, "--dequantize-weights", "-o", out, "--verify", "--input-shape", "A=2,96"
    )
    assert code == 0, text
    assert "verify: exact" in text
    folded = onnx.load(out)
    assert [n.op_type for n in folded.graph.node] == ["MatMul", "Add"]
    assert {o.domain for o in folded.opset_import} == {""}
    weight = next(
        i
        for i in folded.graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT and list(i.dims) == [96, 16]
    )
    assert weight is not None
    # without the flag, fold leaves MatMulNBits alone
    code, text = _cli("fold", source, "-o", tmp_path / "g.onnx")
    assert code == 0 and _ops(tmp_path / "g.onnx") == ["MatMulNBits"]


def test_fold_float16_weights_keep_ort_outputs(tmp_path):
    """ORT's float16 MatMulNBits keeps its weight in float32: --float16 exact (the default)
    folds it to float32 and a Cast, and ORT's outputs stay bit-identical; compact writes
    float16 (outputs within the explained tolerance)."""
    model = matmul_nbits_model(
        np.random.default_rng(5),
        n=32,
        k=256,
        bits=4,
        block_size=32,
        scale_dtype=np.float16,
        bias=True,
    )
    source = _save(tmp_path, model)
    code, out = _cli(
        "fold",
        source,
        "--dequantize-weights",
        "-o",
        tmp_path / "e.onnx",
        "--verify",
        "--input-shape",
        "A=4,256",
    )
    assert code == 0 and "verify: exact" in out, out
    assert _ops(tmp_path / "e.onnx") == ["Cast", "MatMul", "Add"]
    code, out = _cli(
        "fold",
        source,
        "--dequantize-weights",
        "--float16",
        "compact",
        "-o",
        tmp_path / "c.onnx",
        "--verify",
        "--input-shape",
        "A=4,256",
    )
    assert code == 0 and "within tolerance" in out, out
    assert _ops(tmp_path / "c.onnx") == ["MatMul", "Add"]


def test_gather_round_trip_through_the_commands(tmp_path):
    model, indices = gather_block_quantized_model(
        np.random.default_rng(4),
        dtype="uint4",
        shape=(12, 64),
        bits=4,
        block_size=32,
        quantize_axis=1,
        gather_axis=0,
        zero_points=True,
    )
    source = _save(tmp_path, model)
    code, out = _cli(
        "convert",
        source,
        "--to",
        "onnx",
        "-o",
        tmp_path / "c.onnx",
        "--verify",
        "--input-shape",
        "idx=5",
    )
    assert code == 0 and "verify: exact" in out, out
    assert _ops(tmp_path / "c.onnx") == ["DequantizeLinear", "Gather"]
    code, out = _cli(
        "convert", tmp_path / "c.onnx", "--to", "com.microsoft", "-o", tmp_path / "b.onnx"
    )
    assert code == 0, out
    back = onnx.load(tmp_path / "b.onnx")
    assert [n.op_type for n in back.graph.node] == ["GatherBlockQuantized"]

    def tensors(m):
        return {
            i.name: (i.data_type, onnx.numpy_helper.to_array(i).tobytes())
            for i in m.graph.initializer
        }

    assert tensors(back) == tensors(model)  # the same tensors: names, types and values
    back.ir_version = 10
    expected = session(model).run(None, {"idx": indices})[0]
    assert np.array_equal(session(back).run(None, {"idx": indices})[0], expected)
