"""Quantized tensors with every Q/DQ node that touches them: what a retarget changes as one.

A quantized tensor (``q`` in ``QuantizeLinear -> q -> DequantizeLinear``, or an integer
weight read by DequantizeLinear) can change its element type or its values only together
with its producer (a QuantizeLinear, or none for a weight) and all its readers (each a
DequantizeLinear reading it as x) and their zero points. A :class:`Group` is such a
closed set; a tensor read by anything else (a QLinearConv, a Reshape, a graph output) or
produced by anything else is not one (``why``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy.typing as npt
import onnx_ir as ir

from qlrewrite.qdq import QDQ, NodeView, QDQView, QuantizedSite, constant_tensor, node_views
from qlrewrite.qdq.constants import small_array
from qlrewrite.qdq.inference import Inference

__all__ = ["Group", "Member", "groups"]


@dataclasses.dataclass
class Member:
    """One Q/DQ node of a group, with its view and its constant zero point (None: the node
    has none; the zero point is then 0)."""

    site: QuantizedSite
    view: QDQView
    zero_point: npt.NDArray[Any] | None

    @property
    def node(self) -> ir.Node:
        """The QuantizeLinear / DequantizeLinear node."""
        return self.site.node


@dataclasses.dataclass
class Group:
    """A quantized tensor with the QuantizeLinear producing it (None: a weight) and the
    DequantizeLinear nodes reading it."""

    value: ir.Value
    producer: Member | None = None
    readers: list[Member] = dataclasses.field(default_factory=list)
    why: str = ""  # not empty: the group cannot change (and why)

    @property
    def members(self) -> list[Member]:
        """The producer (if any), then the readers."""
        return [*([self.producer] if self.producer else []), *self.readers]

    @property
    def dtype(self) -> ir.DataType | None:
        """The quantized element type."""
        view = self.members[0].view
        return view.output_type if view.is_quantize else view.x_type

    @property
    def where(self) -> str:
        """The first node's description, for messages."""
        return self.members[0].view.where


def groups(model: ir.Model, inference: Inference | None = None) -> list[Group]:
    """Every quantized tensor of ``model`` touched by a Q/DQ node, as a group (types not
    declared read from ``inference``: the run's, else a new one)."""
    found: dict[int, Group] = {}
    for site, views in node_views(model, kinds=(QDQ,), inference=inference):
        view = views[0]
        quantized = site.node.outputs[0] if view.is_quantize else site.node.inputs[0]
        if quantized is None or not isinstance(view, QDQView):
            continue  # (a Q/DQ site's view is a QDQView)
        group = _group(found, quantized)
        member = Member(site, view, _zero_point(site, views))
        if view.is_quantize:
            group.producer = member
        else:
            group.readers.append(member)
        if isinstance(site.graph, ir.Function):  # (its constants are Constant nodes)
            group.why = "inside a function"
    for group in found.values():
        group.why = group.why or _closed(group)
    return list(found.values())


def _group(found: dict[int, Group], value: ir.Value) -> Group:
    if id(value) not in found:
        found[id(value)] = Group(value)
    return found[id(value)]


def _zero_point(site: QuantizedSite, views: list[NodeView]) -> npt.NDArray[Any] | None:
    value = site.input("zero_point")
    if value is None:
        return None
    tensor = constant_tensor(value)
    view = views[0].zero_point
    if tensor is None or view is None or view.shape is None:
        return None
    return small_array(tensor)


def _closed(group: Group) -> str:
    """Why the group's tensor cannot change with its Q/DQ nodes alone ('' if it can)."""
    value = group.value
    readers = {id(m.node) for m in group.readers}
    if value.is_graph_output() or value.is_graph_input():
        return f"'{value.name}' is a graph input or output"
    if any(id(node) not in readers or index != 0 for node, index in value.uses()):
        return f"'{value.name}' is also read by a node that is not a DequantizeLinear"
    if group.producer is None and constant_tensor(value) is None:
        return f"'{value.name}' is neither a weight nor produced by a QuantizeLinear"
    for member in group.members:
        if member.site.input("zero_point") is not None and member.zero_point is None:
            return f"the zero point of {member.view.where} is not a small constant"
    return ""
