"""What a downgrade does with each ai.onnx QuantizeLinear / DequantizeLinear: keep it, lower
it exactly, or refuse it with the reason and the lowest opset that holds it.

Read on the input, at its own opset (the node's meaning comes from :mod:`qlrewrite.qdq`;
what an operator version can express from :func:`qlrewrite.opsets.expression_problems`):

- ``keep``: the target opset's version expresses the node (attributes equal to their
  default that the target's version lacks are dropped);
- ``blocked``: a blocked DequantizeLinear of a constant becomes Cast / Sub / Mul with its
  scale (and zero point) repeated per block (:mod:`qlrewrite.passes.downgrade.lower`);
- ``widen``: an int4 / uint4 constant DequantizeLinear whose 8-bit form the target holds;
  its constants are stored as int8 / uint8;
- ``microsoft``: an int16 / uint16 node becomes a com.microsoft node (ONNX Runtime's).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq import QDQView, QuantizedSite, node_views
from qlrewrite.qdq.constants import constant_tensor
from qlrewrite.qdq.inference import Inference

__all__ = ["KEEP", "Plan", "plan_downgrade"]

KEEP, BLOCKED, WIDEN, MICROSOFT = "keep", "blocked", "widen", "microsoft"

_DT = ir.DataType
#: 4-bit types and the 8-bit types that store their values exactly.
WIDER = {_DT.INT4: _DT.INT8, _DT.UINT4: _DT.UINT8}
#: x types whose differences x - zero_point are exact in float32 (Cast / Sub / Mul lowering).
_LOWERABLE_X = frozenset({_DT.INT4, _DT.UINT4, _DT.INT8, _DT.UINT8, _DT.INT16, _DT.UINT16})
_SIXTEEN = frozenset({_DT.INT16, _DT.UINT16})


@dataclasses.dataclass
class Plan:
    """What the downgrade does with one node (``how``), or why it cannot (``problems``)."""

    site: QuantizedSite
    where: str
    how: str = KEEP
    problems: list[str] = dataclasses.field(default_factory=list)
    lowest_opset: int | None = None
    drop: tuple[str, ...] = ()  # attributes at their default the target's version lacks
    axis: int = 0  # blocked: the normalized axis
    block_size: int = 0

    @property
    def key(self) -> tuple[str, str]:
        """(graph label, first output name): how the node is found again after the
        version converter (names and graph structure survive it)."""
        return str(self.site.ref), self.site.node.outputs[0].name or ""


def plan_downgrade(model: ir.Model, opset: int, inference: Inference) -> list[Plan]:
    """One plan per ai.onnx Q/DQ node of ``model`` for a downgrade to ``opset`` (types
    nobody declared from ``inference``, the run's)."""
    plans = []
    for site, views in node_views(model, read=False, inference=inference):
        if site.domain != "":
            continue
        plan = Plan(site, views[0].where)
        for view in views:
            if isinstance(view, QDQView):  # a Q/DQ site's views are
                _plan_view(plan, view, opset)
        plans.append(plan)
    return plans


def _carried(view: QDQView) -> tuple[str, ...]:
    """The attributes the node states that change its meaning: those not at their default
    (axis only where the node is per-axis or blocked)."""
    row = view.row
    names = []
    for name in view.attributes:
        value = view.int_attr(name)
        if name == "axis":
            if view.granularity.per_axis or view.granularity.blocked:
                names.append(name)
        elif row is None or value is None or value != row.default(name):
            names.append(name)
    return tuple(names)


def _form(view: QDQView) -> opsets.NodeForm | None:
    """The view's :class:`~qlrewrite.opsets.NodeForm` (None: a type is unknown)."""
    scale, zero_point = view.scale, view.zero_point
    if view.x_type is None or scale is None or scale.dtype is None:
        return None
    zp_type = zero_point.dtype if zero_point is not None else None
    output = view.output.dtype if view.output is not None else None
    return opsets.NodeForm(
        x_type=view.x_type,
        scale_type=scale.dtype,
        zero_point_type=zp_type,
        output_type=None if view.is_quantize else output,
        attributes=_carried(view),
        blocked=view.granularity.blocked,
        per_axis=view.granularity.per_axis,
    )


def _plan_view(plan: Plan, view: QDQView, opset: int) -> None:
    """Decide ``plan`` for one view (a node in a function has one per call site)."""
    form = _form(view)
    if form is None:
        plan.problems.append("the element types of x, scale or zero point are unknown")
        return
    op = view.op_type
    row = opsets.qdq_version("", op, opset)
    problems = opsets.expression_problems(row, form) if row else [f"opset {opset} has no {op}"]
    if not problems:
        plan.drop = tuple(a for a in view.attributes if row and a not in row.attributes)
        return
    how, why = _lowering(view, form, opset)
    if how is None:
        plan.problems.extend([*problems, *why])
        lowest = opsets.lowest_onnx_opset(op, form)
        plan.lowest_opset = max(plan.lowest_opset or 0, lowest or 0) or None
        return
    if plan.how not in (KEEP, how):
        plan.problems.append("its call sites need different lowerings")
    plan.how = how
    if how == BLOCKED:
        plan.axis, plan.block_size = _normalized_axis(view), view.block_size


def _normalized_axis(view: QDQView) -> int:
    x = view.x
    rank = x.rank if x is not None else None
    axis = view.axis
    return axis + rank if rank is not None and axis < 0 else axis


def _lowering(view: QDQView, form: opsets.NodeForm, opset: int) -> tuple[str | None, list[str]]:
    """The exact lowering of a node the target's version cannot express, or (None, why)."""
    if view.is_quantize:
        return None, []
    x = view.node.inputs[0]
    constant = x is not None and constant_tensor(x) is not None
    if form.blocked:
        return _blocked(view, form, constant)
    if form.x_type in WIDER and constant:
        wide = WIDER[form.x_type]
        narrow = dataclasses.replace(
            form, x_type=wide, zero_point_type=wide if form.zero_point_type else None
        )
        row = opsets.qdq_version("", view.op_type, opset)
        if row is not None and not opsets.expression_problems(row, narrow):
            return WIDEN, []
    if form.x_type in _SIXTEEN and not opsets.com_microsoft_problems(view.op_type, form):
        return MICROSOFT, []
    return None, []


def _blocked(view: QDQView, form: opsets.NodeForm, constant: bool) -> tuple[str | None, list[str]]:
    """A blocked DequantizeLinear as Cast / Sub / Mul, when exact and static."""
    why = []
    if not constant:
        why.append("blocked x is not a constant (only constant weights are lowered)")
    if form.x_type not in _LOWERABLE_X:
        why.append(f"blocked x of type {form.x_type.name} is not lowered")
    if form.scale_type != _DT.FLOAT:
        why.append(f"blocked {form.scale_type.name} scales are not lowered (float32 only)")
    if isinstance(view.site.graph, ir.Function):  # (its node's graph is the function's own)
        why.append("a blocked node inside a function is not lowered")
    scale, x = view.scale, view.x
    if (
        x is None
        or x.shape is None
        or scale is None
        or scale.shape is None
        or None in x.shape
        or None in scale.shape
    ):
        why.append("the shapes of x and scale must be static")
    return (None, why) if why else (BLOCKED, [])
