"""Single-node QOperator models (QLinearConv, QLinearMatMul, com.microsoft QLinear*,
QGemm, ...), built with onnx.helper, for the QOperator rules' examples (the spec
``model("qoperator", ...)``, :mod:`model_specs`) and the tests; ONNX Runtime helpers to
feed and run them.

:func:`build` takes keyword overrides of a model's constants (name -> array, or None to
leave the input out) and returns a valid model by default: ONNX Runtime loads and runs it
(except :data:`NO_CPU_KERNEL`). Values are written by hand, not with qlrewrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["MS", "NO_CPU_KERNEL", "OPS", "build", "feeds_for", "ort_error"]

#: Ops whose schema ONNX Runtime registers without a CPU kernel (measured, ORT 1.31):
#: ORT cannot run them, so their tests compare with NumPy instead.
NO_CPU_KERNEL = frozenset({"QLinearReduceMean"})

f32, u8, i8, i32 = np.float32, np.uint8, np.int8, np.int32
MS = "com.microsoft"

_S = np.array(0.05, f32)
_ZP = np.array(128, u8)


def _conv(domain: str) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "op": "QLinearConv",
        "domain": domain,
        "inputs": [
            "x",
            "x_scale",
            "x_zero_point",
            "w",
            "w_scale",
            "w_zero_point",
            "y_scale",
            "y_zero_point",
            "B",
        ],
        "activations": {"x": (u8, (1, 2, 4, 4))},
        "consts": {
            "x_scale": _S,
            "x_zero_point": _ZP,
            "w": rng.integers(-20, 20, (3, 2, 3, 3)).astype(i8),
            "w_scale": np.full(3, 0.01, f32),
            "w_zero_point": np.zeros(3, i8),
            "y_scale": np.array(0.2, f32),
            "y_zero_point": _ZP,
            "B": np.array([5, -7, 100], i32),
        },
        "output": ("y", u8, (1, 3, 4, 4)),
        "attrs": {"pads": [1, 1, 1, 1]},
    }


def _matmul() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    return {
        "op": "QLinearMatMul",
        "domain": "",
        "inputs": [
            "a",
            "a_scale",
            "a_zero_point",
            "b",
            "b_scale",
            "b_zero_point",
            "y_scale",
            "y_zero_point",
        ],
        "activations": {"a": (u8, (2, 4))},
        "consts": {
            "a_scale": _S,
            "a_zero_point": _ZP,
            "b": rng.integers(-20, 20, (4, 3)).astype(i8),
            "b_scale": np.full(3, 0.01, f32),
            "b_zero_point": np.zeros(3, i8),
            "y_scale": np.array(0.1, f32),
            "y_zero_point": _ZP,
        },
        "output": ("y", u8, (2, 3)),
        "attrs": {},
    }


def _binary(op: str) -> dict[str, Any]:
    return {
        "op": op,
        "domain": MS,
        "inputs": [
            "A",
            "A_scale",
            "A_zero_point",
            "B",
            "B_scale",
            "B_zero_point",
            "C_scale",
            "C_zero_point",
        ],
        "activations": {"A": (u8, (2, 3)), "B": (u8, (2, 3))},
        "consts": {
            "A_scale": _S,
            "A_zero_point": _ZP,
            "B_scale": np.array(0.02, f32),
            "B_zero_point": np.array(100, u8),
            "C_scale": np.array(0.1, f32),
            "C_zero_point": _ZP,
        },
        "output": ("C", u8, (2, 3)),
        "attrs": {},
    }


def _unary(
    op: str, names: tuple[str, ...], attrs: Mapping[str, Any], shape: tuple = (1, 3, 2, 2)
) -> dict[str, Any]:
    x, xs, xz, ys, yz = names
    return {
        "op": op,
        "domain": MS,
        "inputs": [x, xs, xz, ys, yz],
        "activations": {x: (u8, (1, 3, 2, 2))},
        "consts": {xs: _S, xz: _ZP, ys: np.array(0.01, f32), yz: np.array(0, u8)},
        "output": ("Y", u8, shape),
        "attrs": dict(attrs),
    }


def _gemm() -> dict[str, Any]:
    rng = np.random.default_rng(2)
    return {
        "op": "QGemm",
        "domain": MS,
        "inputs": [
            "A",
            "a_scale",
            "a_zero_point",
            "B",
            "b_scale",
            "b_zero_point",
            "C",
            "y_scale",
            "y_zero_point",
        ],
        "activations": {"A": (u8, (2, 4))},
        "consts": {
            "a_scale": _S,
            "a_zero_point": _ZP,
            "B": rng.integers(-20, 20, (3, 4)).astype(i8),
            "b_scale": np.full(3, 0.01, f32),
            "b_zero_point": np.zeros(3, i8),
            "C": np.array([10, -3, 7], i32),
            "y_scale": np.array(0.1, f32),
            "y_zero_point": _ZP,
        },
        "output": ("Y", u8, (2, 3)),
        "attrs": {"transB": 1},
    }


def _concat() -> dict[str, Any]:
    return {
        "op": "QLinearConcat",
        "domain": MS,
        "inputs": [
            "Y_scale",
            "Y_zero_point",
            "a",
            "a_scale",
            "a_zero_point",
            "b",
            "b_scale",
            "b_zero_point",
        ],
        "activations": {"a": (u8, (2, 3)), "b": (u8, (2, 2))},
        "consts": {
            "Y_scale": np.array(0.1, f32),
            "Y_zero_point": _ZP,
            "a_scale": _S,
            "a_zero_point": _ZP,
            "b_scale": np.array(0.2, f32),
            "b_zero_point": np.array(120, u8),
        },
        "output": ("Y", u8, (2, 5)),
        "attrs": {"axis": 1},
    }


def _where() -> dict[str, Any]:
    return {
        "op": "QLinearWhere",
        "domain": MS,
        "inputs": [
            "condition",
            "X",
            "x_scale",
            "x_zero_point",
            "Y",
            "y_scale",
            "y_zero_point",
            "z_scale",
            "z_zero_point",
        ],
        "activations": {"condition": (np.bool_, (2, 3)), "X": (u8, (2, 3)), "Y": (u8, (2, 3))},
        "consts": {
            "x_scale": _S,
            "x_zero_point": _ZP,
            "y_scale": np.array(0.02, f32),
            "y_zero_point": np.array(100, u8),
            "z_scale": np.array(0.05, f32),
            "z_zero_point": _ZP,
        },
        "output": ("Z", u8, (2, 3)),
        "attrs": {},
    }


_POOL = ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point")
OPS = {
    "QLinearConv": lambda: _conv(""),
    "ms-QLinearConv": lambda: _conv(MS),
    "QLinearMatMul": _matmul,
    "QLinearAdd": lambda: _binary("QLinearAdd"),
    "QLinearMul": lambda: _binary("QLinearMul"),
    "QLinearSigmoid": lambda: _unary(
        "QLinearSigmoid", ("X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"), {}
    ),
    "QLinearLeakyRelu": lambda: _unary(
        "QLinearLeakyRelu",
        ("X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"),
        {"alpha": 0.1},
    ),
    "QLinearGlobalAveragePool": lambda: _unary(
        "QLinearGlobalAveragePool", _POOL, {"channels_last": 0}, (1, 3, 1, 1)
    ),
    "QLinearAveragePool": lambda: _unary(
        "QLinearAveragePool", _POOL, {"kernel_shape": [2, 2]}, (1, 3, 1, 1)
    ),
    "QLinearSoftmax": lambda: _unary(
        "QLinearSoftmax",
        ("X", "X_scale", "x_zero_point", "y_scale", "y_zero_point"),
        {"opset": 13, "axis": -1},
    ),
    "QLinearReduceMean": lambda: _unary(
        "QLinearReduceMean",
        ("data", "data_scale", "data_zero_point", "reduced_scale", "reduced_zero_point"),
        {"axes": [1], "keepdims": 1},
        (1, 1, 2, 2),
    ),
    "QLinearWhere": _where,
    "QGemm": _gemm,
    "QLinearConcat": _concat,
}


def build(op: str, *, opset: int = 13, **overrides: Any) -> onnx.ModelProto:
    """A one-node model of ``op`` (a key of OPS) with ``overrides`` of its constants
    (None: the input is left out, as an empty name)."""
    spec = OPS[op]()
    consts = {**spec["consts"], **overrides}
    inputs = [name if consts.get(name, 0) is not None else "" for name in spec["inputs"]]
    while inputs and inputs[-1] == "":
        inputs.pop()
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items() if v is not None]
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), s)
        for n, (t, s) in spec["activations"].items()
    ]
    name, dtype, shape = spec["output"]
    out = helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape
    )
    node = helper.make_node(
        spec["op"], inputs, [name], name="node", domain=spec["domain"], **spec["attrs"]
    )
    graph = helper.make_graph([node], "g", graph_inputs, [out], initializer=inits)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for every graph input."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
        if dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, shape).astype(bool)
        elif info is not None:
            feeds[value.name] = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def ort_error(model: onnx.ModelProto) -> str | None:
    """None when ONNX Runtime loads and runs ``model``, else its first error line."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        session.run(None, feeds_for(model))
    except Exception as exc:  # ORT raises several kinds
        return str(exc).splitlines()[0]
    return None
