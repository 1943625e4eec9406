"""Element types of the Q/DQ kernels: dtype normalisation, integer ranges, float maxima."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir

__all__ = [
    "FLOAT8_TYPES",
    "FLOAT_TYPES",
    "INT_RANGES",
    "MINIFLOAT_TYPES",
    "SCALE_TYPES",
    "code_table",
    "float_max",
    "to_dtype",
]

#: Integer element types and their saturation range [lo, hi].
INT_RANGES: dict[np.dtype, tuple[int, int]] = {
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int16): (-32768, 32767),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int32): (-(2**31), 2**31 - 1),
    np.dtype(ml_dtypes.int4): (-8, 7),
    np.dtype(ml_dtypes.uint4): (0, 15),
    np.dtype(ml_dtypes.int2): (-2, 1),
    np.dtype(ml_dtypes.uint2): (0, 3),
}

#: Float8 types: the only ones the ``saturate`` attribute applies to.
FLOAT8_TYPES = frozenset(
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
)

#: Quantized float types (float8, float6, float4): x of DQ, y of Q.
MINIFLOAT_TYPES = FLOAT8_TYPES | frozenset(
    np.dtype(t) for t in (ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn)
)

#: Scale types, and the float types a DQ may output / a Q may read.
SCALE_TYPES = frozenset(
    np.dtype(t) for t in (np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e8m0fnu)
)
FLOAT_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16, ml_dtypes.bfloat16))


def to_dtype(value: Any) -> np.dtype | None:
    """A numpy dtype from a numpy dtype, an onnx_ir DataType or an ONNX TensorProto int.

    None and 0 (ONNX's "unset") give None.
    """
    if value is None:
        return None
    if isinstance(value, ir.DataType):
        return None if value == ir.DataType.UNDEFINED else np.dtype(value.numpy())
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if int(value) == 0:
            return None
        try:
            return np.dtype(ir.DataType(int(value)).numpy())
        except (ValueError, TypeError) as err:
            raise ValueError(f"unknown ONNX element type {int(value)}") from err
    try:
        return np.dtype(value)
    except TypeError as err:
        raise ValueError(f"not an element type: {value!r}") from err


def float_max(dtype: np.dtype) -> float:
    """The largest finite value of a float type."""
    return float(ml_dtypes.finfo(dtype).max)


def code_table(dtype: np.dtype) -> np.ndarray:
    """float32 value of every byte code of a one-byte type (256 entries, indexed by the byte)."""
    codes = np.arange(256, dtype=np.uint8).view(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return codes.astype(np.float32)
