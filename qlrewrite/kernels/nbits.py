"""ONNX Runtime's weight-only forms on NumPy arrays: MatMulNBits and GatherBlockQuantized.

Bit-exact with ONNX Runtime's CPU kernels (pinned by tests that run them):

- Packing: ``bits`` (2, 4 or 8) values per byte, low bits first.
- MatMulNBits: B is uint8 ``[N, k_blocks, block_size * bits / 8]``, the weight quantized
  along K in blocks (the last block padded); scales ``[N, k_blocks]`` (or flat); zero points
  packed uint8 ``[N, ceil(k_blocks * bits / 8)]`` (each row padded to whole bytes), default
  ``2 ** (bits - 1)``. Weight ``W[k, n] = float32(q - zp) * scale``, the same formula as
  DequantizeLinear. Zero points in the scale type (2 and 4 bits in ORT) take another path
  in ORT: ``q * scale + (-scale * zp)``, rounded twice (:func:`dequantize_float_zero_point`).
- GatherBlockQuantized: int4 / uint4 data (default zero point 0) or uint8 data holding
  ``8 / bits`` values per byte along the last axis (default zero point ``2 ** (bits - 1)``,
  zero points packed the same way). ``float32(q - zp) * scale``, rounded once.

Every function works on a slice of rows, so callers stream large tensors chunk by chunk.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from qlrewrite.kernels._chunks import scratch

__all__ = [
    "MatMulNBitsLayout",
    "dequantize_float_zero_point",
    "flip_sign_packed",
    "pack",
    "take_bits",
    "transpose",
    "transpose_packed",
    "unpack",
]

_U8 = np.dtype(np.uint8)


def _check_bits(bits: int) -> int:
    if bits not in (2, 4, 8):
        raise ValueError(f"bits must be 2, 4 or 8, got {bits}")
    return bits


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 ``[..., n]`` holding ``8 / bits`` values per byte -> uint8 ``[..., n * 8 / bits]``."""
    packed = np.asarray(packed, dtype=_U8)
    if _check_bits(bits) == 8:
        return packed
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    values = np.empty((*packed.shape, per), _U8)
    for i in range(per):  # at most 4 shifts, not a loop over elements
        np.bitwise_and(packed >> np.uint8(i * bits), mask, out=values[..., i])
    return values.reshape(*packed.shape[:-1], packed.shape[-1] * per)


def pack(values: np.ndarray, bits: int, fill: int = 0) -> np.ndarray:
    """uint8 ``[..., n]`` (each < 2**bits) -> uint8 ``[..., ceil(n * bits / 8)]``; the unused
    slots of the last byte hold ``fill``."""
    values = np.asarray(values, dtype=_U8)
    if _check_bits(bits) == 8:
        return values
    per = 8 // bits
    n = values.shape[-1]
    pad = -n % per
    if pad:
        widths = [(0, 0)] * (values.ndim - 1) + [(0, pad)]
        values = np.pad(values, widths, constant_values=fill)
    grouped = values.reshape(*values.shape[:-1], -1, per)
    out = grouped[..., 0].copy()
    for i in range(1, per):  # at most 4 shifts, not a loop over elements
        out |= grouped[..., i] << np.uint8(i * bits)
    return out


def flip_sign_packed(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """``count`` values packed ``8 / bits`` per byte (uint8, low bits first), moved into the
    other signedness by flipping the top bit of each (``v + 2**(bits-1)`` for a signed v,
    ``v - 2**(bits-1)`` for an unsigned one): a new array, the unused slots of the last
    byte 0 (as ONNX pads them)."""
    per = 8 // _check_bits(bits)
    out = np.bitwise_xor(np.asarray(packed, dtype=_U8), _top_bits(bits))
    used = count % per
    if used and out.size:
        out[-1] &= np.uint8((1 << (used * bits)) - 1)
    return out


def take_bits(raw: np.ndarray, bits: int, index: np.ndarray) -> np.ndarray:
    """The values at flat element ``index`` of a tensor packed ``8 / bits`` per byte.

    ``raw`` is the tensor's bytes (uint8, 1-D, e.g. memory-mapped), ``index`` any int array.
    """
    if _check_bits(bits) == 8:
        return raw[index]
    index = np.asarray(index, dtype=np.int64)
    byte = raw[index * bits >> 3]
    shift = ((index * bits) & 7).astype(_U8)
    return (byte >> shift) & np.uint8((1 << bits) - 1)


@dataclasses.dataclass(frozen=True)
class MatMulNBitsLayout:
    """The shapes of a MatMulNBits weight, from its attributes K, N, bits and block_size."""

    K: int
    N: int
    bits: int
    block_size: int

    def __post_init__(self) -> None:
        _check_bits(self.bits)
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of 2 >= 16, got {self.block_size}")
        if self.K < 1 or self.N < 1:
            raise ValueError(f"K and N must be >= 1, got K={self.K}, N={self.N}")

    @property
    def k_blocks(self) -> int:
        """Blocks along K (the last one may be partial)."""
        return -(-self.K // self.block_size)

    @property
    def blob(self) -> int:
        """Bytes per block of B."""
        return self.block_size * self.bits // 8

    @property
    def b_shape(self) -> tuple[int, int, int]:
        """The shape of B."""
        return (self.N, self.k_blocks, self.blob)

    @property
    def zero_point_row(self) -> int:
        """Bytes per row (per n) of packed zero points."""
        return -(-self.k_blocks * self.bits // 8)

    @property
    def default_zero_point(self) -> int:
        """The zero point when none is given: ``2 ** (bits - 1)``."""
        return 1 << (self.bits - 1)

    # ------------------------------------------------------------ the other inputs' shapes

    @property
    def scales_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shapes scales may have: ``[N, k_blocks]``, or flat (older models)."""
        return ((self.N, self.k_blocks), (self.N * self.k_blocks,))

    def zero_point_shapes(self, packed: bool) -> tuple[tuple[int, ...], ...]:
        """The shapes zero points may have: packed uint8 ``[N, zero_point_row]``, or in a
        float type ``[N, k_blocks]``; either also flat."""
        width = self.zero_point_row if packed else self.k_blocks
        return ((self.N, width), (self.N * width,))

    @property
    def zero_point_stream(self) -> int | None:
        """Bytes of packed zero points written as one stream over all N columns, without
        each column's padding (ONNX Runtime 1.16's MatMul4BitsQuantizer wrote them so);
        None when that is the schema's size (no padding to leave out)."""
        stream = -(-self.N * self.k_blocks * self.bits // 8)
        return stream if stream != self.N * self.zero_point_row else None

    def zero_points_from_stream(self, stream: np.ndarray) -> np.ndarray:
        """The schema's packed zero points ``[N, zero_point_row]`` from a stream of
        :attr:`zero_point_stream` bytes (the same values, each column's row padded)."""
        values = unpack(np.asarray(stream).reshape(-1), self.bits)
        return self.pack_zero_points(values[: self.N * self.k_blocks].reshape(self.N, -1))

    @property
    def g_idx_shapes(self) -> tuple[tuple[int, ...], ...]:
        """g_idx: ``[K]``, or K rounded up to whole blocks."""
        return tuple(dict.fromkeys(((self.K,), (self.k_blocks * self.block_size,))))

    @property
    def bias_shape(self) -> tuple[int]:
        """bias: ``[N]``."""
        return (self.N,)

    # ------------------------------------------------------------ reading (B -> [K, N])

    def quantized_rows(self, b: np.ndarray, k0: int, k1: int) -> np.ndarray:
        """Quantized values of rows ``[k0, k1)`` of the weight laid out ``[K, N]`` (uint8)."""
        bs = self.block_size
        kb0, kb1 = k0 // bs, -(-k1 // bs)
        blocks = np.asarray(b).reshape(self.b_shape)[:, kb0:kb1, :]
        values = unpack(blocks, self.bits).reshape(self.N, (kb1 - kb0) * bs)
        start = k0 - kb0 * bs
        return transpose(values[:, start : start + (k1 - k0)])

    def block_rows(self, array: np.ndarray, kb0: int, kb1: int) -> np.ndarray:
        """Blocks ``[kb0, kb1)`` of scales (``[N, k_blocks]`` or flat) as ``[kb, N]``."""
        return transpose(np.asarray(array).reshape(self.N, self.k_blocks)[:, kb0:kb1])

    def zero_point_rows(self, zero_points: np.ndarray | None, kb0: int, kb1: int) -> np.ndarray:
        """Zero points of blocks ``[kb0, kb1)`` as uint8 ``[kb, N]`` (the default if None)."""
        if zero_points is None:
            return np.full((kb1 - kb0, self.N), self.default_zero_point, _U8)
        rows = np.asarray(zero_points, dtype=_U8).reshape(self.N, self.zero_point_row)
        return unpack(rows, self.bits)[:, kb0:kb1].T

    def dequantized_rows(
        self,
        b: np.ndarray,
        scales: np.ndarray,
        zero_points: np.ndarray | None,
        *,
        k0: int,
        k1: int,
        dtype: np.dtype,
    ) -> np.ndarray:
        """Rows ``[k0, k1)`` of the dequantized weight ``[K, N]`` in ``dtype``.

        ``float32(q - zp) * float32(scale)`` rounded once to ``dtype``; zero points given
        in the scale type use ONNX Runtime's other formula
        (:func:`dequantize_float_zero_point`).
        """
        bs = self.block_size
        kb0, kb1 = k0 // bs, -(-k1 // bs)
        q = self.quantized_rows(b, k0, k1)
        which = np.arange(k0, k1) // bs - kb0
        scale = self.block_rows(scales, kb0, kb1).astype(np.float32)[which]
        if zero_points is not None and np.asarray(zero_points).dtype != _U8:
            zp = self.block_rows(zero_points, kb0, kb1).astype(np.float32)[which]
            return dequantize_float_zero_point(q, scale, zp).astype(dtype, copy=False)
        zp = self.zero_point_rows(zero_points, kb0, kb1)[which]
        out = np.subtract(q, zp, dtype=np.int16).astype(np.float32)
        out *= scale
        return out.astype(dtype, copy=False)

    def packed_rows(self, b: np.ndarray, k0: int, k1: int, *, flip: bool) -> np.ndarray | None:
        """Rows ``[k0, k1)`` of the weight laid out ``[K, N]``, packed ``8 / bits`` values per
        byte (ONNX's layout of a ``bits``-wide tensor), computed on bytes: no unpacking.

        ``flip`` subtracts the default zero point (a signed type: the top bit of each value
        flips). None when this layout has no such path (N not a whole number of bytes, or
        ``k0`` not a multiple of the values per byte).
        """
        rows = np.asarray(b).reshape(self.N, -1)  # bytes along K (the padded K)
        return transpose_packed(rows, self.bits, k0, k1, flip=flip)

    def packed_zero_point_rows(
        self, zero_points: np.ndarray, kb0: int, kb1: int
    ) -> np.ndarray | None:
        """Zero points of blocks ``[kb0, kb1)`` laid out ``[k_blocks, N]``, packed like the
        weight (None: no byte-level path, as :meth:`packed_rows`)."""
        rows = np.asarray(zero_points).reshape(self.N, self.zero_point_row)
        return transpose_packed(rows, self.bits, kb0, kb1, flip=False)

    # ------------------------------------------------------------ writing ([N, K] -> B)

    def pack_rows(self, q: np.ndarray) -> np.ndarray:
        """B rows (``[n, k_blocks, blob]``) from quantized values ``q`` of shape ``[n, K]``.

        The padding of a partial last block is zero bits (what ONNX Runtime's quantizer
        leaves there; the kernels never read it).
        """
        n = q.shape[0]
        padded = np.zeros((n, self.k_blocks * self.block_size), _U8)
        padded[:, : self.K] = q
        return pack(padded.reshape(n, self.k_blocks, self.block_size), self.bits)

    def pack_zero_points(self, zp: np.ndarray) -> np.ndarray:
        """Packed zero points ``[n, zero_point_row]`` from values ``[n, k_blocks]``; unused
        slots hold the default zero point (as ONNX Runtime's quantizer writes them)."""
        return pack(zp, self.bits, fill=self.default_zero_point)

    def b_rows(
        self, x: np.ndarray, n0: int, n1: int, *, transposed: bool, flip: bool
    ) -> np.ndarray | None:
        """B rows ``[n1 - n0, k_blocks, blob]`` from the bytes ``x`` of the quantized weight
        (``[K, N]`` packed along N, or ``[N, K]`` packed along K when ``transposed``),
        computed on bytes: no unpacking.

        ``flip`` adds the default zero point (a signed type: the top bit of each value
        flips); the padding of a partial last block is zero bits. None when this layout has
        no such path (rows of K or N values not whole bytes, ``n0`` not at a byte boundary).
        """
        K, N, bits = self.K, self.N, self.bits
        row = K * bits // 8  # bytes of one n
        if (K * bits) % 8 or (N * bits) % 8:
            return None
        if transposed:
            packed = np.asarray(x[: N * row]).reshape(N, row)[n0:n1]
            packed = packed ^ _top_bits(bits) if flip else packed.copy()  # not a view of x
        else:
            source = np.asarray(x[: N * row]).reshape(K, N * bits // 8)
            packed = transpose_packed(source, bits, n0, n1, flip=flip)
            if packed is None:
                return None
        if row < self.k_blocks * self.blob:  # a partial last block: zero bits after K
            padded = np.zeros((n1 - n0, self.k_blocks * self.blob), _U8)
            padded[:, :row] = packed
            packed = padded
        return packed.reshape(n1 - n0, self.k_blocks, self.blob)


def transpose_packed(
    rows: np.ndarray, bits: int, k0: int, k1: int, *, flip: bool
) -> np.ndarray | None:
    """Values ``[k0, k1)`` of ``rows`` (``[N, bytes]``, ``8 / bits`` values per byte along
    each row) transposed to ``[k1 - k0, N]`` and packed along N, on bytes.

    ``flip`` flips the top bit of each value (subtracts ``2**(bits-1)``). None when N values
    are not whole bytes or ``k0`` is not at a byte boundary.
    """
    n = rows.shape[0]
    per = 8 // bits
    if (n * bits) % 8 or k0 % per:
        return None
    i0, i1 = k0 // per, -(-k1 // per)
    out = np.empty((i1 - i0, per, n // per), _U8)  # (i, residue r of k, byte of n)
    source = rows[:, i0:i1]
    if per == 1:
        transpose(source, out=out[:, 0, :])
    elif not _pack_words(source, out, bits):  # rows not whole 8-byte words
        _spread(transpose(source), out, bits)  # byte i of row n holds k = per * i + r
    packed = out.reshape((i1 - i0) * per, n * bits // 8)[: k1 - k0]
    if flip:
        np.bitwise_xor(packed, _top_bits(bits), out=packed)
    return packed


def _top_bits(bits: int) -> np.uint8:
    """A byte with the top bit of each of its ``8 / bits`` values set."""
    top = 1 << (bits - 1)
    return np.uint8(sum(top << (t * bits) for t in range(8 // bits)))


#: Bytes per block of :func:`_pack_words`' planes: with their scratch, in L2.
_BLOCK_BYTES = 1 << 18


def _pack_words(source: np.ndarray, out: np.ndarray, bits: int) -> bool:
    """:func:`transpose_packed` on 8-byte words: ``out[i, r, j]`` = value r of the bytes
    ``source[per * j + t, i]`` (t < per) packed at bits ``t * bits``. False (nothing done)
    when the rows of ``source`` are not whole words.

    Plane t holds the words of rows ``t::per``, transposed: ``[w, j]`` is bytes
    ``8w .. 8w+7`` of row ``per * j + t``. For each value position r, word operations put
    value r of every byte of plane t at bits ``t * bits`` of the same byte of one word, whose
    byte c then goes to ``out[8w + c, r, j]``. Blocks of planes stay in cache.
    """
    n, width = source.shape
    per = 8 // bits
    if width % 8 or source.strides[1] != 1 or not source.size:
        return False
    count, cols = width // 8, n // per
    planes = [scratch((count, cols), np.dtype(np.uint64), slot=2 + t) for t in range(per)]
    for t, plane in enumerate(planes):  # at most 4 planes, not a loop over elements
        _transpose_tiles(source[t::per].view(np.uint64), plane)
    mask = np.uint64(int.from_bytes(bytes([(1 << bits) - 1]) * 8, "little"))
    grid = out.reshape(count, 8, per, cols)  # (w, c, r, j) with i = 8w + c
    step = max(1, _BLOCK_BYTES // (8 * cols))  # word rows per block
    for w0 in range(0, count, step):
        w1 = min(w0 + step, count)
        word = scratch((w1 - w0, cols), np.dtype(np.uint64), slot=0)
        term = scratch((w1 - w0, cols), np.dtype(np.uint64), slot=1)
        for r in range(per):  # values of each byte: at most 4, not a loop over elements
            for t, plane in enumerate(planes):
                target = word if t == 0 else term
                np.right_shift(plane[w0:w1], np.uint64(r * bits), out=target)
                np.bitwise_and(target, mask, out=target)
                if t:
                    np.left_shift(term, np.uint64(t * bits), out=term)
                    np.bitwise_or(word, term, out=word)
            spread = word.view(_U8).reshape(w1 - w0, cols, 8).transpose(0, 2, 1)
            np.copyto(grid[w0:w1, :, r, :], spread)
    return True


def _words_transposed(array: np.ndarray) -> np.ndarray | None:
    """``array`` (elements of 1, 2 or 4 bytes, rows of whole 8-byte words) viewed as 8-byte
    words and transposed: ``[w, r]`` is word w of row r (a reused buffer). None when the
    rows are not whole words."""
    rows, cols = array.shape
    size = array.itemsize
    if size not in (1, 2, 4) or (cols * size) % 8 or array.strides[1] != size or not array.size:
        return None
    words = scratch((cols * size // 8, rows), np.dtype(np.uint64), slot=2)
    _transpose_tiles(array.view(np.uint64), words)
    return words


def _unpack_words(words: np.ndarray, out: np.ndarray) -> None:
    """Element e of word ``[w, r]`` to ``out[per * w + e, r]`` (out C-contiguous)."""
    count, rows = words.shape
    per = 8 // out.itemsize
    spread = words.view(out.dtype).reshape(count, rows, per).transpose(0, 2, 1)
    np.copyto(out.reshape(count, per, rows), spread)


#: The word holding one output byte's sources: ``8 / bits`` bytes of consecutive n.
_LANES = {2: np.dtype(np.uint16), 4: np.dtype(np.uint32)}


def _spread(by_k: np.ndarray, out: np.ndarray, bits: int) -> None:
    """``out[i, r, j]`` = value r of bytes ``by_k[i, per * j + t]`` (t < per) packed at bits
    ``t * bits``: word operations on lanes of ``per`` bytes (64-bit words when they fit).

    Value r of each byte is shifted to the bottom of its byte and masked, then the bytes of
    a lane are folded into its low byte (``per`` = 2: one shift by 4; 4: by 6, then by 12),
    which the narrowing copy into ``out`` keeps.
    """
    per = 8 // bits
    lane = _LANES[per]
    words = by_k.view(np.uint64) if by_k.shape[1] % 8 == 0 else by_k.view(lane)
    kind = words.dtype.type
    mask = kind(int.from_bytes(bytes([(1 << bits) - 1]) * words.dtype.itemsize, "little"))
    value = scratch(words.shape, words.dtype, slot=0)
    moved = scratch(words.shape, words.dtype, slot=1)
    for r in range(per):  # at most 4 residues, not a loop over elements
        np.right_shift(words, kind(r * bits), out=value)
        np.bitwise_and(value, mask, out=value)
        shift, span = 8 - bits, 2
        while span <= per:  # one or two folds
            np.right_shift(value, kind(shift), out=moved)
            np.bitwise_or(value, moved, out=value)
            shift, span = shift * 2, span * 2
        np.copyto(out[:, r, :], value.view(lane), casting="unsafe")  # the low byte of lanes


#: Rows per tile of :func:`transpose`: 16 source rows make 16-byte runs in each output row.
_TILE = 16


def transpose(array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A C-contiguous transpose of a 2-D array, tile by tile (into ``out`` if given).

    NumPy's own copy of ``array.T`` walks the source with a row-sized stride per element
    (about 40 ms for 4 MiB of bytes here); 16 source rows at a time write 16-byte runs
    instead (about 2.1 ms). Elements narrower than 8 bytes go faster as 8-byte words: the
    words are transposed (0.5 ms), then each word's elements are spread over its output
    rows (1.2 ms). The loops are over tiles of rows, never over elements.
    """
    rows, cols = array.shape
    if out is None:
        out = np.empty((cols, rows), array.dtype)
    words = _words_transposed(array) if out.flags.c_contiguous else None
    if words is None:
        _transpose_tiles(array, out)
    else:
        _unpack_words(words, out)
    return out


def _transpose_tiles(array: np.ndarray, out: np.ndarray) -> None:
    for start in range(0, array.shape[0], _TILE):
        out[:, start : start + _TILE] = array[start : start + _TILE].T


def dequantize_float_zero_point(q: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """ONNX Runtime's MatMulNBits weight for zero points in the scale type (float32):
    ``q * scale + (-scale * zp)``, each product rounded (not ``(q - zp) * scale``)."""
    out = q.astype(np.float32)
    out *= scale
    adjust = np.multiply(scale, zp, dtype=np.float32)
    np.subtract(out, adjust, out=out)
    return out
