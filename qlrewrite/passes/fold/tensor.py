"""Folded values: QuantizeLinear / DequantizeLinear of constants, computed when saved.

A :class:`FoldedTensor` is an ``onnx_ir.LazyTensor`` holding one Q or DQ applied to
constant operands. Nothing is computed until the value is needed. When onnx_ir writes
it to an external data file (:meth:`FoldedTensor.tofile`), it is computed and written
in chunks of rows (along axis 0) on one background thread, the next chunk computed while
the previous one is written, and the next tensor prepared while the last chunk is
written: memory holds one or two input tensors plus a few output chunks, whatever the
model size. The input of a folded DQ may itself be a folded Q (a Q -> DQ chain): it is
then read chunk by chunk too, and the intermediate quantized tensor never exists whole.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, Protocol, get_args

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite.toolkit import main_graphs, tensor_shape

#: How float16 DQ values that ONNX Runtime computes in float32 are folded: "exact" (as
#: ONNX Runtime computes them: float32, then a Cast) or "compact" (float16, rounded).
Float16Mode = Literal["exact", "compact"]
FLOAT16_MODES: tuple[str, ...] = get_args(Float16Mode)

__all__ = [
    "CHUNK_BYTES",
    "ConstOperand",
    "FoldSpec",
    "FoldedTensor",
    "Operand",
    "StreamedTensor",
    "link_in_order",
    "link_initializers",
    "release_tensor",
]

#: Output bytes computed per chunk when a folded tensor is written to a file.
CHUNK_BYTES = 4 << 20

_LITTLE = sys.byteorder == "little"

#: Reads rows ``[start, stop)`` of axis 0 (the whole array for a scalar).
RowReader = Callable[[int, int], npt.NDArray[Any]]
#: What opening a streamed tensor gives: its row reader, the chunk ranges, the first chunk.
_Opened = tuple[RowReader, list[tuple[int, int]], memoryview | bytes]


class Operand(Protocol):
    """The x input of a folded node: a constant tensor or another folded tensor."""

    @property
    def shape(self) -> ir.Shape: ...

    def rows(self) -> RowReader:
        """A reader of row ranges; the data it needs stays loaded while it lives."""
        ...

    def release(self) -> None:
        """Unmap external data read by :meth:`rows` once no reader is left."""
        ...


@dataclasses.dataclass(frozen=True)
class ConstOperand:
    """A constant tensor (initializer or Constant node value) as an operand."""

    tensor: ir.TensorProtocol

    @property
    def shape(self) -> ir.Shape:
        return tensor_shape(self.tensor)

    def rows(self) -> RowReader:
        array = np.asarray(self.tensor.numpy())  # external data: memory-mapped or unpacked once
        if array.ndim == 0:
            return lambda start, stop: array
        return lambda start, stop: array[start:stop]

    def release(self) -> None:
        """Unmap the tensor's external data, if any."""
        release_tensor(self.tensor)


@dataclasses.dataclass(frozen=True)
class FoldSpec:
    """What to compute: the op and its attributes with the defaults of its version applied."""

    quantize: bool
    axis: int
    block_size: int
    output_dtype: ir.DataType
    saturate: int = 1
    precision: int = 0
    widened: bool = False  # a float16 DQ computed to float32 (the model Casts it back)


class StreamedTensor(ir.LazyTensor):
    """A lazily computed tensor written to a file in chunks of rows (along axis 0).

    Subclasses give :meth:`rows` (a reader of output row ranges), :meth:`release` (unmap
    what the reader loaded) and optionally :meth:`row_multiple` (chunk boundaries).
    Also usable as the x operand of a :class:`FoldedTensor` (it has ``shape`` and ``rows``).
    """

    __slots__ = ("_prefetched", "successor")

    def __init__(self, dtype: ir.DataType, shape: ir.Shape, *, name: str | None = None) -> None:
        super().__init__(self._whole, dtype, shape, name=name)
        #: The streamed tensor written after this one, if known (see :meth:`iter_chunks`).
        self.successor: StreamedTensor | None = None
        self._prefetched: concurrent.futures.Future[_Opened] | None = None

    def rows(self) -> RowReader:
        """A reader of output rows; the data it needs stays loaded while it lives."""
        raise NotImplementedError

    def release(self) -> None:
        """Unmap the external data :meth:`rows` read (it is mapped again when needed)."""

    def row_multiple(self) -> int:
        """Chunks start at multiples of this many rows (1: anywhere)."""
        return 1

    def _whole(self) -> ir.TensorProtocol:
        shape = self.shape.numpy()
        if self.size == 0:  # a dimension of size 0: nothing to read or compute
            empty = np.zeros(shape, self.dtype.numpy())
            return ir.Tensor(empty, dtype=self.dtype, name=self.name)
        array = self.rows()(0, shape[0] if shape else 0)
        return ir.Tensor(np.asarray(array), dtype=self.dtype, name=self.name)

    def chunk_rows(self) -> int:
        """Rows per chunk: about CHUNK_BYTES of output, aligned to blocks and byte packing."""
        shape = self.shape.numpy()
        row_elements = math.prod(shape[1:])
        row_bytes = max(1, math.ceil(row_elements * self.dtype.bitwidth / 8))
        multiple = self.row_multiple()
        if self.dtype.bitwidth < 8:  # packed types: whole bytes per chunk
            multiple = math.lcm(multiple, 4)
        rows = max(1, CHUNK_BYTES // row_bytes)
        return max(multiple, rows // multiple * multiple)

    def iter_chunks(self) -> Iterator[memoryview | bytes]:
        """The tensor's bytes in chunks of rows, each computed ahead of its consumer.

        Chunks are computed on one background thread while the previous chunk is being
        written. Memory-mapped inputs are released once the last chunk is computed, so
        the pages they brought in do not stay resident; then the :attr:`successor`
        (the next folded tensor to be written) starts loading its input and its first
        chunk while this tensor's last chunk is written.
        """
        try:
            yield from self._chunks()
        finally:
            self.release()

    def _streams(self) -> bool:
        """True if written in chunks of rows (not a scalar, not empty)."""
        return self.shape.rank() > 0 and self.size > 0

    def _chunks(self) -> Iterator[memoryview | bytes]:
        if not self._streams():
            yield self._whole().tobytes()
            return
        prefetched, self._prefetched = self._prefetched, None
        read, ranges, first = prefetched.result() if prefetched else self._open()
        pool = _pool()
        pending = None
        for bounds in ranges[1:]:
            pending = pool.submit(self._compute, read, bounds)
            yield first
            first = pending.result()
        del read, pending, prefetched  # drop every view of the inputs, then unmap them
        self.release()
        if self.successor is not None and self.successor._streams():
            self.successor._prefetched = pool.submit(self.successor._open)
        yield first

    def _open(self) -> _Opened:
        """Load the inputs; return the row reader, the chunk ranges and the first chunk."""
        rows = self.shape.numpy()[0]
        step = self.chunk_rows()
        ranges = [(start, min(start + step, rows)) for start in range(0, rows, step)]
        read = self.rows()
        return read, ranges, self._compute(read, ranges[0])

    def _compute(self, read: RowReader, bounds: tuple[int, int]) -> memoryview | bytes:
        return _as_bytes(np.asarray(read(*bounds)), self.dtype)

    def tofile(self, file: Any) -> None:  # any binary file object
        """Compute and write the tensor chunk by chunk."""
        start = _position(file)
        for data in self.iter_chunks():
            file.write(data)
        _drop_from_page_cache(file, start)


class FoldedTensor(StreamedTensor):
    """``Q(x, scale, zero_point)`` or ``DQ(x, scale, zero_point)`` of constants, lazily."""

    __slots__ = ("scale", "spec", "x", "zero_point")

    def __init__(
        self,
        spec: FoldSpec,
        x: Operand,
        scale: ir.TensorProtocol,
        zero_point: ir.TensorProtocol | None,
        *,
        name: str | None = None,
    ) -> None:
        shape = ir.Shape(x.shape.numpy())
        super().__init__(spec.output_dtype, shape, name=name)
        self.spec = spec
        self.x = x
        self.scale = scale
        self.zero_point = zero_point

    @property
    def widened(self) -> bool:
        """True for a float16 DQ folded to float32 (see :class:`FoldSpec`)."""
        return self.spec.widened

    def __repr__(self) -> str:
        op = "QuantizeLinear" if self.spec.quantize else "DequantizeLinear"
        return f"FoldedTensor({op}, {self.dtype.name}, {list(self.shape)}, name={self.name!r})"

    # ---------------------------------------------------------------- computing

    def rows(self) -> RowReader:
        """A reader of output rows: loads x (or opens the chained Q), scale and zero point."""
        x_rows = self.x.rows()
        scale = np.asarray(self.scale.numpy())
        zero_point = None if self.zero_point is None else np.asarray(self.zero_point.numpy())
        spec = self.spec
        shape = self.shape.numpy()
        rank = len(shape)
        if rank == 0:
            return lambda start, stop: self._kernel(x_rows(0, 0), scale, zero_point)
        n0 = shape[0]
        axis = spec.axis + rank if spec.axis < 0 else spec.axis
        block = spec.block_size if axis == 0 else 0
        # The scale has rows of its own when blocked (rank of x) or per-axis on axis 0.
        per_axis0 = axis == 0 and scale.ndim == 1 and scale.shape[0] == n0 > 1
        row_scale = spec.block_size > 0 or per_axis0

        def read(start: int, stop: int) -> npt.NDArray[Any]:
            if block:
                lo, hi = start // block * block, min(-(-stop // block) * block, n0)
                s_lo, s_hi = lo // block, -(-hi // block)
                out = self._kernel(
                    x_rows(lo, hi),
                    scale[s_lo:s_hi],
                    None if zero_point is None else zero_point[s_lo:s_hi],
                )
                return out[start - lo : stop - lo]
            if row_scale:
                return self._kernel(
                    x_rows(start, stop),
                    scale[start:stop],
                    None if zero_point is None else zero_point[start:stop],
                )
            return self._kernel(x_rows(start, stop), scale, zero_point)

        return read

    def _kernel(
        self, x: npt.NDArray[Any], scale: npt.NDArray[Any], zero_point: npt.NDArray[Any] | None
    ) -> npt.NDArray[Any]:
        from qlrewrite.kernels import dequantize, quantize  # here: keeps the CLI light

        spec = self.spec
        if spec.quantize:
            return quantize(
                x,
                scale,
                zero_point,
                axis=spec.axis,
                block_size=spec.block_size,
                saturate=bool(spec.saturate),
                output_dtype=spec.output_dtype,
                precision=spec.precision or None,
            )
        return dequantize(
            x,
            scale,
            zero_point,
            axis=spec.axis,
            block_size=spec.block_size,
            output_dtype=spec.output_dtype,
        )

    def row_multiple(self) -> int:
        """Blocked along axis 0: chunks hold whole blocks."""
        axis = self.spec.axis + self.shape.rank() if self.spec.axis < 0 else self.spec.axis
        return self.spec.block_size if axis == 0 and self.spec.block_size > 0 else 1

    def release(self) -> None:
        """Unmap the external data the operands read (it is mapped again when needed)."""
        self.x.release()
        release_tensor(self.scale)
        release_tensor(self.zero_point)


_POOL: list[concurrent.futures.ThreadPoolExecutor] = []


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """The one background thread that computes chunks (created on first use)."""
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qlrewrite-fold"))
    return _POOL[0]


def link_initializers(model: ir.Model) -> None:
    """Link the model's streamed initializers in the order onnx_ir's save writes them."""
    link_in_order(
        value.const_value
        for graph in main_graphs(model)
        for value in graph.initializers.values()
        if isinstance(value.const_value, StreamedTensor)
    )


def link_in_order(tensors: Iterable[StreamedTensor]) -> None:
    """Tell each tensor which one is written after it, so it can be prepared in advance."""
    previous = None
    for tensor in tensors:
        if previous is not None:
            previous.successor = tensor
        previous = tensor


def _as_bytes(array: npt.NDArray[Any], dtype: ir.DataType) -> memoryview | bytes:
    """The bytes of ``array`` as ONNX stores ``dtype``, without a copy when possible."""
    native = array.dtype.byteorder in "|<" or (array.dtype.byteorder == "=" and _LITTLE)
    if dtype.bitwidth >= 8 and native and array.flags.c_contiguous:
        return array.view(np.uint8).reshape(-1).data
    return ir.Tensor(array, dtype=dtype).tobytes()


def _position(file: Any) -> int | None:
    try:
        return int(file.tell())
    except (AttributeError, OSError, ValueError):
        return None


def _drop_from_page_cache(file: Any, start: int | None) -> None:
    """Start writing back what was just written and let the page cache drop it.

    Only a hint (the save still fsyncs): it keeps gigabytes of output from piling up as
    dirty pages, which made writes stall and the final fsync slow (about 2x faster saves).
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or start is None:
        return
    try:
        file.flush()
        advise(file.fileno(), start, file.tell() - start, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError, ValueError):  # not a regular file: nothing to drop
        return


def release_tensor(tensor: ir.TensorProtocol | None) -> None:
    """Unmap an external tensor's data if nothing holds a view of it (else keep the map)."""
    if isinstance(tensor, ir.ExternalTensor):
        with contextlib.suppress(BufferError):  # someone still holds a view: keep the map
            tensor.release()
