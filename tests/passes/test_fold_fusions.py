"""fold knows what it breaks in ONNX Runtime: the DQs of constants ORT's CPU provider
fuses into integer / weight-only kernels, read from ORT's optimized graph of the input
(a real session, no run); --keep-fused leaves them and folds the rest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from ort_quantized import quantized

from qlrewrite.cli import main
from qlrewrite.verify import compare

pytest.importorskip("onnxruntime")


def _fold(tmp_path: Path, config: str, *flags: str) -> tuple[int, str, dict | None]:
    source = tmp_path / "in.onnx"
    onnx.save(quantized(config), source)
    report = tmp_path / "report.json"
    args = ["fold", str(source), "-o", str(tmp_path / "out.onnx"), "--report", str(report)]
    result = CliRunner().invoke(main, [*args, *flags])
    document = json.loads(report.read_text()) if report.exists() else None
    return result.exit_code, result.stderr, document


def _constant_dqs(path: Path) -> int:
    model = onnx.load(path)
    constants = {i.name for i in model.graph.initializer}
    return sum(n.op_type == "DequantizeLinear" and n.input[0] in constants
               for n in model.graph.node)  # fmt: skip


def test_fold_warns_of_the_dqs_ort_fuses_with_their_kernels(tmp_path: Path) -> None:
    """The per-channel CNN: ORT fuses conv1/conv2's weight and bias DQs into QLinearConv
    (4), fc1's weight into QLinearMatMul (its bias Add stays float), fc2's weight and
    bias into QGemm (2)."""
    code, err, report = _fold(tmp_path, "cnn-per-channel")
    assert code == 0, err
    assert "7 folded DequantizeLinear are fused by ONNX Runtime" in err
    assert "QGemm (2), QLinearConv (4), QLinearMatMul (1)" in err
    assert "--keep-fused leaves them" in err
    assert report["changes"]["FoldPass"]["dq_folded"] == 8


def test_keep_fused_leaves_exactly_those_and_ort_runs_as_before(tmp_path: Path) -> None:
    code, err, report = _fold(tmp_path, "cnn-per-channel", "--keep-fused", "--verify")
    assert code == 0, err
    changes = report["changes"]["FoldPass"]
    assert (changes["dq_folded"], changes["dq_kept_fused"]) == (1, 7)
    assert _constant_dqs(tmp_path / "out.onnx") == 7
    deployed = report["verify"]["deployment"]
    assert deployed["lost_kernels"] == {}
    assert all(o["exact"] for o in deployed["outputs"]), deployed
    assert "are fused by" not in err


def test_keep_fused_on_4bit_blocked_qdq_keeps_the_matmulnbits_fusion(tmp_path: Path) -> None:
    code, err, _ = _fold(tmp_path, "mlp-nbits-sym")
    assert code == 0 and "MatMulNBits (6)" in err
    code, err, report = _fold(tmp_path, "mlp-nbits-sym", "--keep-fused", "--verify")
    assert code == 0, err
    assert report["changes"]["FoldPass"]["dq_kept_fused"] == 6
    assert report["verify"]["deployment"]["kernels"]["rewritten"] == {"MatMulNBits": 6}


def test_static_s8_transformer_block_fuses_two_matmuls(tmp_path: Path) -> None:
    """The transformer-like block (u8 activations, s8 weights): ORT forms QLinearMatMul
    only where both MatMul inputs come from Q/DQ (o_proj, down_proj)."""
    code, err, _ = _fold(tmp_path, "mlp-u8s8")
    assert code == 0 and "2 folded DequantizeLinear" in err and "QLinearMatMul (2)" in err


def test_without_onnxruntime_fold_says_it_did_not_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ImportError
    code, err, _ = _fold(tmp_path, "cnn-per-channel")
    assert code == 0
    assert "not checked which DequantizeLinear ONNX Runtime fuses" in err
    assert "onnxruntime is not installed" in err
    (tmp_path / "out.onnx").unlink()
    code, err, _ = _fold(tmp_path, "cnn-per-channel", "--keep-fused")
    assert code == 1 and "--keep-fused needs ONNX Runtime's graph" in err
    assert not (tmp_path / "out.onnx").exists()


def test_above_the_size_bound_the_warning_is_not_checked_but_keep_fused_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare, "FUSION_CHECK_MAX_BYTES", 1024)
    code, err, _ = _fold(tmp_path, "cnn-per-channel")
    assert code == 0 and "not checked which DequantizeLinear" in err
    assert "(--keep-fused checks at any size)" in err
    code, err, report = _fold(tmp_path, "cnn-per-channel", "--keep-fused")
    assert code == 0 and report["changes"]["FoldPass"]["dq_kept_fused"] == 7


def test_above_the_node_bound_the_warning_is_not_checked_but_keep_fused_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORT's session creation grows faster than the graph: above the bound fold says it did
    not check (the model's node count in the reason); --keep-fused still checks."""
    monkeypatch.setattr(compare, "FUSION_CHECK_MAX_NODES", 3)
    code, err, report = _fold(tmp_path, "cnn-per-channel")
    assert code == 0 and "not checked which DequantizeLinear" in err
    nodes = len(quantized("cnn-per-channel").graph.node)
    assert f"the model has {nodes} nodes, above the 3 this check loads into ORT" in err
    assert "(--keep-fused checks at any size)" in err
    assert "are fused by" not in err
    assert report["changes"]["FoldPass"]["dq_folded"] == 8
    (tmp_path / "out.onnx").unlink()
    code, err, report = _fold(tmp_path, "cnn-per-channel", "--keep-fused")
    assert code == 0 and report["changes"]["FoldPass"]["dq_kept_fused"] == 7
