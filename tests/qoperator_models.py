"""ONNX Runtime helpers for the single-node QOperator models of
:mod:`qlrewrite.rules.qoperator_models` (re-exported here for the tests)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from qlrewrite.rules.qoperator_models import MS, NO_CPU_KERNEL, OPS, build

__all__ = ["MS", "NO_CPU_KERNEL", "OPS", "build", "feeds_for", "ort_error"]


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
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])  # fmt: skip
        session.run(None, feeds_for(model))
    except Exception as exc:  # ORT raises several kinds
        return str(exc).splitlines()[0]
    return None
