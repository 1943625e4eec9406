"""Writing a model as one protobuf file (no external data) one initializer at a time.

``onnx_ir.save`` without external data serializes the whole model into a ModelProto,
then protobuf copies it into bytes, then into Python ``bytes``: a 96 MB output peaked at
four times its size. Here the model is serialized without the main graph's initializers
(no tensor is read), and each initializer is then serialized and written alone, so memory
holds one tensor at a time (and its serialized copy).

The file is a valid ModelProto: protobuf parsers accept fields in any order, so the
initializers follow the rest of the graph, and the graph's length is written as a
fixed-width varint (continuation bytes, which every parser accepts) patched once known.
Parsed, the file is the same ModelProto ``onnx_ir.save`` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import onnx
import onnx_ir as ir

from qlrewrite.io.tensors import serialize_without
from qlrewrite.toolkit import main_graphs

#: Called after each initializer is written (model_io.SaveCallback).
SaveCallback = Callable[[ir.TensorProtocol, "CallbackInfo"], None]
CallbackInfo = ir.external_data.CallbackInfo

__all__ = ["save_inline"]

_GRAPH = 7  # ModelProto.graph
_INITIALIZER = 5  # GraphProto.initializer
_LENGTH_BYTES = 5  # a graph below 2 GiB: 31 bits, 7 per byte
_PLACEHOLDER = "qlrewrite-inline-placeholder"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _padded_varint(value: int, width: int) -> bytes:
    """``value`` as a varint of exactly ``width`` bytes (continuation bits, then zeros)."""
    if value >= 1 << (7 * width):
        raise ValueError(f"{value} does not fit a {width}-byte varint")
    return bytes(((value >> (7 * i)) & 0x7F) | (0x80 if i < width - 1 else 0) for i in range(width))


def _key(field: int) -> bytes:
    """The key of a length-delimited field."""
    return _varint(field << 3 | 2)


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


def _initializers(values: list[ir.Value]) -> Iterator[tuple[ir.TensorProtocol, bytes]]:
    """Each initializer serialized as onnx_ir serializes it (its name the value's name),
    one at a time, with its tensor."""
    for value in values:
        tensor = value.const_value
        assert tensor is not None
        tensor.name = value.name
        if isinstance(tensor, ir.ExternalTensor):  # the input's file: read it in, alone
            tensor = ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=value.name)
        proto = onnx.TensorProto()
        ir.serde.serialize_tensor_into(proto, tensor)
        yield value.const_value, proto.SerializeToString()


def _write_graph(
    file: BinaryIO, graph: bytes, values: list[ir.Value], callback: SaveCallback | None
) -> None:
    file.write(_key(_GRAPH))
    length_at = file.tell()
    file.write(bytes(_LENGTH_BYTES))
    file.write(graph)
    size = len(graph)
    for index, (tensor, data) in enumerate(_initializers(values)):
        head = _key(_INITIALIZER) + _varint(len(data))
        file.write(head)
        file.write(data)
        if callback is not None:
            info = CallbackInfo(
                total=len(values), index=index, offset=file.tell(), filename=file.name
            )
            callback(tensor, info)
        size += len(head) + len(data)
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
    with open(path, "wb") as file:
        file.write(proto.SerializeToString())
        _write_graph(file, graph, values, callback)
