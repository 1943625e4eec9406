"""Float32 initializers cast to float16 / bfloat16 lazily: each is read, cast and
released while the output is written (peak memory: one tensor, not the model), and the
tests of a scale's value in the target type (zero, subnormal, overflow)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir

from qlrewrite.toolkit import tensor_shape

__all__ = ["cast_tensor", "target_numpy", "underflow"]


def target_numpy(dtype: ir.DataType) -> Any:
    """The NumPy dtype of float16 / bfloat16."""
    return np.float16 if dtype == ir.DataType.FLOAT16 else ml_dtypes.bfloat16


def cast_tensor(source: ir.TensorProtocol, dtype: ir.DataType) -> ir.LazyTensor:
    """``source`` (float32) as ``dtype``, computed when read (round to nearest even)."""
    numpy_type = target_numpy(dtype)

    def compute() -> ir.TensorProtocol:
        return ir.Tensor(np.asarray(source.numpy()).astype(numpy_type), dtype=dtype)

    return ir.LazyTensor(compute, dtype=dtype, shape=tensor_shape(source), name=source.name)


def underflow(values: np.ndarray, dtype: ir.DataType) -> str:
    """ "zero" when a non-zero value rounds to zero in ``dtype``, "subnormal" when one is
    subnormal there, "overflow" when one becomes infinite, else ""."""
    numpy_type = target_numpy(dtype)
    cast = values.astype(numpy_type).astype(np.float64)
    finite = np.isfinite(values)
    if np.any((cast == 0) & (values != 0)):
        return "zero"
    if np.any(~np.isfinite(cast) & finite):
        return "overflow"
    tiny = float(ml_dtypes.finfo(numpy_type).smallest_normal)  # type: ignore[no-untyped-call]
    if np.any((np.abs(cast) < tiny) & (cast != 0)):
        return "subnormal"
    return ""
