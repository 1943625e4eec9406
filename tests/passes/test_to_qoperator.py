"""`convert --to qoperator`: Q/DQ groups become QLinear / integer operators that ONNX
Runtime 1.31 (ORT_DISABLE_ALL) computes as the Q/DQ form does: bit for bit, or within the
stated bound (QLinearSoftmax: one step); what the QOperator form cannot hold stays Q/DQ,
counted by reason."""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from ort_quantized import inputs_for, quantized, run_ort
from to_qoperator_models import GROUP_OPS, Params, feeds, group_model, residual_cnn, run_int

from qlrewrite import api
from qlrewrite.checking.checker import check_model
from qlrewrite.cli import main
from qlrewrite.errors import InputError
from qlrewrite.passes.commands import qoperator_passes
from qlrewrite.passes.convert.qdq_to_qoperator import QdqToQOperatorPass
from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorToQdqPass
from qlrewrite.passes.convert.to_qoperator_result import STEPS

_WRITES = {
    "Conv": "QLinearConv",
    "MatMul": "QLinearMatMul",
    "Gemm": "QGemm",
    "Add": "QLinearAdd",
    "Mul": "QLinearMul",
    "Concat": "QLinearConcat",
    "AveragePool": "QLinearAveragePool",
    "GlobalAveragePool": "QLinearGlobalAveragePool",
    "LeakyRelu": "QLinearLeakyRelu",
    "Sigmoid": "QLinearSigmoid",
    "Softmax": "QLinearSoftmax",
    "MaxPool": "MaxPool",
}


def _convert(proto: onnx.ModelProto, **kwargs: object) -> tuple[onnx.ModelProto, object]:
    model = ir.serde.deserialize_model(proto)
    result = QdqToQOperatorPass(**kwargs)(model)  # type: ignore[arg-type]
    converted = ir.serde.serialize_model(model)
    onnx.checker.check_model(converted)
    return converted, result


def _ops(proto: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in proto.graph.node)


#: Scales quantizers write (decimal ones put exact products and sums on half-way points,
#: where the kernels' rounding and the float op's part).
_DECIMAL_SCALES = (0.5, 0.2, 0.1, 0.07, 0.05, 0.02, 0.0123)


def _params() -> st.SearchStrategy[Params]:
    scale = st.one_of(st.floats(1e-3, 1.0), st.sampled_from(_DECIMAL_SCALES))
    return st.builds(
        Params,
        signed=st.booleans(),
        scales=st.tuples(scale, scale, scale),
        zeros=st.tuples(*[st.one_of(st.integers(-100, 100), st.integers(-20, 20))] * 3),
        weight_scale=st.floats(1e-3, 0.1),
        per_channel=st.booleans(),
        seed=st.integers(0, 2**16),
    )


@pytest.mark.parametrize("op", sorted(GROUP_OPS))
@settings(max_examples=15)
@given(params=_params())
def test_kernel_steps(op: str, params: Params) -> None:
    """Each group's QLinear kernel against DQ -> op -> Q in ORT 1.31 (ORT_DISABLE_ALL):
    within STEPS (0: bit-identical) over random scales, zero points, types and inputs."""
    original = group_model(op, params)
    converted, result = _convert(original)
    assert _ops(converted)[_WRITES[op]] == 1, result.summary  # type: ignore[attr-defined]
    assert "DequantizeLinear" not in _ops(converted)
    inputs = feeds(original, params.seed)
    expected = run_int(original, inputs).astype(np.int64)
    actual = run_int(converted, inputs).astype(np.int64)
    steps = STEPS.get(_WRITES[op], 0.0)
    assert np.abs(expected - actual).max() <= steps


@pytest.mark.parametrize("opset", [13, 19, 21])
@pytest.mark.parametrize("op", ["Conv", "MatMul", "Gemm", "Add", "Concat", "Sigmoid", "MaxPool"])
@pytest.mark.parametrize("shape", ["no zero points", "no bias", "per-channel, no zero points"])
def test_other_producers_shapes(op: str, opset: int, shape: str) -> None:
    """Q/DQ as other producers write it: zero points left out (uint8, zero), no bias, at
    opsets 13, 19, 21: converted, the output as the Q/DQ model's."""
    params = Params(
        zero_points="zero points" not in shape,
        bias=shape != "no bias",
        per_channel=shape.startswith("per-channel"),
        seed=opset,
    )
    original = group_model(op, params, opset=opset)
    converted, result = _convert(original)
    assert _ops(converted)[_WRITES[op]] == 1, result.summary  # type: ignore[attr-defined]
    inputs = feeds(original, 1)
    expected, actual = run_int(original, inputs), run_int(converted, inputs)
    assert np.abs(expected.astype(np.int64) - actual).max() <= STEPS.get(_WRITES[op], 0.0)
    assert check_model(ir.serde.deserialize_model(converted)).errors == []


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(GROUP_OPS))
def test_kernel_steps_measured(op: str) -> None:
    """The figures of docs/qoperator.md's table: 200 groups per op (decimal scales and
    zero points within 20 of the middle, half of them the Params defaults), each element
    of each output compared; the ops stated exact never differ, the others by at most
    STEPS. Prints the count (``-s``)."""
    rng = np.random.default_rng(1)
    worst, differing, total = 0, 0, 0
    for trial in range(200):
        chosen = tuple(float(rng.choice(_DECIMAL_SCALES)) for _ in range(3))
        zeros = tuple(int(z) for z in rng.integers(-20, 20, 3))
        params = (
            Params(signed=trial % 4 == 1, seed=trial, per_channel=trial % 3 == 0)
            if trial % 2
            else Params(trial % 4 == 0, chosen, zeros, seed=trial, per_channel=trial % 3 == 0)  # type: ignore[arg-type]
        )
        original = group_model(op, params)
        converted, _ = _convert(original, bound=False)
        inputs = feeds(original, trial)
        expected = run_int(original, inputs).astype(np.int64)
        difference = np.abs(expected - run_int(converted, inputs))
        worst, differing = (
            max(worst, int(difference.max())),
            differing + int((difference > 0).sum()),
        )
        total += difference.size
    print(f"{op}: {differing} of {total} elements differ, at most {worst} step(s)")
    assert worst <= STEPS.get(_WRITES[op], 0.0)


@pytest.mark.parametrize(
    ("kwargs", "opset"),
    [
        ({"activation_type": "QUInt8", "weight_type": "QInt8"}, 13),
        ({"activation_type": "QInt8", "weight_type": "QInt8"}, 13),
        ({"activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True}, 13),
        ({"activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True}, 19),
        ({"activation_type": "QUInt8", "weight_type": "QUInt8"}, 21),
    ],
)
def test_quantize_static_residual_cnn_is_exact(kwargs: dict, opset: int) -> None:
    """Conv, Relu, MaxPool, Add residual, GlobalAveragePool, Gemm: every group becomes a
    QLinear op; outputs bit-identical to the Q/DQ model's (ORT 1.31.1, optimizations off)."""
    original = _quantize_static(residual_cnn(opset), kwargs)
    converted, result = _convert(original)
    ops = _ops(converted)
    assert ops["QLinearConv"] == 3 and ops["QGemm"] == 1 and ops["QLinearAdd"] == 1, ops
    assert ops["MaxPool"] == 1 and ops["QLinearGlobalAveragePool"] == 1, ops
    assert not any(k.startswith("left_") for k in result.summary)  # type: ignore[attr-defined]
    assert check_model(ir.serde.deserialize_model(converted)).errors == []
    x = {"x": np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    np.testing.assert_array_equal(run_ort(converted, x)[0], run_ort(original, x)[0])


def test_transformer_block_layer_norm_stays_qdq() -> None:
    """bert: MatMul, Add, Softmax, Mul become QLinear ops; LayerNormalization, Erf, Div,
    Gather stay Q/DQ (counted); outputs within the stated bound."""
    from transformer_models import quantized as transformer

    original = transformer("bert", qdq=True)
    converted, result = _convert(original)
    ops = _ops(converted)
    assert ops["QLinearMatMul"] >= 6 and ops["QLinearSoftmax"] == 1 and ops["QLinearAdd"] >= 4
    assert ops["LayerNormalization"] == 3
    assert result.summary["left_no_qoperator_form"] >= 3  # type: ignore[attr-defined]
    assert check_model(ir.serde.deserialize_model(converted)).errors == []
    feeds_ = {"input_ids": np.random.default_rng(4).integers(0, 50, (1, 9)).astype(np.int64)}
    bound = dict(result.verify_bound.per_output)  # type: ignore[attr-defined]
    for name, a, b in zip(
        [o.name for o in original.graph.output],
        run_ort(original, feeds_),
        run_ort(converted, feeds_),
        strict=True,
    ):
        assert np.abs(a - b).max() <= bound.get(name, 0.0)


def test_quantize_static_mlp_softmax_within_bound() -> None:
    original = quantized("mlp-u8s8")
    converted, result = _convert(original)
    assert _ops(converted)["QLinearSoftmax"] == 1
    x = inputs_for("mlp")
    difference = np.abs(run_ort(converted, x)[0] - run_ort(original, x)[0]).max()
    assert 0 < difference <= dict(result.verify_bound.per_output)["y"]  # type: ignore[attr-defined]


def test_dynamic_form_becomes_matmul_integer() -> None:
    """quantize_dynamic's MatMulInteger pattern, as Q/DQ (convert --to onnx), comes back as
    MatMulInteger -> Cast -> Mul; float outputs within FLOAT_SUM_RELATIVE."""
    qdq = ir.serde.deserialize_model(quantized("mlp-dynamic"))
    QOperatorToQdqPass()(qdq)
    original = ir.serde.serialize_model(qdq)
    converted, result = _convert(original)
    assert _ops(converted)["MatMulInteger"] == _ops(quantized("mlp-dynamic"))["MatMulInteger"]
    assert result.verify_bound.relative is not None  # type: ignore[attr-defined]
    assert check_model(ir.serde.deserialize_model(converted)).errors == []
    x = inputs_for("mlp")
    expected, actual = run_ort(original, x)[0], run_ort(converted, x)[0]
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_bias_scale_not_product_stays_qdq() -> None:
    proto = group_model("Conv", Params())
    scale = next(i for i in proto.graph.initializer if i.name == "bias_s")
    scale.CopyFrom(onnx.numpy_helper.from_array(np.array(0.123, np.float32), "bias_s"))
    converted, result = _convert(proto)
    assert result.summary == {
        "groups_converted": 0,
        "integer_ops_written": 0,  # type: ignore[attr-defined]
        "opset_imports_added": 0,
        "left_bias": 1,
    }
    assert "bias" in result.warnings[0]  # type: ignore[attr-defined]
    assert _ops(converted)["Conv"] == 1


def test_int16_and_ops_choice_stay_qdq() -> None:
    converted, result = _convert(quantized("cnn-int16-contrib"))
    assert result.summary["left_type"] == 6 and not result.modified  # type: ignore[attr-defined]
    converted, result = _convert(quantized("cnn-u8s8"), ops=["Conv"])
    assert _ops(converted)["QLinearConv"] == 2 and _ops(converted)["QGemm"] == 0
    assert result.summary["left_not_chosen"] == 4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("activation", "bounds", "y_scale", "folds"),
    [
        ("Relu", (), 0.1, True),  # zero point -128: the bottom of int8
        ("Clip", (0.0, 6.0), 6 / 255, True),  # Relu6 quantized to [0, 6]: Q(6) = 127
        ("Clip", (0.0, 1.0), 0.1, False),  # Q(1) = -118: the Clip cuts inside the range
    ],
)
def test_relu_clip_folded_where_exact(
    activation: str, bounds: tuple[float, ...], y_scale: float, folds: bool
) -> None:
    """Q(Relu(x)) / Q(Clip(x, lo, hi)) = Q(x) where Q(lo) and Q(hi) are the type's ends."""
    proto = group_model(
        "Conv", Params(signed=True, scales=(0.05, 0.07, y_scale), zeros=(3, -5, -128))
    )
    names = [f"bound{i}" for i in range(len(bounds))]
    proto.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in zip(names, bounds, strict=True)
    )
    nodes = list(proto.graph.node)
    nodes[-1].input[0] = "f_act"
    nodes.insert(len(nodes) - 1, onnx.helper.make_node(activation, ["f", *names], ["f_act"]))
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    converted, result = _convert(proto)
    if folds:
        assert _ops(converted) == Counter({"QLinearConv": 1})
    else:
        assert result.summary["left_activation"] == 1  # type: ignore[attr-defined]
    x = feeds(proto, 0)
    np.testing.assert_array_equal(run_int(converted, x), run_int(proto, x))


@pytest.mark.parametrize(("opset", "axis"), [(11, 1), (11, -1), (12, 2), (13, 1), (13, None)])
def test_softmax_keeps_the_semantics_of_its_opset(opset: int, axis: int | None) -> None:
    """QLinearSoftmax's ``opset`` attribute is the model's: before 13 Softmax coerces the
    input to 2-D at the axis (default 1), from 13 it normalizes along the axis (default -1)."""
    attrs = {} if axis is None else {"axis": axis}
    original = group_model("Softmax", Params(seed=opset), opset=opset, attrs=attrs)
    converted, _ = _convert(original)
    node = next(n for n in converted.graph.node if n.op_type == "QLinearSoftmax")
    assert {a.name: a.i for a in node.attribute}["opset"] == opset
    inputs = feeds(original, 0)
    difference = run_int(original, inputs).astype(np.int64) - run_int(converted, inputs)
    assert np.abs(difference).max() <= STEPS["QLinearSoftmax"]


def test_group_inside_a_function() -> None:
    """A group in a model-local function: written there (com.microsoft imported by the
    function and the model); its output's bound is stated unbounded (the walk follows the
    main graph only)."""
    inner = group_model("Add", Params())
    g = inner.graph
    body = [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in g.initializer]
    function = onnx.helper.make_function(
        "local",
        "group",
        [i.name for i in g.input],
        ["y"],
        [*body, *g.node],
        opset_imports=[onnx.helper.make_opsetid("", 13)],
    )
    call = onnx.helper.make_node("group", [i.name for i in g.input], ["y"], domain="local")
    main_graph = onnx.helper.make_graph([call], "main", list(g.input), list(g.output))
    imports = [onnx.helper.make_opsetid("", 13), onnx.helper.make_opsetid("local", 1)]
    proto = onnx.helper.make_model(
        main_graph, functions=[function], opset_imports=imports, ir_version=8
    )
    converted, result = _convert(proto)
    assert [n.op_type for n in converted.functions[0].node][-1] == "QLinearAdd"
    assert {o.domain for o in converted.functions[0].opset_import} >= {"com.microsoft"}
    assert result.verify_bound.unbounded == ("y",)  # type: ignore[attr-defined]
    assert check_model(ir.serde.deserialize_model(converted)).errors == []
    x = feeds(proto, 0)
    assert np.abs(run_int(proto, x).astype(np.int64) - run_int(converted, x)).max() <= 1


@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_openvino_target_leaves_per_channel_conv(activations: str) -> None:
    """OpenVINO's table refuses per-channel QLinearConv, QGemm and QLinearGlobalAveragePool
    (uint8 and int8 activations probed) and computes a QLinearAdd whose output saturates
    (zero point at its type's lowest: the quantizer folded the Relu after it) wrong,
    hundreds of percent off the reference (its value rows): they all stay Q/DQ."""
    original = _quantize_static(
        residual_cnn(13),
        {"activation_type": activations, "weight_type": "QInt8", "per_channel": True},
    )
    passes = qoperator_passes(target="openvino")
    model = ir.serde.deserialize_model(original)
    result = passes[0](model)
    assert result.summary["left_target_refuses"] == 6  # 3 Conv, Gemm, GlobalAveragePool, Add
    assert result.summary["groups_converted"] == 0
    converted = ir.serde.serialize_model(model)
    assert _ops(converted)["Conv"] == 3 and _ops(converted)["Add"] == 1


def test_api_and_cli(tmp_path: Path) -> None:
    source = tmp_path / "cnn.onnx"
    onnx.save(quantized("cnn-u8s8"), source)
    model = api.convert(source, "qoperator", ops=["Conv", "MatMul"])
    assert Counter(n.op_type for n in model.graph)["QLinearConv"] == 2
    assert api.verify_rewrite(source, model).passed  # the stated bound, from summary_of
    with pytest.raises(InputError, match="'Foo' cannot be converted"):
        api.convert(source, "qoperator", ops=["Foo"])
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    run = CliRunner().invoke(
        main,
        [
            "convert",
            str(source),
            "--to",
            "qoperator",
            "-o",
            str(out),
            "--report",
            str(report),
            "--verify",
        ],
    )
    assert run.exit_code == 0, run.output
    assert "groups converted 5" in run.output and "exact" in run.output
    assert json.loads(report.read_text())["changes"]
    run = CliRunner().invoke(main, ["convert", str(source), "--to", "onnx", "--ops", "Conv"])
    assert run.exit_code == 2 and "--ops applies to --to qoperator" in run.output


def _quantize_static(model: onnx.ModelProto, kwargs: dict) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(9)
            shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            self._data = iter(
                [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self) -> dict | None:
            return next(self._data, None)

    args = {k: getattr(QuantType, v) if k.endswith("_type") else v for k, v in kwargs.items()}
    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source, target = Path(tmp, "f.onnx"), Path(tmp, "q.onnx")
        onnx.save(model, source)
        quantize_static(str(source), str(target), Reader(), **args)
        return onnx.load(target)
