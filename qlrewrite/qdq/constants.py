"""Constant values without reading weights: initializers and Constant nodes.

An initializer is constant unless a graph input of the same name can override it; a
Constant node's output is constant whatever attribute holds its value. Every module that
asks "is this input constant, and what is its tensor?" asks here.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from qlrewrite.toolkit import ONNX_DOMAINS

__all__ = ["MAX_VALUE_BYTES", "constant_tensor", "is_constant", "small_array", "value_dtype"]

#: Constants above this size are never read (their shape and type are enough).
MAX_VALUE_BYTES = 1 << 20


def is_constant(value: ir.Value | None) -> bool:
    """True if ``value`` is an initializer that is not a graph input, or a Constant output.

    An omitted optional input (None) counts as constant.
    """
    if value is None:
        return True
    producer = value.producer()
    if producer is not None:
        return producer.op_type == "Constant" and producer.domain in ONNX_DOMAINS
    return value.is_initializer() and value.const_value is not None and not value.is_graph_input()


def constant_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor of an initializer (not overridable by a graph input) or Constant node.

    None when ``value`` is not constant or its Constant node is malformed (or refers to a
    function attribute). Reads no data: external tensors stay lazy.
    """
    try:
        return _constant_tensor(value)
    except Exception:  # a malformed Constant node: treat the value as unknown
        return None


def value_dtype(value: ir.Value | None) -> ir.DataType | None:
    """The element type of ``value``: declared, else its constant's (initializer or
    Constant node: exporters often declare neither), else None."""
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype
    tensor = constant_tensor(value)
    return tensor.dtype if tensor is not None else None


def _constant_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    producer = value.producer()
    if producer is not None:
        if producer.op_type != "Constant" or producer.domain not in ONNX_DOMAINS:
            return None
        for name, attr in producer.attributes.items():
            if attr.is_ref():
                return None
            if name == "value":
                return attr.as_tensor()
            if name in ("value_float", "value_int"):
                dtype = ir.DataType.FLOAT if name == "value_float" else ir.DataType.INT64
                return ir.Tensor(np.array(attr.value, dtype=dtype.numpy()))
            if name in ("value_floats", "value_ints"):
                dtype = ir.DataType.FLOAT if name == "value_floats" else ir.DataType.INT64
                return ir.Tensor(np.array(list(attr.value), dtype=dtype.numpy()))
        return None
    if value.is_graph_input():
        return None
    return value.const_value


_NON_NUMERIC = frozenset(
    {ir.DataType.STRING, ir.DataType.COMPLEX64, ir.DataType.COMPLEX128, ir.DataType.UNDEFINED}
)


def small_array(
    tensor: ir.TensorProtocol, dims: tuple[int, ...] | None = None
) -> np.ndarray | None:
    """The values as float64 (None: above :data:`MAX_VALUE_BYTES`, unreadable or not
    numeric). ``dims``: the tensor's dims when the caller has read them already."""
    try:
        dtype = tensor.dtype
        if dtype in _NON_NUMERIC:
            return None
        count = math.prod(dims) if dims is not None else tensor.size
        if count * dtype.bitwidth > 8 * MAX_VALUE_BYTES:
            return None
        return np.asarray(tensor.numpy()).astype(np.float64)
    except Exception:  # unreadable data is reported by the hygiene rules
        return None
