"""`qlrewrite half`: float32 -> float16 / bfloat16 keeping Q/DQ valid, on ONNX Runtime's
quantize_static outputs at opsets 13, 19 and 21: onnx.checker and `check` pass (the
pipeline's output check), float16 runs in ONNX Runtime 1.31.1 (optimizations off) and its
measured difference is within the stated bound; a scale that rounds to zero is refused
by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import _quantize, inputs_for, model_name_of, quantized, run_ort

import qlrewrite
from qlrewrite.cli import main
from qlrewrite.errors import Refusal
from qlrewrite.passes.half.half_pass import HALF_BOUND

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


def _source(name: str, opset: int) -> onnx.ModelProto:
    return onnx.ModelProto.FromString(_quantize(name, opset, "static", {}))


def _scale_types(proto: onnx.ModelProto) -> set[int]:
    inits = {t.name: t.data_type for t in proto.graph.initializer}
    return {
        inits[n.input[1]]
        for n in proto.graph.node
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] in inits
    }


@pytest.mark.parametrize("opset", [13, 19, 21])
@pytest.mark.parametrize("name", ["cnn", "mlp"])
def test_float16_runs_in_ort_within_the_stated_bound(name: str, opset: int) -> None:
    source = _source(name, opset)
    half = ir.serde.serialize_model(qlrewrite.half(source))  # checker + check inside
    onnx.checker.check_model(half, full_check=True)
    # opset 19+: the scales are float16; below: float32 Q/DQ with Casts around them
    assert _scale_types(half) == ({F16} if opset >= 19 else {F32})
    assert [i.type.tensor_type.elem_type for i in half.graph.input] == [F32]
    assert [o.type.tensor_type.elem_type for o in half.graph.output] == [F32]
    feeds = inputs_for(name)
    (expected,) = run_ort(source, feeds)
    (found,) = run_ort(half, feeds)
    difference = float(np.max(np.abs(found - expected)))
    assert HALF_BOUND.relative is not None
    assert difference <= HALF_BOUND.relative * float(np.max(np.abs(expected)))
    if opset < 19:  # ORT runs every node between the float32 Q/DQ in float32
        assert difference == 0.0


@pytest.mark.parametrize("opset", [13, 19, 21])
def test_bfloat16_passes_the_checks(opset: int) -> None:
    half = ir.serde.serialize_model(qlrewrite.half(_source("cnn", opset), to="bfloat16"))
    onnx.checker.check_model(half, full_check=True)
    assert _scale_types(half) == ({BF16} if opset >= 19 else {F32})


def _tiny_scale_model(scale: float) -> onnx.ModelProto:
    """x -> Q(scale) -> DQ -> Relu -> y at opset 21."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="Q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="DQ"),
        helper.make_node("Relu", ["d"], ["y"], name="relu"),
    ]
    inits = [
        numpy_helper.from_array(np.array(scale, np.float32), "act_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "z"),
    ]
    for node in nodes[:2]:
        node.input[1] = "act_scale"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_tensor_value_info("y", F32, [2])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_a_scale_that_rounds_to_zero_is_refused_by_name() -> None:
    with pytest.raises(Refusal, match="'act_scale' of QuantizeLinear 'Q'"):
        qlrewrite.half(_tiny_scale_model(1e-8))


def test_a_subnormal_scale_keeps_its_qdq_in_float32_and_says_so() -> None:
    with pytest.warns(Warning, match=r"scales subnormal in FLOAT16 \(1: 'act_scale'\)"):
        half = ir.serde.serialize_model(qlrewrite.half(_tiny_scale_model(1e-6)))
    assert _scale_types(half) == {F32}
    x = np.array([3e-6, 1e-4], np.float32)
    np.testing.assert_array_equal(
        run_ort(half, {"x": x})[0], run_ort(_tiny_scale_model(1e-6), {"x": x})[0]
    )


def test_block_and_convert_io() -> None:
    half = ir.serde.serialize_model(
        qlrewrite.half(_source("mlp", 21), block=["Softmax"], convert_io=True)
    )
    softmax = [n for n in half.graph.node if n.op_type == "Softmax"]
    inferred = onnx.shape_inference.infer_shapes(half, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    assert softmax and all(types[n.output[0]] == F32 for n in softmax)
    assert half.graph.input[0].type.tensor_type.elem_type == F16
    assert half.graph.output[0].type.tensor_type.elem_type == F16


def test_cli_writes_and_refuses(tmp_path: Path) -> None:
    onnx.save(_tiny_scale_model(1e-8), tmp_path / "bad.onnx")
    runner = CliRunner()
    result = runner.invoke(
        main, ["half", str(tmp_path / "bad.onnx"), "-o", str(tmp_path / "o.onnx")]
    )
    assert result.exit_code == 1 and "'act_scale'" in result.output
    assert not (tmp_path / "o.onnx").exists()
    onnx.save(_source("cnn", 19), tmp_path / "m.onnx")
    result = runner.invoke(main, ["half", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "h.onnx")])
    assert result.exit_code == 0, result.output
    assert _scale_types(onnx.load(tmp_path / "h.onnx")) == {F16}


def test_float_weights_are_cast_in_chunks_as_numpy_rounds(tmp_path: Path) -> None:
    """A float32 weight larger than one chunk (4 MiB of float16 output) written with
    external data holds NumPy's round-to-nearest-even cast of every value."""
    weight = np.random.default_rng(3).normal(0, 10000, (2048, 1100)).astype(np.float32)
    weight[0, :4] = [65504.0, 1e-8, -3e-5, 65519.0]  # largest, zero, subnormal, rounds down
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F32, [1, 2048])],
        [helper.make_tensor_value_info("y", F32, [1, 1100])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "h.onnx"
    result = CliRunner().invoke(
        main, ["half", str(tmp_path / "m.onnx"), "-o", str(out), "--external-data"]
    )
    assert result.exit_code == 0, result.output
    written = {
        t.name: numpy_helper.to_array(t, str(tmp_path)) for t in onnx.load(out).graph.initializer
    }
    expected = weight.astype(np.float16)
    np.testing.assert_array_equal(written["w"].view(np.uint16), expected.view(np.uint16))

    weight[-1, -1] = 65520.0  # rounds to infinity in float16: refused by name
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "w"))
    with pytest.raises(Refusal, match="initializer 'w' overflows FLOAT16"):
        qlrewrite.half(model)


@pytest.mark.parametrize("config", ["cnn-int16-contrib", "mlp-int16-contrib", "mlp-nbits-asym"])
def test_com_microsoft_nodes_stay_float32_and_run(config: str) -> None:
    """com.microsoft Q/DQ (no ONNX inference past them) and MatMulNBits: float32 with
    Casts around them, the float ops between in float16; runs in ORT within the bound."""
    source = quantized(config)
    half = ir.serde.serialize_model(qlrewrite.half(source))
    feeds = inputs_for(model_name_of(config))
    (expected,) = run_ort(source, feeds)
    (found,) = run_ort(half, feeds)
    assert HALF_BOUND.relative is not None
    limit = HALF_BOUND.relative * float(np.max(np.abs(expected)))
    assert float(np.max(np.abs(found - expected))) <= limit
    assert any(n.op_type == "Cast" for n in half.graph.node)


def _softmax_output_model() -> onnx.ModelProto:
    """x -> Softmax -> Q(1/255, 0) -> DQ -> y: outputs of at most 1, one step 1/255."""
    scale = np.array(1 / 255, np.float32)
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], axis=-1),
        helper.make_node("QuantizeLinear", ["p", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [1, 40])],
        [helper.make_tensor_value_info("y", F32, [1, 40])],
        initializer=[
            numpy_helper.from_array(scale, "s"),
            numpy_helper.from_array(np.uint8(0), "z"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_verify_accepts_one_step_of_a_quantized_output() -> None:
    """A Softmax over 40 values quantized to steps of 1/255: its largest output is about
    0.1, so one step that float16 rounding moves (0.0039) is 4% of it or more; the bound
    accepts one step of the output DequantizeLinear's scale besides 5% of the largest."""
    from qlrewrite.passes.half import HalfPass

    result = HalfPass()(ir.serde.deserialize_model(_softmax_output_model()))
    bound = result.verify_bound
    assert bound is not None
    assert dict(bound.per_output) == {"y": pytest.approx(float(np.float32(1 / 255)))}
    assert bound.relative == HALF_BOUND.relative


def test_int16_bias_scales_that_round_to_zero_keep_their_dequantize_float32() -> None:
    """ORT's quantize_static with int16 activations and weights at opset 21: each int32
    bias scale is x_scale x w_scale (below 1e-8), zero in float16. Those DequantizeLinear
    read constants, so they stay float32 (named in one warning) and the model converts and
    runs within the bound; before, the whole model was refused."""
    kwargs = {"activation_type": "QInt16", "weight_type": "QInt16"}
    source = onnx.ModelProto.FromString(_quantize("cnn", 21, "static", dict(kwargs)))
    tiny = [
        numpy_helper.to_array(t)
        for t in source.graph.initializer
        if t.name.endswith("_scale") and t.data_type == F32 and t.dims in ([], [1])
    ]
    assert min(float(np.abs(a).max()) for a in tiny) < 2.0**-25  # rounds to zero in float16
    with pytest.warns(Warning, match=r"scales zero \(DequantizeLinear of constants\) in FLOAT16"):
        half = ir.serde.serialize_model(qlrewrite.half(source))
    feeds = inputs_for("cnn")
    (expected,) = run_ort(source, feeds)
    (found,) = run_ort(half, feeds)
    limit = HALF_BOUND.relative * float(np.max(np.abs(expected)))  # type: ignore[operator]
    assert float(np.max(np.abs(found - expected))) <= limit
