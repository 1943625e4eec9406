"""DequantizeLinear on NumPy arrays, bit-exact with ONNX Runtime's CPU kernel.

``y = float32(int32(x) - int32(zero_point)) * float32(scale)``, rounded once to the output
type (float16 / bfloat16 outputs are computed in float32, as ORT does). Float x types
(float8, float6, float4) are converted exactly to float32; float8 needs a zero zero point
(ORT and the reference refuse others). Where ORT has no kernel (bfloat16, float4/float6,
int2, float8e8m0 scales) the same formula is the ONNX spec's.

Deviations from onnx.reference (pinned by tests):
- int32 x with a nonzero zero point is subtracted in int32 (wrapping, as ORT); the reference
  subtracts in float32 and loses precision above 2**24.
- float4 x: the zero point is subtracted as the spec formula says; the reference ignores it
  (it subtracts it for float6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlrewrite.kernels._chunks import (
    chunks,
    layout,
    output_array,
    parts,
    run_chunks,
    scratch,
)
from qlrewrite.kernels._types import (
    DQ_OUTPUT_TYPES,
    DQ_SCALE_TYPES,
    DQ_X_TYPES,
    FLOAT8_TYPES,
    MINIFLOAT_TYPES,
    code_table,
    to_dtype,
    type_refusal,
)
from qlrewrite.opsets import DEFAULT_AXIS

__all__ = ["dequantize"]

_F32 = np.dtype(np.float32)


def dequantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None = None,
    *,
    axis: int = DEFAULT_AXIS,
    block_size: int = 0,
    output_dtype: Any = None,
    threads: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """DequantizeLinear: ``(x - zero_point) * scale`` per tensor, per axis or per block.

    ``output_dtype`` (numpy dtype, onnx_ir DataType or TensorProto int; 0 = unset) defaults
    to the scale's type. ``threads`` overrides $QLREWRITE_THREADS / the core count; ``out``
    is an optional C-contiguous array to write into. Raises ValueError for invalid type or
    shape combinations.
    """
    x = np.asarray(x, order="C")  # (np.ascontiguousarray makes rank 0 rank 1)
    scale = np.asarray(scale)
    zp = None if zero_point is None else np.asarray(zero_point)
    out_dtype = _output_type(x, scale, zp, output_dtype)
    lay = layout(x.shape, scale, zp, axis, block_size)
    zp = _checked_zero_point(x, zp)
    out = output_array(out, x.shape, out_dtype)
    if out.size == 0:
        return out
    x3 = x.reshape(lay.P, lay.C, lay.Q)
    o3 = out.reshape(lay.P, lay.C, lay.Q)
    s3 = scale.astype(_F32, copy=False).reshape(lay.scale_shape)
    table = code_table(x.dtype) if x.dtype in MINIFLOAT_TYPES else None

    if table is not None and lay.scale_shape == (1, 1, 1):
        _dequantize_by_table(x3, o3, s3, zp, table, lay, threads)
        return out
    int32 = x.dtype == np.int32
    z3 = None
    if zp is not None:
        z3 = zp.astype(np.int32 if int32 else _F32).reshape(lay.scale_shape)

    def work(chunk):
        for (xv, ov), (s, z) in parts(lay, chunk, (x3, o3), (s3, z3)):
            _dequantize_part(xv, ov, s, z, table)

    run_chunks(work, chunks(lay), threads)
    return out


def _dequantize_by_table(  # noqa: PLR0917 (the kernel's arrays, as dequantize has them)
    x3: np.ndarray,
    o3: np.ndarray,
    s3: np.ndarray,
    zp: np.ndarray | None,
    table: np.ndarray,
    lay: Any,
    threads: int | None,
) -> None:
    """One scale and an 8-bit float type: one table of the 256 possible outputs,
    ``y = table[byte]``."""
    if zp is not None:
        table = table - zp.astype(_F32).reshape(())
    with np.errstate(over="ignore", invalid="ignore"):
        table = (table * s3.reshape(())).astype(o3.dtype)
    xb = x3.view(np.uint8)

    def lookup(chunk):
        p0, p1 = chunk[0], chunk[1]
        np.take(table, xb[p0:p1], out=o3[p0:p1], mode="wrap")

    run_chunks(lookup, chunks(lay), threads)


def _dequantize_part(
    xv: np.ndarray,
    ov: np.ndarray,
    s: np.ndarray,
    z: np.ndarray | None,
    table: np.ndarray | None,
) -> None:
    """``ov = (xv - z) * s`` for one part of a chunk, with ONNX Runtime's roundings."""
    tmp = scratch(xv.shape)
    if xv.dtype == np.int32:
        xi = xv
        if z is not None:
            xi = scratch(xv.shape, np.dtype(np.int32), slot=1)
            np.subtract(xv, z, out=xi)  # wraps in int32, as ORT
        np.copyto(tmp, xi, casting="unsafe")  # rounds to nearest even
    else:
        if table is not None:  # float8 / float6 / float4: exact values by table
            np.take(table, xv.view(np.uint8), out=tmp, mode="wrap")
        else:  # ints up to 16 bits: exact (NumPy / ml_dtypes casts)
            np.copyto(tmp, xv, casting="unsafe")
        if z is not None:
            np.subtract(tmp, z, out=tmp)  # exact: |x - zp| < 2**17
    if ov.dtype == _F32:
        np.multiply(tmp, s, out=ov)
    else:
        np.multiply(tmp, s, out=tmp)
        np.copyto(ov, tmp, casting="unsafe")  # one rounding to float16 / bfloat16


def _checked_zero_point(x: np.ndarray, zp: np.ndarray | None) -> np.ndarray | None:
    """The zero point, or None when subtracting it changes nothing (all +0).

    A float4 / float6 zero point of -0.0 is kept: x - (-0.0) turns x = -0.0 into +0.0.
    """
    if zp is None:
        return None
    values = zp.astype(_F32)
    with np.errstate(invalid="ignore"):
        nonzero = bool(np.any(values != 0))
    if nonzero and x.dtype in FLOAT8_TYPES:  # ORT and the reference refuse it
        raise ValueError(f"{x.dtype} DequantizeLinear needs a zero point of 0")
    negative_zero = x.dtype in MINIFLOAT_TYPES and x.dtype not in FLOAT8_TYPES
    return zp if nonzero or (negative_zero and bool(np.any(np.signbit(values)))) else None


def _output_type(
    x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, output_dtype: Any
) -> np.dtype:
    if x.dtype not in DQ_X_TYPES:
        raise type_refusal("DequantizeLinear", "x", x.dtype, DQ_X_TYPES)
    if zp is not None and zp.dtype != x.dtype:
        raise ValueError(f"zero point type {zp.dtype} differs from x type {x.dtype}")
    if scale.dtype not in DQ_SCALE_TYPES:
        raise type_refusal("DequantizeLinear", "scale", scale.dtype, DQ_SCALE_TYPES)
    out = to_dtype(output_dtype)
    if out is None:
        if scale.dtype not in DQ_OUTPUT_TYPES:
            raise ValueError(f"a {scale.dtype} scale needs output_dtype")
        return scale.dtype
    if out not in DQ_OUTPUT_TYPES:
        raise ValueError(f"DequantizeLinear cannot output {out}")
    return out
