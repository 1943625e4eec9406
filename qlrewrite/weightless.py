"""A weight-free ModelProto of an in-memory model, for ONNX's checker and shape inference.

ONNX's C++ APIs take a serialized model, which cannot exceed 2 GB and would read every
lazy or external tensor. Here each initializer above a few bytes is left out of the
proto and declared as a main-graph input of the same type and shape instead, so the
checker and shape inference see the same names, types and shapes without any data.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from qlrewrite.materialize import external_in_memory

__all__ = ["weightless_proto"]

_PLACEHOLDER = "qlrewrite-weightless-placeholder"


def weightless_proto(model: ir.Model, *, max_inline_bytes: int = 1024) -> onnx.ModelProto:
    """Serialize ``model`` without initializers larger than ``max_inline_bytes``.

    Evaluates no lazy tensor and reads no large initializer; the model is left unchanged.
    Small initializers stay, so shape inference can still use constant shapes and axes;
    those and node attribute tensors (Constant values) that live in external data are read
    into the proto, which has no folder to resolve them against.
    """
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    try:
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is None or tensor.nbytes <= max_inline_bytes:
                    continue
                swapped.append((value, tensor))
                value.const_value = ir.ExternalTensor(
                    _PLACEHOLDER,
                    0,
                    tensor.nbytes,
                    tensor.dtype,
                    shape=ir.Shape(tensor.shape.numpy()),
                    name=value.name or "",
                )
        with external_in_memory(model, initializers=lambda t: t.location != _PLACEHOLDER):
            proto = ir.serde.serialize_model(model)
    finally:
        for value, tensor in swapped:
            value.const_value = tensor
    _hoist_placeholders(proto.graph, proto.graph)
    return proto


def _hoist_placeholders(graph: onnx.GraphProto, main: onnx.GraphProto) -> None:
    """Turn placeholder initializers of ``graph`` (and its subgraphs) into main inputs."""
    input_names = {i.name for i in main.input}
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
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                _hoist_placeholders(attr.g, main)
            for sub in attr.graphs:
                _hoist_placeholders(sub, main)
