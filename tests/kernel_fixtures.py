"""Shared helpers of the kernel tests: one-node ONNX Runtime / reference runs (no tests here).

x, scale and zero point are initializers (ORT's Python API cannot feed sub-byte, bfloat16 or
float8 arrays); outputs ORT cannot hand back (4-bit, float8) go through a Cast node to int8 /
float32, which is exact.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

__all__ = ["bits", "build_model", "run_ort", "run_reference", "same_bits"]

#: Output types handed back through a Cast (ORT's Python API cannot return them).
_CAST_BACK = {
    np.dtype(ml_dtypes.int4): np.int8,
    np.dtype(ml_dtypes.uint4): np.uint8,
    np.dtype(ml_dtypes.int2): np.int8,
    np.dtype(ml_dtypes.uint2): np.uint8,
    np.dtype(ml_dtypes.bfloat16): np.float32,
}
for _t in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"):
    _CAST_BACK[np.dtype(getattr(ml_dtypes, _t))] = np.float32


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return ir.serde.serialize_tensor(ir.Tensor(np.asarray(array), name=name))


def build_model(
    op: str,
    x: np.ndarray,
    scale: np.ndarray,
    zp: np.ndarray | None,
    out_dtype: np.dtype,
    *,
    opset: int = 21,
    cast_back: bool = True,
    **attrs: Any,
) -> onnx.ModelProto:
    """``y = op(x, scale[, zp])`` with every input an initializer."""
    inits = [_init("x", x), _init("scale", scale)]
    names = ["x", "scale"]
    if zp is not None:
        inits.append(_init("zp", zp))
        names.append("zp")
    out_type = int(ir.DataType.from_numpy(np.dtype(out_dtype)))
    nodes = [helper.make_node(op, names, ["q"], **attrs)]
    final = "q"
    back = _CAST_BACK.get(np.dtype(out_dtype)) if cast_back else None
    if back is not None:
        final = "y"
        out_type = int(ir.DataType.from_numpy(np.dtype(back)))
        nodes.append(helper.make_node("Cast", ["q"], ["y"], to=out_type))
    y = helper.make_tensor_value_info(final, out_type, list(x.shape))
    graph = helper.make_graph(nodes, "g", [], [y], initializer=inits)
    ir_version = {19: 9, 21: 10, 23: 11, 24: 12, 25: 13}.get(opset, 10)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )


def run_ort(model: onnx.ModelProto) -> np.ndarray:
    """Run a model without inputs in ONNX Runtime (no graph optimization)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return sess.run(None, {})[0]


def run_reference(model: onnx.ModelProto) -> np.ndarray:
    """Run a model without inputs in onnx.reference.ReferenceEvaluator."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {})[0]


def bits(a: np.ndarray) -> np.ndarray:
    """The bytes of each element (sub-byte types by value), for bit-exact comparisons."""
    a = np.asarray(a)
    if np.dtype(a.dtype) in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.int2)):
        return a.astype(np.int8)
    if np.dtype(a.dtype) in (np.dtype(ml_dtypes.uint4), np.dtype(ml_dtypes.uint2)):
        return a.astype(np.uint8)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


def same_bits(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Bit-identical (after mapping ``ours`` to the type ``theirs`` came back in)."""
    ours = np.asarray(ours)
    theirs = np.asarray(theirs)
    back = _CAST_BACK.get(ours.dtype)
    if back is not None and theirs.dtype != ours.dtype:
        ours = ours.astype(back)
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return False
    return bool(np.array_equal(bits(ours), bits(theirs)))
