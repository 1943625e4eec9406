"""The IR version a model needs: for its ai.onnx opset and for the element types it uses."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.toolkit import all_graphs, function_kinds, onnx_opset

__all__ = ["element_types", "ir_version_for_opset", "needed_ir_version", "raise_ir_version"]


def ir_version_for_opset(opset: int) -> int | None:
    """The IR version released with ai.onnx ``opset`` (None: unknown to this onnx)."""
    found = [row[1] for row in onnx.helper.VERSION_TABLE if row[2] >= opset]
    return min(found) if found else None


def element_types(model: ir.Model) -> set[ir.DataType]:
    """Every element type of a value, initializer or tensor attribute, in every graph."""
    found: set[ir.DataType] = set()
    for graph_like in all_graphs(model):
        values = [*graph_like.inputs, *graph_like.outputs]
        if isinstance(graph_like, ir.Graph):
            values.extend(graph_like.initializers.values())
        for node in graph_like:
            values.extend(v for v in node.inputs if v is not None)
            values.extend(node.outputs)
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR and not attr.is_ref():
                    found.add(attr.value.dtype)
        for value in values:
            dtype = value.dtype
            if dtype is None and value.const_value is not None:
                dtype = value.const_value.dtype
            if dtype is not None:
                found.add(dtype)
    return found


#: Model-local functions appear in IR version 8, function overloads in 10.
_FUNCTIONS_IR, _OVERLOAD_IR = 8, 10


def needed_ir_version(model: ir.Model, *, opset_at_most: int | None = None) -> int:
    """The lowest IR version that has the model's ai.onnx opset, all its element types and
    its functions (overloads included); with ``opset_at_most``, as if its ai.onnx opset
    were lowered to that (what a downgrade to it leaves)."""
    needed = max((opsets.min_ir_version(t) for t in element_types(model)), default=3)
    functions, overloads = function_kinds(model)
    needed = max(needed, _FUNCTIONS_IR if functions else 0, _OVERLOAD_IR if overloads else 0)
    opset = onnx_opset(model)
    if opset is not None and opset_at_most is not None:
        opset = min(opset, opset_at_most)
    if opset is not None:
        needed = max(needed, ir_version_for_opset(opset) or 0)
    return needed


def raise_ir_version(model: ir.Model) -> bool:
    """Raise ``model.ir_version`` to :func:`needed_ir_version` (never lower it)."""
    needed = needed_ir_version(model)
    if needed > model.ir_version:
        model.ir_version = needed
        return True
    return False
