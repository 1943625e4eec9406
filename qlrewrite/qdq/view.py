"""The per-node view: what one quantized node means, decided once and read everywhere.

A view describes one node of a :class:`~qlrewrite.qdq.sites.QuantizedSite` as seen from
one place (inside a model-local function: from one call site, with the function's inputs
and attribute references replaced by the call's), without reading weights. One class per
kind of node, over the parts they share (:class:`NodeView`: identity; the version in
force, ``row`` (None when the imported opset has none) and ``version`` (the same, never
None: for the rules that need one); the attributes in force with
:meth:`NodeView.attr_or_default`; x / scale / zero point / output as :class:`ValueView`
from constants, declarations and type inference; messages):

- :class:`QDQView` (QuantizeLinear / DequantizeLinear, ``row``: an
  :class:`~qlrewrite.opsets.OpVersion`): ``axis``, ``block_size``, ``output_type`` (as the
  version in force decides it), ``x_type`` (also where only the producer or the
  operator's type constraints tell it), ``granularity``;
- :class:`WeightOnlyView` (com.microsoft MatMulNBits / GatherBlockQuantized, ``row``: a
  :class:`~qlrewrite.opsets.WeightOnlyVersion`): every input by its schema name
  (``operand``), the attributes in force (``weight_attributes``), the weights' layout
  (``weight_layout``) and its granularity;
- :class:`QOperatorView` (QLinearConv, QLinearMatMul, ..., ``row``: a
  :class:`~qlrewrite.opsets.QOperatorVersion`): ``operand``; its triples are
  :func:`qlrewrite.qdq.qoperator.triples`.

Views are built by :func:`qlrewrite.qdq.binding.node_views` (with type inference) or
:func:`qlrewrite.qdq.binding.site_view` (constants and declarations only).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import Finding, Rule
from qlrewrite.kernels.nbits import MatMulNBitsLayout
from qlrewrite.qdq.constants import constant_tensor, small_array
from qlrewrite.qdq.sites import QuantizedSite
from qlrewrite.qdq.weight_only import (
    GatherBlockForm,
    gather_block_form,
    int_attributes,
    matmul_nbits_layout,
)
from qlrewrite.toolkit import GraphRef

__all__ = [
    "Dims",
    "Granularity",
    "NodeView",
    "QDQView",
    "QOperatorView",
    "TypeShape",
    "ValueView",
    "WeightOnlyView",
    "view_of",
]

Dims = tuple[int | None, ...]
#: What type inference knows of a value: (element type, dims); either may be None.
TypeShape = tuple[ir.DataType | None, Dims | None]


@dataclasses.dataclass(frozen=True)
class ValueView:
    """What is known statically about one input or output of a node."""

    name: str
    dtype: ir.DataType | None = None
    shape: Dims | None = None  # None: rank unknown; None entries: unknown dims
    array: np.ndarray | None = None  # the value (as float64) when constant, small and read

    @property
    def rank(self) -> int | None:
        """The rank, when known."""
        return None if self.shape is None else len(self.shape)

    @property
    def size(self) -> int | None:
        """The element count, when every dim is known."""
        dims = [d for d in self.shape or () if d is not None]
        if self.shape is None or len(dims) != len(self.shape):
            return None
        return math.prod(dims)

    def describe(self) -> str:
        """``'name' (FLOAT [3, 4])`` for messages."""
        dtype = self.dtype.name if self.dtype is not None else "?"
        shape = (
            "?"
            if self.shape is None
            else "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
        )
        return f"'{self.name}' ({dtype} {shape})"


def _dims(shape: Iterable[object] | None) -> Dims | None:
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in shape)


def view_of(
    value: ir.Value | None, inferred: Mapping[str, TypeShape], *, read: bool = False
) -> ValueView | None:
    """The :class:`ValueView` of ``value`` (None for an omitted optional input): the
    constant's tensor, else the declared type and shape, completed from ``inferred``.

    ``read``: also read the value of a small constant (scales and zero points only).
    """
    if value is None:
        return None
    name = value.name or ""
    array = None
    tensor = constant_tensor(value)
    if tensor is None:
        dtype, shape = value.dtype, _dims(value.shape)
    else:
        dtype = tensor.dtype
        shape = _dims(tensor.shape)  # a tensor's dims are always known
        ints = tuple(d for d in shape or () if d is not None)
        known = shape is not None and len(ints) == len(shape)
        array = small_array(tensor, ints if known else None) if read else None
    if (dtype is None or shape is None) and name in inferred:
        inf_dtype, inf_shape = inferred[name]
        dtype = dtype if dtype is not None else inf_dtype
        shape = shape if shape is not None else inf_shape
    return ValueView(name, dtype, shape, array)


#: Granularity kinds besides opsets.PER_TENSOR / PER_AXIS / BLOCKED.
RANK_N = "rank-n"  # a scale of rank >= 2 without block_size: no valid granularity
UNKNOWN = "?"  # the scale's shape is unknown


@dataclasses.dataclass(frozen=True)
class Granularity:
    """How a node's scale applies to x; ``str()`` is what ``info`` prints."""

    kind: str  # opsets.PER_TENSOR, PER_AXIS, BLOCKED, RANK_N or UNKNOWN
    text: str

    @property
    def per_axis(self) -> bool:
        """A 1-D scale (of length other than 1), or a scale of rank >= 2 without blocks."""
        return self.kind in (opsets.PER_AXIS, RANK_N)

    @property
    def blocked(self) -> bool:
        """block_size > 0."""
        return self.kind == opsets.BLOCKED

    def __str__(self) -> str:
        return self.text


#: Builds the ValueView of a node's value (``read``: read a small constant's values).
Lookup = Callable[[ir.Value | None, bool], ValueView | None]


def _layout_granularity(layout: MatMulNBitsLayout | GatherBlockForm | None) -> Granularity | None:
    """A weight-only op's granularity from its weight layout (None: no layout)."""
    if isinstance(layout, MatMulNBitsLayout):  # blocks along K of the [K, N] weight
        return Granularity(opsets.BLOCKED, f"blocked(K, block={layout.block_size})")
    if isinstance(layout, GatherBlockForm):
        axis, block = layout.quantize_axis, layout.block_size
        if block == 0:
            return Granularity(opsets.PER_AXIS, f"one block per row (axis={axis})")
        return Granularity(opsets.BLOCKED, f"blocked(axis={axis}, block={block})")
    return None


def _scale_granularity(axis: int, block: int, shape: Dims | None) -> Granularity:
    """A Q/DQ node's granularity from its block size and its scale's shape."""
    if block > 0:
        return Granularity(opsets.BLOCKED, f"blocked(axis={axis}, block={block})")
    if shape is None:
        return Granularity(UNKNOWN, "?")
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return Granularity(opsets.PER_TENSOR, "per-tensor")
    if len(shape) == 1:
        return Granularity(opsets.PER_AXIS, f"per-axis(axis={axis})")
    return Granularity(RANK_N, f"rank-{len(shape)} scale")


RowT = TypeVar("RowT", bound=opsets.Row)


def _in_force(row: RowT | None, view: NodeView) -> RowT:
    """``row``, which a rule that needs a version is only run with (see
    :attr:`NodeView.version`)."""
    if row is None:
        raise LookupError(
            f"{view.where}: no version of the operator at {view.version_label}; a rule "
            "declared needs_version=False reads view.row"
        )
    return row


class NodeView:
    """One quantized node as rules, passes and ``info`` see it: the parts every kind
    shares (identity, x / scale / zero point / output, attributes, messages). Each kind
    has its subclass: :class:`QDQView`, :class:`WeightOnlyView`, :class:`QOperatorView`
    (:func:`view_class` picks it)."""

    def __init__(
        self,
        site: QuantizedSite,
        *,
        lookup: Lookup,
        attributes: dict[str, ir.Attr],
        ir_version: int,
        call_site: str = "",
        producer: Callable[[ir.Node], NodeView | None] = lambda node: None,
        read_constants: bool = True,
    ) -> None:
        self.site = site
        self._lookup = lookup
        #: The node's attributes after resolving function attribute references.
        self.attributes = attributes
        self.ir_version = ir_version
        #: Inside a function: "'<call node>' in <graph>" of the call this view is from.
        self.call_site = call_site
        self._producer = producer
        self._read = read_constants
        roles = site.kind.roles
        self._x_index = roles.get("x")
        self._scale_index = roles.get("scale")
        self._zero_point_index = roles.get("zero_point")
        #: The rule being run on this view: what :meth:`report` files findings under.
        self.rule: Rule | None = None

    # ------------------------------------------------------------------ identity

    @property
    def node(self) -> ir.Node:
        """The node."""
        return self.site.node

    @property
    def op_type(self) -> str:
        """The node's op type."""
        return self.site.node.op_type

    @property
    def domain(self) -> str:
        """The node's domain, "" for ai.onnx."""
        return self.site.domain

    @property
    def imported(self) -> int | None:
        """The opset of the node's domain imported for its graph."""
        return self.site.imported

    @property
    def row(self) -> opsets.Row | None:
        """The operator version in force (None: none at that opset)."""
        return self.site.row

    @property
    def version(self) -> opsets.Row:
        """The operator version in force, for a rule that needs one: the registry runs a
        rule declared with ``needs_version`` (the default) only on nodes that have one
        (a rule declared ``needs_version=False`` reads :attr:`row`, which may be None)."""
        return _in_force(self.row, self)

    @property
    def ref(self) -> GraphRef:
        """Where the node's graph sits."""
        return self.site.ref

    @property
    def graph(self) -> str:
        """The graph label findings show."""
        return str(self.site.ref)

    @property
    def is_quantize(self) -> bool:
        """True for QuantizeLinear."""
        return self.op_type == "QuantizeLinear"

    @property
    def domain_label(self) -> str:
        """'ai.onnx' or 'com.microsoft'."""
        return self.domain or "ai.onnx"

    # ------------------------------------------------------------------ values

    def _read_indices(self) -> set[int]:
        """The inputs whose small constant values are read: every one but x."""
        return set(range(len(self.node.inputs))) - {self._x_index}

    @functools.cached_property
    def inputs(self) -> list[ValueView | None]:
        """One view per input slot (None for an omitted one); the values of small constants
        are read as the kind says (:meth:`_read_indices`), unless the view was built not
        to read any."""
        wanted = self._read_indices() if self._read else set()
        return [self._lookup(v, i in wanted) for i, v in enumerate(self.node.inputs)]

    def _at(self, index: int | None) -> ValueView | None:
        inputs = self.inputs
        return inputs[index] if index is not None and index < len(inputs) else None

    @functools.cached_property
    def x(self) -> ValueView | None:
        """The quantized data: x of Q/DQ, the weight of a weight-only op. What neither a
        declaration nor inference tells of it (ONNX inference stops at com.microsoft nodes
        and does not run inside functions) comes from the quantized node producing it: its
        output type, and for a Q/DQ producer its x's shape (Q/DQ keep the shape)."""
        x = self._at(self._x_index)
        if x is None or self._x_index is None or (x.dtype is not None and x.shape is not None):
            return x
        self.__dict__["x"] = x  # a cycle of producers (invalid graph) reads x as declared
        value = self.node.inputs[self._x_index]
        producer = value.producer() if value is not None else None
        parent = self._producer(producer) if producer is not None else None
        if parent is None:
            return x
        dtype = x.dtype if x.dtype is not None else parent.output_type
        shape = x.shape
        if shape is None and isinstance(parent, QDQView) and parent.x is not None:
            shape = parent.x.shape
        return dataclasses.replace(x, dtype=dtype, shape=shape)

    @property
    def scale(self) -> ValueView | None:
        """The scale input."""
        return self._at(self._scale_index)

    @property
    def zero_point(self) -> ValueView | None:
        """The zero point input (None when omitted)."""
        return self._at(self._zero_point_index)

    def value_view(self, value: ir.Value | None, *, read: bool = False) -> ValueView | None:
        """The :class:`ValueView` of any input or output ``value`` of the node, seen from
        this view's place (``read``: read a small constant's values)."""
        return self._lookup(value, read)

    @functools.cached_property
    def output(self) -> ValueView | None:
        """The first output."""
        outputs = self.node.outputs
        return self._lookup(outputs[0], False) if outputs else None

    @property
    def output_type(self) -> ir.DataType | None:
        """The output's element type as the version in force decides it (None: cannot
        tell, or decided by another input, as a weight-only op's)."""
        return None

    @property
    def x_type(self) -> ir.DataType | None:
        """x's element type (completed from its producer, see :attr:`x`)."""
        x = self.x
        return x.dtype if x is not None else None

    @property
    def granularity(self) -> Granularity:
        """Per-tensor, per-axis or blocked (``?`` where the kind does not say)."""
        return Granularity(UNKNOWN, "?")

    # ------------------------------------------------------------------ attributes

    def int_attr(self, name: str) -> int | None:
        """The value of an INT attribute as written, or None when absent or not INT."""
        attr = self.attributes.get(name)
        if attr is None or attr.type != ir.AttributeType.INT:
            return None
        return attr.as_int()

    def attr_or_default(self, name: str) -> int | None:
        """The value the version in force gives attribute ``name``: as written, else its
        default. None when the version has no such attribute (or no default)."""
        row = self.row
        if row is None or name not in row.attributes:
            return None
        value = self.int_attr(name)
        if value is not None:
            return value
        default = row.default(name)
        return default if isinstance(default, int) else None

    # ------------------------------------------------------------------ messages

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
        if self.site.import_missing and self.site.opset is not None:
            text = f"{self.domain_label} (not imported; read as opset {self.site.opset})"
        else:
            text = f"{self.domain_label} opset {self.imported}"
        return f"{text} ({self.op_type}-{self.row.since})" if self.row else text

    def report(self, message: str, hint: str = "", *, attribute: str = "") -> Finding:
        """A finding of the rule being run (:attr:`rule`, set by the registry around each
        check: its code and severity are the rule's declaration) about this node;
        ``message`` follows ``where``; ``attribute``: the attribute it is about."""
        if self.rule is None:
            raise RuntimeError("report() outside a rule's check: use finding_of(rule, ...)")
        return self.finding_of(self.rule, message, hint, attribute=attribute)

    def finding_of(
        self, rule: Rule, message: str, hint: str = "", *, attribute: str = ""
    ) -> Finding:
        """A finding of ``rule`` about this node (for findings made outside a rule's check,
        as suppressions are)."""
        return Finding(
            rule=rule.code,
            severity=rule.severity,
            message=f"{self.where}: {message}",
            hint=hint,
            node=self.node.name or "",
            op_type=self.op_type,
            domain=self.domain,
            opset=self.imported,
            graph=self.graph,
            output=(self.node.outputs[0].name or "") if self.node.outputs else "",
            attribute=attribute,
        )


class QDQView(NodeView):
    """A QuantizeLinear / DequantizeLinear node (ai.onnx or com.microsoft)."""

    @property
    def row(self) -> opsets.OpVersion | None:
        """The Q/DQ version in force."""
        row = self.site.row
        return row if isinstance(row, opsets.OpVersion) else None

    @property
    def version(self) -> opsets.OpVersion:
        """The version in force, for a rule that needs one (see :attr:`NodeView.version`)."""
        return _in_force(self.row, self)

    @property
    def block_size(self) -> int:
        """block_size (0 when absent or not part of the version in force)."""
        return self.attr_or_default("block_size") or 0

    @property
    def axis(self) -> int:
        """The Q/DQ axis applied: as written, else the default of the version in force,
        else :data:`qlrewrite.opsets.DEFAULT_AXIS` (com.microsoft Q/DQ have no default in
        the schema; ONNX Runtime's kernel applies axis 1)."""
        axis = self.attr_or_default("axis")
        return opsets.DEFAULT_AXIS if axis is None else axis

    @functools.cached_property
    def output_type(self) -> ir.DataType | None:
        """The output's element type as the version in force decides it (None: cannot
        tell). See :func:`qlrewrite.opsets.output_type` for the rule of each version."""
        row, zp, scale = self.row, self.zero_point, self.scale
        if row is None:
            return None
        if "zero_point" in row.output_from and zp is not None and zp.dtype is None:
            return None
        try:
            return opsets.output_type(
                row,
                scale_type=scale.dtype if scale is not None else None,
                zero_point_type=zp.dtype if zp is not None else None,
                output_dtype=self.int_attr("output_dtype"),
            )
        except ValueError:  # output_dtype is not a data type (QL306)
            return None

    @functools.cached_property
    def x_type(self) -> ir.DataType | None:
        """x's element type: known from x itself, else the output type of the quantized node
        producing it (ONNX inference stops at com.microsoft nodes), else the type x shares
        with the scale (Q-19/21, com.microsoft Q) or the zero point (DequantizeLinear)."""
        x = self.x
        if x is not None and x.dtype is not None:
            return x.dtype
        scale, zp = self.scale, self.zero_point
        shares_scale = self.row is not None and self.row.scale_matches_x
        if shares_scale and scale is not None and scale.dtype is not None:
            return scale.dtype
        if not self.is_quantize and zp is not None:
            return zp.dtype
        return None

    @functools.cached_property
    def granularity(self) -> Granularity:
        """From block_size and the scale's shape (with a note when the axis or block_size
        attribute is not an integer)."""
        scale = self.scale
        found = _scale_granularity(
            self.axis, self.block_size, scale.shape if scale is not None else None
        )
        for name in ("axis", "block_size"):
            attr = self.attributes.get(name)
            if attr is not None and attr.type != ir.AttributeType.INT:
                return dataclasses.replace(found, text=f"? ({name} is {attr.type.name})")
        return found


class _SchemaView(NodeView):
    """A node whose schema names its inputs (weight-only and QOperator rows): only the
    values a rule reads are read (``row.read_values``: never the weights)."""

    @property
    def row(self) -> opsets.WeightOnlyVersion | opsets.QOperatorVersion | None:
        """The version in force."""
        row = self.site.row
        return row if not isinstance(row, opsets.OpVersion) else None

    def _read_indices(self) -> set[int]:
        row = self.row
        if row is None:
            return set()
        names = [spec.name for spec in row.inputs]
        return {i for i, name in enumerate(names) if name in row.read_values}

    def operand(self, name: str) -> ValueView | None:
        """The input the schema names ``name`` ("A", "g_idx", "bias", "indices", ...);
        None when omitted."""
        row = self.row
        for index, spec in enumerate(row.inputs if row is not None else ()):
            if spec.name == name:
                return self._at(index)
        return None


class WeightOnlyView(_SchemaView):
    """A com.microsoft MatMulNBits / GatherBlockQuantized node: every input by its schema
    name, the attributes in force and the weights' layout."""

    @property
    def row(self) -> opsets.WeightOnlyVersion | None:
        """The weight-only version in force."""
        row = self.site.row
        return row if isinstance(row, opsets.WeightOnlyVersion) else None

    @property
    def version(self) -> opsets.WeightOnlyVersion:
        """The version in force, for a rule that needs one (see :attr:`NodeView.version`)."""
        return _in_force(self.row, self)

    @functools.cached_property
    def weight_attributes(self) -> dict[str, int | None]:
        """The attributes in force (as written, else the default; None: absent without a
        default, or not an INT)."""
        row = self.row
        return int_attributes(self.attributes, row) if row is not None else {}

    @functools.cached_property
    def weight_layout(self) -> MatMulNBitsLayout | GatherBlockForm | None:
        """How the weights are laid out: a
        :class:`~qlrewrite.kernels.nbits.MatMulNBitsLayout` (K, N, blocks, the shape of
        every input) or a :class:`~qlrewrite.qdq.weight_only.GatherBlockForm` (axes, packing,
        scale and zero-point shapes). None for attributes / a data type that describe
        none (the check rules say why)."""
        row, values, x = self.row, self.weight_attributes, self.x
        if row is None:
            return None
        if self.op_type == "MatMulNBits":
            return matmul_nbits_layout(values, row)
        dtype = x.dtype if x is not None else None
        return gather_block_form(values, row, dtype, x.rank if x is not None else None)

    @functools.cached_property
    def granularity(self) -> Granularity:
        """From the weight layout (``?`` without one)."""
        found = _layout_granularity(self.weight_layout)
        return found if found is not None else Granularity(UNKNOWN, "?")


class QOperatorView(_SchemaView):
    """A QOperator / dynamic node (QLinearConv, QLinearMatMul, MatMulInteger,
    com.microsoft QLinear*, QGemm, ...): its (data, scale, zero point) triples are read
    with :func:`qlrewrite.qdq.qoperator.triples`."""

    @property
    def row(self) -> opsets.QOperatorVersion | None:
        """The QOperator version in force."""
        row = self.site.row
        return row if isinstance(row, opsets.QOperatorVersion) else None

    @property
    def version(self) -> opsets.QOperatorVersion:
        """The version in force, for a rule that needs one (see :attr:`NodeView.version`)."""
        return _in_force(self.row, self)

    def _read_indices(self) -> set[int]:
        wanted = super()._read_indices()
        row = self.row
        if row is not None and row.variadic:  # QLinearConcat: (x, scale, zp) threes
            fixed = len(row.inputs) - 1
            wanted |= {i for i in range(fixed, len(self.node.inputs)) if (i - fixed) % 3}
        return wanted
