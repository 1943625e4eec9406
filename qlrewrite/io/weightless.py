"""A weight-free ModelProto of an in-memory model, for ONNX's checker and shape inference.

ONNX's C++ APIs take a serialized model, which cannot exceed 2 GB and would read every
lazy or external tensor. Here each initializer above a few bytes is left out of the
proto and declared as a main-graph input of the same type and shape instead, so the
checker and shape inference see the same names, types and shapes without any data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import onnx
import onnx_ir as ir

from qlrewrite.io.tensors import serialize_without
from qlrewrite.toolkit import main_graphs, nbytes, proto_graphs

__all__ = ["INLINE_BYTES", "weightless_from_source", "weightless_proto"]

_PLACEHOLDER = "qlrewrite-weightless-placeholder"
#: Bytes: a larger initializer is left out (declared as an input).
INLINE_BYTES = 1024


def weightless_proto(model: ir.Model, *, max_inline_bytes: int = INLINE_BYTES) -> onnx.ModelProto:
    """Serialize ``model`` without initializers larger than ``max_inline_bytes``.

    Evaluates no lazy tensor and reads no large initializer; the model is left unchanged.
    Small initializers stay, so shape inference can still use constant shapes and axes;
    those and node attribute tensors (Constant values) that live in external data are read
    into the proto, which has no folder to resolve them against.
    """
    large = [
        value
        for graph in main_graphs(model)
        for value in graph.initializers.values()
        if value.const_value is not None and value.const_value.nbytes > max_inline_bytes
    ]
    proto = serialize_without(model, large, _PLACEHOLDER)
    _hoist_placeholders(proto)
    return proto


def _hoist_placeholders(proto: onnx.ModelProto) -> None:
    """Turn placeholder initializers of every graph (subgraphs too) into main inputs."""
    main = proto.graph
    input_names = {i.name for i in main.input}
    for _, graph in proto_graphs(proto):
        if not isinstance(graph, onnx.GraphProto):
            continue
        kept = []
        for tensor in graph.initializer:
            location = {e.key: e.value for e in tensor.external_data}.get("location")
            if tensor.data_location != onnx.TensorProto.EXTERNAL or location != _PLACEHOLDER:
                kept.append(tensor)
                continue
            if tensor.name not in input_names:
                main.input.append(
                    onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
                )
                input_names.add(tensor.name)
        if len(kept) != len(graph.initializer):
            del graph.initializer[:]
            graph.initializer.extend(kept)


def weightless_from_source(
    source: onnx.ModelProto, *, max_inline_bytes: int = INLINE_BYTES
) -> onnx.ModelProto | None:
    """What :func:`weightless_proto` returns, built from the ModelProto a model was just
    deserialized from: a copy of its nodes and small initializers, no per-node Python work.

    Shape inference on it gives the same types and shapes for every value that is not an
    initializer (onnx_ir also declares initializers in ``value_info``; this copy does not,
    and their types come from the tensors). Only valid while the model is unchanged since
    it was loaded from ``source``. None when the copy could differ from serializing the
    model (a kept tensor in external data, a string, unknown or sparse initializer, a
    large initializer in a subgraph): use :func:`weightless_proto` then.
    """
    main = source.graph
    proto = onnx.ModelProto()
    _copy_fields(source, proto, skip=("graph",))
    _copy_fields(main, proto.graph, skip=("initializer", "value_info"))
    split = _split_initializers(source, max_inline_bytes)
    if split is None:
        return None
    kept, hoisted = split
    proto.graph.initializer.extend(kept)
    proto.graph.value_info.extend(_live_value_info(main))
    _as_onnx_ir_reads(proto)
    input_names = {i.name for i in main.input}
    for tensor in hoisted:
        if tensor.name not in input_names:
            proto.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
            input_names.add(tensor.name)
    return proto


def _split_initializers(
    source: onnx.ModelProto, max_inline_bytes: int
) -> tuple[list[onnx.TensorProto], list[onnx.TensorProto]] | None:
    """The main graph's initializers kept (at most ``max_inline_bytes``) and those left
    out, in one walk of every graph; None when the copy would differ from serializing the
    model: a size unknown, a kept tensor in external data, a sparse initializer, a
    subgraph initializer that is large or external, an external attribute tensor."""
    kept: list[onnx.TensorProto] = []
    hoisted: list[onnx.TensorProto] = []
    for ref, graph in proto_graphs(source):
        if isinstance(graph, onnx.GraphProto):
            if len(graph.sparse_initializer):
                return None
            for tensor in graph.initializer:
                size = nbytes(tensor.data_type, tensor.dims)
                if size is None or (size > max_inline_bytes and ref.parent is not None):
                    return None
                if size > max_inline_bytes:
                    hoisted.append(tensor)
                elif tensor.data_location == onnx.TensorProto.EXTERNAL:
                    return None
                elif ref.parent is None:
                    kept.append(tensor)
        attribute_tensors = (t for n in graph.node for a in n.attribute for t in (a.t, *a.tensors))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in attribute_tensors):
            return None  # an unset ``t`` reads as an empty, inline tensor
    return kept, hoisted


def _as_onnx_ir_reads(proto: onnx.ModelProto) -> None:
    """Make the copy what serializing the deserialized model gives: subgraphs keep only
    live ``value_info`` entries, and domain 'ai.onnx' is ''."""
    for ref, sub in proto_graphs(proto):
        if ref.parent is not None:
            live = _live_value_info(sub)
            del sub.value_info[:]
            sub.value_info.extend(live)
            _normalize_domains(sub.node)
    _normalize_domains(proto.graph.node)
    for function in proto.functions:
        _normalize_domains(function.node)
        if function.domain == "ai.onnx":
            function.domain = ""


def _copy_fields(source: Any, target: Any, skip: tuple[str, ...]) -> None:
    for field, value in source.ListFields():
        if field.name in skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _normalize_domains(nodes: Iterable[onnx.NodeProto]) -> None:
    """Domain 'ai.onnx' is '' (as onnx_ir reads it; ONNX's inference wants the import)."""
    for node in nodes:
        if node.domain == "ai.onnx":
            node.domain = ""


def _live_value_info(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The ``value_info`` entries onnx_ir keeps (and serializes): one per name (the last),
    for node outputs that are not graph outputs and initializers that are not inputs;
    exporters leave entries for values that no longer exist."""
    outputs = {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    live = {t.name for t in graph.initializer if t.name not in inputs}
    live.update(name for node in graph.node for name in node.output if name not in outputs)
    return list({info.name: info for info in graph.value_info if info.name in live}.values())
