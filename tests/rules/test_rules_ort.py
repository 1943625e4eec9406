"""No false alarms: ONNX's backend test models, ONNX Runtime's verdict on generated nodes,
and models written by onnxruntime.quantization all check without errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper
from qdq_models import DQ, DT, MS, Q, blocked_with_one_element_scale, load_ir, qdq_model

from qlrewrite.checking.checker import check_model

ort = pytest.importorskip("onnxruntime")


# --------------------------------------------------------------------------- ONNX backend


@pytest.fixture(scope="module")
def backend_cases() -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return collect_testcases("QuantizeLinear") + collect_testcases("DequantizeLinear")


def _inputs_as_initializers(case: Any) -> onnx.ModelProto:
    """The backend model with scale and zero point turned into initializers (values known)."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    if not case.data_sets:
        return model
    values = case.data_sets[0][0]
    keep = []
    for index, (info, value) in enumerate(zip(model.graph.input, values, strict=False)):
        if index == 0:
            keep.append(info)
            continue
        if isinstance(value, onnx.TensorProto):
            tensor = onnx.TensorProto()
            tensor.CopyFrom(value)
            tensor.name = info.name
        else:
            tensor = numpy_helper.from_array(np.asarray(value), info.name)
        model.graph.initializer.append(tensor)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model


def test_backend_models_have_no_errors(backend_cases: list[Any]) -> None:
    assert len(backend_cases) >= 20
    for case in backend_cases:
        for proto in (case.model, _inputs_as_initializers(case)):
            report = check_model(load_ir(proto))
            assert report.nodes_checked >= 1, case.name
            assert not report.errors, (case.name, report.errors)


# --------------------------------------------------------------------------- ORT's verdict


def _runs_in_ort(proto: onnx.ModelProto, x: np.ndarray) -> bool:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        session.run(None, {"x": x})
    except Exception:
        return False
    return True


#: Rules whose violation ONNX Runtime is known to accept (see notes/qdq-facts.md):
#: per-axis DequantizeLinear at opset 10-12.
ORT_LENIENT = {"QL402"}

_X_SHAPES = [(4, 6), (6,), (2, 4, 6)]


@st.composite
def _nodes(draw: st.DrawFn) -> dict:
    op = draw(st.sampled_from([Q, DQ]))
    domain = draw(st.sampled_from(["", "", MS]))
    opset = draw(st.sampled_from([10, 13, 19, 21])) if domain == "" else 13
    x_shape = draw(st.sampled_from(_X_SHAPES))
    kind = draw(st.sampled_from(["scalar", "one", "1d", "blocked", "rank2"]))
    axis = draw(st.one_of(st.none(), st.integers(-3, 3)))
    attrs: dict[str, int] = {}
    if axis is not None:
        attrs["axis"] = axis
    if kind == "scalar":
        scale_shape: tuple = ()
    elif kind == "one":
        scale_shape = (1,)
    elif kind == "1d":
        scale_shape = (draw(st.integers(1, 7)),)
    else:
        scale_shape = tuple(draw(st.integers(1, 7)) for _ in x_shape)
        if kind == "blocked":
            attrs["block_size"] = draw(st.integers(-1, 7))
    zp_kind = draw(st.sampled_from(["same", "same", "scalar", "one", "none"]))
    zp_shape = {"same": scale_shape, "scalar": (), "one": (1,), "none": scale_shape}[zp_kind]
    if op == DQ:
        x_type = draw(st.sampled_from([DT.UINT8, DT.INT8, DT.INT32, DT.INT16]))
        zp_type = None if zp_kind == "none" else x_type
    else:
        x_type = DT.FLOAT
        zp_type = None if zp_kind == "none" else draw(st.sampled_from([DT.UINT8, DT.INT8]))
    return dict(
        op=op,
        opset=opset,
        domain=domain,
        x_type=x_type,
        x_shape=x_shape,
        scale_shape=scale_shape,
        zp_type=zp_type,
        zp_shape=zp_shape,
        attrs=attrs,
    )


@settings(max_examples=80)
@given(_nodes())
def test_check_agrees_with_ort(kwargs: dict) -> None:
    proto = qdq_model(**kwargs)
    x_type, x_shape = kwargs["x_type"], kwargs["x_shape"]
    x = (np.arange(np.prod(x_shape)) % 50).reshape(x_shape).astype(x_type.numpy())
    errors = check_model(load_ir(proto)).errors
    if _runs_in_ort(proto, x):
        assert not [f for f in errors if f.rule not in ORT_LENIENT], (kwargs, errors)
    elif not blocked_with_one_element_scale(kwargs):  # a known disagreement: spec allows it
        # on these types ORT implements every version: a node it refuses breaks a rule
        assert errors, kwargs


# --------------------------------------------------------------------------- ORT's quantizer


def _float_model(opset: int) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((8 * 6 * 6, 64)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="reshape"),
        helper.make_node("MatMul", ["f", "w2"], ["y"], name="matmul"),
    ]
    shape = numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        initializer=[w1, b1, w2, shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


class _Reader:
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self._data = iter(
            [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(4)]
        )

    def get_next(self) -> dict | None:
        return next(self._data, None)


def _quantize(tmp_path: Any, opset: int, **kwargs: Any) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    source = tmp_path / f"float{opset}.onnx"
    target = tmp_path / f"q{opset}.onnx"
    onnx.save_model(_float_model(opset), source)
    reader = type("Reader", (_Reader, CalibrationDataReader), {})()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(source), str(target), reader, quant_format=QuantFormat.QDQ, **kwargs)
    return onnx.load_model(target)


QUANTIZER_CONFIGS = {
    "default": (13, {}),
    "per-channel": (13, {"per_channel": True}),
    "int16-contrib": (
        13,
        {
            "activation_type": "QInt16",
            "weight_type": "QInt16",
            "extra_options": {"UseQDQContribOps": True},
        },
    ),
    "int4-weights-contrib": (13, {"weight_type": "QInt4", "per_channel": True}),
    "int4-weights-21": (21, {"weight_type": "QInt4", "per_channel": True}),
}


@pytest.mark.parametrize("config", list(QUANTIZER_CONFIGS))
def test_ort_quantizer_output_has_no_errors(tmp_path: Any, config: str) -> None:
    from onnxruntime.quantization import QuantType

    opset, kwargs = QUANTIZER_CONFIGS[config]
    kwargs = dict(kwargs)
    for key in ("activation_type", "weight_type"):
        if key in kwargs:
            kwargs[key] = getattr(QuantType, kwargs[key])
    proto = _quantize(tmp_path, opset, **kwargs)
    report = check_model(load_ir(proto))
    assert report.nodes_checked >= 6
    assert not report.errors, report.errors
    if config == "int16-contrib":
        assert any(n.domain == MS for n in proto.graph.node)


def test_ort_quantizer_opset12_per_channel_is_an_error(tmp_path: Any) -> None:
    proto = _quantize(tmp_path, 12, per_channel=True)
    errors = check_model(load_ir(proto)).errors
    axis = [f for f in errors if f.rule == "QL201"]
    assert axis, errors
    assert all("qlrewrite upgrade --opset 13" in f.hint for f in axis)


def test_matmul_nbits_qdq_has_no_errors(tmp_path: Any) -> None:
    pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = _float_model(13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantizer = MatMulNBitsQuantizer(
            model, block_size=32, is_symmetric=False, quant_format=QuantFormat.QDQ
        )
        quantizer.process()
    proto = quantizer.model.model
    report = check_model(load_ir(proto))
    assert report.nodes_checked >= 1
    assert not report.errors, report.errors
