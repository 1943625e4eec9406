"""The byte-level MatMulNBits repacking kernels against unpack -> transpose -> pack.

The expected values are computed one value per byte with :func:`unpack` and :func:`pack`
(tested in tests/passes/test_nbits.py); the kernels under test never unpack.
"""

from __future__ import annotations

import numpy as np
import pytest

from qlrewrite.kernels import nbits
from qlrewrite.kernels.nbits import MatMulNBitsLayout, pack, transpose, transpose_packed, unpack


def _expected_transposed(rows: np.ndarray, bits: int, k0: int, k1: int, flip: bool):
    values = unpack(rows, bits)[:, k0:k1].T  # [k, N], one value per byte
    if flip:
        values = values ^ np.uint8(1 << (bits - 1))
    return pack(values, bits)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize(("n", "width"), [(64, 64), (48, 40), (16, 24), (40, 8), (8, 13)])
@pytest.mark.parametrize("block_bytes", [64, 1 << 18], ids=["many-blocks", "one-block"])
def test_transpose_packed_equals_values_transposed(bits, n, width, block_bytes, monkeypatch):
    """Word transpose, blocks of rows and the fold of each lane, against the values."""
    monkeypatch.setattr(nbits, "_BLOCK_BYTES", block_bytes)
    rows = np.random.default_rng(bits * n + width).integers(0, 256, (n, width), dtype=np.uint8)
    per = 8 // bits
    k = width * per
    for k0, k1 in ((0, k), (per * 8, k), (per, k - 1), (0, per * 3)):
        if k0 >= k1:
            continue
        for flip in (False, True):
            got = transpose_packed(rows, bits, k0, k1, flip=flip)
            expected = _expected_transposed(rows, bits, k0, k1, flip)
            assert got is not None and np.array_equal(got, expected), (k0, k1, flip)


def test_transpose_packed_refuses_what_is_not_whole_bytes():
    rows = np.zeros((6, 8), np.uint8)  # 6 values of 4 bits per column: 3 bytes
    assert transpose_packed(rows, 2, 0, 32, flip=False) is None  # 6 x 2 bits
    assert transpose_packed(rows, 4, 1, 16, flip=False) is None  # k0 inside a byte
    assert transpose_packed(rows, 4, 0, 16, flip=False) is not None


@pytest.mark.parametrize("shape", [(24, 16), (8, 40), (33, 7), (1, 8)])
def test_transpose_of_a_view(shape):
    base = np.random.default_rng(0).integers(0, 256, (shape[0], shape[1] + 16), dtype=np.uint8)
    view = base[:, 8 : 8 + shape[1]]
    assert np.array_equal(transpose(view), view.T)
    assert np.array_equal(transpose(view.astype(np.float32)), view.T)


def _expected_b(x: np.ndarray, layout: MatMulNBitsLayout, transposed: bool, flip: bool):
    K, N, bits = layout.K, layout.N, layout.bits
    values = unpack(x, bits)[: K * N]
    w = values.reshape(N, K) if transposed else values.reshape(K, N).T  # [N, K]
    if flip:
        w = w ^ np.uint8(1 << (bits - 1))
    padded = np.zeros((N, layout.k_blocks * layout.block_size), np.uint8)
    padded[:, :K] = w
    return pack(padded, bits).reshape(layout.b_shape)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize(("k", "n", "block"), [(64, 16, 16), (100, 24, 32), (32, 8, 64)])
def test_b_rows_equal_the_values_packed(bits, k, n, block):
    """DequantizeLinear's x -> MatMulNBits' B on bytes (convert --to com.microsoft)."""
    layout = MatMulNBitsLayout(K=k, N=n, bits=bits, block_size=block)
    x = np.random.default_rng(k + n).integers(0, 256, k * n * bits // 8, dtype=np.uint8)
    for transposed in (False, True):
        for flip in (False, True):
            expected = _expected_b(x, layout, transposed, flip)
            for n0, n1 in ((0, n), (0, 8), (8, n)):
                got = layout.b_rows(x, n0, n1, transposed=transposed, flip=flip)
                ok = got is not None and np.array_equal(got, expected[n0:n1])
                assert ok, (n0, n1, transposed, flip)


def test_b_rows_refuses_what_is_not_whole_bytes():
    layout = MatMulNBitsLayout(K=20, N=6, bits=2, block_size=16)  # 6 x 2 bits per k
    x = np.zeros(30, np.uint8)
    assert layout.b_rows(x, 0, 6, transposed=False, flip=False) is None
    odd_k = MatMulNBitsLayout(K=21, N=8, bits=4, block_size=16)  # 21 x 4 bits per n
    assert odd_k.b_rows(np.zeros(84, np.uint8), 0, 8, transposed=True, flip=False) is None
