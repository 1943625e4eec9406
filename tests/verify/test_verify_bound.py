"""--verify after a QOperator conversion: each difference a converted node may make is
carried through the float ops to every output (qlrewrite.verify.difference), re-checked on the
values measured inside both models; ORT-quantized BERT- and GPT-2-like graphs verify at
sequence lengths 1, 2 and 8, a wrong conversion does not."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from transformer_models import quantized

from qlrewrite.cli import main
from qlrewrite.verify.difference import output_bounds

pytest.importorskip("onnxruntime")

CASES = [
    (name, fused, seq) for name in ("bert", "gpt2") for fused in (False, True) for seq in (1, 2, 8)
]


def _convert_verify(tmp_path, proto: onnx.ModelProto, seq: int, *extra: str):
    source, report = tmp_path / "q.onnx", tmp_path / "report.json"
    onnx.save_model(proto, source)
    args = [
        "convert",
        str(source),
        "--to",
        "onnx",
        "--dry-run",
        "--verify",
        "--input-shape",
        f"input_ids=1,{seq}",
        "--verify-runs",
        "2",
        "--report",
        str(report),
        *extra,
    ]
    result = CliRunner().invoke(main, args)
    return result, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize(("name", "fused", "seq"), CASES)
def test_ort_quantized_transformers_verify(tmp_path, name: str, fused: bool, seq: int) -> None:
    result, report = _convert_verify(tmp_path, quantized(name, fused=fused), seq)
    assert result.exit_code == 0, result.output + result.stderr
    verify = report["verify"]
    assert verify["passed"]
    bound = verify["bound"]
    for output in verify["outputs"]:  # each output exact, within its bound, or unbounded
        limit = bound["per_output"].get(output["name"])
        if output["exact"]:
            continue
        assert output["name"] in bound["unbounded"] or output["max_abs"] <= limit


def test_bert_at_one_token_names_the_unbounded_output(tmp_path) -> None:
    """ORT's uint8 QLinearSoftmax wraps a one-element row (probability 1 at scale 1/256)
    to 0, the Q/DQ form saturates to 255: the outputs differ, the conversion is right."""
    result, report = _convert_verify(tmp_path, quantized("bert"), 1)
    text = result.output + result.stderr
    assert result.exit_code == 0, text
    assert report["verify"]["status"] == "within-tolerance"
    bound = report["verify"]["bound"]
    assert bound["unbounded"] == ["last_hidden_state"]  # a LayerNormalization output
    assert "pooler_output" in bound["per_output"]  # Gather -> Gemm -> Tanh: bounded
    assert "unbounded: last_hidden_state (reported, not checked)" in text
    assert "QLinearSoftmax wraps around" in text


def test_a_wrong_scale_in_bert_is_a_mismatch(tmp_path, monkeypatch) -> None:
    from qlrewrite.passes.convert import qoperator_to_qdq

    real = qoperator_to_qdq._Rewriter.dequantize

    def wrong(self, plan, t, scale=None):  # one weight's scale 10% off
        value = real(self, plan, t, scale)
        if t.role != "weight" or plan.view.node.name != "up_matmul_quant":
            return value
        factor = self.constant(plan, np.array(1.1, np.float32), "factor")
        return self._node(plan, "Mul", [value, factor], {}, "off")

    monkeypatch.setattr(qoperator_to_qdq._Rewriter, "dequantize", wrong)
    result, report = _convert_verify(tmp_path, quantized("bert"), 8)
    assert result.exit_code == 1
    assert report["verify"]["status"] == "mismatch"
    assert "'up_quantized' differs by" in report["verify"]["reason"]


# --------------------------------------------------------------------------- the rules


def _graph(nodes, inits, outputs=("y",)) -> ir.Model:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ir.serde.deserialize_model(model)


_QDQ = {"s": np.float32(0.5), "z": np.uint8(128), "s2": np.float32(0.25)}


def _requantized(*after) -> ir.Model:
    """x -> DQ -> Q(q, the source) -> DQ -> ``after`` -> y."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("QuantizeLinear", ["f", "s2", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s2", "z"], ["d"]),
        *after,
    ]
    return _graph(
        nodes, dict(_QDQ, w=np.array([[1.0, -2.0], [0.5, 0.5], [0, 0], [1, 1]], np.float32))
    )


def test_one_step_through_data_movement_and_a_constant_matmul() -> None:
    model = _requantized(
        helper.make_node("Reshape", ["d", "shape"], ["r"]),
        helper.make_node("MatMul", ["d", "w"], ["y"]),
    )
    bound = output_bounds(model, {"q": 1.0}).bounds["y"]
    # one step of 0.25 times the largest column sum of |w| (3.5); plus the rounding of the
    # DequantizeLinear (64 units of 2^-24 of its largest value 255 x 0.25) through the
    # MatMul and the MatMul's own summation slack (2 gamma(4) x 63.75 x 3.5)
    u, top = 2.0**-24, 255 * 0.25
    slack = 64 * u * top * 3.5 + 2 * (4 * u / (1 - 4 * u)) * top * 3.5
    assert bound == pytest.approx(0.875 + slack, rel=1e-12)


def test_tanh_is_lipschitz_one_and_layer_norm_unbounded() -> None:
    tanh = output_bounds(_requantized(helper.make_node("Tanh", ["d"], ["y"])), {"q": 1.0})
    u = 2.0**-24  # + the rounding of the DequantizeLinear (at 63.75) and of Tanh (at 1)
    assert tanh.bounds["y"] == pytest.approx(0.25 + 64 * u * 63.75 + 64 * u, rel=1e-12)
    norm = _requantized(helper.make_node("LayerNormalization", ["d", "g", "b"], ["y"]))
    assert output_bounds(norm, {"q": 1.0}).bounds["y"] == math.inf
    assert output_bounds(norm, {}).bounds["y"] == 0.0  # no source: identical inputs


def test_measured_differences_are_checked_and_carried() -> None:
    model = _requantized(helper.make_node("Tanh", ["d"], ["y"]))
    outcome = output_bounds(model, {"q": 1.0}, {"q": 0.0, "y": 0.0})
    assert outcome.violations == [] and outcome.bounds["y"] == 0.0
    outcome = output_bounds(model, {"q": 1.0}, {"q": 3.0})  # 3 steps where 1 is allowed
    assert outcome.violations == [
        "'q' differs by 3 where the differences of its inputs allow at most 1"
    ]


def test_no_measuring_inside_where_another_difference_has_no_rule() -> None:
    """Float sums in another order (QGemm without y_scale, the dynamic forms, MatMulNBits)
    make a converted MatMul's output differ with identical inputs: no rule states that, so
    measuring inside would call it a mismatch; those runs keep the stated bound."""
    from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorResult
    from qlrewrite.passes.nbits.to_onnx import NBitsResult
    from qlrewrite.pipeline import in_memory
    from qlrewrite.verify.verify import Bound

    class Recorder:
        probes = None

        def expect_measured(self, probes, refine) -> None:
            self.probes = probes

    model = _requantized(helper.make_node("Tanh", ["d"], ["y"]))
    requantized = QOperatorResult(model, True, differences={"q": 1.0})
    sums = Bound("sums", relative=1e-5)
    float_sums = QOperatorResult(model, True, differences={"q": 1.0}, verify_bound=sums)
    nbits = NBitsResult(model, True, verify_bound=Bound("sums", relative=1e-5))
    cases = (([requantized], True), ([float_sums], False), ([requantized, nbits], False))
    for results, measured in cases:
        recorder = Recorder()
        in_memory._expect_measured(recorder, model, results)
        assert (recorder.probes is not None) == measured
        if measured:
            assert set(recorder.probes) == {"f", "q", "d", "y"}
