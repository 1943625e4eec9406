"""`qlrewrite info` on com.microsoft MatMulNBits / GatherBlockQuantized: groups with bits,
block size, K x N (or the table's shape), zero-point format, scale type, accuracy level and
the bytes they hold (worked out by hand from the builders); no weight is read."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
import pytest
from model_io_fixtures import cli
from nbits_models import DT, gather_block_quantized_model, matmul_nbits_model


def _info(tmp_path: Path, proto: onnx.ModelProto, *args: str) -> Any:
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, path)
    result = cli("info", str(path), *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if args else result.stdout


def test_matmul_nbits_group(tmp_path: Path) -> None:
    # K=40, N=8, bits=4, block 16: k_blocks 3, blob 8. B 8*3*8 = 192 bytes, scales
    # 8*3*4 = 96, packed zero points 8*ceil(3*4/8) = 16, bias 8*4 = 32.
    proto = matmul_nbits_model(
        k=40, n=8, bits=4, block_size=16, zp="packed", bias=True, attrs={"accuracy_level": 4}
    )
    doc = _info(tmp_path, proto, "--format", "json")
    assert doc["qdq_nodes"] == 0 and doc["qdq"] == []
    assert doc["weight_only_nodes"] == 1
    assert doc["weight_only"] == [
        {
            "op_type": "MatMulNBits",
            "version": 1,
            "weight_type": "UINT8",
            "bits": 4,
            "block_size": 16,
            "K": 40,
            "N": 8,
            "shape": None,
            "quantize_axis": None,
            "zero_points": "packed UINT8",
            "scale_type": "FLOAT",
            "accuracy_level": 4,
            "constant": True,
            "nodes": 1,
            "input_bytes": 192 + 96 + 16 + 32,
        }
    ]


def test_matmul_nbits_float16_zero_points_and_defaults(tmp_path: Path) -> None:
    # bits absent (default 4), float16 zero points [8, 2]: B 8*2*8, scales and zp 8*2*2.
    proto = matmul_nbits_model(a_type=DT.FLOAT16, zp="float", drop_attrs=["bits"])
    (row,) = _info(tmp_path, proto, "--format", "json")["weight_only"]
    assert (row["bits"], row["accuracy_level"], row["zero_points"]) == (4, 0, "FLOAT16")
    assert (row["scale_type"], row["input_bytes"]) == ("FLOAT16", 128 + 32 + 32)


def test_gather_block_quantized_groups(tmp_path: Path) -> None:
    # uint8 [8, 16] holding 32 4-bit values per row, block 16: scales [8, 2] float,
    # zero points [8, 1] uint8. 128 + 64 + 8 bytes; indices are not part of the weights.
    proto = gather_block_quantized_model(zp=True)
    (row,) = _info(tmp_path, proto, "--format", "json")["weight_only"]
    assert row == {
        "op_type": "GatherBlockQuantized",
        "version": 1,
        "weight_type": "UINT8",
        "bits": 4,
        "block_size": 16,
        "K": None,
        "N": None,
        "shape": [8, 32],
        "quantize_axis": 1,
        "zero_points": "packed UINT8",
        "scale_type": "FLOAT",
        "accuracy_level": None,
        "constant": True,
        "nodes": 1,
        "input_bytes": 200,
    }
    fp8 = gather_block_quantized_model(
        data_type=DT.FLOAT8E4M3FN,
        data_shape=(8, 32),
        bits=None,
        block_size=0,
        scale_type=DT.FLOAT16,
    )
    (row,) = _info(tmp_path, fp8, "--format", "json")["weight_only"]
    assert (row["weight_type"], row["bits"], row["block_size"]) == ("FLOAT8E4M3FN", None, 0)
    assert (row["shape"], row["zero_points"], row["input_bytes"]) == ([8, 32], "none", 256 + 16)


def test_text_table(tmp_path: Path) -> None:
    out = _info(tmp_path, matmul_nbits_model(k=64, n=16, bits=8, block_size=32))
    assert "1 weight-only node(s):" in out and "Q/DQ node(s)" not in out
    line = next(line for line in out.splitlines() if "MatMulNBits-1" in line)
    assert all(text in line for text in ("UINT8", " 8 ", " 32 ", "64 x 16", "none", "FLOAT"))


def test_non_constant_scales(tmp_path: Path) -> None:
    proto = matmul_nbits_model(inputs_as_graph_inputs=["scales"])
    (row,) = _info(tmp_path, proto, "--format", "json")["weight_only"]
    assert row["constant"] is False and row["input_bytes"] == 8 * 2 * 8


def test_matmul_nbits_quantizer_model(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from test_rules_weight_only import _embedding_mlp

    logging.getLogger().setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantizer = MatMulNBitsQuantizer(
            _embedding_mlp(), bits=4, block_size=32, op_types_to_quantize=("MatMul", "Gather")
        )
        quantizer.process()
    doc = _info(tmp_path, quantizer.model.model, "--format", "json")
    rows = {(r["op_type"], r["K"], r["N"]): r for r in doc["weight_only"]}
    assert set(rows) == {
        ("MatMulNBits", 96, 80),
        ("MatMulNBits", 80, 40),
        ("GatherBlockQuantized", None, None),
    }
    # 96 x 80 at 4 bits in blocks of 32: B 80*3*16, scales 80*3*4, zero points 80*2.
    assert rows["MatMulNBits", 96, 80]["input_bytes"] == 3840 + 960 + 160
    assert rows["GatherBlockQuantized", None, None]["shape"] == [64, 96]


def test_info_reads_no_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = matmul_nbits_model(zp="packed", g_idx=True, bias=True)

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a weight was read")

    monkeypatch.setattr(ir.serde.TensorProtoTensor, "numpy", refuse)
    monkeypatch.setattr(ir.serde.TensorProtoTensor, "tobytes", refuse)
    monkeypatch.setattr(ir.serde.TensorProtoTensor, "__array__", refuse)
    (row,) = _info(tmp_path, proto, "--format", "json")["weight_only"]
    assert row["nodes"] == 1
