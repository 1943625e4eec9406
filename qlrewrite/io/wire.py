"""The protobuf wire format of a model file: what a file that does not parse is; a skeleton.

When onnx cannot parse a file, its top level is walked field by field as protobuf writes
a ``ModelProto`` (tag, then a varint, 8 or 4 bytes, or a length and that many bytes):
a field that runs past the end of the file is a truncated model; bytes that start no
field of a ``ModelProto`` before any field did are some other file (text, a zip archive,
or raw bytes such as an external data file); the first field that does not parse after
some that did is where a model was damaged or other bytes were appended
(:func:`diagnose`).

A model with its weights inside is walked the same way before it is parsed
(:class:`Skeleton`): the graphs, nodes, attributes and functions that may hold large
tensors, nothing else; each tensor whose data is large keeps its other fields and points
at where its data lies in the file (:class:`LeftOut`), so the proto parsed holds no
weights. The walk reads a few bytes per field (:class:`Window`), never the data.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, NamedTuple

import onnx

__all__ = [
    "LeftOut",
    "Malformed",
    "SizeOf",
    "Skeleton",
    "Window",
    "diagnose",
    "encode_varint",
    "read_varint",
    "skip_value",
]

_TEXT = set(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
_WIRE_SIZES = {1: 8, 5: 4}
#: ModelProto's fields: number -> (name, wire type).
_FIELDS = {
    f.number: (f.name, 2 if f.type in (f.TYPE_MESSAGE, f.TYPE_STRING, f.TYPE_BYTES) else 0)
    for f in onnx.ModelProto.DESCRIPTOR.fields
}


class _End(Exception):
    """The file ended inside a varint."""


def _varint(file: BinaryIO) -> int:
    value, shift = 0, 0
    while True:
        byte = file.read(1)
        if not byte:
            raise _End
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def diagnose(file: BinaryIO, size: int) -> str | None:
    """Why ``file`` (``size`` bytes, read from the start) is no ONNX model, in words, when
    its wire format says so; None when its top level reads as a ModelProto's (the problem
    is deeper: onnx's own message says more)."""
    head = file.read(512)
    file.seek(0)
    fields, position = 0, 0
    while position < size:
        try:
            problem = _field(file, size)
        except _End:
            return _truncated(size, "a field's tag or varint", None)
        except ValueError as exc:
            problem = str(exc)
        if problem is not None and problem.startswith("truncated"):
            return problem
        if problem is not None:
            return _other(head, position, fields, problem)
        fields, position = fields + 1, file.tell()
    return None


def _field(file: BinaryIO, size: int) -> str | None:
    """Read one top-level field; the problem with it, if any."""
    start = file.tell()
    tag = _varint(file)
    number, wire = tag >> 3, tag & 7
    known = _FIELDS.get(number)
    if known is None or known[1] != wire:
        return f"field {number} of wire type {wire} is no ModelProto field"
    if wire == 0:
        _varint(file)
        return None
    length = _varint(file) if wire == 2 else _WIRE_SIZES[wire]
    begin = file.tell()
    if begin + length > size:
        return _truncated(size, f"{known[0]} (from byte {start})", length)
    file.seek(begin + length)
    return None


def _truncated(size: int, what: str, length: int | None) -> str:
    if length is None:
        return f"truncated: the file ends at byte {size}, inside {what}"
    return f"truncated: the file ends at byte {size}, inside a field of {length} bytes: {what}"


def _other(head: bytes, position: int, fields: int, problem: str) -> str:
    """What a file is whose bytes at ``position`` start no ModelProto field."""
    if fields:
        return (
            f"not an ONNX model: byte {position} starts no field ({problem}) after "
            f"{fields} that parse (damaged, or other bytes appended to a model?)"
        )
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive, not an ONNX model (unpack it first)"
    if head and all(b in _TEXT for b in head.rstrip(b"\x00")):
        return f"looks like text, not an ONNX model ({problem} at byte 0; JSON or textproto?)"
    return (
        f"looks like raw tensor data, not an ONNX model ({problem} at byte 0; an external "
        "data file holds a model's weights, the .onnx file beside it is the model)"
    )


# --------------------------------------------------------------------------- skeleton


class Window:
    """Bytes of an open file read where they are indexed (``window[i]``,
    ``window[a:b]``), a block at a time with ``os.pread``: a walk that reads a few bytes
    here and there never maps or reads the rest (a memory map would bring whole folios of
    the page cache into the process for each byte looked at)."""

    def __init__(self, fd: int, size: int, block: int = 64 << 10) -> None:
        self._fd, self._size, self._block = fd, size, block
        self._start, self._data = 0, b""

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop = index.start or 0, min(index.stop, self._size)
            return self._read(start, stop - start) if stop > start else b""
        at = index - self._start
        if not 0 <= at < len(self._data):
            if not 0 <= index < self._size:
                raise IndexError(index)
            self._start = index
            self._data = self._read(index, self._block)
            at = 0
        return self._data[at]

    def _read(self, start: int, length: int) -> bytes:
        chunks = []
        length = min(length, self._size - start)
        while length > 0:
            chunk = os.pread(self._fd, length, start)
            if not chunk:
                raise Malformed("the file is shorter than it was")
            chunks.append(chunk)
            start, length = start + len(chunk), length - len(chunk)
        return b"".join(chunks)


class Malformed(Exception):
    """The wire format does not walk as a ModelProto's (or too much to walk): parse the
    file whole instead, protobuf says what is wrong."""


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """A tensor the skeleton leaves out: where its bytes lie in the file.

    ``start``/``length``: its TensorProto's bytes. ``data``/``data_length``: its raw_data
    bytes (None: the values are in a typed field, read by parsing the message). ``head``:
    the bytes just before what is read (a key and a length), as the walk saw them.
    """

    start: int
    length: int
    data: int | None
    data_length: int
    head: bytes

    @property
    def read_at(self) -> int:
        """Where the bytes read start (the raw data, or the message)."""
        return self.start if self.data is None else self.data


#: What a tensor of (data type, dims) holds in TensorProto field number N: bytes of
#: raw_data, values of a typed field; None: no valid tensor holds its data there
#: (:func:`qlrewrite.io.data_problems.stored_size`).
SizeOf = Callable[[int, Sequence[int], int], "int | None"]
#: Fields holding messages that may hold tensors: (message kind, field number) -> kind.
_CHILDREN: dict[str, dict[int, str]] = {
    "model": {7: "graph", 25: "function"},
    "graph": {1: "node", 5: "tensor"},
    "function": {7: "node"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph"},
}
_RAW_DATA = 9
_DIMS, _DATA_TYPE, _EXTERNAL_DATA, _DATA_LOCATION = 1, 2, 13, 14
#: TensorProto's typed fields: number -> bytes per value (0: varints).
_TYPED = {4: 4, 5: 0, 7: 0, 10: 8, 11: 0}
_STRING_DATA = 6
#: Protobuf refuses messages nested deeper than 100.
_MAX_NESTING = 100
#: Fields of one TensorProto walked before it is kept whole (the parser judges it).
_TENSOR_FIELDS = 64


def read_varint(buffer: Any, position: int, end: int) -> tuple[int, int]:
    """The varint at ``position`` (before ``end``) and the position after it."""
    value, shift = 0, 0
    while position < end:
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            break
    raise Malformed("a varint that does not end")


def encode_varint(value: int) -> bytes:
    """``value`` as a varint (7 bits a byte, low bits first)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string_field(number: int, data: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(data)) + data


def skip_value(buffer: Any, wire: int, position: int, end: int) -> int:
    """The position after a field's value of ``wire`` type starting at ``position``."""
    if wire == 0:
        return read_varint(buffer, position, end)[1]
    size = {1: 8, 5: 4}.get(wire)
    if size is None:  # 2 is read by the caller; groups (3, 4) and 6, 7: not walked
        raise Malformed(f"wire type {wire}")
    if position + size > end:
        raise Malformed("a field runs past its message")
    return position + size


class Skeleton:
    """A ModelProto's bytes with the data of every tensor above ``min_bytes`` left out.

    Each such tensor stays in place with its name, type, dims and other fields, its data
    replaced by an external data reference to ``marker`` (``offset``: the TensorProto's
    position in the file); :attr:`left_out` says where its bytes are. Walked field by
    field, messages no larger than ``min_bytes`` copied whole: the work grows with the
    number of graphs, nodes and large tensors, not with the bytes of data. ``budget``
    caps the fields walked (:class:`Malformed` beyond it).
    """

    def __init__(
        self, buffer: Any, marker: str, min_bytes: int, budget: int, size_of: SizeOf
    ) -> None:
        self._buffer = buffer
        self._size_of = size_of
        self._marker = marker.encode()
        self._min_bytes = min_bytes
        self._budget = budget
        #: TensorProto position in the file -> where its bytes are.
        self.left_out: dict[int, LeftOut] = {}

    def walk(self, size: int) -> bytes:
        """The skeleton of the ``size`` bytes of the buffer (Malformed: walk no further)."""
        body = self._message("model", 0, size, 0)
        return bytes(self._buffer[0:size]) if body is None else body

    def _message(self, kind: str, start: int, end: int, depth: int) -> bytes | None:
        """The new bytes of a message of ``kind`` (None: unchanged)."""
        if depth > _MAX_NESTING:
            raise Malformed("messages nested too deep")
        children, buffer = _CHILDREN[kind], self._buffer
        pieces: list[bytes] = []
        copied = position = start
        while position < end:
            self._budget -= 1
            if self._budget < 0:
                raise Malformed("too many fields to walk")
            field = _field_at(buffer, position, end)
            position = field.end
            child = children.get(field.number) if field.wire == 2 else None
            if child is None or field.end - field.value_at <= self._min_bytes:
                continue
            if child == "tensor":
                new = self._tensor(field.key_at, field.value_at, field.end - field.value_at)
            else:
                new = self._message(child, field.value_at, field.end, depth + 1)
            if new is not None:
                key = bytes(buffer[field.key_at : field.length_at])
                pieces += [bytes(buffer[copied : field.key_at]), key, encode_varint(len(new)), new]
                copied = position
        if not pieces:
            return None
        pieces.append(bytes(buffer[copied:end]))
        return b"".join(pieces)

    def _tensor(self, key_at: int, start: int, length: int) -> bytes | None:
        """A TensorProto's bytes with its data left out (None: kept whole)."""
        fields = _tensor_fields(self._buffer, start, start + length)
        if fields is None:  # too many fields: kept whole, the parser judges it
            return None
        size = self._size_of(fields.data_type, fields.dims, _RAW_DATA)
        if size is None or size <= self._min_bytes:  # its data is small: kept
            return None
        left = _left_out(self._buffer, fields, (key_at, start, length), self._size_of)
        if left is None:
            return None
        data_key, data_end = fields.data[0][1], fields.data[0][3]
        self.left_out[start] = left
        buffer = self._buffer
        reference = b"".join(
            _string_field(_EXTERNAL_DATA, _string_field(1, key.encode()) + _string_field(2, value))
            for key, value in (
                ("location", self._marker),
                ("offset", str(start).encode()),
                ("length", str(length).encode()),
            )
        )
        location = encode_varint(_DATA_LOCATION << 3) + b"\x01"  # EXTERNAL
        kept = bytes(buffer[start:data_key]) + bytes(buffer[data_end : start + length])
        return kept + reference + location


@dataclasses.dataclass
class _TensorFields:
    dims: list[int] = dataclasses.field(default_factory=list)
    data_type: int = 0
    location: int = 0
    external: bool = False
    #: (field number, key position, value position, end) of each data field.
    data: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)


class _Field(NamedTuple):
    """One field of a message: its number and wire type, where its key, its length (wire
    type 2) and its value start, and where it ends."""

    number: int
    wire: int
    key_at: int
    length_at: int
    value_at: int
    end: int


def _field_at(buffer: Any, position: int, end: int) -> _Field:
    """The field whose key is at ``position`` of a message ending at ``end``."""
    tag, after = read_varint(buffer, position, end)
    if tag >> 3 == 0:
        raise Malformed("field number 0")
    if tag & 7 != 2:
        return _Field(
            tag >> 3, tag & 7, position, after, after, skip_value(buffer, tag & 7, after, end)
        )
    length, value_at = read_varint(buffer, after, end)
    if value_at + length > end:
        raise Malformed("a field runs past its message")
    return _Field(tag >> 3, 2, position, after, value_at, value_at + length)


def _tensor_fields(buffer: Any, start: int, end: int) -> _TensorFields | None:
    """The fields of the TensorProto at ``start`` that decide whether its data can be
    left out; None when it has too many fields or dims to walk (kept whole)."""
    found = _TensorFields()
    position, count = start, 0
    while position < end:
        count += 1
        if count > _TENSOR_FIELDS:
            return None
        field = _field_at(buffer, position, end)
        position = field.end
        if field.number in _TYPED or field.number in (_RAW_DATA, _STRING_DATA):
            found.data.append((field.number, field.key_at, field.value_at, field.end))
        elif field.number == _DIMS and field.wire == 2:
            if field.end - field.value_at > 256:
                return None
            found.dims += _varints(buffer, field.value_at, field.end)
        elif field.wire == 0 and field.number in (_DIMS, _DATA_TYPE, _DATA_LOCATION):
            value = read_varint(buffer, field.value_at, end)[0]
            if field.number == _DIMS:
                found.dims.append(_signed(value))
            elif field.number == _DATA_TYPE:
                found.data_type = value
            else:
                found.location = value
        elif field.number == _EXTERNAL_DATA:
            found.external = True
    return found


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _varints(buffer: Any, position: int, end: int) -> list[int]:
    values = []
    while position < end:
        value, position = read_varint(buffer, position, end)
        values.append(_signed(value))
    return values


def _left_out(
    buffer: Any, fields: _TensorFields, where: tuple[int, int, int], size_of: SizeOf
) -> LeftOut | None:
    """Where the data of a tensor with ``fields`` is, if it can be left out: one data
    field, packed, of the size its type and dims need (anything else is kept whole, for
    the checks of whole tensors to judge). ``where``: the TensorProto's key position,
    its bytes' start and length."""
    key_at, start, length = where
    if fields.external or fields.location != 0 or len(fields.data) != 1:
        return None
    number, data_key, value_at, end = fields.data[0]
    if read_varint(buffer, data_key, end)[0] & 7 != 2:
        return None
    expected = size_of(fields.data_type, fields.dims, number)
    if expected is None:
        return None
    if number == _RAW_DATA:
        if end - value_at != expected:
            return None
        head = bytes(buffer[data_key:value_at])
        return LeftOut(start, length, value_at, end - value_at, head)
    width = _TYPED.get(number)
    if width is None:  # string_data
        return None
    count = (end - value_at) // width if width else _count_varints(buffer, value_at, end)
    if (width and (end - value_at) % width) or count != expected:
        return None
    head = bytes(buffer[key_at:start])
    return LeftOut(start, length, None, 0, head)


#: Bytes of a packed varint field read at once to count its values.
_COUNT_STEP = 4 << 20


def _count_varints(buffer: Any, start: int, end: int) -> int:
    """How many varints ``buffer[start:end]`` holds (Malformed: one does not end, or
    is longer than 10 bytes), read in steps with NumPy."""
    import numpy as np

    count, run = 0, 0  # run: continuation bytes since the last varint ended
    for at in range(start, end, _COUNT_STEP):
        chunk = np.frombuffer(bytes(buffer[at : min(at + _COUNT_STEP, end)]), np.uint8)
        ends = np.flatnonzero(chunk < 0x80)
        if ends.size == 0:
            run += chunk.size
        else:
            gaps = np.diff(ends)
            longest = max(run + int(ends[0]), int(gaps.max()) - 1 if gaps.size else 0)
            if longest >= 10:
                raise Malformed("a varint longer than 10 bytes")
            run = chunk.size - 1 - int(ends[-1])
        if run >= 10:
            raise Malformed("a varint longer than 10 bytes")
        count += ends.size
    if run:
        raise Malformed("a varint that does not end")
    return count
