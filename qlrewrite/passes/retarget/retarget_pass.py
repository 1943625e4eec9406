"""Exact retargets of the Q/DQ form for runtimes that take only some of it.

Each works on a whole quantized tensor with its QuantizeLinear and DequantizeLinear nodes
(:mod:`qlrewrite.passes.retarget.groups`) and is exact, or refuses (nothing written):

- ``signedness``: uint8 with zero point z <-> int8 with zero point z - 128 (uint4 / int4:
  8, uint16 / int16: 32768), weights shifted by the same offset. Exact for QuantizeLinear
  too: ``clamp(round(x / s) + z, 0, 255) - 128 == clamp(round(x / s) + z - 128, -128,
  127)``, and DequantizeLinear reads ``(q - z) * s`` unchanged.
- ``symmetric``: zero points become 0. For a weight, ``x - z`` (computed exactly, as an
  integer) replaces x when every value fits the type; for activations a non-zero zero
  point cannot move exactly (the clamp range would change): refused.
- ``narrow``: 8-bit weights whose values and zero points fit 4 bits are stored as int4 /
  uint4 (half the bytes) where the opset has them (ai.onnx 21, com.microsoft); others are
  left as they are (counted).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.io.tensors import packed_bytes
from qlrewrite.kernels import dequantize, int_range
from qlrewrite.kernels.nbits import flip_sign_packed
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.tensor import release_tensor
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.passes.retarget.groups import Group, Member, groups
from qlrewrite.qdq import constant_tensor
from qlrewrite.text import grouped
from qlrewrite.toolkit import FreshNames, tensor_shape

__all__ = ["SIGNEDNESS", "RetargetPass", "RetargetResult"]


@dataclasses.dataclass
class RetargetResult(RewritePassResult):
    """:class:`~qlrewrite.passes.retarget.RetargetPass`: quantized tensors ``sign_flipped``,
    ``made_symmetric``, ``narrowed`` (to 4 bits) and ``narrow_left`` (8-bit weights that do
    not fit 4 bits or whose opset has no 4-bit types);
    :class:`~qlrewrite.passes.convert.tidy.QdqTidyPass`: ``redundant_pairs_removed``,
    ``shared_dequantize_split``, ``shared_initializers_split``."""


#: Values of ``signedness``.
SIGNEDNESS = ("signed", "unsigned")
Signedness = Literal["signed", "unsigned"]

_DT = ir.DataType
_FLIP = {
    _DT.UINT8: _DT.INT8,
    _DT.INT8: _DT.UINT8,
    _DT.UINT4: _DT.INT4,
    _DT.INT4: _DT.UINT4,
    _DT.UINT16: _DT.INT16,
    _DT.INT16: _DT.UINT16,
}
_SIGNED = frozenset({_DT.INT8, _DT.INT4, _DT.INT16})
_NARROW = {_DT.INT8: _DT.INT4, _DT.UINT8: _DT.UINT4}
#: The lowest ai.onnx opset with int4 / uint4 QuantizeLinear / DequantizeLinear.
_INT4_OPSET = 21

#: The counts of a change that rewrites its group.
_WRITTEN = frozenset({"sign_flipped", "made_symmetric", "narrowed"})

Transform = Callable[[npt.NDArray[np.int32]], npt.NDArray[np.int32]]


def _range(dtype: ir.DataType) -> tuple[int, int]:
    found = int_range(dtype)
    assert found is not None  # only the integer types of _FLIP get here
    return found


@dataclasses.dataclass
class _Change:
    """What happens to one group: its new type, each member's zero point, the weight's
    values (a transform of the array as read), or why not."""

    group: Group
    dtype: ir.DataType
    zero_points: list[npt.NDArray[Any] | None]
    source: ir.TensorProtocol | None = None  # the weight as read (None: an activation)
    only_flipped: bool = False  # the weight's one transform is the signedness flip
    transforms: list[Transform] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def weight(self) -> npt.NDArray[np.int32]:
        """The weight's values after the transforms so far, in int32 (every 4, 8 and 16-bit
        value and any shift of one fits; 4 bytes a value while one tensor is rewritten)."""
        assert self.source is not None
        array = np.asarray(self.source.numpy()).astype(np.int32)
        for transform in self.transforms:
            array = transform(array)
        return array


class RetargetPass(ContextPass, ir.passes.InPlacePass):
    """Apply the requested retargets (see module); raises Refusal naming every quantized
    tensor that cannot be retargeted exactly."""

    needs = frozenset({"inference"})  # the types of the Q/DQ nodes, when undeclared
    keeps_types = False  # a retargeted tensor changes its type under its name

    def __init__(
        self,
        *,
        signedness: Signedness | None = None,
        symmetric: bool = False,
        narrow: bool = False,
    ) -> None:
        super().__init__()
        self.signedness = signedness
        self.symmetric = symmetric
        self.narrow = narrow

    def call(self, model: ir.Model) -> RetargetResult:
        inference = self.context(model).inference
        changes = [self._plan(group) for group in groups(model, inference)]
        _refuse([c for c in changes if c.problems])
        names = FreshNames(model)
        counts: collections.Counter[str] = collections.Counter()
        for change in changes:
            counts.update(change.counts)
            if change.counts.keys() & _WRITTEN:
                _write(change, names)
        summary = {k: counts[k] for k in ("sign_flipped", "made_symmetric", "narrowed")}
        summary["narrow_left"] = counts["narrow_left"]
        return RetargetResult(model, any(summary.values()), summary)

    def _plan(self, group: Group) -> _Change:
        dtype = group.dtype
        zero_points = [m.zero_point for m in group.members]
        source = constant_tensor(group.value) if group.producer is None else None
        change = _Change(group, dtype or _DT.UNDEFINED, zero_points, source)
        if dtype not in _FLIP:
            return change
        if self.signedness is not None and (dtype in _SIGNED) != (self.signedness == "signed"):
            _flip(change)
        if self.symmetric and not change.problems:
            _symmetric(change)
        if self.narrow and not change.problems:
            _narrow(change)
        return change


def _flip(change: _Change) -> None:
    """Signed <-> unsigned with the zero point and the weight shifted by the offset."""
    group = change.group
    if group.why:
        change.problems.append(f"{group.dtype.name if group.dtype else '?'}: {group.why}")
        return
    new = _FLIP[change.dtype]
    delta = _range(new)[0] - _range(change.dtype)[0]
    change.zero_points = [_zeros_if_none(z, m) + delta for z, m in _pairs(change)]
    if group.producer is None:
        change.only_flipped = not change.transforms
        change.transforms.append(lambda array: np.add(array, delta, out=array))
    change.dtype = new
    change.counts["sign_flipped"] += 1


def _pairs(change: _Change) -> list[tuple[npt.NDArray[Any] | None, Member]]:
    return list(zip(change.zero_points, change.group.members, strict=True))


def _zeros_if_none(zero_point: npt.NDArray[Any] | None, member: Member) -> npt.NDArray[Any]:
    if zero_point is not None:
        return zero_point.astype(np.int64)
    scale = member.view.scale
    shape = tuple(int(d or 1) for d in scale.shape) if scale and scale.shape else ()
    return np.zeros(shape, np.int64)


def _symmetric(change: _Change) -> None:
    """Zero points to 0: a weight takes x - z when it fits; activations only if z is 0."""
    if all(z is None or not np.any(z) for z in change.zero_points):
        return
    group = change.group
    if group.why or group.producer is not None:
        reason = group.why or "the zero point of an activation cannot become 0 exactly"
        change.problems.append(reason)
        return
    first = change.zero_points[0]
    if first is None or any(z is None or not np.array_equal(z, first) for z in change.zero_points):
        change.problems.append("its readers' zero points differ")
        return
    reader = group.readers[0].view
    axis, block = reader.axis, reader.block_size
    zero = np.asarray(first).astype(np.int32)

    def shift(array: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        """x - z per element, by the reader's granularity (the kernel's int32 path: exact)."""
        ones = np.ones(zero.shape, np.float32)
        values = dequantize(array.astype(np.int32), ones, zero, axis=axis, block_size=block)
        return values.astype(np.int32)

    shifted = shift(change.weight())
    low, high = _range(change.dtype)
    if shifted.size and (shifted.min() < low or shifted.max() > high):
        change.problems.append(
            f"x - zero_point spans [{shifted.min()}, {shifted.max()}], beyond "
            f"{change.dtype.name}'s [{low}, {high}]"
        )
        return
    change.transforms.append(shift)
    change.only_flipped = False
    change.zero_points = [np.zeros_like(first, np.int64) for _ in change.zero_points]
    change.counts["made_symmetric"] += 1


def _narrow(change: _Change) -> None:
    """An 8-bit weight whose values and zero points fit 4 bits, as int4 / uint4."""
    group = change.group
    new = _NARROW.get(change.dtype)
    if new is None or group.why or group.producer is not None:
        return
    if any(m.site.domain == "" and (m.site.opset or 0) < _INT4_OPSET for m in group.members):
        change.counts["narrow_left"] += 1
        return
    low, high = _range(new)
    values = [change.weight(), *(z for z in change.zero_points if z is not None)]
    if any(v.size and (v.min() < low or v.max() > high) for v in values):
        change.counts["narrow_left"] += 1
        return
    change.dtype = new
    change.only_flipped = False
    change.zero_points = [z if z is None else z.astype(np.int64) for z in change.zero_points]
    change.counts["narrowed"] += 1


def _refuse(refused: list[_Change]) -> None:
    if refused:
        reasons = grouped((c.group.where, c.problems) for c in refused)
        raise Refusal(f"cannot retarget exactly: {reasons}; nothing written")


def _write(change: _Change, names: FreshNames) -> None:
    """Write ``change`` into the model: zero points, the producer's type, the weight."""
    dtype, group = change.dtype, change.group
    for zero_point, member in _pairs(change):
        if zero_point is not None:
            _set_zero_point(member.node, zero_point, dtype, names)
    producer = group.producer
    if producer is not None and producer.view.int_attr("output_dtype"):
        producer.node.attributes["output_dtype"] = ir.AttrInt64("output_dtype", int(dtype))
    group.value.type = ir.TensorType(dtype)
    if producer is None:
        _set_weight(change)


def _set_zero_point(
    node: ir.Node, values: npt.NDArray[Any], dtype: ir.DataType, names: FreshNames
) -> None:
    name = names.fresh(f"{node.name or 'qdq'}_zero_point")
    tensor = ir.tensor(values.astype(dtype.numpy()), dtype=dtype, name=name)
    value = ir.Value(name=name, shape=ir.Shape(values.shape), const_value=tensor)
    value.type = ir.TensorType(dtype)
    graph = node.graph  # a node of the main graph or a subgraph (groups in functions stay)
    if graph is None:
        raise Refusal(f"{node.name}: not in a graph")
    graph.register_initializer(value)
    if len(node.inputs) < 3:
        node.resize_inputs(3)
    old = node.inputs[2]
    node.replace_input_with(2, value)
    _drop_if_unused(graph, old)


def _drop_if_unused(graph: ir.Graph, value: ir.Value | None) -> None:
    """Remove the initializer ``value``, or the Constant node of ``graph`` writing it,
    when nothing reads it any more."""
    if value is None or value.uses() or value.is_graph_output():
        return
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.graph is graph:
        graph.remove(producer, safe=True)
    elif value.name and value.is_initializer() and not value.is_graph_input():
        graph.initializers.pop(value.name, None)


def _flipped_bits(array: npt.NDArray[Any], dtype: ir.DataType) -> npt.NDArray[Any]:
    """``array`` moved into the other signedness's ``dtype`` by flipping the top bit of
    each value (two's complement: ``v + 2**(bits-1)`` for a signed v, ``v - 2**(bits-1)``
    for an unsigned one; ml_dtypes keeps a 4-bit value in the low nibble of its byte)."""
    width = array.dtype.itemsize
    raw = array.view(np.uint16 if width == 2 else np.uint8)
    top = (1 << (dtype.bitwidth - 1)) if dtype.bitwidth < 8 * width else (1 << (8 * width - 1))
    flipped: npt.NDArray[Any] = np.bitwise_xor(raw, raw.dtype.type(top))
    return flipped.view(dtype.numpy())


def _set_weight(change: _Change) -> None:
    """The weight as ``change`` computes it, lazily (read and written one tensor at a
    time when the model is saved)."""
    value, dtype, tensor = change.group.value, change.dtype, change.source
    assert tensor is not None

    def compute() -> ir.TensorProtocol:
        if change.only_flipped and dtype.bitwidth == 4:  # flipped as stored, still packed
            packed = flip_sign_packed(packed_bytes(tensor), 4, tensor.size)
            release_tensor(tensor)
            return ir.PackedTensor(packed, dtype, shape=tensor_shape(tensor), name=value.name)
        if change.only_flipped:
            values = _flipped_bits(np.asarray(tensor.numpy()), dtype)
        else:
            values = change.weight().astype(dtype.numpy())
        release_tensor(tensor)  # the input's pages, mapped while read, are not kept
        return ir.tensor(values, dtype=dtype, name=value.name)

    lazy = ir.LazyTensor(compute, dtype=dtype, shape=tensor_shape(tensor), name=value.name)
    value.const_value = lazy
    holder = value.producer()  # a Constant node's value: the node holds what is saved
    if holder is not None and holder.op_type == "Constant":
        holder.attributes.clear()
        holder.attributes["value"] = ir.AttrTensor("value", lazy)
