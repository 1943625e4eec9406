"""Lazy tensors that repack ONNX Runtime's weight-only forms, streamed when saved.

Each class is a :class:`~qlrewrite.passes.fold_tensor.StreamedTensor`: nothing is computed
until the model is written, then rows are produced chunk by chunk from the memory-mapped
input (never a whole-tensor copy) by the NumPy functions of :mod:`qlrewrite.kernels.nbits`.

- :class:`MatMulNBitsWeight`: a MatMulNBits weight laid out ``[K, N]`` for
  DequantizeLinear -> MatMul: its quantized values, scales or zero points.
- :class:`MatMulNBitsB`: the reverse: B ``[N, k_blocks, blob]`` from a DequantizeLinear
  input laid out ``[K, N]`` (or ``[N, K]`` behind a Transpose).
- :class:`RetypedTensor`: uint8 data of GatherBlockQuantized holding ``8 / bits`` values
  per byte, as the 2-, 4- or 8-bit tensor it is (or the reverse).
"""

from __future__ import annotations

import math
import mmap

import numpy as np
import onnx_ir as ir

from qlrewrite.kernels.nbits import MatMulNBitsLayout, pack, take_bits, unpack
from qlrewrite.passes.fold_tensor import RowReader, StreamedTensor

__all__ = [
    "MappedTensor",
    "MatMulNBitsB",
    "MatMulNBitsWeight",
    "RetypedTensor",
    "int_type",
    "raw_bytes",
]

_U8 = np.dtype(np.uint8)
_DT = ir.DataType

#: (bits, signed) -> the ONNX element type of that width.
_INT_TYPES = {
    (2, False): _DT.UINT2,
    (2, True): _DT.INT2,
    (4, False): _DT.UINT4,
    (4, True): _DT.INT4,
    (8, False): _DT.UINT8,
    (8, True): _DT.INT8,
}


def int_type(bits: int, signed: bool) -> ir.DataType:
    """The integer element type of ``bits`` bits."""
    return _INT_TYPES[(bits, signed)]


def raw_bytes(tensor: ir.TensorProtocol) -> np.ndarray:
    """The stored bytes of ``tensor`` as a 1-D uint8 array (memory-mapped when external).

    The map is closed when the array is dropped, so the pages read do not stay resident.
    """
    if isinstance(tensor, ir.ExternalTensor):
        length = math.ceil(tensor.size * tensor.dtype.bitwidth / 8)
        if length == 0:
            return np.empty(0, _U8)
        with open(tensor.path, "rb") as file:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(mapped, _U8, count=length, offset=tensor.offset or 0)
    if tensor.dtype.bitwidth >= 8:
        array = np.asarray(tensor.numpy())
        if array.dtype.byteorder not in "|<=" or not array.flags.c_contiguous:
            return np.frombuffer(tensor.tobytes(), _U8)
        return array.reshape(-1).view(_U8)
    return np.frombuffer(tensor.tobytes(), _U8)


def _values(q: np.ndarray, dtype: ir.DataType, bits: int) -> np.ndarray:
    """uint8 values ``q`` (< 2**bits) as an array of ``dtype``; a signed type stores
    ``q - 2**(bits-1)`` (the default zero point taken out)."""
    if dtype.is_signed():
        return (q.astype(np.int16) - (1 << (bits - 1))).astype(dtype.numpy())
    return q.astype(dtype.numpy())


class MatMulNBitsWeight(StreamedTensor):
    """One input of the DequantizeLinear a MatMulNBits becomes, laid out ``[K, N]``.

    ``role``: ``"x"`` (the quantized weight ``[K, N]``, of ``dtype``: unsigned with the
    zero points, or signed when the node had none: ``q - 2**(bits-1)``), ``"scale"``
    (``[k_blocks, N]``) or ``"zero_point"`` (``[k_blocks, N]``, unsigned).
    """

    __slots__ = ("b", "layout", "role", "scales", "zero_points")

    def __init__(
        self,
        role: str,
        layout: MatMulNBitsLayout,
        dtype: ir.DataType,
        *,
        b: ir.TensorProtocol,
        scales: ir.TensorProtocol,
        zero_points: ir.TensorProtocol | None,
        name: str | None = None,
    ) -> None:
        rows = layout.K if role == "x" else layout.k_blocks
        super().__init__(dtype, ir.Shape([rows, layout.N]), name=name)
        self.role = role
        self.layout = layout
        self.b = b
        self.scales = scales
        self.zero_points = zero_points

    def rows(self) -> RowReader:
        layout = self.layout
        if self.role == "x":
            b = raw_bytes(self.b)
            return lambda k0, k1: _values(layout.quantized_rows(b, k0, k1), self.dtype, layout.bits)
        if self.role == "scale":
            scales = np.asarray(self.scales.numpy())
            return lambda kb0, kb1: layout.block_rows(scales, kb0, kb1)
        zero_points = None if self.zero_points is None else raw_bytes(self.zero_points)
        return lambda kb0, kb1: _values(
            layout.zero_point_rows(zero_points, kb0, kb1), self.dtype, layout.bits
        )


class MatMulNBitsB(StreamedTensor):
    """MatMulNBits' B ``[N, k_blocks, blob]`` (uint8) from a DequantizeLinear input.

    ``x`` holds the quantized weight laid out ``[K, N]`` (``transposed=False``) or ``[N, K]``
    (behind a Transpose), of a ``bits``-wide type; a signed type (no zero point) is stored
    as ``x + 2**(bits-1)`` (MatMulNBits' default zero point). The padding of a partial last
    block is zero bits, what ONNX Runtime's quantizer leaves there.
    """

    __slots__ = ("layout", "transposed", "x")

    def __init__(
        self,
        layout: MatMulNBitsLayout,
        x: ir.TensorProtocol,
        *,
        transposed: bool,
        name: str | None = None,
    ) -> None:
        super().__init__(_DT.UINT8, ir.Shape(list(layout.b_shape)), name=name)
        self.layout = layout
        self.x = x
        self.transposed = transposed

    def rows(self) -> RowReader:
        layout = self.layout
        K, N, bits = layout.K, layout.N, layout.bits
        raw = raw_bytes(self.x)
        signed = self.x.dtype.is_signed()
        offset = (1 << (bits - 1)) if signed else 0

        def read(n0: int, n1: int) -> np.ndarray:
            k = np.arange(K, dtype=np.int64)
            n = np.arange(n0, n1, dtype=np.int64)
            index = n[:, None] * K + k if self.transposed else k * N + n[:, None]
            q = take_bits(raw, bits, index)  # [n, K]
            if offset:
                q = (q + np.uint8(offset)) & np.uint8((1 << bits) - 1)
            return layout.pack_rows(q)

        return read


class RetypedTensor(StreamedTensor):
    """A tensor's values in another packing: uint8 bytes holding ``8 / bits`` values each
    along the last axis (GatherBlockQuantized's uint8 data) <-> a ``bits``-wide tensor.

    ``to_packed=False``: the packed uint8 ``source`` (shape ``[..., D]``) read as ``dtype``
    (``[..., D * 8 / bits]``; a signed ``dtype`` subtracts ``2**(bits-1)``, the default zero
    point). ``to_packed=True``: the reverse (a signed source adds it back).
    """

    __slots__ = ("bits", "source", "to_packed")

    def __init__(
        self,
        source: ir.TensorProtocol,
        dtype: ir.DataType,
        bits: int,
        *,
        to_packed: bool,
        name: str | None = None,
    ) -> None:
        dims = list(source.shape.numpy())
        per = 8 // bits
        dims[-1] = -(-dims[-1] // per) if to_packed else dims[-1] * per
        super().__init__(dtype, ir.Shape(dims), name=name)
        self.source = source
        self.bits = bits
        self.to_packed = to_packed

    def rows(self) -> RowReader:
        bits = self.bits
        source_dims = list(self.source.shape.numpy())
        row = math.prod(source_dims[1:])
        if self.to_packed:
            half = (1 << (bits - 1)) if self.source.dtype.is_signed() else 0
            mask = np.uint8((1 << bits) - 1)
            values = raw_bytes(self.source)
            shape = self.shape.numpy()

            def read_packed(r0: int, r1: int) -> np.ndarray:
                index = np.arange(r0 * row, r1 * row, dtype=np.int64)
                q = take_bits(values, bits, index) if bits < 8 else values[index]
                q = (q + np.uint8(half)) & mask if half else q
                q = q.reshape(r1 - r0, -1, source_dims[-1])
                return pack(q, bits).reshape(r1 - r0, *shape[1:])

            return read_packed
        raw = raw_bytes(self.source)
        out_dims = list(self.shape.numpy())

        def read(r0: int, r1: int) -> np.ndarray:
            packed = raw[r0 * row : r1 * row].reshape(r1 - r0, -1, source_dims[-1])
            q = unpack(packed, bits).reshape(r1 - r0, *out_dims[1:])
            return _values(q, self.dtype, bits)

        return read


class MappedTensor(StreamedTensor):
    """A tensor computed from another by ``transform(array)`` on rows of the result.

    ``make_reader`` opens the source (e.g. memory-maps it) and returns a row reader; used
    for the small companions of a weight (scales transposed, zero points repacked).
    """

    __slots__ = ("make_reader",)

    def __init__(
        self,
        make_reader,
        dtype: ir.DataType,
        shape: list[int],
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(dtype, ir.Shape(shape), name=name)
        self.make_reader = make_reader

    def rows(self) -> RowReader:
        return self.make_reader()
