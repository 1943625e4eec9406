"""Temporarily hold external tensors in memory, for the places that cannot reference them.

A serialized proto handed to ONNX's checker, shape inference or version converter has no
folder to resolve external data against, and onnx_ir's save writes only initializers to
the external data file. Tensors in node attributes (Constant values) and, where the caller
asks, initializers, are therefore swapped for in-memory copies while the body runs, and
restored afterwards: the model is left as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import onnx_ir as ir

__all__ = ["attribute_tensors", "external_in_memory"]


def _node_containers(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    yield from model.graphs()
    for function in model.functions.values():
        yield function
        for node in ir.traversal.RecursiveGraphIterator(function):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    yield attr.value
                elif attr.type == ir.AttributeType.GRAPHS:
                    yield from attr.value


def attribute_tensors(model: ir.Model) -> Iterator[tuple[ir.Node, ir.Attr]]:
    """Every TENSOR / TENSORS attribute of every node, in all graphs and functions."""
    for container in _node_containers(model):
        for node in container:
            for attr in node.attributes.values():
                if not attr.is_ref() and attr.type in (
                    ir.AttributeType.TENSOR,
                    ir.AttributeType.TENSORS,
                ):
                    yield node, attr


def _in_memory(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    if not isinstance(tensor, ir.ExternalTensor):
        return tensor
    return ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=tensor.name)


@contextlib.contextmanager
def external_in_memory(
    model: ir.Model,
    *,
    initializers: Callable[[ir.TensorProtocol], bool] = lambda tensor: False,
) -> Iterator[None]:
    """Within the block, external attribute tensors (and the external initializers for
    which ``initializers(tensor)`` is true) are in-memory copies."""
    swapped_attrs: list[tuple[ir.Node, ir.Attr]] = []
    swapped_inits: list[tuple[ir.Value, ir.TensorProtocol]] = []
    try:
        for node, attr in list(attribute_tensors(model)):
            values = attr.value if attr.type == ir.AttributeType.TENSORS else [attr.value]
            if not any(isinstance(t, ir.ExternalTensor) for t in values):
                continue
            copies = [_in_memory(t) for t in values]
            value = copies if attr.type == ir.AttributeType.TENSORS else copies[0]
            swapped_attrs.append((node, attr))
            node.attributes[attr.name] = ir.Attr(attr.name, attr.type, value)
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if isinstance(tensor, ir.ExternalTensor) and initializers(tensor):
                    swapped_inits.append((value, tensor))
                    value.const_value = _in_memory(tensor)
        yield
    finally:
        for node, attr in swapped_attrs:
            node.attributes[attr.name] = attr
        for value, tensor in swapped_inits:
            value.const_value = tensor
