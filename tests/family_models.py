"""QDQ node groups of the activation-only operator families ONNX Runtime's QDQ selectors
fuse or drop (no constant weight): one float input "a" [1, 4, 4, 4] quantized and
dequantized, the operator, its output quantized and dequantized again. The probe's
family patterns (``tools/probe/families.py``) and the examples of the rules that read them.

The families are those of ``onnxruntime/core/optimizer/qdq_transformer/selectors_actions/
qdq_selector_action_transformer.cc`` (CPU provider): unary (AveragePool, GlobalAveragePool,
LeakyRelu, Sigmoid, Softmax: QLinear* kernels), binary (Add, Mul), variadic (Concat),
Where, the ops whose Q/DQ pair is dropped (Reshape, Transpose, MaxPool, Resize, Gather,
...), ArgMax (its DequantizeLinear dropped), plus Pad, InstanceNormalization, Relu and Clip
(other providers' selectors; Relu / Clip folded into the QuantizeLinear on the CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from example_models import DQ, DT, FLOAT8_TYPES, IR_OF_OPSET, MS, Q, _typed, _weight_range
from onnx import helper

from qlrewrite.targets.forms import FAMILY_OPS

__all__ = ["FAMILY_OPS", "qdq_family"]

SHAPE = (1, 4, 4, 4)
#: The second data input of the multi-input ops: a constant (quantized and dequantized too).
TWO_INPUTS = ("Add", "Mul", "Concat", "Where")
#: Per op: the output's value range for inputs in [0, 6) (the output Q's scale covers it).
_RANGES = {
    "Add": (0.0, 12.0),
    "Mul": (0.0, 36.0),
    "Sigmoid": (0.0, 1.0),
    "Softmax": (0.0, 1.0),
    "InstanceNormalization": (-3.0, 3.0),
    "ArgMax": None,
}
#: Ops with no quantized output (the DQ is dropped into them).
NO_OUTPUT_Q = ("ArgMax",)


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, onnx.TensorProto.INT64, [len(values)], values)


def _f32(name: str, values: list[float]) -> onnx.TensorProto:
    return helper.make_tensor(name, onnx.TensorProto.FLOAT, [len(values)], values)


#: AveragePool's padding variants: none, or one row and column on each side, counted in
#: the average (count_include_pad=1, PyTorch's AvgPool2d default) or excluded.
POOL_PADS = {
    "none": {},
    "counted": {"pads": [1, 1, 1, 1], "count_include_pad": 1},
    "excluded": {"pads": [1, 1, 1, 1], "count_include_pad": 0},
}


def _node_of(
    op: str, x: str, opset: int, pool_pads: str = "none"
) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """The operator on ``x`` (and "c_f", the second data input) into "y"; AveragePool
    padded as :data:`POOL_PADS` says."""
    pool = {"kernel_shape": [2, 2]}
    table: dict[str, tuple[list[str], dict[str, Any], list[onnx.TensorProto]]] = {
        "AveragePool": ([x], {**pool, **POOL_PADS[pool_pads]}, []),
        "MaxPool": ([x], pool, []),
        "GlobalAveragePool": ([x], {}, []),
        "LeakyRelu": ([x], {"alpha": 0.1}, []),
        "Sigmoid": ([x], {}, []),
        "Softmax": ([x], {"axis": -1}, []),
        "Relu": ([x], {}, []),
        "Clip": ([x, "lo", "hi"], {}, [_scalar("lo", 0.0), _scalar("hi", 6.0)]),
        "Add": ([x, "c_f"], {}, []),
        "Mul": ([x, "c_f"], {}, []),
        "Concat": ([x, "c_f"], {"axis": 1}, []),
        "Where": (["cond", x, "c_f"], {}, [_cond()]),
        "Pad": ([x, "pads"], {}, [_i64("pads", [0, 0, 1, 1, 0, 0, 1, 1])]),
        "InstanceNormalization": (
            [x, "in_s", "in_b"],
            {},
            [_f32("in_s", [1.0, 0.5, 2.0, 1.5]), _f32("in_b", [0.0, 0.5, -0.5, 0.25])],
        ),
        "Gather": ([x, "idx"], {"axis": 1}, [_i64("idx", [2, 0])]),
        "Reshape": ([x, "shape"], {}, [_i64("shape", [1, -1])]),
        "Transpose": ([x], {"perm": [0, 2, 3, 1]}, []),
        "Flatten": ([x], {"axis": 1}, []),
        "Squeeze": ([x, "axes"], {}, [_i64("axes", [0])]),
        "Unsqueeze": ([x, "axes"], {}, [_i64("axes", [0])]),
        "Slice": (
            [x, "starts", "ends", "axes"],
            {},
            [_i64("starts", [1]), _i64("ends", [3]), _i64("axes", [1])],
        ),
        "Resize": (
            [x, "", "scales"],
            {"mode": "nearest"},
            [_f32("scales", [1.0, 1.0, 2.0, 2.0])],
        ),
        "ReduceMax": ([x], {"keepdims": 1}, []),
        "ArgMax": ([x], {"axis": 1}, []),
    }
    inputs, attrs, inits = table[op]
    return helper.make_node(op, inputs, ["y"], name="op", **attrs), inits


def _scalar(name: str, value: float) -> onnx.TensorProto:
    return helper.make_tensor(name, onnx.TensorProto.FLOAT, [], [value])


def _cond() -> onnx.TensorProto:
    mask = np.random.default_rng(3).integers(0, 2, SHAPE).astype(bool)
    return helper.make_tensor("cond", onnx.TensorProto.BOOL, SHAPE, mask.ravel().tolist())


def _params(qtype: DT, low: float, high: float) -> tuple[float, int]:
    """A scale and zero point of ``qtype`` covering [low, high] (float8: zero point 0)."""
    if qtype in FLOAT8_TYPES:
        return max(abs(low), high) / 64.0, 0
    qmin, qmax = _weight_range(qtype)
    scale = (high - low) / (qmax - qmin)
    return float(np.float32(scale)), int(np.clip(round(qmin - low / scale), qmin, qmax))


def _pair(
    name: str, out: str, qtype: DT, scale: np.ndarray, zero: int, *, attrs: dict, domain: str
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Q "q_<name>" and DQ "dq_<name>" of ``name`` into ``out`` (scale shape: per tensor
    or per axis)."""
    zeros = np.full(scale.shape, zero)
    inits = [
        helper.make_tensor(f"{name}_s", onnx.TensorProto.FLOAT, scale.shape, scale.ravel()),
        _typed(f"{name}_z", zeros, qtype),
    ]
    params = [f"{name}_s", f"{name}_z"]
    quantize = helper.make_node(
        Q, [name, *params], [f"{name}_q"], name=f"q_{name}", domain=domain, **attrs
    )
    dequantize = helper.make_node(
        DQ, [f"{name}_q", *params], [out], name=f"dq_{name}", domain=domain, **attrs
    )
    return [quantize, dequantize], inits


def _input_scale(qtype: DT, granularity: str, low: float) -> tuple[np.ndarray, int, dict]:
    """The input's scale covering [``low``, 6] (per tensor, or per channel on axis 1, 1.0 ..
    1.6 times it), its zero point, and the Q/DQ attributes."""
    scale, zero = _params(qtype, low, 6.0)
    if granularity == "per-axis":
        factors = np.array([1.0, 1.2, 1.4, 1.6], np.float32)
        return (np.float32(scale) * factors).astype(np.float32), zero, {"axis": 1}
    return np.array(scale, np.float32), zero, {}


def _second_input(
    qtype: DT, scale: np.ndarray, zero: int, attrs: dict, domain: str
) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """DequantizeLinear "dq_c" of a random constant "c_q" into "c_f" (``scale``)."""
    c_scale = scale.astype(np.float32)
    low, high = _weight_range(qtype) if qtype not in FLOAT8_TYPES else (0, 64)
    values = np.random.default_rng(4).integers(max(low, zero), high // 2, SHAPE)
    inits = [
        _typed("c_q", values, qtype),
        helper.make_tensor("c_s", onnx.TensorProto.FLOAT, c_scale.shape, c_scale.ravel()),
        _typed("c_z", np.full(c_scale.shape, zero), qtype),
    ]
    node = helper.make_node(DQ, ["c_q", "c_s", "c_z"], ["c_f"], name="dq_c", domain=domain, **attrs)
    return node, inits


def _output_params(
    op: str, qtype: DT, params: str, scale: np.ndarray, zero: int
) -> tuple[np.ndarray, int]:
    """The output's per-tensor scale and zero point: the input's (``params`` "equal"), else
    covering the op's output range (:data:`_RANGES`; [0, 7.5] for the others)."""
    if params == "equal":
        return np.array(scale.ravel()[0], np.float32), zero
    low, high = _RANGES.get(op) or (0.0, 7.5)
    y_scale, y_zero = _params(qtype, low, high)
    return np.array(y_scale, np.float32), y_zero


def qdq_family(
    op: str,
    qtype: DT = DT.UINT8,
    granularity: str = "per-tensor",
    *,
    params: str = "differ",
    opset: int = 13,
    domain: str = "",
    output: str = "quantized",
    pool_pads: str = "none",
    low: float = 0.0,
) -> onnx.ModelProto:
    """DQ(Q(a)) -> ``op`` -> Q -> DQ with activations of ``qtype`` (``domain``'s Q/DQ:
    "" or com.microsoft at opset 1), quantized ``granularity`` ("per-tensor", or
    "per-axis" on the channel axis); ``params`` "equal": every Q/DQ of the group has the
    input's scale and zero point (the ops whose output stays in the input's range), else
    the output's cover its range and a second input's scale is 1.5 times the first's.
    The output is quantized per tensor; with ``output`` "float" the op's output is the
    graph's (as NNCF writes: Q/DQ on the inputs of an op only). AveragePool is padded as
    ``pool_pads`` says (:data:`POOL_PADS`); the input's Q/DQ covers [``low``, 6] (below 0:
    a uint8 zero point above 0)."""
    scale, zero, attrs = _input_scale(qtype, granularity, low)
    nodes, inits = _pair("a", "a_f", qtype, scale, zero, attrs=attrs, domain=domain)
    if op in TWO_INPUTS:
        factor = np.float32(1.0 if params == "equal" else 1.5)
        second, second_inits = _second_input(qtype, scale * factor, zero, attrs, domain)
        nodes.append(second)
        inits += second_inits
    node, op_inits = _node_of(op, "a_f", opset, pool_pads)
    nodes.append(node)
    inits += op_inits
    out, out_type = "y", onnx.TensorProto.INT64 if op in NO_OUTPUT_Q else onnx.TensorProto.FLOAT
    if op not in NO_OUTPUT_Q and output == "quantized":
        y_scale, y_zero = _output_params(op, qtype, params, scale, zero)
        pair, pair_inits = _pair("y", "y_f", qtype, y_scale, y_zero, attrs={}, domain=domain)
        nodes += pair
        inits += pair_inits
        out, out_type = "y_f", onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(out, out_type, None)],
        initializer=inits,
    )
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(MS, 1))
    ir_version = 7 if domain else IR_OF_OPSET.get(opset, 10)
    model = helper.make_model(graph, opset_imports=imports, ir_version=ir_version)
    return _with_output_shape(model)


def _with_output_shape(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph output declared with the shape ONNX's inference gives it."""
    inferred = onnx.shape_inference.infer_shapes(model)
    found = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    output = model.graph.output[0]
    value = found.get(output.name)
    if value is not None:
        output.type.tensor_type.shape.CopyFrom(value.type.tensor_type.shape)
    return model
