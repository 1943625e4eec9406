"""What --verify accepts when MatMulNBits and DequantizeLinear -> MatMul trade places.

From ONNX Runtime's CPU kernel (contrib_ops/cpu/quantization/matmul_nbits.cc): with weight
prepacking off (as --verify runs), a float32 MatMulNBits dequantizes B to float32 and calls
MLAS's SGEMM with B transposed; DequantizeLinear -> MatMul calls it with B as is. The
weights are bit-identical; what can differ is the summation order: MLAS has separate M = 1
kernels for B and for B transposed, and MatMulNBits adds its bias into C before the GEMM
(beta = 1: before the last K panel) where the rewritten graph adds it after. The
accuracy level and the zero-point form choose kernels only for prepacked weights. These
tests measure that claim: bit-identical for every accuracy level and zero-point form with
two or more rows of A; within the stated float32 summation-order bound with one row; and a
real change of the weights is still refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from nbits_weights import matmul_nbits_model

from qlrewrite import pipeline
from qlrewrite.cli import main
from qlrewrite.passes.nbits.to_onnx import NBitsToOnnxPass
from qlrewrite.verify.verify import VerificationFailed, VerifyOptions

pytest.importorskip("onnxruntime")

U = 2.0**-24  # float32 unit roundoff, written out here


def _model(tmp_path: Path, *, k: int = 256, bias: bool = False, **kw: object) -> Path:
    proto = matmul_nbits_model(
        np.random.default_rng(k), n=32, k=k, bits=kw.pop("bits", 4), block_size=32, bias=bias, **kw
    )
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return path


def _verify(path: Path, rows: int, k: int, command: tuple[str, ...] = ("convert", "--to", "onnx")):
    report, out = path.with_name("r.json"), path.with_name("out.onnx")
    result = CliRunner().invoke(
        main,
        [
            *command,
            str(path),
            "-o",
            str(out),
            "--verify",
            "--input-shape",
            f"A={rows},{k}",
            "--verify-runs",
            "3",
            "--report",
            str(report),
        ],
    )
    return result.exit_code, result.output, json.loads(report.read_text())["verify"]


@pytest.mark.parametrize("accuracy_level", [0, 1, 4])
@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_two_rows_are_bit_identical_at_every_accuracy_level(
    tmp_path: Path, accuracy_level: int, zero_points: bool, bits: int
) -> None:
    path = _model(
        tmp_path,
        bits=bits,
        zero_points=zero_points,
        accuracy_level=accuracy_level,
        opset=25 if bits == 2 else 21,
    )  # int2 / uint2 DequantizeLinear: opset 25
    code, out, verify = _verify(path, 2, 256)
    assert code == 0 and verify["status"] == "exact", out


def test_one_row_sums_in_another_order_within_the_stated_bound(tmp_path: Path) -> None:
    k = 256
    code, out, verify = _verify(_model(tmp_path, k=k), 1, k)
    assert code == 0, out
    assert verify["status"] == "within-tolerance"
    (logits,) = verify["outputs"]
    assert not logits["exact"] and logits["max_abs"] > 0  # the M = 1 kernels differ
    limit = 2 * (k + 1) * U / (1 - (k + 1) * U)
    assert verify["bound"]["relative"] == pytest.approx(limit, rel=1e-12)
    assert logits["max_abs"] <= limit * logits["max_ref"]
    assert "one row" in verify["bound"]["reason"] and "K = 256" in verify["bound"]["reason"]
    assert "accepted: differences up to" in out


def test_a_bias_over_many_k_panels_is_within_the_bound(tmp_path: Path) -> None:
    k = 4096
    code, out, verify = _verify(_model(tmp_path, k=k, bias=True), 2, k)
    assert code == 0, out
    assert verify["status"] in ("exact", "within-tolerance")
    assert "bias" in verify["bound"]["reason"]


def test_the_reverse_and_the_fold_state_the_same_bound(tmp_path: Path) -> None:
    path = _model(tmp_path, k=128)
    code, out, verify = _verify(path, 1, 128, ("fold", "--dequantize-weights"))
    assert code == 0 and verify["status"] == "within-tolerance", out
    converted = tmp_path / "qdq.onnx"
    assert (
        CliRunner()
        .invoke(main, ["convert", str(path), "--to", "onnx", "-o", str(converted)])
        .exit_code
        == 0
    )
    code, out, verify = _verify(converted, 1, 128, ("convert", "--to", "com.microsoft"))
    assert code == 0 and verify["status"] == "within-tolerance", out
    assert "one row" in verify["bound"]["reason"]


class _ScaleOnePercent(ir.passes.InPlacePass):
    """A broken rewrite: every DequantizeLinear scale 1% larger."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for node in model.graph:
            if node.op_type == "DequantizeLinear":
                scale = node.inputs[1]
                array = scale.const_value.numpy() * np.float32(1.01)
                scale.const_value = ir.tensor(array, name=scale.name)
        return ir.passes.PassResult(model, True)


def test_a_real_change_of_the_weights_is_still_refused(tmp_path: Path) -> None:
    path = _model(tmp_path)
    options = VerifyOptions(input_shapes={"A": (1, 256)})
    with pytest.raises(VerificationFailed) as info:
        pipeline.rewrite(path, [NBitsToOnnxPass(), _ScaleOnePercent()], command="x", verify=options)
    assert info.value.verification.status == "mismatch"
    assert not (tmp_path / "m.x.onnx").exists()
