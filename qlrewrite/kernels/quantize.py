"""QuantizeLinear on NumPy arrays, bit-exact with ONNX Runtime's CPU kernel.

``y = saturate(rint(x / scale) + zero_point)``, rounding half to even. The division type:
``precision`` when given; float32 when x and scale are both float32 or both float16 (ORT
divides float16 in float32); else the scale's type (the spec: bfloat16, mixed types of
Q-23); int32 / float8e8m0 scales divide in float32. Saturation happens in float before any
integer conversion, so +-inf and quotients beyond the int32 range land on the right end of
the range; NaN gives the low end (ORT's float32 kernels).
Float8 outputs: ``saturate`` clamps to +-max (NaN stays NaN), otherwise out-of-range values
become NaN or inf as the type allows (float8e5m2: inf); float4 / float6 always clamp.
Float8 zero points are ignored, as ORT and the reference do; float4 / float6 ones are added
before the cast as the spec formula says (so -0.0 + 0 gives +0, as the reference).

Deviations (each pinned by a test in tests/kernels/test_kernels.py):
- from ONNX Runtime: some ORT paths (float16 x, blocked on a non-last axis, 4-bit on the
  last axis) compute ``int32(nearbyint(q)) + zp``, so +-inf, NaN and quotients beyond
  2**31 become INT_MIN + zp: the low end, or the high end when zp < 0 (int32 wrap). This
  kernel saturates (NaN: the low end). ORT's float8e5m2 conversion without saturation gives
  NaN for finite values in [61440, 65536) (it ORs 0x7C into 0x7B): round to nearest even
  makes them +-inf, as the spec and ml_dtypes do.
- from onnx.reference: the reference wraps NaN, +-inf and quotients beyond the int32 range
  the same way, divides float16 x by a float16 scale in float16 (ORT: float32), divides
  Q-23's mixed types in the promoted type (the spec: the scale's type) and int32 x in
  float64 (here: float32(x) / scale, the scale's type).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
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
    FLOAT8_TYPES,
    FLOAT_TYPES,
    INT_RANGES,
    Q_OUTPUT_TYPES,
    Q_SCALE_TYPES,
    Q_X_TYPES,
    float_max,
    to_dtype,
    type_refusal,
)
from qlrewrite.opsets import DEFAULT_AXIS

__all__ = ["quantize"]

_F32 = np.dtype(np.float32)
_BOOL = np.dtype(bool)
_SUB_BYTE = {
    np.dtype(ml_dtypes.int4): 0x0F,
    np.dtype(ml_dtypes.uint4): 0x0F,
    np.dtype(ml_dtypes.int2): 0x03,
    np.dtype(ml_dtypes.uint2): 0x03,
}


def quantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None = None,
    *,
    axis: int = DEFAULT_AXIS,
    block_size: int = 0,
    saturate: bool = True,
    output_dtype: Any = None,
    precision: Any = None,
    threads: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """QuantizeLinear: ``saturate(round(x / scale) + zero_point)`` per tensor, axis or block.

    The output type is the zero point's, else ``output_dtype``, else uint8. ``precision``
    (Q-23) is the type the division is done in. Types may be numpy dtypes, onnx_ir
    DataTypes or TensorProto ints (0 = unset). ``threads`` overrides $QLREWRITE_THREADS /
    the core count; ``out`` is an optional C-contiguous array to write into. Raises
    ValueError for invalid combinations.
    """
    x = np.asarray(x, order="C")  # (np.ascontiguousarray makes rank 0 rank 1)
    scale = np.asarray(scale)
    zp = None if zero_point is None else np.asarray(zero_point)
    out_dtype = _output_type(x, scale, zp, output_dtype)
    div_dtype = _division_type(x, scale, precision)
    lay = layout(x.shape, scale, zp, axis, block_size)
    out = output_array(out, x.shape, out_dtype)
    if out.size == 0:
        return out
    s3 = scale.astype(div_dtype).astype(_F32).reshape(lay.scale_shape)
    zp3 = None
    if zp is not None and out_dtype not in FLOAT8_TYPES:  # float8: ignored, as ORT does
        zp3 = zp.astype(_F32).reshape(lay.scale_shape)
        if out_dtype in INT_RANGES and not np.any(zp3):
            zp3 = None  # adding 0 changes nothing (float4/6: it turns -0.0 into +0.0)
    x3 = x.reshape(lay.P, lay.C, lay.Q)
    o3 = out.reshape(lay.P, lay.C, lay.Q)
    if out_dtype in _SUB_BYTE:
        o3 = o3.view(np.int8 if INT_RANGES[out_dtype][0] < 0 else np.uint8)
    finish = _finisher(out_dtype, saturate)

    def work(chunk):
        for (xv, ov), (s, z) in parts(lay, chunk, (x3, o3), (s3, zp3)):
            tmp = scratch(xv.shape)
            _divide(xv, s, tmp, div_dtype)
            finish(tmp, z, ov)

    with np.errstate(all="ignore"):
        run_chunks(work, chunks(lay), threads)
    return out


def _divide(xv: np.ndarray, s: np.ndarray, tmp: np.ndarray, div_dtype: np.dtype) -> None:
    """``tmp = xv / s`` (float32 scratch) as QuantizeLinear divides in ``div_dtype``."""
    if div_dtype == _F32:
        if xv.dtype == _F32:
            np.divide(xv, s, out=tmp)
        else:
            np.copyto(tmp, xv, casting="unsafe")  # float16 / bfloat16: exact
            np.divide(tmp, s, out=tmp)
        return
    # x rounded to the division type, then a correctly rounded quotient: float32 division
    # of two narrower floats rounded again is correctly rounded (24 >= 2 * 11 + 2 bits, so
    # the double rounding is harmless)
    np.copyto(tmp, xv if xv.dtype == div_dtype else xv.astype(div_dtype))
    np.divide(tmp, s, out=tmp)
    np.copyto(tmp, tmp.astype(div_dtype))


def _finisher(out_dtype: np.dtype, saturate: bool):
    """The function turning float32 quotients into the output type, in place."""
    if out_dtype in INT_RANGES:
        lo, hi = INT_RANGES[out_dtype]
        mask = _SUB_BYTE.get(out_dtype)

        def to_int(tmp, z, ov):
            np.rint(tmp, out=tmp)
            if z is not None:
                np.add(tmp, z, out=tmp)
            np.clip(tmp, lo, hi, out=tmp)
            nan = np.isnan(tmp, out=scratch(tmp.shape, _BOOL, slot=1))
            np.copyto(tmp, lo, where=nan)  # NaN -> low end, as ORT's float32 kernels
            np.copyto(ov, tmp, casting="unsafe")
            if mask is not None and lo < 0:
                view = ov.view(np.uint8)
                np.bitwise_and(view, mask, out=view)  # ml_dtypes' canonical bytes

        return to_int

    clamp = float_max(out_dtype) if (saturate or out_dtype not in FLOAT8_TYPES) else None

    def to_float(tmp, z, ov):
        if z is not None:  # float4 / float6: the spec formula adds it (as the reference)
            np.add(tmp, z, out=tmp)
        if clamp is not None:
            np.clip(tmp, -clamp, clamp, out=tmp)
        np.copyto(ov, tmp, casting="unsafe")

    return to_float


def _output_type(
    x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, output_dtype: Any
) -> np.dtype:
    if x.dtype not in Q_X_TYPES:
        raise type_refusal("QuantizeLinear", "x", x.dtype, Q_X_TYPES)
    if scale.dtype not in Q_SCALE_TYPES:
        raise type_refusal("QuantizeLinear", "scale", scale.dtype, Q_SCALE_TYPES)
    out = to_dtype(output_dtype)
    if zp is not None:
        if out is not None and out != zp.dtype:
            raise ValueError(f"output_dtype {out} differs from zero point type {zp.dtype}")
        out = zp.dtype
    if out is None:
        out = np.dtype(np.uint8)
    if out not in Q_OUTPUT_TYPES:
        raise ValueError(f"QuantizeLinear cannot output {out}")
    return out


def _division_type(x: np.ndarray, scale: np.ndarray, precision: Any) -> np.dtype:
    """The type of x / scale: ``precision`` if given; float32 for float32 / float16 x with a
    scale of the same type (ORT's kernel); else the scale's type (the spec: bfloat16, mixed
    types of Q-23)."""
    prec = to_dtype(precision)
    if prec is not None:
        if prec not in FLOAT_TYPES:
            raise ValueError(f"precision must be float32, float16 or bfloat16, got {prec}")
        return prec
    if scale.dtype not in FLOAT_TYPES:  # int32 / float8e8m0 (Q-23+): no float type of its own
        return _F32
    if x.dtype == scale.dtype and x.dtype in (_F32, np.dtype(np.float16)):
        return _F32
    return scale.dtype
