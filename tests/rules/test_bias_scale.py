"""QL505 (an int32 bias whose scale is not x_scale x w_scale) and QL508 (an int32 bias the
accumulator can overflow) measured in the installed ONNX
Runtime: the default session computes other values than ORT_DISABLE_ALL on the bad model,
the fix makes them agree, and the fix is exact (the dequantized bias bit for bit)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from example_models import qdq_biased_op
from onnx import numpy_helper
from ort_quantized import CONFIGS, INVALID_CONFIGS, quantized, run_session
from qdq_models import load_ir

from qlrewrite.checking.checker import check_model
from qlrewrite.findings import Finding
from qlrewrite.passes.commands import fix_passes
from qlrewrite.targets.spec import parse_targets

ort = pytest.importorskip("onnxruntime")

OPS = ("Conv", "Gemm", "MatMul")


def _run(proto: onnx.ModelProto, optimized: bool) -> np.ndarray:
    shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).uniform(-3, 3, shape).astype(np.float32)
    return run_session(proto, x, optimized=optimized)


def _findings(proto: onnx.ModelProto) -> list[Finding]:
    return [f for f in check_model(load_ir(proto)).findings if f.rule == "QL505"]


def _fixed(proto: onnx.ModelProto) -> onnx.ModelProto:
    model = load_ir(proto)
    for fix_pass in fix_passes(_findings(proto)):
        model = fix_pass(model).model
    return ir.serde.serialize_model(model)


def _dequantized_bias(proto: onnx.ModelProto) -> np.ndarray:
    """The bias as DequantizeLinear computes it, in float32 (zero point 0)."""
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    node = next(n for n in proto.graph.node if n.name == "dq_b")
    values, scale = inits[node.input[0]], inits[node.input[1]]
    return values.astype(np.float32) * scale.astype(np.float32)


@pytest.mark.parametrize("op", OPS)
def test_ort_computes_the_bad_model_wrong_and_the_fixed_one_right(op: str) -> None:
    bad = qdq_biased_op(op, bias_factor=4.0)
    wanted = _run(bad, optimized=False)
    fused = _run(bad, optimized=True)
    if np.array_equal(fused, wanted):
        pytest.skip(f"ORT {ort.__version__} computes a {op} with a x4 bias scale right")
    # measured in ORT 1.31.1: Gemm and MatMul + Add off by 3 output steps (32%)
    assert np.abs(fused - wanted).max() >= 1.0
    fixed = _fixed(bad)
    assert _findings(fixed) == []
    assert np.array_equal(_run(fixed, optimized=True), wanted)
    assert np.array_equal(_run(fixed, optimized=False), wanted)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("per_axis", [False, True])
def test_the_fix_keeps_the_dequantized_bias_bit_for_bit(op: str, per_axis: bool) -> None:
    bad = qdq_biased_op(op, bias_factor=4.0, per_axis=per_axis)
    (finding,) = _findings(bad)
    assert finding.fix == "safe" and "'b'" in finding.message
    fixed = _fixed(bad)
    before, after = _dequantized_bias(bad), _dequantized_bias(fixed)
    assert before.view(np.int32).tolist() == after.view(np.int32).tolist()
    inits = {t.name: numpy_helper.to_array(t) for t in fixed.graph.initializer}
    assert inits["b"].dtype == np.int32
    # the new scale is x_scale x w_scale, written as ORT's quantizer writes it
    w_scale = inits["ws"]
    assert inits["bs"].tolist() == (np.float32(0.05) * w_scale).astype(np.float32).tolist()


def test_the_fused_conv_is_one_step_off_for_a_half_percent_and_not_fixed() -> None:
    # bias +-50 in float: 0.5% of it is half an output step
    bad = qdq_biased_op("Conv", bias_factor=1.005, bias=[100_000, -100_000] * 4)
    (finding,) = _findings(bad)
    assert finding.fix is None and "bias 'b'" in finding.hint
    fused, wanted = _run(bad, optimized=True), _run(bad, optimized=False)
    if np.array_equal(fused, wanted):
        pytest.skip(f"ORT {ort.__version__} computes a Conv with a 0.5% bias scale right")
    assert np.abs(fused - wanted).max() == pytest.approx(0.5)  # one output step


def test_a_bias_overflowing_int32_when_rescaled_is_not_fixed() -> None:
    bad = qdq_biased_op("Gemm", bias_factor=4.0, bias=[2**30] * 8)
    (finding,) = _findings(bad)
    assert finding.fix is None


def test_a_per_tensor_bias_scale_with_per_channel_weights_is_not_fixed() -> None:
    # x_scale x w_scale differs per channel: a per-tensor bias scale cannot hold it
    bad = qdq_biased_op("Conv", per_axis=True)
    proto = onnx.ModelProto()
    proto.CopyFrom(bad)
    scale = next(t for t in proto.graph.initializer if t.name == "bs")
    scale.CopyFrom(numpy_helper.from_array(np.array(0.002, np.float32), "bs"))
    zero = next(t for t in proto.graph.initializer if t.name == "bz")
    zero.CopyFrom(numpy_helper.from_array(np.array(0, np.int32), "bz"))
    node = next(n for n in proto.graph.node if n.name == "dq_b")
    del node.attribute[:]
    found = _findings(proto)
    assert len(found) == 1 and found[0].fix is None


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("per_axis", [False, True])
def test_matching_scales_are_silent(op: str, per_axis: bool) -> None:
    assert _findings(qdq_biased_op(op, per_axis=per_axis)) == []


@pytest.mark.parametrize("config", sorted(set(CONFIGS) - INVALID_CONFIGS))
def test_ort_quantizer_outputs_are_silent(config: str) -> None:
    assert _findings(quantized(config)) == []


def _target_codes(proto: onnx.ModelProto, target: str) -> list[str]:
    targets = parse_targets([target])
    return sorted(f.rule for f in check_model(load_ir(proto), targets=targets).findings)


@pytest.mark.parametrize(
    ("op", "factor", "target", "codes"),
    [
        # measured: Gemm and MatMul + Add miscomputed by every release 1.15.1-1.32.0
        ("Gemm", 4.0, "ort>=1.15", ["QL730"]),
        ("MatMul", 4.0, "ort==1.32", ["QL730"]),
        # Conv: 1.15.1-1.26.0 beyond 1%; 1.27.0 onwards leave it unfused (PR 28229)
        ("Conv", 4.0, "ort==1.26", ["QL730"]),
        ("Conv", 4.0, "ort==1.27", ["QL505"]),
        ("Conv", 1.005, "ort==1.32", ["QL730"]),
        ("Conv", 1.0, "ort>=1.15", []),
    ],
)
def test_target_ort_errors_on_the_releases_measured_to_miscompute(
    op: str, factor: float, target: str, codes: list[str]
) -> None:
    bias = [100_000, -100_000] * 4 if factor == 1.005 else None
    assert _target_codes(qdq_biased_op(op, bias_factor=factor, bias=bias), target) == codes


def _overflowing(op: str, bias: int) -> onnx.ModelProto:
    """A fused op whose int32 bias is ``bias`` (+-), with an output step (2e6) that keeps
    the dequantized bias (about 1e6) inside the uint8 output's range."""
    model = qdq_biased_op(op, bias=[bias, -bias] * 4)
    step = next(t for t in model.graph.initializer if t.name == "y_s")
    step.CopyFrom(numpy_helper.from_array(np.array(2.0e6, np.float32), "y_s"))
    return model


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bias", [2**31 - 1, 2**31 - 1000])
def test_ort_wraps_the_accumulator_past_int32(op: str, bias: int) -> None:
    model = _overflowing(op, bias)
    codes = [f.rule for f in check_model(load_ir(model)).findings]
    assert codes == ["QL508"]
    fused, wanted = _run(model, optimized=True), _run(model, optimized=False)
    if np.array_equal(fused, wanted):
        pytest.skip(f"ORT {ort.__version__} does not wrap a {op}'s int32 accumulator")
    # measured in ORT 1.15.1, 1.24.4, 1.31.1, 1.32.0: off by two output steps (4e6), the
    # sign of the bias flipped
    assert np.abs(fused - wanted).max() >= 4.0e6


def test_a_bias_with_room_in_int32_is_silent() -> None:
    # 16 products of up to 128 x 128 (uint8 zero point 128, int8 zero point 0): 262144
    room = 2**31 - 1 - 16 * 128 * 128
    assert [f.rule for f in check_model(load_ir(_overflowing("Gemm", room))).findings] == []
    over = [f.rule for f in check_model(load_ir(_overflowing("Gemm", room + 1))).findings]
    assert over == ["QL508"]


@pytest.mark.parametrize("config", sorted(set(CONFIGS) - INVALID_CONFIGS))
def test_ort_quantizer_outputs_do_not_overflow(config: str) -> None:
    codes = {f.rule for f in check_model(load_ir(quantized(config))).findings}
    assert "QL508" not in codes
