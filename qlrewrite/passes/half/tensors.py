"""Float32 initializers cast to float16 / bfloat16 lazily: each is read, cast and
written in chunks of rows while the output is written (as fold's tensors: peak memory a
few chunks, whatever the model's size), and the tests of a scale's value in the target
type (zero, subnormal, overflow)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir

from qlrewrite.passes.fold.tensor import ConstOperand, RowReader, StreamedTensor
from qlrewrite.toolkit import tensor_shape

__all__ = ["CastTensor", "cast_tensor", "overflows", "target_numpy", "underflow"]


def target_numpy(dtype: ir.DataType) -> Any:
    """The NumPy dtype of float16 / bfloat16."""
    return np.float16 if dtype == ir.DataType.FLOAT16 else ml_dtypes.bfloat16


class CastTensor(StreamedTensor):
    """A float32 constant as float16 / bfloat16 (round to nearest even), computed in
    chunks of rows while it is written (:class:`~qlrewrite.passes.fold.tensor.StreamedTensor`)."""

    __slots__ = ("_source",)

    def __init__(self, source: ir.TensorProtocol, dtype: ir.DataType) -> None:
        super().__init__(dtype, tensor_shape(source), name=source.name)
        self._source = ConstOperand(source)

    def rows(self) -> RowReader:
        read = self._source.rows()
        numpy_type = target_numpy(self.dtype)
        return lambda start, stop: np.asarray(read(start, stop)).astype(numpy_type)

    def release(self) -> None:
        self._source.release()


def cast_tensor(source: ir.TensorProtocol, dtype: ir.DataType) -> CastTensor:
    """``source`` (float32) as ``dtype``, computed when written."""
    return CastTensor(source, dtype)


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


def overflows(tensor: ir.TensorProtocol, dtype: ir.DataType) -> bool:
    """Whether a finite value of ``tensor`` becomes infinite in ``dtype``: read in chunks
    of rows (memory: one chunk), the external data released after."""
    # values up to half a step above the largest finite one round down to it
    limit = float(ml_dtypes.finfo(target_numpy(dtype)).max) * (1 + 2.0**-12)  # type: ignore[no-untyped-call]
    source = ConstOperand(tensor)
    try:
        return _largest(source) >= limit
    finally:
        source.release()  # no view of the map is left: the chunks died with _largest


def _largest(source: ConstOperand) -> float:
    """The largest finite magnitude of ``source``, read in chunks of about 4 MiB."""
    read = source.rows()
    rows = int(source.shape.numpy()[0]) if source.shape.rank() else 1
    row_elements = max(1, source.tensor.size // max(1, rows))
    step = max(1, (4 << 20) // (4 * row_elements))
    largest = 0.0
    for start in range(0, rows, step):
        chunk = np.abs(np.asarray(read(start, start + step), dtype=np.float32))
        finite = chunk[np.isfinite(chunk)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest
