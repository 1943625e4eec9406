"""The per-node view the check rules read: types, shapes, small constants, attributes.

A :class:`NodeContext` describes one Q/DQ node as seen from one place: its graph, the
version of the op in force, and for each input a :class:`ValueView` (element type,
shape, and the values of a small constant). Inside a model-local function the inputs
of the function are replaced by the actual values of one call site. Nothing here reads
a tensor above :data:`MAX_VALUE_BYTES`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets, tensors
from qlrewrite.findings import Finding, Severity

__all__ = [
    "MAX_VALUE_BYTES",
    "ModelContext",
    "NodeContext",
    "ValueView",
    "constant_tensor",
    "view_of",
]

#: Constants above this size are never read (their shape and type are enough).
MAX_VALUE_BYTES = 1 << 20

Dims = tuple[int | None, ...]


@dataclasses.dataclass(frozen=True)
class ValueView:
    """What is known statically about one input or output of a node."""

    name: str
    dtype: ir.DataType | None = None
    shape: Dims | None = None  # None: rank unknown; None entries: unknown dims
    array: np.ndarray | None = None  # the value (as float64) when constant and small

    @property
    def rank(self) -> int | None:
        """The rank, when known."""
        return None if self.shape is None else len(self.shape)

    @property
    def size(self) -> int | None:
        """The element count, when every dim is known."""
        if self.shape is None or any(d is None for d in self.shape):
            return None
        return int(np.prod(self.shape, dtype=np.int64))

    def describe(self) -> str:
        """``'name' (FLOAT [3, 4])`` for messages."""
        dtype = self.dtype.name if self.dtype is not None else "?"
        shape = "?" if self.shape is None else "[" + ", ".join(
            "?" if d is None else str(d) for d in self.shape) + "]"  # fmt: skip
        return f"'{self.name}' ({dtype} {shape})"


def _dims(shape: ir.Shape | None) -> Dims | None:
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in shape)


def constant_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor of an initializer (not overridable by a graph input) or Constant node."""
    try:
        return _constant_tensor(value)
    except Exception:  # a malformed Constant node: treat the value as unknown
        return None


def _constant_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    producer = value.producer()
    if producer is not None:
        if producer.op_type != "Constant" or producer.domain not in ("", "ai.onnx"):
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


def _small_array(tensor: ir.TensorProtocol) -> np.ndarray | None:
    """The values as float64 (None: too large, unreadable or not numeric)."""
    try:
        if tensor.nbytes > MAX_VALUE_BYTES or tensor.dtype in _NON_NUMERIC:
            return None
        return np.asarray(tensor.numpy()).astype(np.float64)
    except Exception:  # unreadable data is reported by the hygiene rules
        return None


_NON_NUMERIC = frozenset({
    ir.DataType.STRING, ir.DataType.COMPLEX64, ir.DataType.COMPLEX128, ir.DataType.UNDEFINED
})  # fmt: skip


def view_of(
    value: ir.Value | None,
    inferred: Mapping[str, tuple[ir.DataType | None, Dims | None]],
    *,
    read: bool = False,
) -> ValueView | None:
    """The :class:`ValueView` of ``value`` (None for an omitted optional input).

    ``read``: also read the value of a small constant (scales and zero points only).
    """
    if value is None:
        return None
    name = value.name or ""
    dtype = value.dtype
    shape = _dims(value.shape)
    array = None
    tensor = constant_tensor(value)
    if tensor is not None:
        dtype = tensor.dtype
        shape = _dims(tensor.shape)
        array = _small_array(tensor) if read else None
    if (dtype is None or shape is None) and name in inferred:
        inf_dtype, inf_shape = inferred[name]
        dtype = dtype if dtype is not None else inf_dtype
        shape = shape if shape is not None else inf_shape
    return ValueView(name, dtype, shape, array)


@dataclasses.dataclass
class NodeContext:
    """One Q/DQ node as the rules see it."""

    node: ir.Node
    graph: str  # the graph label of the finding
    domain: str  # "" for ai.onnx
    imported: int | None  # the opset the model imports for the node's domain
    row: opsets.OpVersion | None  # the version in force (None: none at that opset)
    ir_version: int
    inputs: list[ValueView | None]  # one per input slot; None for an omitted input
    output: ValueView | None
    attributes: dict[str, ir.Attr]  # after resolving function attribute references
    call_site: str = ""  # inside a function: "'<call node>' in <graph>" of the call checked

    @property
    def op_type(self) -> str:
        """QuantizeLinear or DequantizeLinear."""
        return self.node.op_type

    @property
    def is_quantize(self) -> bool:
        """True for QuantizeLinear."""
        return self.node.op_type == "QuantizeLinear"

    @property
    def domain_label(self) -> str:
        """'ai.onnx' or 'com.microsoft'."""
        return self.domain or "ai.onnx"

    def _input(self, index: int) -> ValueView | None:
        return self.inputs[index] if len(self.inputs) > index else None

    @property
    def x(self) -> ValueView | None:
        """The input to (de)quantize."""
        return self._input(0)

    @property
    def scale(self) -> ValueView | None:
        """The scale input."""
        return self._input(1)

    @property
    def zero_point(self) -> ValueView | None:
        """The zero point input (None when omitted)."""
        return self._input(2)

    def int_attr(self, name: str) -> int | None:
        """The value of an INT attribute as written, or None when absent or not INT."""
        attr = self.attributes.get(name)
        if attr is None or attr.type != ir.AttributeType.INT:
            return None
        return attr.as_int()

    def attr_or_default(self, name: str) -> int | None:
        """The attribute's value, else the default of the version in force."""
        value = self.int_attr(name)
        if value is None and self.row is not None:
            return self.row.default(name)
        return value

    @property
    def block_size(self) -> int:
        """block_size (0 when absent or not part of the version in force)."""
        if self.row is None or not self.row.has_block_size:
            return 0
        return self.int_attr("block_size") or 0

    @property
    def where(self) -> str:
        """``DequantizeLinear 'name' in main`` for messages."""
        if self.node.name:
            label = f"'{self.node.name}'"
        else:
            outputs = [v.name for v in self.node.outputs if v is not None and v.name]
            label = f"(unnamed, output '{outputs[0]}')" if outputs else "(unnamed)"
        return f"{self.op_type} {label} in {self.graph}{self.call_site_note}"

    @property
    def call_site_note(self) -> str:
        """``" (called from 'f1' in main)"`` inside a function with call sites, else ''."""
        return f" (called from {self.call_site})" if self.call_site else ""

    @property
    def version_label(self) -> str:
        """``ai.onnx opset 13 (DequantizeLinear-13)`` for messages."""
        text = f"{self.domain_label} opset {self.imported}"
        return f"{text} ({self.op_type}-{self.row.since})" if self.row else text

    def finding(self, code: str, severity: Severity, message: str, hint: str = "") -> Finding:
        """A finding about this node; ``message`` follows ``where``."""
        return Finding(
            rule=code,
            severity=severity,
            message=f"{self.where}: {message}",
            hint=hint,
            node=self.node.name or "",
            op_type=self.op_type,
            domain=self.domain,
            opset=self.imported,
            graph=self.graph,
            output=(self.node.outputs[0].name or "") if self.node.outputs else "",
        )


@dataclasses.dataclass
class ModelContext:
    """The whole model, for rules about the file rather than one node."""

    model: ir.Model
    path: str | None = None

    @functools.cached_property
    def data_problems(self) -> list[tensors.DataProblem]:
        """Tensors whose data is missing, escapes the folder or has the wrong size."""
        return tensors.data_problems(self.model)
