"""What a file that does not parse as an ONNX model is: read from its protobuf wire format.

When onnx cannot parse a file, its top level is walked field by field as protobuf writes
a ``ModelProto`` (tag, then a varint, 8 or 4 bytes, or a length and that many bytes):
a field that runs past the end of the file is a truncated model; bytes that start no
field of a ``ModelProto`` before any field did are some other file (text, a zip archive,
or raw bytes such as an external data file); the first field that does not parse after
some that did is where a model was damaged or other bytes were appended.
"""

from __future__ import annotations

from typing import BinaryIO

import onnx

__all__ = ["diagnose"]

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
