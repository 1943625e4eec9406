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

from qlrewrite.kernels._chunks import Layout, chunks, layout, parts, run_chunks, scratch
from qlrewrite.kernels._types import (
    FLOAT8_TYPES,
    FLOAT_TYPES,
    INT_RANGES,
    MINIFLOAT_TYPES,
    SCALE_TYPES,
    code_table,
    to_dtype,
)

__all__ = ["dequantize"]

_F32 = np.dtype(np.float32)
_WIDE_INTS = frozenset(np.dtype(t) for t in (np.int16, np.uint16, np.int32))


def dequantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: Any = None,
    threads: int | None = None,
) -> np.ndarray:
    """DequantizeLinear: ``(x - zero_point) * scale`` per tensor, per axis or per block.

    ``output_dtype`` (numpy dtype, onnx_ir DataType or TensorProto int; 0 = unset) defaults
    to the scale's type. ``threads`` overrides $QLREWRITE_THREADS / the core count.
    Raises ValueError for invalid type or shape combinations.
    """
    x = np.asarray(x, order="C")  # (np.ascontiguousarray makes rank 0 rank 1)
    scale = np.asarray(scale)
    zp = None if zero_point is None else np.asarray(zero_point)
    out_dtype = _output_type(x, scale, zp, output_dtype)
    lay = layout(x.shape, scale, zp, axis, block_size)
    s3 = scale.astype(_F32).reshape(lay.scale_shape)
    plan = _plan(x, zp, lay)
    out = np.empty(x.shape, out_dtype)
    if out.size == 0:
        return out
    x3 = x.reshape(lay.P, lay.C, lay.Q)
    o3 = out.reshape(lay.P, lay.C, lay.Q)
    per_tensor = lay.scale_shape == (1, 1, 1)

    if per_tensor and x.dtype.itemsize == 1:
        # one table of the 256 possible outputs: y = table[byte]
        with np.errstate(over="ignore", invalid="ignore"):
            table = (_codes_minus_zp(x.dtype, plan) * s3.reshape(())).astype(out_dtype)
        xb = x3.view(np.uint8)

        def work(chunk):
            p0, p1 = chunk[0], chunk[1]
            np.take(table, xb[p0:p1], out=o3[p0:p1], mode="clip")

        run_chunks(work, chunks(lay), threads)
        return out

    def work(chunk):
        for (a0, a1, b0, b1, c0, c1, split), (xv, ov) in parts(lay, chunk, (x3, o3)):
            s = s3[a0:a1, b0:b1, c0:c1]
            z = None if plan.zp3 is None else plan.zp3[a0:a1, b0:b1, c0:c1]
            if split:
                s = s[:, :, None, :]
                z = None if z is None else z[:, :, None, :]
            _dequantize_part(xv, s, z, ov, plan)

    plan.bind(lay)
    with np.errstate(over="ignore", invalid="ignore"):
        run_chunks(work, chunks(lay), threads)
    return out


class _Plan:
    """Per-call constants: how to turn x into float32 and subtract the zero point."""

    def __init__(self, x: np.ndarray, zp: np.ndarray | None) -> None:
        self.dtype = x.dtype
        self.table = code_table(x.dtype) if x.dtype.itemsize == 1 else None
        self.int32 = x.dtype == np.int32
        self.zp = zp
        self.zp3: np.ndarray | None = None

    def bind(self, lay: Layout) -> None:
        if self.zp is None:
            return
        if self.int32:
            self.zp3 = self.zp.astype(np.int32).reshape(lay.scale_shape)
        else:
            self.zp3 = self.zp.astype(_F32).reshape(lay.scale_shape)


def _plan(x: np.ndarray, zp: np.ndarray | None, lay: Layout) -> _Plan:
    if zp is not None:
        with np.errstate(invalid="ignore"):
            nonzero = bool(np.any(zp.astype(_F32) != 0))
        if nonzero and x.dtype in FLOAT8_TYPES:  # ORT and the reference refuse it
            raise ValueError(f"{x.dtype} DequantizeLinear needs a zero point of 0")
        if not nonzero:
            zp = None  # all zero: skip the subtraction
    return _Plan(x, zp)


def _codes_minus_zp(dtype: np.dtype, plan: _Plan) -> np.ndarray:
    """float32(value(byte) - zero point) for every byte code (per-tensor only)."""
    table = code_table(dtype)
    if plan.zp is not None:
        table = table - plan.zp.astype(_F32).reshape(())
    return table


def _dequantize_part(
    xv: np.ndarray, s: np.ndarray, z: np.ndarray | None, ov: np.ndarray, plan: _Plan
) -> None:
    tmp = scratch(xv.shape)
    if plan.int32:
        if z is not None:
            ti = scratch(xv.shape, np.dtype(np.int32), slot=1)
            np.subtract(xv, z, out=ti)  # wraps in int32 like ORT
            np.copyto(tmp, ti, casting="unsafe")
        else:
            np.copyto(tmp, xv, casting="unsafe")
    else:
        if plan.table is not None:
            np.take(plan.table, xv.view(np.uint8), out=tmp, mode="clip")
        else:
            np.copyto(tmp, xv)
        if z is not None:
            np.subtract(tmp, z, out=tmp)  # exact: |x - zp| < 2**17
    if ov.dtype == _F32:
        np.multiply(tmp, s, out=ov)
    else:
        np.multiply(tmp, s, out=tmp)
        np.copyto(ov, tmp, casting="unsafe")


def _output_type(
    x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, output_dtype: Any
) -> np.dtype:
    if x.dtype not in INT_RANGES and x.dtype not in MINIFLOAT_TYPES:
        raise ValueError(f"DequantizeLinear cannot read x of type {x.dtype}")
    if zp is not None and zp.dtype != x.dtype:
        raise ValueError(f"zero point type {zp.dtype} differs from x type {x.dtype}")
    if scale.dtype not in SCALE_TYPES:
        raise ValueError(f"DequantizeLinear scale type {scale.dtype} is not supported")
    out = to_dtype(output_dtype)
    if out is None:
        if scale.dtype not in FLOAT_TYPES:
            raise ValueError(f"a {scale.dtype} scale needs output_dtype")
        return scale.dtype
    if out not in FLOAT_TYPES:
        raise ValueError(f"DequantizeLinear cannot output {out}")
    return out
