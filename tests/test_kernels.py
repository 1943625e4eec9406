"""qlrewrite.kernels against ONNX Runtime on hand-picked cases, and argument validation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_kernels_helpers import build_model, run_ort, same_bits

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
