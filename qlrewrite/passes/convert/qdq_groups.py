"""Q/DQ groups: a float node whose inputs are dequantized and whose one consumer is a
QuantizeLinear (through a Relu / Clip that the QuantizeLinear's range makes a no-op), or
after DynamicQuantizeLinear a MatMul / Conv with a float output; what ``convert --to
qoperator`` rewrites (:mod:`qlrewrite.passes.convert.qdq_to_qoperator`) and the reasons
one stays Q/DQ (:data:`REASONS`, the keys of the result's summary). What each Q/DQ node
means is read from its :class:`~qlrewrite.qdq.QDQView`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq import (
    QDQ,
    GraphScope,
    QDQView,
    constant_tensor,
    iter_graphs,
    iter_sites,
    site_view,
)

__all__ = ["REASONS", "Group", "find_groups", "reason_text"]

_DT = ir.DataType
#: Why a group stays Q/DQ: summary key -> the sentence warnings use.
REASONS: Mapping[str, str] = {
    "no_qoperator_form": "no QOperator operator computes it",
    "not_chosen": "its op type is not in --ops",
    "type": "an element type the QLinear kernel does not take (8-bit only, one "
    "activation type, int8 activations with int8 weights, float32 scales)",
    "blocked": "a blocked scale",
    "per_channel": "a per-channel scale where the QLinear operator takes one scale, or "
    "along an axis it does not take",
    "bias": "a bias that is not int32 with scale x_scale * w_scale and zero point 0",
    "attribute": "an attribute the QLinear operator does not have",
    "softmax_wraps": "a uint8 softmax output where probability 1 quantizes above 255 "
    "(ONNX Runtime's QLinearSoftmax wraps around)",
    "parameters_differ": "a scale or zero point that changes between its input and output",
    "opset": "an opset that has no such integer operator",
    "target_refuses": "the --target runtime refuses the QLinear form",
    "activation": "a Relu / Clip before the QuantizeLinear that clips inside its range",
}


def reason_text(key: str) -> str:
    """The sentence of a summary key."""
    return REASONS[key]


@dataclasses.dataclass
class Group:
    """One float node between Q/DQ and what it becomes."""

    scope: GraphScope
    node: ir.Node
    #: The DequantizeLinear of each float input (None: not dequantized).
    inputs: list[QDQView | None]
    #: The QuantizeLinear after it (None: the dynamic form, or none).
    output: QDQView | None
    #: A Relu / Clip between the op and the QuantizeLinear.
    activation: ir.Node | None = None
    #: Q(activation(x)) = Q(x) for every x (:func:`_activation_folds`).
    activation_folds: bool = True
    #: The QLinear / integer / float op written (domain, op type), its row if QLinear.
    written: tuple[str, str] = ("", "")
    row: opsets.QOperatorVersion | None = None
    reason: str = ""  # why it stays Q/DQ: a key of REASONS ("" once planned to convert)

    @property
    def where(self) -> str:
        """``Conv 'conv1' in main`` for warnings."""
        name = self.node.name or self.node.outputs[0].name
        return f"{self.node.op_type} '{name}' in {self.scope.ref}"

    @property
    def dynamic(self) -> bool:
        """DynamicQuantizeLinear -> DQ -> MatMul / Conv (float output)."""
        return self.output is None


def _views(model: ir.Model) -> dict[int, QDQView]:
    """The view of every Q/DQ node, by node id."""
    found: dict[int, QDQView] = {}
    for site in iter_sites(model, (QDQ,)):
        view = site_view(model, site)
        if isinstance(view, QDQView):
            found[id(site.node)] = view
    return found


def _dequantize(value: ir.Value | None, views: dict[int, QDQView]) -> QDQView | None:
    producer = value.producer() if value is not None else None
    view = views.get(id(producer)) if producer is not None else None
    return view if view is not None and not view.is_quantize else None


def _only_consumer(value: ir.Value) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def _quantize_after(
    node: ir.Node, views: dict[int, QDQView]
) -> tuple[QDQView | None, ir.Node | None]:
    """The QuantizeLinear that is the only consumer of ``node``, and the Relu / Clip
    between them if any."""
    if len(node.outputs) != 1:
        return None, None
    consumer = _only_consumer(node.outputs[0])
    activation = None
    if consumer is not None and consumer.op_type in _ACTIVATIONS and consumer.domain == "":
        activation, consumer = consumer, _only_consumer(consumer.outputs[0])
    view = views.get(id(consumer)) if consumer is not None else None
    if view is None or not view.is_quantize:
        return None, None
    return view, activation


_ACTIVATIONS = ("Relu", "Clip")
_RANGES = {_DT.UINT8: (0, 255), _DT.INT8: (-128, 127)}


def _kept_range(activation: ir.Node) -> tuple[float, float] | None:
    """What Relu / Clip keep of x: [lo, hi] (None: a Clip bound that is not a constant)."""
    if activation.op_type == "Relu":
        return 0.0, math.inf
    bounds = [-math.inf, math.inf]
    for index, name in ((0, "min"), (1, "max")):  # Clip-6 attributes, Clip-11+ inputs
        attr = activation.attributes.get(name)
        if attr is not None:
            bounds[index] = float(attr.value)
        value = activation.inputs[index + 1] if len(activation.inputs) > index + 1 else None
        tensor = constant_tensor(value) if value is not None else None
        if value is not None and tensor is None:
            return None
        if tensor is not None:
            bounds[index] = float(tensor.numpy().reshape(-1)[0])
    return bounds[0], bounds[1]


def _activation_folds(activation: ir.Node, view: QDQView) -> bool:
    """Q(activation(x)) = Q(x) for every x: QuantizeLinear is monotone, so Q(Clip(x, lo,
    hi)) = clamp(Q(x), Q(lo), Q(hi)), which is Q(x) where Q(lo) is the bottom of the type
    and Q(hi) its top (Q computed as QuantizeLinear does: float32 x / scale, rounded half
    to even, plus the zero point, saturated)."""
    kept, limits = _kept_range(activation), _RANGES.get(view.output_type)  # type: ignore[arg-type]
    inputs = view.node.inputs
    scale = view.value_view(inputs[1], read=True)
    zero = view.value_view(inputs[2], read=True) if len(inputs) > 2 else None
    if kept is None or limits is None or scale is None or scale.array is None:
        return False
    if scale.array.size != 1 or (zero is not None and zero.array is None):
        return False
    offset = float(zero.array.reshape(-1)[0]) if zero is not None and zero.array is not None else 0
    step = np.float32(scale.array.reshape(-1)[0])
    with np.errstate(over="ignore", divide="ignore"):
        q = np.clip(np.rint(np.array(kept, np.float32) / step) + offset, *limits)
    return bool(q[0] == limits[0] and q[1] == limits[1])


def _group(scope: GraphScope, node: ir.Node, views: dict[int, QDQView]) -> Group | None:
    """The group ``node`` is the float op of (None: it is not one)."""
    if id(node) in views or node.domain not in ("", "ai.onnx"):
        return None
    inputs = [_dequantize(v, views) for v in node.inputs]
    if not any(inputs):
        return None
    quantize, activation = _quantize_after(node, views)
    if quantize is None:
        first = inputs[0].node.inputs[0] if inputs[0] is not None else None
        source = first.producer() if first is not None else None
        if source is None or source.op_type != "DynamicQuantizeLinear":
            return None
    folds = activation is None or quantize is None or _activation_folds(activation, quantize)
    return Group(scope, node, inputs, quantize, activation, folds)


def find_groups(model: ir.Model) -> list[Group]:
    """Every group of every graph, in graph order."""
    views = _views(model)
    found = []
    for scope in iter_graphs(model):
        for node in scope.graph:
            group = _group(scope, node, views)
            if group is not None:
                found.append(group)
    return found
