"""``--verify`` as deployed: both models in ONNX Runtime's default session (optimizations
ORT_ENABLE_ALL, prepacking on); the kernels come from ORT's own optimized graph, the
latency from real runs (asserted present, never timed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import numpy_helper
from ort_quantized import quantized

from qlrewrite.cli import main
from qlrewrite.verify.verify import output_steps

pytest.importorskip("onnxruntime")


def _fold(tmp_path: Path, config: str, *flags: str) -> tuple[int, str, dict]:
    source = tmp_path / "in.onnx"
    onnx.save(quantized(config), source)
    report = tmp_path / "report.json"
    args = ["fold", str(source), "-o", str(tmp_path / "out.onnx"), "--report", str(report)]
    result = CliRunner().invoke(main, [*args, *flags])
    return result.exit_code, result.stderr, json.loads(report.read_text())


def test_fold_verify_names_the_integer_kernels_ort_no_longer_forms(tmp_path: Path) -> None:
    """Folding the QDQ CNN: ORT fuses the original's DQ(weight) + activation Q/DQ into
    QLinearConv, QLinearMatMul and QGemm; the folded model's float MatMul weight is not
    fused (ORT re-quantizes Conv and Gemm weights itself, not MatMul's)."""
    code, err, report = _fold(tmp_path, "cnn-per-channel", "--verify")
    assert code == 0, err  # the semantics decide: exact with optimizations off
    verify = report["verify"]
    assert verify["status"] == "exact"
    deployed = verify["deployment"]
    assert deployed["kernels"]["original"] == {"QGemm": 1, "QLinearConv": 2, "QLinearMatMul": 1}
    assert "QLinearMatMul" not in deployed["kernels"]["rewritten"]
    assert deployed["lost_kernels"] == {"QLinearMatMul": 1}
    assert deployed["differs"] and "ORT_ENABLE_ALL" in deployed["runtime"]
    latency = deployed["latency"]
    assert latency["original_ms"] > 0 and latency["rewritten_ms"] > 0
    (y,) = deployed["outputs"]
    assert y["name"] == "y" and not y["exact"] and y["max_abs"] > 0
    assert "warning: verify deployed" in err and "QLinearMatMul x1" in err


def test_deployed_steps_are_the_output_dq_scale(tmp_path: Path) -> None:
    """The difference in quantization steps is max abs over the output DQ's scale (read
    here from the file, not through qlrewrite)."""
    code, _, report = _fold(tmp_path, "cnn-u8s8", "--verify")
    assert code == 0
    model = quantized("cnn-u8s8")
    (dq,) = [n for n in model.graph.node if n.output[0] == "y"]
    assert dq.op_type == "DequantizeLinear"
    scales = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    scale = float(scales[dq.input[1]])
    (y,) = report["verify"]["deployment"]["outputs"]
    assert y["steps"] == pytest.approx(y["max_abs"] / scale)
    assert y["relative"] is not None and 0 < y["relative"] < 0.1
    assert output_steps(ir.from_proto(model)) == {"y": pytest.approx(scale)}


def test_weight_only_fusion_lost_by_folding_4bit_blocked_qdq(tmp_path: Path) -> None:
    """4-bit blocked QDQ (ORT's MatMulNBitsQuantizer, QDQ format): ORT re-forms
    MatMulNBits from DQ + MatMul; the folded float weights stay MatMul."""
    code, _, report = _fold(tmp_path, "mlp-nbits-sym", "--verify")
    assert code == 0
    deployed = report["verify"]["deployment"]
    assert deployed["kernels"]["original"] == {"MatMulNBits": 6}
    assert deployed["kernels"]["rewritten"] == {}
    assert deployed["lost_kernels"] == {"MatMulNBits": 6}


def test_verify_semantics_runs_only_the_semantic_proof(tmp_path: Path) -> None:
    code, err, report = _fold(tmp_path, "cnn-per-channel", "--verify=semantics")
    assert code == 0
    assert report["verify"]["status"] == "exact"
    assert report["verify"]["deployment"] is None
    assert "deployed" not in err


def test_verify_scope_unknown_is_a_usage_error(tmp_path: Path) -> None:
    source = tmp_path / "in.onnx"
    onnx.save(quantized("cnn-u8s8"), source)
    result = CliRunner().invoke(main, ["fold", str(source), "--verify=deployment"])
    assert result.exit_code == 2
    assert "--verify takes no value" in result.stderr


def test_a_rewrite_ort_runs_alike_when_deployed_does_not_warn(tmp_path: Path) -> None:
    """fold --keep-dq of the CNN folds no DQ of a weight (nothing to fold but Q of
    constants, of which ORT's quantizer writes none): the deployment is identical."""
    code, err, report = _fold(tmp_path, "cnn-u8s8", "--keep-dq", "--verify")
    assert code == 0, err
    deployed = report["verify"]["deployment"]
    assert deployed["lost_kernels"] == {}
    assert deployed["kernels"]["original"] == deployed["kernels"]["rewritten"]
    assert all(o["exact"] for o in deployed["outputs"])
    assert not deployed["differs"] and "warning: verify deployed" not in err


def test_ort_crashing_in_the_deployment_is_reported_not_fatal(tmp_path: Path) -> None:
    from qoperator_models import build
    from test_verify import _ort_crashing_model

    from qlrewrite.verify.compare import verify_both
    from qlrewrite.verify.verify import VerifyOptions, input_specs

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(build("QLinearLeakyRelu"), good)
    onnx.save(_ort_crashing_model(), bad)
    specs = input_specs(ir.load(good), {})
    result = verify_both(good, bad, specs, VerifyOptions(deployed=True))
    assert result.status == "mismatch"  # the semantic proof: ORT crashed on it
    assert result.deployment.reason == "ONNX Runtime crashed (SIGABRT) on the rewritten model"
    again = verify_both(good, good, specs, VerifyOptions(deployed=True))
    assert again.passed and again.deployment.reason is None
    assert all(o.exact for o in again.deployment.outputs)
    assert np.isfinite(again.deployment.latency_ms).all()


def test_dynamic_model_as_qdq_loses_a_dynamic_kernel(tmp_path: Path) -> None:
    """quantize_dynamic's MLP block: ORT fuses DynamicQuantizeLinear + MatMulInteger +
    scaling into MatMulIntegerToFloat and DynamicQuantizeMatMul; `convert --to onnx`
    (Q/DQ form, within its stated bound by the semantics) lets ORT re-form all but one
    DynamicQuantizeMatMul."""
    source = tmp_path / "in.onnx"
    onnx.save(quantized("mlp-dynamic"), source)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        main,
        [
            "convert",
            str(source),
            "--to",
            "onnx",
            "-o",
            str(tmp_path / "out.onnx"),
            "--verify",
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.stderr
    verify = json.loads(report.read_text())["verify"]
    assert verify["passed"]
    deployed = verify["deployment"]
    assert deployed["kernels"]["original"] == {
        "DynamicQuantizeMatMul": 3,
        "MatMulIntegerToFloat": 3,
    }
    assert deployed["lost_kernels"] == {"DynamicQuantizeMatMul": 1}
    assert "DynamicQuantizeMatMul x1" in result.stderr


def test_kernel_of_finds_the_first_kernel_by_name_or_repacked_name() -> None:
    """The kernel taking a weight: by its name or ORT's repacked ``<name>_*``, the first
    in the graph's order; a name that only starts like it (``w1`` for ``w``, ``w-T``) is
    another weight."""
    from qlrewrite.verify.deployed import OptimizedGraph

    graph = OptimizedGraph(
        op_types={},
        produced=(),
        kernels=(
            ("QLinearMatMul", "a", ("x", "w1", "w-T")),
            ("QGemm", "b", ("x", "v_T", "w")),
            ("MatMulNBits", "c", ("x", "w_T", "v")),
            ("QLinearConv", "d", ("x", "u_T_1")),
        ),
    )
    assert graph.kernel_of("w") == "QGemm"  # exact in b, repacked in c: b comes first
    assert graph.kernel_of("v") == "QGemm"  # repacked in b before exact in c
    assert graph.kernel_of("w1") == "QLinearMatMul"
    assert graph.kernel_of("u") == "QLinearConv"
    assert graph.kernel_of("u_T") == "QLinearConv"
    assert graph.kernel_of("y") is None
    assert graph.kernel_of("w-") is None
    assert graph.kernel_of("") is None


def test_kernel_of_is_not_quadratic_in_the_kernels() -> None:
    """fold asks it of every fused DQ: 5000 kernels and lookups take a few
    milliseconds (a scan of every kernel per lookup took half a minute)."""
    import time

    from qlrewrite.verify.deployed import OptimizedGraph

    n = 5000
    kernels = tuple(("QLinearMatMul", f"k{i}", ("x", f"w{i}_T", f"s{i}")) for i in range(n))
    graph = OptimizedGraph(op_types={}, produced=(), kernels=kernels)
    start = time.process_time()
    found = [graph.kernel_of(f"w{i}") for i in range(n)]
    assert time.process_time() - start < 5
    assert found == ["QLinearMatMul"] * n
