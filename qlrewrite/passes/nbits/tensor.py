"""Lazy tensors that repack ONNX Runtime's weight-only forms, streamed when saved.

Each class is a :class:`~qlrewrite.passes.fold.tensor.StreamedTensor`: nothing is computed
until the model is written, then rows are produced chunk by chunk from the memory-mapped
input (never a whole-tensor copy) by the NumPy functions of :mod:`qlrewrite.kernels.nbits`.

- :class:`MatMulNBitsWeight`: a MatMulNBits weight laid out ``[K, N]`` for
  DequantizeLinear -> MatMul: its quantized values, scales or zero points.
- :class:`MatMulNBitsB`: the reverse: B ``[N, k_blocks, blob]`` from a DequantizeLinear
  input laid out ``[K, N]`` (or ``[N, K]`` behind a Transpose).
- :class:`RetypedTensor`: uint8 data of GatherBlockQuantized holding ``8 / bits`` values
  per byte, as the 2-, 4- or 8-bit tensor it is.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite.io import reading, tensors
from qlrewrite.kernels.nbits import MatMulNBitsLayout, take_bits, unpack
from qlrewrite.passes.fold.tensor import RowReader, StreamedTensor, release_tensor

__all__ = [
    "MappedTensor",
    "MatMulNBitsB",
    "MatMulNBitsFloat",
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


def raw_bytes(tensor: ir.TensorProtocol) -> npt.NDArray[np.uint8]:
    """The stored bytes of ``tensor`` as a 1-D uint8 array (memory-mapped when external).

    The map is closed when the array is dropped, so the pages read do not stay resident.
    """
    if isinstance(tensor, ir.ExternalTensor):
        length = tensors.tensor_bytes(tensor)
        if length == 0:
            return np.empty(0, _U8)
        path = tensors.data_file(tensor)  # the model's folder only
        with reading.opened(path, "external data file", None) as file:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(mapped, _U8, count=length, offset=tensor.offset or 0)
    if tensor.dtype.bitwidth >= 8:
        array = np.asarray(tensor.numpy())
        if array.dtype.byteorder not in "|<=" or not array.flags.c_contiguous:
            return np.frombuffer(tensor.tobytes(), _U8)
        return array.reshape(-1).view(_U8)
    return np.frombuffer(tensor.tobytes(), _U8)


def _values(q: npt.NDArray[np.uint8], dtype: ir.DataType, bits: int) -> npt.NDArray[Any]:
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
        if self.role == "scale":
            scales = _typed(self.scales)
            return lambda kb0, kb1: layout.block_rows(scales, kb0, kb1)
        source = self.b if self.role == "x" else self.zero_points
        return _QuantizedRows(self, None if source is None else raw_bytes(source))

    def _compute(self, read: RowReader, bounds: tuple[int, int]) -> memoryview | bytes:
        """Quantized rows straight from the packed input to the output's packing."""
        if isinstance(read, _QuantizedRows) and read.raw is not None:
            if self.role == "x":
                packed = self.layout.packed_rows(read.raw, *bounds, flip=self.dtype.is_signed())
            else:
                packed = self.layout.packed_zero_point_rows(read.raw, *bounds)
            if packed is not None:
                return np.ascontiguousarray(packed).reshape(-1).data
        return super()._compute(read, bounds)


class MatMulNBitsFloat(StreamedTensor):
    """A MatMulNBits weight dequantized to float32, laid out ``[K, N]``, as ONNX Runtime's
    kernel computes it when DequantizeLinear cannot (zero points in the scale type:
    :func:`~qlrewrite.kernels.nbits.dequantize_float_zero_point`)."""

    __slots__ = ("b", "layout", "scales", "zero_points")

    def __init__(
        self,
        layout: MatMulNBitsLayout,
        *,
        b: ir.TensorProtocol,
        scales: ir.TensorProtocol,
        zero_points: ir.TensorProtocol,
        name: str | None = None,
    ) -> None:
        super().__init__(_DT.FLOAT, ir.Shape([layout.K, layout.N]), name=name)
        self.layout, self.b, self.scales, self.zero_points = layout, b, scales, zero_points

    def rows(self) -> RowReader:
        b, scales, zero_points = raw_bytes(self.b), _typed(self.scales), _typed(self.zero_points)
        return lambda k0, k1: self.layout.dequantized_rows(
            b, scales, zero_points, k0=k0, k1=k1, dtype=np.dtype(np.float32)
        )


class _QuantizedRows:
    """Reader of a MatMulNBits weight's quantized rows ``[k, N]`` (or its zero points'
    ``[k_blocks, N]``), one value per element; ``raw`` is the packed input (None: the
    default zero points)."""

    def __init__(self, tensor: MatMulNBitsWeight, raw: npt.NDArray[np.uint8] | None) -> None:
        self.tensor, self.raw = tensor, raw

    def __call__(self, r0: int, r1: int) -> npt.NDArray[Any]:
        layout, dtype, raw = self.tensor.layout, self.tensor.dtype, self.raw
        if self.tensor.role != "x":
            q = layout.zero_point_rows(raw, r0, r1)
        elif raw is not None:
            q = layout.quantized_rows(raw, r0, r1)
        else:  # the weight's rows read without the weight (rows() always passes b)
            raise ValueError("MatMulNBits weight rows without the packed weight")
        return _values(q, dtype, layout.bits)


def _typed(tensor: ir.TensorProtocol) -> npt.NDArray[Any]:
    """A float tensor's values, memory-mapped when external (unmapped when dropped)."""
    return raw_bytes(tensor).view(np.dtype(tensor.dtype.numpy()).newbyteorder("<"))


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

        def read(n0: int, n1: int) -> npt.NDArray[Any]:
            fast = layout.b_rows(raw, n0, n1, transposed=self.transposed, flip=signed)
            if fast is not None:  # on bytes
                return fast
            k = np.arange(K, dtype=np.int64)
            n = np.arange(n0, n1, dtype=np.int64)
            index = n[:, None] * K + k if self.transposed else k * N + n[:, None]
            q = take_bits(raw, bits, index)  # [n, K]
            if offset:
                q = (q + np.uint8(offset)) & np.uint8((1 << bits) - 1)
            return layout.pack_rows(q)

        return read


class RetypedTensor(StreamedTensor):
    """GatherBlockQuantized's uint8 data (``8 / bits`` values per byte along the last axis)
    as the ``bits``-wide tensor it holds: shape ``[..., D]`` -> ``[..., D * 8 / bits]``; a
    signed ``dtype`` subtracts ``2**(bits-1)`` (the default zero point).

    ``source_dims`` reads the source with another shape of the same size (the data reaches
    the node through a Reshape, as ONNX Runtime GenAI's tied embeddings do).
    """

    __slots__ = ("bits", "source", "source_dims")

    def __init__(
        self,
        source: ir.TensorProtocol,
        dtype: ir.DataType,
        bits: int,
        *,
        source_dims: list[int] | None = None,
        name: str | None = None,
    ) -> None:
        self.source_dims = list(source_dims or source.shape.numpy())
        dims = [*self.source_dims[:-1], self.source_dims[-1] * (8 // bits)]
        super().__init__(dtype, ir.Shape(dims), name=name)
        self.source = source
        self.bits = bits

    def rows(self) -> RowReader:
        bits, source_dims = self.bits, self.source_dims
        row = math.prod(source_dims[1:])
        raw = raw_bytes(self.source)
        out_dims = list(self.shape.numpy())

        def read(r0: int, r1: int) -> npt.NDArray[Any]:
            packed = raw[r0 * row : r1 * row].reshape(r1 - r0, -1, source_dims[-1])
            q = unpack(packed, bits).reshape(r1 - r0, *out_dims[1:])
            return _values(q, self.dtype, bits)

        return read


class MappedTensor(StreamedTensor):
    """A tensor computed from another by ``transform(array)`` on rows of the result.

    ``make_reader`` opens the source (e.g. memory-maps it) and returns a row reader; used
    for the small companions of a weight (scales transposed, zero points repacked).
    """

    __slots__ = ("make_reader", "sources")

    def __init__(
        self,
        make_reader: Callable[[], RowReader],
        dtype: ir.DataType,
        shape: list[int],
        *,
        sources: tuple[ir.TensorProtocol, ...] = (),
        name: str | None = None,
    ) -> None:
        super().__init__(dtype, ir.Shape(shape), name=name)
        self.make_reader = make_reader
        self.sources = sources

    def rows(self) -> RowReader:
        return self.make_reader()

    def release(self) -> None:
        """Unmap the external data of the sources (``numpy()`` keeps it mapped)."""
        for source in self.sources:
            release_tensor(source)
