"""Writing a model as one protobuf file (no external data) one initializer at a time.

``onnx_ir.save`` without external data serializes the whole model into a ModelProto,
then protobuf copies it into bytes, then into Python ``bytes``: a 96 MB output peaked at
four times its size. Here the model is serialized without the main graph's initializers
(no tensor is read), and each initializer is then serialized and written alone, so memory
holds one tensor at a time (and its serialized copy).

The file is a valid ModelProto: protobuf parsers accept fields in any order, so the
initializers follow the rest of the graph, and the graph's length is written as a
fixed-width varint (continuation bytes, which every parser accepts) patched once known.
The model's own fields keep protobuf's order around the graph (OpenVINO's reader needs
it).
Parsed, the file is the same ModelProto ``onnx_ir.save`` writes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import onnx
import onnx_ir as ir

from qlrewrite.io.tensors import InlineTensor, in_memory, serialize_without
from qlrewrite.io.wire import encode_varint, read_varint, skip_value
from qlrewrite.toolkit import main_graphs

#: Called after each initializer is written (model_io.SaveCallback).
SaveCallback = Callable[[ir.TensorProtocol, "CallbackInfo"], None]
CallbackInfo = ir.external_data.CallbackInfo

__all__ = ["save_inline"]

_GRAPH = 7  # ModelProto.graph
_INITIALIZER = 5  # GraphProto.initializer
_RAW_DATA = 9  # TensorProto.raw_data
_RAW_DATA_KEY = _RAW_DATA << 3 | 2
_LENGTH_BYTES = 5  # a graph below 2 GiB: 31 bits, 7 per byte
_PLACEHOLDER = "qlrewrite-inline-placeholder"


def _padded_varint(value: int, width: int) -> bytes:
    """``value`` as a varint of exactly ``width`` bytes (continuation bits, then zeros)."""
    if value >= 1 << (7 * width):
        raise ValueError(f"{value} does not fit a {width}-byte varint")
    return bytes(((value >> (7 * i)) & 0x7F) | (0x80 if i < width - 1 else 0) for i in range(width))


def _key(field: int) -> bytes:
    """The key of a length-delimited field."""
    return encode_varint(field << 3 | 2)


def _skeleton(model: ir.Model, values: list[ir.Value]) -> onnx.ModelProto:
    """``model`` serialized with ``values`` (main-graph initializers) left out; no
    tensor of theirs is read. Attribute and subgraph tensors in external data are read in."""
    proto = serialize_without(model, values, _PLACEHOLDER)
    del proto.graph.initializer[:]
    return proto


def _from_weightless(weightless: onnx.ModelProto, model: ir.Model) -> onnx.ModelProto | None:
    """What :func:`_skeleton` makes, copied from ``weightless``: its main graph without
    initializers and without the inputs it declared for the large ones. None when one of
    those came from a subgraph (the skeleton keeps subgraph initializers in place)."""
    if any(graph.initializers for graph in main_graphs(model)[1:]):
        return None
    inputs = len(model.graph.inputs)
    declared = {info.name for info in weightless.graph.input[inputs:]}
    if not declared <= model.graph.initializers.keys():
        return None
    proto = onnx.ModelProto()
    proto.CopyFrom(weightless)
    del proto.graph.initializer[:]
    del proto.graph.input[inputs:]
    return proto


class _Shell:
    """A tensor's name, type, shape and metadata with no data: what onnx_ir serializes
    around the raw data of a tensor that is not a TensorProto already."""

    def __init__(self, tensor: ir.TensorProtocol) -> None:
        self.name = tensor.name
        self.doc_string = tensor.doc_string
        self.dtype = tensor.dtype
        self.shape = tensor.shape
        self.metadata_props = tensor.metadata_props

    def tobytes(self) -> bytes:
        return b""


def _shell(tensor: ir.TensorProtocol) -> onnx.TensorProto | None:
    """The TensorProto onnx_ir writes for ``tensor`` with an empty raw_data, when its data
    is raw bytes that can be written after it (None: a TensorProto as read, strings, a
    typed field: serialized whole)."""
    if isinstance(tensor, InlineTensor):
        proto = tensor.without_data()
        if proto is None:
            return None
        proto.raw_data = b""
        shell: Any = ir.TensorProtoTensor(proto)
        shell.name = tensor.name
    elif isinstance(tensor, ir.TensorProtoTensor | ir.StringTensor):
        return None
    else:
        shell = _Shell(tensor)
    proto = onnx.TensorProto()
    ir.serde.serialize_tensor_into(proto, shell)
    return proto


def _split_at_raw_data(data: bytes) -> tuple[bytes, bytes]:
    """A serialized TensorProto with an empty raw_data: the bytes before and after it."""
    position = 0
    while position < len(data):
        tag, after = read_varint(data, position, len(data))
        if tag == _RAW_DATA_KEY and data[after] == 0:
            return data[:position], data[after + 1 :]
        if tag & 7 == 2:
            length, after = read_varint(data, after, len(data))
            position = after + length
        else:
            position = skip_value(data, tag & 7, after, len(data))
    raise ValueError("no raw_data field")


def _write_initializer(file: BinaryIO, value: ir.Value) -> int:
    """Write ``value``'s tensor as an initializer field, as onnx_ir serializes it (its name
    the value's name); raw data is streamed into the file (:meth:`tofile`: folded tensors
    computed in chunks, inline and external ones copied from their file), any other tensor
    serialized alone. Returns the bytes written."""
    tensor = value.const_value
    assert tensor is not None
    tensor.name = value.name
    shell = _shell(tensor)
    if shell is None:
        whole = onnx.TensorProto()
        ir.serde.serialize_tensor_into(whole, in_memory(tensor))
        data = whole.SerializeToString()
        field = _key(_INITIALIZER) + encode_varint(len(data))
        file.write(field)
        file.write(data)
        return len(field) + len(data)
    before, after = _split_at_raw_data(shell.SerializeToString())
    size = tensor.nbytes
    raw = _key(_RAW_DATA) + encode_varint(size)
    inner = len(before) + len(raw) + size + len(after)
    field = _key(_INITIALIZER) + encode_varint(inner)
    for part in (field, before, raw):
        file.write(part)
    file.flush()  # a tensor may write through the descriptor
    start = file.tell()
    tensor.tofile(file)
    file.flush()
    if file.tell() - start != size:
        raise ValueError(f"tensor '{value.name}' wrote {file.tell() - start} bytes, not {size}")
    file.write(after)
    return len(field) + inner


def _write_graph(
    file: BinaryIO, graph: bytes, values: list[ir.Value], callback: SaveCallback | None
) -> None:
    file.write(_key(_GRAPH))
    length_at = file.tell()
    file.write(bytes(_LENGTH_BYTES))
    file.write(graph)
    size = len(graph)
    for index, value in enumerate(values):
        size += _write_initializer(file, value)
        if callback is not None:
            info = CallbackInfo(
                total=len(values), index=index, offset=file.tell(), filename=file.name
            )
            assert value.const_value is not None
            callback(value.const_value, info)
    end = file.tell()
    file.seek(length_at)
    file.write(_padded_varint(size, _LENGTH_BYTES))
    file.seek(end)


def save_inline(
    model: ir.Model,
    path: str | Path,
    callback: SaveCallback | None = None,
    weightless: onnx.ModelProto | None = None,
) -> None:
    """Write ``model`` to ``path`` with every tensor inside the file, the main graph's
    initializers serialized one at a time; ``callback`` is called after each (as onnx_ir
    calls it for external data: progress). ``weightless``: the
    :func:`~qlrewrite.io.weightless.weightless_proto` of ``model`` as it is now, if the
    caller has it: the rest of the model is copied from it, not serialized again."""
    values = [v for v in model.graph.initializers.values() if v.const_value is not None]
    proto = _from_weightless(weightless, model) if weightless is not None else None
    if proto is None:
        proto = _skeleton(model, values)
    graph = proto.graph.SerializeToString()
    proto.ClearField("graph")
    head, tail = _around_graph(proto)
    with open(path, "wb") as file:
        file.write(head)
        _write_graph(file, graph, values, callback)
        file.write(tail)


def _around_graph(proto: onnx.ModelProto) -> tuple[bytes, bytes]:
    """``proto`` (no graph) as the fields numbered below the graph's and those above it:
    the file keeps protobuf's field order. OpenVINO 2026.4.1's ONNX reader refuses a file
    whose repeated field (two opset imports) comes before three distinct fields (measured:
    ir_version, opset_import x2, graph is refused; ir_version, graph, opset_import x2 is
    read)."""
    head, tail = onnx.ModelProto(), onnx.ModelProto()
    head.CopyFrom(proto)
    tail.CopyFrom(proto)
    for field, _ in proto.ListFields():
        (tail if field.number < _GRAPH else head).ClearField(field.name)
    return head.SerializeToString(), tail.SerializeToString()
