"""One-node com.microsoft MatMulNBits / GatherBlockQuantized models for the rule tests:
the builders are the rules' examples' (:mod:`example_models`, shapes by hand from ONNX
Runtime's schema text, independent of the checker); ``ort_runs`` is ONNX Runtime's
verdict.
"""

from __future__ import annotations

import numpy as np
import onnx
from example_models import (
    DT,
    MS,
    gather_block_quantized_model,
    matmul_nbits_model,
    nbits_shapes,
)

__all__ = [
    "DT",
    "MS",
    "gather_block_quantized_model",
    "matmul_nbits_model",
    "nbits_shapes",
    "ort_runs",
]

_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


def ort_runs(proto: onnx.ModelProto, *, prepack: bool = False) -> bool:
    """True when ONNX Runtime's CPU provider loads the model and runs it on ones / zeros
    (unknown dims: 2; indices: 0).

    Weight prepacking is off unless ``prepack``: with it, ORT packs B at load and its
    kernel's input check no longer sees B (a float16 MatMulNBits then runs with a B of
    any shape, reading it by K and N; see test_prepacking_hides_wrong_b_shape).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    try:
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = {}
        for info in session.get_inputs():
            shape = [d if isinstance(d, int) else 2 for d in info.shape]
            dtype = _NUMPY[info.type]
            fill = 0 if np.issubdtype(dtype, np.integer) else 1
            feeds[info.name] = np.full(shape, fill, dtype=dtype)
        session.run(None, feeds)
    except Exception:
        return False
    return True
