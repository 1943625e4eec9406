"""Element types of the Q/DQ kernels: which types they take (read from the rule table,
:mod:`qlrewrite.opsets`: the union over the ai.onnx versions, which com.microsoft's are a
subset of), dtype normalisation, integer ranges, float maxima."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir

from qlrewrite import opsets

__all__ = [
    "DQ_OUTPUT_TYPES",
    "DQ_SCALE_TYPES",
    "DQ_X_TYPES",
    "FLOAT8_TYPES",
    "FLOAT_TYPES",
    "INT_RANGES",
    "MINIFLOAT_TYPES",
    "Q_OUTPUT_TYPES",
    "Q_SCALE_TYPES",
    "Q_X_TYPES",
    "code_table",
    "float_max",
    "int_range",
    "to_dtype",
    "type_refusal",
]


def _union(op_type: str, role: str) -> frozenset[np.dtype]:
    """Every numpy dtype some ai.onnx version of ``op_type`` allows for ``role``."""
    rows = opsets.versions("", op_type)
    return frozenset(np.dtype(t.numpy()) for row in rows for t in getattr(row, role))


#: What the kernels take and give, per role (the table decides; the rules check the version).
DQ_X_TYPES = _union("DequantizeLinear", "x_types")
DQ_SCALE_TYPES = _union("DequantizeLinear", "scale_types")
DQ_OUTPUT_TYPES = _union("DequantizeLinear", "output_types")
Q_X_TYPES = _union("QuantizeLinear", "x_types")
Q_SCALE_TYPES = _union("QuantizeLinear", "scale_types")
Q_OUTPUT_TYPES = _union("QuantizeLinear", "output_types")

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


def int_range(dtype: ir.DataType) -> tuple[int, int] | None:
    """The (min, max) of an integer quantized element type (None: not one)."""
    try:
        return INT_RANGES.get(np.dtype(dtype.numpy()))
    except (TypeError, ValueError):  # a type NumPy cannot hold
        return None


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

#: The float types (computations, ``precision``).
FLOAT_TYPES = frozenset(np.dtype(t.numpy()) for t in opsets.FLOAT_TYPES)


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


def type_refusal(op: str, role: str, dtype: np.dtype, allowed: frozenset[np.dtype]) -> ValueError:
    """The error for an input of a type ``op`` does not take: the types it takes and, for
    float64 (what NumPy makes of a Python list or float), to pass float32: ONNX defines no
    float64 Q/DQ and ONNX Runtime has no such kernel, so the exact kernel has no float64
    result to match; the cast rounds each value to the nearest float32, as any caller of
    ONNX Runtime does."""
    names = ", ".join(sorted(str(t) for t in allowed))
    message = f"{op} cannot read {role} of type {dtype} (it takes {names})"
    if dtype == np.float64:
        message += (
            f"; ONNX has no float64 {op} (ONNX Runtime takes float32): pass "
            f"np.asarray({role}, np.float32) (a Python list or float becomes float64; the cast "
            "rounds each value to the nearest float32)"
        )
    return ValueError(message)
