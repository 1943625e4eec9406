"""qlrewrite.kernels against ONNX Runtime on hand-picked cases, and argument validation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kernel_fixtures import build_model, run_ort, same_bits
from ort_quantized import ort_version

from qlrewrite.kernels import dequantize, quantize

DQ = "DequantizeLinear"
Q = "QuantizeLinear"
RNG = np.random.default_rng(0)

INT_TYPES = [np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4]


def _ints(dtype, shape):
    info = ml_dtypes.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize(
    ("shape", "scale_shape", "attrs"),
    [
        ((5, 7), (), {}),
        ((5, 7), (7,), {"axis": 1}),
        ((5, 7), (5,), {"axis": -2}),
        ((5, 7), (2, 7), {"axis": 0, "block_size": 3}),
        ((3, 4, 10), (3, 4, 4), {"axis": -1, "block_size": 3}),
    ],
)
def test_dequantize_matches_ort(dtype, shape, scale_shape, attrs):
    x = _ints(dtype, shape)
    zp = _ints(dtype, scale_shape)
    scale = RNG.uniform(0.001, 2, size=scale_shape).astype(np.float32)
    ref = run_ort(build_model(DQ, x, scale, zp, np.float32, **attrs))
    assert same_bits(dequantize(x, scale, zp, **attrs), ref)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("x_dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    ("shape", "scale_shape", "attrs"),
    [
        ((5, 7), (), {}),
        ((5, 7), (5,), {"axis": 0}),
        ((3, 4, 10), (3, 4, 4), {"axis": -1, "block_size": 3}),
    ],
)
def test_quantize_matches_ort(dtype, x_dtype, shape, scale_shape, attrs):
    scale = RNG.uniform(0.01, 0.2, size=scale_shape).astype(x_dtype)
    x = (RNG.standard_normal(shape) * 40).astype(x_dtype)
    x.flat[::3] = (np.round(x.flat[::3]) + 0.5) * scale.flat[0]  # ties
    zp = _ints(dtype, scale_shape)
    ref = run_ort(build_model(Q, x, scale, zp, dtype, **attrs))
    assert same_bits(quantize(x, scale, zp, **attrs), ref)


def test_quantize_nan_inf_saturate_like_ort():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e38, 2.5, -2.5], np.float32)
    zp = np.array(3, np.int8)
    ours = quantize(x, np.float32(1), zp)
    assert ours.tolist() == [-128, 127, -128, 127, -128, 127, 5, 1]
    assert same_bits(ours, run_ort(build_model(Q, x, np.float32(1), zp, np.int8)))


@pytest.mark.parametrize(
    "call",
    [
        lambda: dequantize(np.zeros((2, 3), np.int8), np.ones(4, np.float32)),
        lambda: dequantize(np.zeros((2, 3), np.int8), np.ones((2, 2), np.float32)),
        lambda: dequantize(np.zeros((2, 3), np.int8), np.ones(3, np.float32), axis=2),
        lambda: dequantize(np.zeros((2, 6), np.int8), np.ones((2, 2), np.float32), block_size=2),
        lambda: dequantize(np.zeros(3, np.int8), np.float32(1), np.uint8(0)),
        lambda: dequantize(np.zeros(3, np.int8), np.ones((), ml_dtypes.float8_e8m0fnu)),
        lambda: quantize(np.zeros(3, np.float32), np.float32(1), np.int8(0), output_dtype=2),
        lambda: quantize(np.zeros(3, np.int8), np.float32(1)),
    ],
)
def test_invalid_combinations_raise(call):
    with pytest.raises(ValueError):
        call()


# ------------------------------------------------ documented deviations, pinned one by one


def _ref(op, x, scale, zp, out, **attrs):
    import warnings

    from kernel_fixtures import run_reference

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(
            run_reference(build_model(op, x, scale, zp, out, opset=25, cast_back=False, **attrs))
        )


def test_ort_blocked_non_last_axis_wraps_inf_we_saturate():
    x = np.array([[np.inf, 3e9], [1.0, -np.inf]], np.float32)
    scale = np.ones((1, 2), np.float32)
    zp = np.zeros((1, 2), np.uint8)
    ort = run_ort(build_model(Q, x, scale, zp, np.uint8, axis=0, block_size=2))
    ours = quantize(x, scale, zp, axis=0, block_size=2).tolist()
    assert ours == [[255, 255], [1, 0]]
    # ORT 1.31: +inf and 3e9 -> 0 (int32 wrap); ORT 1.32 saturates, as we do
    assert ort.tolist() == ([[0, 0], [1, 0]] if ort_version() < (1, 32) else ours)


def test_ort_float16_nan_with_negative_zero_point_we_give_low_end():
    x = np.array([np.nan, 1.0], np.float16)
    zp = np.array(-1, np.int8)
    ort = run_ort(build_model(Q, x, np.float16(1), zp, np.int8))
    # ORT 1.31: int32(NaN) + zp = INT_MIN - 1 wraps to INT_MAX; ORT 1.32: the low end
    assert ort.tolist() == ([127, 0] if ort_version() < (1, 32) else [-128, 0])
    assert quantize(x, np.float16(1), zp).tolist() == [-128, 0]
    # float32 x: ORT's MLAS path gives the low end too
    ort32 = run_ort(build_model(Q, x.astype(np.float32), np.float32(1), zp, np.int8))
    assert ort32.tolist() == [-128, 0]


def test_ort_float8e5m2_unsaturated_rounds_to_nan_we_to_inf():
    e5m2 = ml_dtypes.float8_e5m2
    x = np.array([61440.0, -64000.0, 60000.0, 1e6], np.float32)
    ort = run_ort(build_model(Q, x, np.float32(1), None, e5m2, output_dtype=19, saturate=0))
    assert np.isnan(ort[:2]).all() and ort[2] == 57344 and ort[3] == np.inf
    ours = quantize(x, np.float32(1), output_dtype=e5m2, saturate=False).astype(np.float32)
    assert ours.tolist() == [np.inf, -np.inf, 57344.0, np.inf]  # round to nearest even
    assert same_bits(
        quantize(x, np.float32(1), output_dtype=e5m2, saturate=False), x.astype(e5m2)
    )  # ml_dtypes agrees


def test_reference_wraps_beyond_int32_we_saturate():
    x = np.array([3e9, np.inf, -3e9, 200.0], np.float32)
    ref = _ref(Q, x, np.float32(1), np.uint8(0), np.uint8)
    assert ref.tolist() == [0, 0, 0, 200]
    assert quantize(x, np.float32(1), np.uint8(0)).tolist() == [255, 255, 0, 200]
    assert same_bits(
        quantize(x, np.float32(1), np.uint8(0)),
        run_ort(build_model(Q, x, np.float32(1), np.uint8(0), np.uint8)),
    )


def test_reference_divides_float16_in_float16_we_in_float32_like_ort():
    # 60000 / 0.5 overflows float16 (the reference: inf -> wraps to -32768)
    x = np.array([60000.0], np.float16)
    scale = np.float16(0.5)
    zp = np.int16(0)
    assert _ref(Q, x, scale, zp, np.int16).tolist() == [-32768]
    ours = quantize(x, scale, zp)
    assert ours.tolist() == [32767]
    assert same_bits(ours, run_ort(build_model(Q, x, scale, zp, np.int16)))
    # double rounding: a float32 quotient just above a tie rounds to the tie in float16
    xs = np.arange(1, 2048, dtype=np.float16)
    s16 = np.float16(0.3)
    q32 = xs.astype(np.float32) / np.float32(s16)
    q16 = (xs / s16).astype(np.float32)
    differ = np.rint(q32) != np.rint(q16)
    assert differ.any()
    x = xs[differ][:8]
    ours = quantize(x, s16, np.int16(0))
    np.testing.assert_array_equal(ours, np.rint(q32[differ][:8]).astype(np.int16))
    assert same_bits(ours, run_ort(build_model(Q, x, s16, np.int16(0), np.int16)))
    assert not np.array_equal(_ref(Q, x, s16, np.int16(0), np.int16), ours)


def test_q23_mixed_types_divide_in_the_scale_type_not_the_promoted_one():
    x = np.array([2.5005, 100.3], np.float32)  # float16(2.5005) == 2.5, a tie
    scale = np.float16(1.0)
    ours = quantize(x, scale, np.int8(0))
    assert ours.tolist() == [2, 100]  # spec: float16 division, 2.5 rounds to even
    assert _ref(Q, x, scale, np.int8(0), np.int8).tolist() == [3, 100]  # promoted: float32
    assert quantize(x, scale, np.int8(0), precision=np.float32).tolist() == [3, 100]
    assert quantize(x, scale, np.int8(0), precision=10).tolist() == [2, 100]  # FLOAT16


def test_reference_int32_dequantize_loses_precision_we_subtract_in_int32():
    x = np.array([2**24 + 1, -(2**31), 2**31 - 1], np.int32)
    zp = np.array(1, np.int32)
    ours = dequantize(x, np.float32(1), zp)
    assert ours.tolist() == [2.0**24, np.float32(2**31 - 1), np.float32(2**31 - 2)]
    assert same_bits(ours, run_ort(build_model(DQ, x, np.float32(1), zp, np.float32)))
    assert _ref(DQ, x, np.float32(1), zp, np.float32)[0] == 2**24 - 1


def test_reference_ignores_float4_zero_point_we_subtract_it():
    f4 = ml_dtypes.float4_e2m1fn
    x = np.array([1.0, 3.0, -6.0], f4)
    zp = np.array(0.5, f4)
    ours = dequantize(x, np.float32(2), zp)
    assert ours.tolist() == [1.0, 5.0, -13.0]  # (x - zp) * scale, the spec formula
    assert _ref(DQ, x, np.float32(2), zp, np.float32).tolist() == [2.0, 6.0, -12.0]
    # float6: the reference does subtract it, and agrees
    f6 = ml_dtypes.float6_e2m3fn
    x6, zp6 = x.astype(f6), zp.astype(f6)
    assert same_bits(
        dequantize(x6, np.float32(2), zp6), _ref(DQ, x6, np.float32(2), zp6, np.float32)
    )


def test_blocked_scale_of_one_element_is_per_tensor():
    # the spec allows block_size >= D with one block; ORT refuses it ("block_size must be 0
    # for per-tensor quantization")
    x = np.array([[1, -3, 5]], np.int8)
    blocked = dequantize(x, np.array([[0.5]], np.float32), axis=1, block_size=4)
    assert blocked.tolist() == [[0.5, -1.5, 2.5]]


def test_float8_dequantize_needs_zero_point_zero():
    x = np.array([1.0, 2.0], ml_dtypes.float8_e4m3fn)
    assert dequantize(x, np.float32(2), np.zeros((), x.dtype)).tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="zero point of 0"):
        dequantize(x, np.float32(2), np.ones((), x.dtype))


def test_float8_quantize_ignores_zero_point_like_ort():
    f8 = ml_dtypes.float8_e4m3fn
    x = np.array([1.0, -0.0], np.float32)
    ours = quantize(x, np.float32(1), np.array(2.0, f8))
    assert same_bits(ours, run_ort(build_model(Q, x, np.float32(1), np.array(2.0, f8), f8)))
    assert ours.astype(np.float32).tolist() == [1.0, -0.0]


def test_output_dtype_forms_agree():
    x = np.array([1, 2], np.uint8)
    s = np.float32(0.5)
    import onnx_ir as ir

    for form in (np.float16, np.dtype(np.float16), ir.DataType.FLOAT16, 10):
        assert dequantize(x, s, output_dtype=form).dtype == np.float16
    assert dequantize(x, s, output_dtype=0).dtype == np.float32
    assert quantize(np.zeros(2, np.float32), s, output_dtype=ir.DataType.INT4).dtype == (
        ml_dtypes.int4
    )
    assert dequantize(x, np.ones((), ml_dtypes.float8_e8m0fnu), output_dtype=16).dtype == (
        ml_dtypes.bfloat16
    )


def test_threads_and_env(monkeypatch):
    from qlrewrite.kernels._chunks import thread_count

    monkeypatch.setenv("QLREWRITE_THREADS", "3")
    assert thread_count() == 3
    assert thread_count(1) == 1
    monkeypatch.setenv("QLREWRITE_THREADS", "x")
    with pytest.raises(ValueError):
        thread_count()
    with pytest.raises(ValueError):
        thread_count(0)


def test_large_tensor_many_chunks_and_threads_match_single_thread():
    x = _ints(np.int8, (300, 1000))
    scale = RNG.uniform(0.01, 1, size=(10, 1000)).astype(np.float32)
    zp = _ints(np.int8, (10, 1000))
    one = dequantize(x, scale, zp, axis=0, block_size=32, threads=1)
    two = dequantize(x, scale, zp, axis=0, block_size=32, threads=2)
    expected = (x.astype(np.float32) - np.repeat(zp, 32, 0)[:300]) * np.repeat(scale, 32, 0)[:300]
    np.testing.assert_array_equal(one, expected)
    np.testing.assert_array_equal(two, expected)
    xf = (RNG.standard_normal((300, 1000)) * 100).astype(np.float32)
    q1 = quantize(xf, scale, zp, axis=0, block_size=32, threads=1)
    q2 = quantize(xf, scale, zp, axis=0, block_size=32, threads=2)
    assert same_bits(q1, q2)
    assert same_bits(q1, run_ort(build_model(Q, xf, scale, zp, np.int8, axis=0, block_size=32)))


# ------------------------------------------------ memory, out=, threads, layouts


def test_memory_is_output_plus_a_few_chunks():
    import tracemalloc

    x = _ints(np.int8, (2048, 4096))  # 8 MiB in, 32 MiB out
    scale = RNG.uniform(0.01, 1, size=(64, 4096)).astype(np.float32)
    zp = _ints(np.int8, (64, 4096))
    dequantize(x[:64], scale[:2], zp[:2], axis=0, block_size=32)  # pool and scratch warm
    for threads in (1, 2):
        tracemalloc.start()
        out = dequantize(x, scale, zp, axis=0, block_size=32, threads=threads)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert out.nbytes <= peak < out.nbytes + (4 << 20), peak - out.nbytes
    xf = (RNG.standard_normal((2048, 4096)) * 50).astype(np.float32)
    tracemalloc.start()
    q = quantize(xf, scale, zp, axis=0, block_size=32, threads=2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert q.nbytes <= peak < q.nbytes + (4 << 20), peak - q.nbytes


def test_out_parameter():
    x = _ints(np.uint8, (3, 5))
    out = np.full((3, 5), np.nan, np.float32)
    got = dequantize(x, np.float32(0.5), np.uint8(3), out=out)
    assert got is out
    np.testing.assert_array_equal(out, (x.astype(np.float32) - 3) * np.float32(0.5))
    q = np.zeros((3, 5), ml_dtypes.int4)
    assert quantize(out, np.float32(1), np.zeros((), ml_dtypes.int4), out=q) is q
    assert q.astype(np.int8).tolist() == np.clip(np.rint(out), -8, 7).astype(np.int8).tolist()
    with pytest.raises(ValueError, match="out must be"):
        dequantize(x, np.float32(0.5), out=np.empty((5, 3), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        dequantize(x, np.float32(0.5), out=np.empty((3, 5), np.float16))


def test_concurrent_calls_share_the_pool():
    from concurrent.futures import ThreadPoolExecutor

    xs = [_ints(np.int8, (512, 300)) for _ in range(6)]
    scale = RNG.uniform(0.01, 1, 300).astype(np.float32)
    expected = [x.astype(np.float32) * scale for x in xs]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda x: dequantize(x, scale, threads=2), xs))
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_non_contiguous_input_and_rank_zero():
    x = _ints(np.int8, (6, 4)).T  # a transposed view
    scale = RNG.uniform(0.1, 1, 6).astype(np.float32)
    np.testing.assert_array_equal(
        dequantize(x, scale, axis=1), x.astype(np.float32) * scale[None, :]
    )
    assert dequantize(np.array(-3, np.int8), np.float32(0.5)).shape == ()
    assert quantize(np.array(2.6, np.float32), np.array([1.0], np.float32)).shape == ()
    empty = dequantize(np.zeros((0, 3), np.int8), np.ones(3, np.float32), axis=1)
    assert empty.shape == (0, 3) and empty.dtype == np.float32


def test_ort_float8e4m3fn_unsaturated_480_to_496_gives_448_we_nan():
    f8 = ml_dtypes.float8_e4m3fn
    x = np.array([470.0, 480.0, 490.0, 495.0, 496.0, -485.0], np.float32)
    ort = run_ort(build_model(Q, x, np.float32(1), None, f8, output_dtype=17, saturate=0))
    assert np.isnan(ort[0]) and ort[1:4].tolist() == [448.0] * 3
    assert np.isnan(ort[4]) and ort[5] == -448.0
    ours = quantize(x, np.float32(1), output_dtype=f8, saturate=False)
    assert np.isnan(ours.astype(np.float32)).all()  # 480 is beyond 448: NaN (spec, ml_dtypes)
    assert same_bits(ours, x.astype(f8))
    saturated = quantize(x, np.float32(1), output_dtype=f8).astype(np.float32)
    assert saturated.tolist() == [448.0] * 5 + [-448.0]


def test_blocked_empty_tensors():
    # ONNX Runtime 1.31 crashes (segmentation fault) on this QuantizeLinear; the spec's
    # answer is an empty tensor
    x = np.zeros((3, 6, 0), np.float32)
    scale = np.ones((1, 6, 0), np.float32)
    zp = np.zeros((1, 6, 0), np.uint16)
    q = quantize(x, scale, zp, axis=0, block_size=4)
    assert q.shape == (3, 6, 0) and q.dtype == np.uint16
    y = dequantize(q, scale, zp, axis=0, block_size=4)
    assert y.shape == (3, 6, 0) and y.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, ml_dtypes.int4], ids=str)
def test_dequantize_output_dtype_float16_matches_ort_23(dtype):
    x = _ints(dtype, (64, 33))
    scale = RNG.uniform(1e-3, 3000, 33).astype(np.float32)  # some products overflow float16
    zp = _ints(dtype, (33,))
    ref = run_ort(build_model(DQ, x, scale, zp, np.float16, opset=23, axis=1, output_dtype=10))
    assert same_bits(dequantize(x, scale, zp, axis=1, output_dtype=10), ref)


def test_float6_negative_zero_point_turns_negative_zero_positive():
    """Found by the property test: x - (-0.0) is +0.0 for x = -0.0 (spec formula); a
    zero point of -0.0 must not be dropped as 'all zero'."""
    for dtype in (ml_dtypes.float6_e2m3fn, ml_dtypes.float4_e2m1fn):
        neg_zero = np.array(-0.0, dtype=dtype)
        got = dequantize(neg_zero, np.float32(0.5), neg_zero)
        assert got.view(np.uint32) == 0  # +0.0
        got = dequantize(neg_zero, np.float32(0.5))
        assert got.view(np.uint32) == 0x80000000  # no zero point: -0.0 * 0.5 = -0.0
