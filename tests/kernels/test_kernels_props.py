"""Property tests: qlrewrite.kernels bit-exact against ONNX Runtime (types it runs) and the
reference evaluator (types it does not), over types x granularities x axes x block sizes x
shapes (rank 0, empty), with NaN, +-inf, ties, saturation and quotients beyond int32.

Differences allowed are the documented bugs of the peers, each checked position by position
(see ``_ort_q_deviation`` and ``_reference_deviation``); everything else must match bit for bit.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_fixtures import bits, build_model, run_ort, run_reference

import qlrewrite.kernels._chunks as chunking
from qlrewrite.kernels import dequantize, quantize

DQ = "DequantizeLinear"
Q = "QuantizeLinear"
F8 = [
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
]
ORT_INTS = [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16)] + [
    np.dtype(ml_dtypes.int4),
    np.dtype(ml_dtypes.uint4),
]
REF_ONLY = [
    np.dtype(t)
    for t in (
        ml_dtypes.int2,
        ml_dtypes.uint2,
        ml_dtypes.float4_e2m1fn,
        ml_dtypes.float6_e2m3fn,
        ml_dtypes.float6_e3m2fn,
    )
]
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
#: QLREWRITE_KERNEL_EXAMPLES=3000 for a deeper search by hand (CI: 300, about 30 s).
SETTINGS = settings(
    max_examples=int(os.environ.get("QLREWRITE_KERNEL_EXAMPLES", "300")),
    suppress_health_check=list(HealthCheck),
)


@contextlib.contextmanager
def _chunk_size(n: int):
    """Small chunks so that a few dozen elements already split into heads, blocks, tails."""
    old = chunking.CHUNK
    chunking.CHUNK = n
    try:
        yield
    finally:
        chunking.CHUNK = old


@st.composite
def layouts(draw, blocked: bool = True, ort: bool = False):
    """(x shape, scale shape, attrs) of a valid per-tensor / per-axis / blocked Q/DQ.

    ``ort``: no blocked scale of one element (ORT refuses it: "block_size must be 0 for
    per-tensor quantization"; the spec allows it, test_kernels.py pins our result) and no
    blocked empty x (ORT 1.31 crashes with a segmentation fault on it in QuantizeLinear).
    """
    rank = draw(st.integers(0, 4))
    dims = st.integers(1, 6) | st.just(0) if draw(st.integers(0, 9)) == 0 else st.integers(1, 6)
    shape = tuple(draw(st.lists(dims, min_size=rank, max_size=rank)))
    kinds = ["tensor", "tensor1"]
    if rank:
        kinds += ["axis", "block"] if blocked else ["axis"]
    kind = draw(st.sampled_from(kinds))
    axis = draw(st.integers(-rank, rank - 1)) if rank else 1
    attrs = {"axis": axis}
    if kind == "tensor":
        return shape, (), attrs
    if kind == "tensor1":
        return shape, (1,), attrs
    dim = shape[axis]
    if kind == "axis" or dim == 0:
        return shape, (dim,), attrs
    block = draw(st.integers(1, dim + 1))
    scale_shape = list(shape)
    scale_shape[axis] = -(-dim // block)
    scale_shape = tuple(scale_shape)
    if ort and all(d == 1 for d in scale_shape):
        return shape, (), attrs
    if ort and 0 in shape:  # ORT 1.31 segfaults on blocked QuantizeLinear of an empty x
        return shape, (dim,), attrs
    attrs["block_size"] = block
    return shape, tuple(scale_shape), attrs


def _scales(draw, shape, dtype) -> np.ndarray:
    pool = st.sampled_from([0.5, 0.25, 1.0, 2.0, 0.1, 3e-3, 7.0, 1e-6, -0.5, 0.0, 1e4])
    vals = draw(
        st.lists(
            pool | st.floats(0.0001220703125, 10.0, width=32),
            min_size=int(np.prod(shape)),
            max_size=int(np.prod(shape)),
        )
    )
    return np.array(vals, np.float64).reshape(shape).astype(dtype)


def _ints(draw, dtype, shape) -> np.ndarray:
    info = ml_dtypes.iinfo(dtype)
    n = int(np.prod(shape))
    vals = draw(st.lists(st.integers(info.min, info.max), min_size=n, max_size=n))
    return np.array(vals, np.int64).reshape(shape).astype(dtype)


def _codes(draw, dtype, shape) -> np.ndarray:
    """Any byte pattern of a one-byte float type (NaN, inf, subnormals included)."""
    n = int(np.prod(shape))
    top = 1 << (dtype.itemsize * 8 if dtype.itemsize > 1 else ml_dtypes.finfo(dtype).bits)
    vals = draw(st.lists(st.integers(0, top - 1), min_size=n, max_size=n))
    return np.array(vals, np.uint8).reshape(shape).view(dtype)


def _floats(draw, shape, dtype, scale) -> np.ndarray:
    """x for Q: multiples of the scale, exact ties, specials, huge and tiny values."""
    n = int(np.prod(shape))
    special = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e9, -3e9, 1e38, 6e4])
    ties = st.integers(-300, 300).map(lambda k: k + 0.5)
    vals = draw(
        st.lists(
            special | ties | st.floats(-1000.0, 1000.0, width=32) | st.integers(-70000, 70000),
            min_size=n,
            max_size=n,
        )
    )
    x = np.array(vals, np.float64).reshape(shape)
    s = np.broadcast_to(np.abs(scale.astype(np.float64)).max(initial=1.0), shape)
    scaled = np.where(draw(st.booleans()), x * s, x)  # mostly ties of the quotient
    with np.errstate(over="ignore", invalid="ignore"):
        return scaled.astype(dtype)


def _broadcast(value, x, attrs) -> np.ndarray:
    """A scale-shaped array repeated to the shape of x, as the node would."""
    from qlrewrite.kernels._chunks import layout

    lay = layout(x.shape, value, None, attrs.get("axis", 1), attrs.get("block_size", 0))
    v3 = value.reshape(lay.scale_shape)
    if lay.block:
        v3 = np.repeat(v3, lay.block, axis=1)[:, : lay.C]
    return np.broadcast_to(v3, (lay.P, lay.C, lay.Q)).reshape(x.shape)


def _quotient(x, scale, attrs) -> np.ndarray:
    """float32 x / scale (for the deviation checks)."""
    with np.errstate(all="ignore"):
        return x.astype(F32) / _broadcast(scale.astype(F32), x, attrs)


def _ort_q_deviation(ours, theirs, x, scale, *, zp, attrs, saturate) -> np.ndarray:
    """Positions where ORT's Q is known to be wrong (see quantize.py), checked in detail."""
    q = _quotient(x, scale, attrs)
    if ours.dtype in F8:
        if saturate:
            return np.zeros(q.shape, bool)
        if ours.dtype == np.dtype(ml_dtypes.float8_e5m2):
            # ORT: finite quotients that round up to inf give NaN (0x7B | 0x7C)
            bad = (np.abs(q) >= 61440) & np.isfinite(q) & np.isnan(theirs.astype(F32))
            assert np.all(np.isinf(ours.astype(F32)[bad]))
            return bad
        if ours.dtype == np.dtype(ml_dtypes.float8_e4m3fn):
            # ORT: 480 <= |q| < 496 give +-448 (it turns the NaN code 0x7F into 0x7E before
            # rounding) where round to nearest even gives 480, beyond the range: NaN
            bad = (np.abs(q) >= 480) & (np.abs(q) < 496) & (np.abs(theirs.astype(F32)) == 448)
            assert np.all(np.isnan(ours.astype(F32)[bad]))
            return bad
        return np.zeros(q.shape, bool)
    # Some ORT paths (float16 x, blocked on a non-last axis, 4-bit on the last axis) compute
    # int32(nearbyint(q)) + zp: +-inf, NaN and |q| >= 2**31 become INT_MIN + zp, which is
    # the low end, or the high end when zp < 0 (int32 wrap). We saturate (NaN: low end).
    lo, hi = ml_dtypes.iinfo(ours.dtype).min, ml_dtypes.iinfo(ours.dtype).max
    z = np.zeros(q.shape, np.int64) if zp is None else _broadcast(zp.astype(np.int64), x, attrs)
    wrapped = np.where(z < 0, hi, lo)
    bad = ((np.abs(q) >= 2**31) | np.isnan(q)) & (theirs.astype(np.int64) == wrapped)
    expected = np.where(q > 0, hi, lo)
    np.testing.assert_array_equal(ours.astype(np.int64)[bad], expected[bad])
    return bad


def _assert_same(ours, theirs, allowed=None):
    ours = np.asarray(ours)
    if ours.dtype != theirs.dtype:  # came back through a Cast
        ours = ours.astype(theirs.dtype)
    assert ours.shape == theirs.shape
    a, b = bits(ours), bits(theirs)
    if allowed is not None:
        a, b = a[~allowed], b[~allowed]
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- against ONNX Runtime


@SETTINGS
@given(data=st.data(), lay=layouts(ort=True))
def test_dequantize_matches_ort(data, lay):
    shape, scale_shape, attrs = lay
    draw = data.draw
    x_type = draw(st.sampled_from([*ORT_INTS, np.dtype(np.int32), *F8]))
    scale = _scales(draw, scale_shape, draw(st.sampled_from([F32, F16])))
    if x_type in F8:
        x = _codes(draw, x_type, shape)
        zp = np.zeros(scale_shape, x_type) if draw(st.booleans()) else None
    else:
        x = _ints(draw, x_type, shape)
        zp = _ints(draw, x_type, scale_shape) if draw(st.booleans()) else None
    with _chunk_size(draw(st.sampled_from([1, 3, 8, 1 << 16]))):
        ours = dequantize(x, scale, zp, threads=draw(st.integers(1, 3)), **attrs)
    theirs = run_ort(build_model(DQ, x, scale, zp, scale.dtype, **attrs))
    assert ours.dtype == scale.dtype
    _assert_same(ours, theirs)


@SETTINGS
@given(data=st.data(), lay=layouts(ort=True))
def test_quantize_matches_ort(data, lay):
    shape, scale_shape, attrs = lay
    draw = data.draw
    out_type = draw(st.sampled_from([*ORT_INTS, *F8]))
    x_type = draw(st.sampled_from([F32, F16]))
    scale = _scales(draw, scale_shape, x_type)
    x = _floats(draw, shape, x_type, scale)
    saturate = draw(st.booleans()) if out_type in F8 else True
    if draw(st.booleans()):
        zp = (
            _ints(draw, out_type, scale_shape)
            if out_type not in F8
            else np.zeros(scale_shape, out_type)
        )
        kw = {}
    else:
        zp, kw = None, {"output_dtype": int(_onnx_type(out_type))}
    extra = {} if saturate else {"saturate": 0}
    with _chunk_size(draw(st.sampled_from([1, 3, 8, 1 << 16]))):
        ours = quantize(
            x, scale, zp, saturate=saturate, threads=draw(st.integers(1, 3)), **kw, **attrs
        )
    assert ours.dtype == out_type
    theirs = run_ort(build_model(Q, x, scale, zp, out_type, **kw, **extra, **attrs))
    _assert_same(
        ours,
        theirs,
        _ort_q_deviation(ours, theirs, x, scale, zp=zp, attrs=attrs, saturate=saturate),
    )


def _onnx_type(dtype):
    import onnx_ir as ir

    return ir.DataType.from_numpy(np.dtype(dtype))


# ---------------------------------------------------------------- against the reference


def _dq_reference_deviation(x, scale, zp, attrs) -> np.ndarray | None:
    """Positions where onnx.reference's DQ is known to differ (see dequantize.py)."""
    # float4 x: the reference ignores the zero point the spec formula subtracts (a -0.0
    # zero point too: x = -0.0 minus -0.0 is +0.0 by the formula, -0.0 in the reference)
    if x.dtype == np.dtype(ml_dtypes.float4_e2m1fn) and zp is not None:
        zp32 = zp.astype(F32)
        return np.ones(x.shape, bool) if np.any(zp32) or np.any(np.signbit(zp32)) else None
    # NaN x times a NaN scale (float8e8m0 0xFF): IEEE 754 leaves open which NaN's sign
    # and payload the product keeps
    with np.errstate(all="ignore"):
        nan_scale = np.isnan(_broadcast(scale.astype(F32), x, attrs))
    return nan_scale & np.isnan(x.astype(F32))


@SETTINGS
@given(data=st.data(), lay=layouts())
def test_dequantize_matches_reference_where_ort_has_no_kernel(data, lay):
    shape, scale_shape, attrs = lay
    draw = data.draw
    x_type = draw(st.sampled_from([*ORT_INTS, *REF_ONLY, *F8]))
    scale_type = draw(st.sampled_from([BF16, E8M0, F32, F16]))
    if x_type not in REF_ONLY and scale_type in (F32, F16):
        scale_type = BF16  # ORT covers these (previous test)
    if scale_type == E8M0:
        scale = _codes(draw, E8M0, scale_shape)
        out = draw(st.sampled_from([F32, F16, BF16]))
    else:
        scale = _scales(draw, scale_shape, scale_type)
        out = draw(st.sampled_from([None, F32, F16, BF16]))
    if x_type in F8 or x_type in REF_ONLY[2:]:
        x = _codes(draw, x_type, shape)
        zp = None
        if x_type not in F8 and draw(st.booleans()):
            zp = _codes(draw, x_type, scale_shape)
    else:
        x = _ints(draw, x_type, shape)
        zp = _ints(draw, x_type, scale_shape) if draw(st.booleans()) else None
    kw = {} if out is None else {"output_dtype": int(_onnx_type(out))}
    with _chunk_size(draw(st.sampled_from([1, 5, 1 << 16]))):
        ours = dequantize(x, scale, zp, **kw, **attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = run_reference(build_model(DQ, x, scale, zp, ours.dtype, opset=25, **kw, **attrs))
    assert ours.dtype == (out or scale.dtype)
    _assert_same(ours, np.asarray(theirs), _dq_reference_deviation(x, scale, zp, attrs))


@SETTINGS
@given(data=st.data(), lay=layouts())
def test_quantize_matches_reference_where_ort_has_no_kernel(data, lay):
    """bfloat16 x, mixed x / scale types, ``precision``, float8e8m0 scales, int2 / float4 /
    float6 outputs, int32 x. The reference runs what the spec says (see the comments)."""
    shape, scale_shape, attrs = lay
    draw = data.draw
    out_type = draw(st.sampled_from([*REF_ONLY, *ORT_INTS, *F8]))
    x_type = draw(st.sampled_from([F32, F16, BF16, np.dtype(np.int32)]))
    scale_type = draw(st.sampled_from([F32, F16, BF16, E8M0]))
    precision = draw(st.sampled_from([None, F32, F16, BF16]))
    if out_type not in REF_ONLY and precision is None and x_type == scale_type != BF16:
        precision = BF16  # ORT runs the rest (test_quantize_matches_ort)
    if x_type == scale_type == F16 and precision is None:
        precision = F32  # the reference divides float16 in float16, ORT (and we) in float32
    if scale_type == E8M0:
        scale = _codes(draw, E8M0, scale_shape)
    else:
        scale = _scales(draw, scale_shape, scale_type)
    if x_type == np.int32:
        x = _ints(draw, np.int32, shape)
    else:
        x = _floats(draw, shape, x_type, scale.astype(F32))
    zp = None
    if draw(st.booleans()):
        if out_type in F8:
            zp = np.zeros(scale_shape, out_type)
        elif out_type in REF_ONLY[2:]:
            zp = _codes(draw, out_type, scale_shape)
        else:
            zp = _ints(draw, out_type, scale_shape)
    kw = {} if zp is not None else {"output_dtype": int(_onnx_type(out_type))}
    if precision is not None:
        kw["precision"] = int(_onnx_type(precision))
    ours = quantize(x, scale, zp, **kw, **attrs)
    assert ours.dtype == out_type
    # the spec's division type, spelled out for the reference, which otherwise divides in
    # the promoted type (Q-23 without precision) and int32 x in float64
    division = precision or (F32 if scale_type == E8M0 else scale_type)
    x_ref = x.astype(F32) if x_type == np.int32 else x
    kw["precision"] = int(_onnx_type(division))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = np.asarray(
            run_reference(
                build_model(Q, x_ref, scale, zp, out_type, opset=25, cast_back=False, **kw, **attrs)
            )
        )
    allowed = None
    if out_type in ORT_INTS or out_type in REF_ONLY[:2]:
        # the reference wraps NaN, +-inf and |q| >= 2**31 to INT_MIN + zp (see quantize.py)
        with np.errstate(all="ignore"):  # the quotient in the division type
            q = x_ref.astype(division) / _broadcast(scale.astype(division), x, attrs)
        q = q.astype(F32)
        lo, hi = ml_dtypes.iinfo(out_type).min, ml_dtypes.iinfo(out_type).max
        z = np.zeros(q.shape, np.int64) if zp is None else _broadcast(zp.astype(np.int64), x, attrs)
        wrapped = np.where(z < 0, hi, lo)
        allowed = ((np.abs(q) >= 2**31) | np.isnan(q)) & (theirs.astype(np.int64) == wrapped)
        np.testing.assert_array_equal(
            ours.astype(np.int64)[allowed], np.where(q > 0, hi, lo)[allowed]
        )
    _assert_same(ours, theirs, allowed)
