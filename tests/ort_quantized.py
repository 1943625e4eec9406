"""Models written by onnxruntime.quantization, built in the tests (no downloads).

Two float models defined here (a small CNN, a transformer-like MLP block) are quantized by
ORT's own quantizer in the configurations users meet. Each model is built once per test
process (cached as serialized bytes); :func:`quantized` returns a fresh ModelProto.
:func:`run_ort` runs a model the way bit-exact comparisons need: no graph optimizations
and no weight prepacking.
"""

from __future__ import annotations

import functools
import logging
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "CONFIGS",
    "FAMILY_CONFIGS",
    "FLOAT_MODELS",
    "QOPERATOR_CONFIGS",
    "float_model",
    "inputs_for",
    "quantized",
    "run_ort",
    "run_session",
]


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _cnn(opset: int) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Relu -> Reshape -> MatMul -> Add -> Gemm."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    inits = [
        _init("w1", rng.standard_normal((8, 4, 3, 3)).astype(f32)),
        _init("b1", rng.standard_normal(8).astype(f32)),
        _init("w2", rng.standard_normal((8, 8, 3, 3)).astype(f32) * 0.2),
        _init("b2", rng.standard_normal(8).astype(f32)),
        _init("w3", rng.standard_normal((8 * 4 * 4, 64)).astype(f32) * 0.1),
        _init("b3", rng.standard_normal(64).astype(f32)),
        _init("w4", rng.standard_normal((32, 64)).astype(f32) * 0.1),
        _init("b4", rng.standard_normal(32).astype(f32)),
        _init("shape", np.array([1, -1], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Reshape", ["r2", "shape"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "w3"], ["m"], name="fc1"),
        helper.make_node("Add", ["m", "b3"], ["a"], name="fc1_bias"),
        helper.make_node("Gemm", ["a", "w4", "b4"], ["y"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _mlp(opset: int) -> onnx.ModelProto:
    """An attention-like block: Q/K/V MatMuls, scaled Softmax, output and MLP MatMuls."""
    rng = np.random.default_rng(2)
    f32 = np.float32
    d, hidden = 64, 128
    inits = [
        _init(name, (rng.standard_normal(shape) * 0.1).astype(f32))
        for name, shape in (
            ("wq", (d, d)),
            ("wk", (d, d)),
            ("wv", (d, d)),
            ("wo", (d, d)),
            ("w_up", (d, hidden)),
            ("b_up", (hidden,)),
            ("w_down", (hidden, d)),
        )
    ] + [_init("inv_sqrt_d", np.array(1 / np.sqrt(d), dtype=f32))]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Mul", ["s", "inv_sqrt_d"], ["ss"], name="scale"),
        helper.make_node("Softmax", ["ss"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["att"], name="context"),
        helper.make_node("MatMul", ["att", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["o", "x"], ["h"], name="residual1"),
        helper.make_node("MatMul", ["h", "w_up"], ["u"], name="up_proj"),
        helper.make_node("Add", ["u", "b_up"], ["ub"], name="up_bias"),
        helper.make_node("Relu", ["ub"], ["ur"], name="act"),
        helper.make_node("MatMul", ["ur", "w_down"], ["dn"], name="down_proj"),
        helper.make_node("Add", ["dn", "h"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, d])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _branchy(opset: int) -> onnx.ModelProto:
    """A CNN of the activation-only families ORT's QDQ selectors fuse or drop: Conv -> Relu
    -> MaxPool, two branches (Conv -> Sigmoid, and AveragePool -> Conv -> LeakyRelu) Mul-ed
    and Concat-ed, Add (residual), Resize, Transpose -> Reshape, GlobalAveragePool, Gemm,
    Softmax."""
    rng = np.random.default_rng(5)
    f32 = np.float32
    inits = [
        _init("w1", rng.standard_normal((8, 4, 3, 3)).astype(f32) * 0.3),
        _init("w2", rng.standard_normal((8, 8, 1, 1)).astype(f32) * 0.3),
        _init("w3", rng.standard_normal((8, 8, 3, 3)).astype(f32) * 0.2),
        _init("w4", rng.standard_normal((16, 16, 1, 1)).astype(f32) * 0.2),
        _init("wf", rng.standard_normal((10, 16)).astype(f32) * 0.3),
        _init("bf", rng.standard_normal(10).astype(f32)),
        _init("scales", np.array([1, 1, 2, 2], dtype=f32)),
        _init("shape", np.array([1, 16, -1], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["g"], name="gate"),
        helper.make_node(
            "AveragePool", ["p1"], ["a1"], name="avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Conv", ["a1", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c3"], ["l3"], name="leaky", alpha=0.1),
        helper.make_node("Mul", ["l3", "g"], ["m"], name="gated"),
        helper.make_node("Concat", ["m", "p1"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w4"], ["c4"], name="conv4"),
        helper.make_node("Add", ["c4", "cat"], ["res"], name="residual"),
        helper.make_node("Resize", ["res", "", "scales"], ["up"], name="up", mode="nearest"),
        helper.make_node("Transpose", ["up"], ["t"], name="nhwc", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["t"], ["t2"], name="nchw", perm=[0, 3, 1, 2]),
        helper.make_node("GlobalAveragePool", ["t2"], ["gp"], name="gap"),
        helper.make_node("Reshape", ["gp", "shape"], ["flat3"], name="flatten3"),
        helper.make_node("Flatten", ["flat3"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "branchy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _attention(opset: int) -> onnx.ModelProto:
    """Two-head self-attention of x [1, 8, 32] with the families a transformer brings:
    Reshape / Transpose into heads, a causal Where mask, Softmax, Concat, Gather of token
    rows, a residual Add, Sigmoid."""
    rng = np.random.default_rng(7)
    f32 = np.float32
    mask = np.tril(np.ones((8, 8), dtype=bool))
    inits = [
        _init(name, (rng.standard_normal((32, 32)) * 0.2).astype(f32))
        for name in ("wq", "wk", "wv", "wo")
    ] + [
        _init("heads", np.array([1, 8, 2, 16], dtype=np.int64)),
        _init("model", np.array([1, 8, 32], dtype=np.int64)),
        _init("scale", np.array(0.25, dtype=f32)),
        _init("mask", mask),
        _init("neg", np.array(-30.0, dtype=f32)),
        _init("last", np.array([7], dtype=np.int64)),
        _init("first", np.array([0], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
        helper.make_node("Reshape", ["q", "heads"], ["q4"], name="q_heads"),
        helper.make_node("Reshape", ["k", "heads"], ["k4"], name="k_heads"),
        helper.make_node("Reshape", ["v", "heads"], ["v4"], name="v_heads"),
        helper.make_node("Transpose", ["q4"], ["qh"], name="q_t", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kh"], name="k_t", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], name="v_t", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kh"], ["s"], name="scores"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scaled"),
        helper.make_node("Where", ["mask", "ss", "neg"], ["masked"], name="causal"),
        helper.make_node("Softmax", ["masked"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["ctx"], name="context"),
        helper.make_node("Transpose", ["ctx"], ["ct"], name="ctx_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "model"], ["c"], name="merge"),
        helper.make_node("MatMul", ["c", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["o", "x"], ["h"], name="residual"),
        helper.make_node("Gather", ["h", "last"], ["hl"], name="take_last", axis=1),
        helper.make_node("Gather", ["h", "first"], ["hf"], name="take_first", axis=1),
        helper.make_node("Concat", ["hl", "hf"], ["pair"], name="pair", axis=1),
        helper.make_node("Sigmoid", ["pair"], ["y"], name="gate"),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 32])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


FLOAT_MODELS = {"cnn": _cnn, "mlp": _mlp, "branchy": _branchy, "attention": _attention}
_INPUT_SHAPES = {
    "cnn": (1, 4, 8, 8),
    "mlp": (1, 16, 64),
    "branchy": (1, 4, 8, 8),
    "attention": (1, 8, 32),
}

#: name -> (float model, opset, how): how is ("static", quantize_static kwargs with QuantType
#: names as strings) or ("nbits", MatMulNBitsQuantizer kwargs).
CONFIGS: dict[str, tuple[str, int, tuple[str, dict[str, Any]]]] = {
    "cnn-u8s8": ("cnn", 13, ("static", {})),
    "cnn-s8s8": ("cnn", 13, ("static", {"activation_type": "QInt8", "weight_type": "QInt8"})),
    "cnn-per-channel": ("cnn", 13, ("static", {"per_channel": True})),
    "cnn-int16-contrib": (
        "cnn",
        13,
        (
            "static",
            {
                "activation_type": "QInt16",
                "weight_type": "QInt16",
                "extra_options": {"UseQDQContribOps": True},
            },
        ),
    ),
    "cnn-int4-per-channel-contrib": (
        "cnn",
        13,
        ("static", {"weight_type": "QInt4", "per_channel": True}),
    ),
    "cnn-int4-per-channel-21": (
        "cnn",
        21,
        ("static", {"weight_type": "QInt4", "per_channel": True}),
    ),
    "cnn-qdq-pair-weights": (
        "cnn",
        13,
        ("static", {"extra_options": {"AddQDQPairToWeight": True}}),
    ),
    "cnn-opset12-per-channel": ("cnn", 12, ("static", {"per_channel": True})),
    "mlp-u8s8": ("mlp", 13, ("static", {})),
    "mlp-per-channel-21": ("mlp", 21, ("static", {"per_channel": True})),
    "mlp-int16-contrib": (
        "mlp",
        13,
        (
            "static",
            {
                "activation_type": "QInt16",
                "weight_type": "QInt16",
                "extra_options": {"UseQDQContribOps": True},
            },
        ),
    ),
    "mlp-qdq-pair-weights": (
        "mlp",
        13,
        ("static", {"extra_options": {"AddQDQPairToWeight": True}}),
    ),
    "mlp-nbits-sym": ("mlp", 13, ("nbits", {"block_size": 32, "is_symmetric": True})),
    "mlp-nbits-asym": ("mlp", 13, ("nbits", {"block_size": 32, "is_symmetric": False})),
}

#: QOperator and dynamic models (kept apart from CONFIGS: those tests expect Q/DQ):
#: "qoperator" is quantize_static with QuantFormat.QOperator, "dynamic" quantize_dynamic.
QOPERATOR_CONFIGS: dict[str, tuple[str, int, tuple[str, dict[str, Any]]]] = {
    "cnn-qop-u8s8": ("cnn", 13, ("qoperator", {"activation_type": "QUInt8"})),
    "cnn-qop-s8s8-per-channel": (
        "cnn",
        13,
        ("qoperator", {"activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True}),
    ),
    "mlp-qop-u8s8": ("mlp", 13, ("qoperator", {"activation_type": "QUInt8"})),
    "mlp-qop-s8s8-per-channel": (
        "mlp",
        13,
        ("qoperator", {"activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True}),
    ),
    "mlp-dynamic": ("mlp", 13, ("dynamic", {})),
    "cnn-dynamic-per-channel": (
        "cnn",
        13,
        ("dynamic", {"per_channel": True, "op_types_to_quantize": ["Conv", "MatMul"]}),
    ),
    "mlp-dynamic-per-channel": ("mlp", 13, ("dynamic", {"per_channel": True})),
}

#: ORT's quantizer outputs of the family-rich CNN and attention block (kept apart from
#: CONFIGS: those tests expect the two original models): QDQ uint8 / int8 / per-channel at
#: opset 13 and 21, 16-bit activations at opset 21 (ai.onnx) and in com.microsoft Q/DQ,
#: QOperator (the CNN only: ORT 1.31.1's QOperator quantizer of the attention block raises
#: "Invalid model with unknown initializers/tensors" at its Where), dynamic.
FAMILY_CONFIGS: dict[str, tuple[str, int, tuple[str, dict[str, Any]]]] = {
    "branchy-u8s8": ("branchy", 13, ("static", {})),
    "branchy-s8s8": (
        "branchy",
        13,
        ("static", {"activation_type": "QInt8", "weight_type": "QInt8"}),
    ),
    "branchy-per-channel": ("branchy", 13, ("static", {"per_channel": True})),
    "branchy-per-channel-21": ("branchy", 21, ("static", {"per_channel": True})),
    "branchy-u16s8-21": (
        "branchy",
        21,
        ("static", {"activation_type": "QUInt16", "weight_type": "QInt8"}),
    ),
    "branchy-int16-contrib": (
        "branchy",
        13,
        (
            "static",
            {
                "activation_type": "QInt16",
                "weight_type": "QInt16",
                "extra_options": {"UseQDQContribOps": True},
            },
        ),
    ),
    "branchy-qop-u8s8": ("branchy", 13, ("qoperator", {"activation_type": "QUInt8"})),
    "branchy-dynamic": ("branchy", 13, ("dynamic", {})),
    "attention-u8s8": ("attention", 13, ("static", {})),
    "attention-s8s8-per-channel-21": (
        "attention",
        21,
        ("static", {"activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True}),
    ),
    "attention-u16s8-21": (
        "attention",
        21,
        ("static", {"activation_type": "QUInt16", "weight_type": "QInt8"}),
    ),
    "attention-int16-contrib": (
        "attention",
        13,
        (
            "static",
            {
                "activation_type": "QInt16",
                "weight_type": "QInt16",
                "extra_options": {"UseQDQContribOps": True},
            },
        ),
    ),
    "attention-dynamic": ("attention", 13, ("dynamic", {})),
}

#: Configurations whose output ORT cannot load (ORT's quantizer writes `axis` at opset 12).
INVALID_CONFIGS = frozenset({"cnn-opset12-per-channel"})


def float_model(name: str, opset: int = 13) -> onnx.ModelProto:
    """One of the float models at ``opset``."""
    return FLOAT_MODELS[name](opset)


def inputs_for(model_name: str, seed: int = 1) -> dict[str, np.ndarray]:
    """Feeds for a float model (or any model quantized from it)."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(_INPUT_SHAPES[model_name]).astype(np.float32)}


def _reader(model_name: str) -> Any:
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._data = iter([inputs_for(model_name, seed) for seed in range(10, 14)])

        def get_next(self) -> dict | None:
            return next(self._data, None)

    return Reader()


@functools.cache
def _quantized_bytes(config: str) -> bytes:
    model_name, opset, (how, kwargs) = {**CONFIGS, **QOPERATOR_CONFIGS, **FAMILY_CONFIGS}[config]
    kwargs = dict(kwargs)
    quiet = logging.getLogger().level, logging.getLogger("onnxruntime").level
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    try:
        return _quantize(model_name, opset, how, kwargs)
    finally:
        logging.getLogger().setLevel(quiet[0])
        logging.getLogger("onnxruntime").setLevel(quiet[1])


def _quantize(model_name: str, opset: int, how: str, kwargs: dict[str, Any]) -> bytes:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "nbits":
            from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

            quantizer = MatMulNBitsQuantizer(
                float_model(model_name, opset), quant_format=QuantFormat.QDQ, **kwargs
            )
            quantizer.process()
            return quantizer.model.model.SerializeToString()
        for key in ("activation_type", "weight_type"):
            if key in kwargs:
                kwargs[key] = getattr(QuantType, kwargs[key])
        with tempfile.TemporaryDirectory() as tmp:
            source, target = Path(tmp, "float.onnx"), Path(tmp, "quantized.onnx")
            onnx.save_model(float_model(model_name, opset), source)
            if how == "dynamic":
                from onnxruntime.quantization import quantize_dynamic

                quantize_dynamic(str(source), str(target), **kwargs)
                return target.read_bytes()
            form = QuantFormat.QOperator if how == "qoperator" else QuantFormat.QDQ
            quantize_static(
                str(source), str(target), _reader(model_name), quant_format=form, **kwargs
            )
            return target.read_bytes()


def quantized(config: str) -> onnx.ModelProto:
    """A fresh copy of the model ORT's quantizer writes for ``config`` (see CONFIGS)."""
    return onnx.load_model_from_string(_quantized_bytes(config))


def model_name_of(config: str) -> str:
    """The float model a configuration quantizes."""
    return {**CONFIGS, **QOPERATOR_CONFIGS, **FAMILY_CONFIGS}[config][0]


def ort_version() -> tuple[int, int]:
    """The installed onnxruntime's (major, minor): tests pin what each version computes."""
    import onnxruntime as ort

    major, minor = ort.__version__.split(".")[:2]
    return int(major), int(minor)


def run_ort(
    model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """Outputs of ``model`` in ORT's CPU provider: no graph optimizations, no prepacking."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.log_severity_level = 3
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def run_session(
    proto: onnx.ModelProto,
    x: np.ndarray,
    *,
    optimized: bool = True,
    disabled: tuple[str, ...] = (),
) -> np.ndarray:
    """The first output of ``proto`` fed ``x`` as "x" in ORT's CPU provider: the default
    session (``optimized``, less the ``disabled`` optimizers) or ORT_DISABLE_ALL (the graph
    as written). The value rules' measurements compare the two."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        proto.SerializeToString(),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(disabled),
    )
    return np.asarray(session.run(None, {"x": x})[0])
