"""Whether the QOperator form holds a Q/DQ group, and as which operator: the planning half
of ``convert --to qoperator`` (:mod:`qlrewrite.passes.convert.qdq_to_qoperator`).

What each QLinear operator takes (its inputs, their element types, which triple may be per
channel and along which axis, its attributes) is read from its row of
:data:`qlrewrite.opsets.QOPERATOR_ROWS`; what a Q/DQ node means from its
:class:`~qlrewrite.qdq.QDQView`. :func:`plan` gives each group the operator it becomes,
or the reason it stays Q/DQ (a key of
:data:`~qlrewrite.passes.convert.qdq_groups.REASONS`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.passes.convert.qdq_groups import Group
from qlrewrite.qdq import MS_DOMAIN, QDQView

__all__ = ["CONVERTIBLE", "FLOAT_OPS", "INTEGER_OPS", "MOVES", "plan"]

_DT = ir.DataType
_8BIT = frozenset({_DT.INT8, _DT.UINT8})
#: The float op -> the QLinear operator that holds its group (domain, op type).
FLOAT_OPS: Mapping[str, tuple[str, str]] = {
    "Conv": ("", "QLinearConv"),
    "MatMul": ("", "QLinearMatMul"),
    "Gemm": (MS_DOMAIN, "QGemm"),
    "Add": (MS_DOMAIN, "QLinearAdd"),
    "Mul": (MS_DOMAIN, "QLinearMul"),
    "Concat": (MS_DOMAIN, "QLinearConcat"),
    "AveragePool": (MS_DOMAIN, "QLinearAveragePool"),
    "GlobalAveragePool": (MS_DOMAIN, "QLinearGlobalAveragePool"),
    "LeakyRelu": (MS_DOMAIN, "QLinearLeakyRelu"),
    "Sigmoid": (MS_DOMAIN, "QLinearSigmoid"),
    "Softmax": (MS_DOMAIN, "QLinearSoftmax"),
}
#: Ops that only move or select values: DQ -> op -> Q with the same scale and zero point
#: is the op on the integers (exact), from the ai.onnx opset that types it for int8/uint8.
MOVES: Mapping[str, int] = {
    "MaxPool": 12,
    "Reshape": 5,
    "Transpose": 1,
    "Flatten": 1,
    "Squeeze": 1,
    "Unsqueeze": 1,
    "Identity": 1,
    "Gather": 1,
    "Slice": 1,
}
#: Every float op type ``--ops`` may name.
CONVERTIBLE: tuple[str, ...] = (*FLOAT_OPS, *MOVES)
#: The dynamic form: the float op -> its integer op (ai.onnx).
INTEGER_OPS: Mapping[str, str] = {"MatMul": "MatMulInteger", "Conv": "ConvInteger"}
#: Float attributes a QLinear op drops when they hold their default.
_DROPPED_DEFAULTS: Mapping[str, Mapping[str, object]] = {
    "Gemm": {"beta": 1.0},
    "AveragePool": {"dilations": None},
}


def _is_8bit(view: QDQView | None, dtype: ir.DataType | None) -> bool:
    return view is not None and dtype in _8BIT and _scale_type(view) == _DT.FLOAT


def _scale_type(view: QDQView) -> ir.DataType | None:
    return view.scale.dtype if view.scale is not None else None


def _array(view: QDQView, index: int) -> np.ndarray | None:
    """A scale's (1) or zero point's (2) values (None: omitted or not a small constant)."""
    inputs = view.node.inputs
    if index >= len(inputs) or inputs[index] is None:
        return None
    found = view.value_view(inputs[index], read=True)
    return found.array if found is not None else None


def _per_tensor(view: QDQView) -> bool:
    return view.granularity.kind == opsets.PER_TENSOR


def _types(group: Group) -> str:
    """'' when every quantized value is 8-bit with a float32 scale, one activation type,
    and int8 activations meet int8 weights (ONNX Runtime 1.31 registers its QLinear kernels
    for those); else "type"."""
    views = [v for v in _quantized(group) if v is not None]
    if not all(_is_8bit(v, v.x_type) for v in views):
        return "type"
    if group.output is not None and not _is_8bit(group.output, group.output.output_type):
        return "type"
    acts = {v.x_type for v in _activations(group)}
    if group.output is not None:
        acts.add(group.output.output_type)
    weights = {v.x_type for v in _weights(group)}
    if len(acts) > 1 or (acts == {_DT.INT8} and _DT.UINT8 in weights):
        return "type"
    return ""


def _quantized(group: Group) -> list[QDQView | None]:
    """The DequantizeLinear of each quantized float input (not Conv's / Gemm's bias)."""
    if group.node.op_type in ("Conv", "Gemm"):
        return group.inputs[:2]
    return group.inputs


def _roles(group: Group) -> list[str]:
    """The role of each float input's triple (input / weight), from the row."""
    if group.row is None:
        return ["input"] * len(group.inputs)
    specs = [t for t in group.row.triples if t.role != "output"]
    return [t.role for t in specs] + ["input"] * (len(group.inputs) - len(specs))


def _activations(group: Group) -> list[QDQView]:
    pairs = zip(_roles(group), _quantized(group), strict=False)
    return [v for role, v in pairs if role == "input" and v is not None]


def _weights(group: Group) -> list[QDQView]:
    pairs = zip(_roles(group), _quantized(group), strict=False)
    return [v for role, v in pairs if role == "weight" and v is not None]


def _channel_axis(group: Group) -> int | None:
    """The weight axis the QLinear op takes a per-channel scale along (None: none)."""
    spec = next((t for t in group.row.triples if t.role == "weight"), None) if group.row else None
    if spec is None:
        return None
    if spec.channel_axis_if is not None:
        name, axis = spec.channel_axis_if
        if _attribute(group.node, name, 0):
            return axis
    return spec.channel_axis


def _attribute(node: ir.Node, name: str, default: object) -> object:
    attr = node.attributes.get(name)
    return attr.value if attr is not None else default


def _granularity(group: Group) -> str:
    """'' when activations are per tensor and a per-channel weight runs along the axis
    the QLinear op takes; "blocked" / "per_channel" otherwise."""
    views = [v for v in _quantized(group) if v is not None]
    if group.output is not None:
        views.append(group.output)
    if any(v.granularity.blocked for v in views):
        return "blocked"
    weights = _weights(group)
    if not all(_per_tensor(v) for v in views if not any(v is w for w in weights)):
        return "per_channel"
    for weight in weights:
        if _per_tensor(weight):
            continue
        axis, rank = _channel_axis(group), weight.x.rank if weight.x is not None else None
        if axis is None or not rank or weight.axis % rank != axis % rank:
            return "per_channel"
        if group.node.op_type != "Conv" and rank != 2:
            return "per_channel"
    return ""


def _bias(group: Group) -> str:
    """Conv's B / Gemm's C: int32, zero point 0, scale = float32(x_scale * w_scale) (the
    integer kernels add B to the int32 sum of x and w)."""
    if len(group.inputs) < 3:
        return ""
    bias = group.inputs[2]
    if bias is None or bias.x_type != _DT.INT32 or bias.granularity.blocked:
        return "bias"
    zero, own = _array(bias, 2), _array(bias, 1)
    x, w = (_array(v, 1) if v is not None else None for v in group.inputs[:2])
    if (zero is not None and np.any(zero)) or own is None or x is None or w is None:
        return "bias"
    product = (np.float32(x.reshape(-1)[0]) * w.astype(np.float32)).reshape(-1)
    own = own.astype(np.float32).reshape(-1)
    if own.size not in (1, product.size) and product.size != 1:
        return "bias"
    left, right = np.broadcast_arrays(own, product)
    return "" if np.array_equal(left, right) else "bias"


def _attributes(group: Group) -> str:
    """'' when every attribute of the float op is one the QLinear op has (or a default it
    drops); Gemm with alpha other than 1 and a bias has no QGemm form."""
    node, row = group.node, group.row
    if row is None:
        return "attribute"
    dropped = _DROPPED_DEFAULTS.get(node.op_type, {})
    for name, attr in node.attributes.items():
        if name in row.attributes:
            continue
        if name in dropped and _default_held(attr.value, dropped[name]):
            continue
        if node.op_type == "Softmax" and name == "axis":
            continue
        return "attribute"
    if node.op_type == "Gemm" and len(group.inputs) > 2 and _attribute(node, "alpha", 1.0) != 1.0:
        return "attribute"
    return ""


def _default_held(value: object, default: object) -> bool:
    if default is None:  # dilations: all ones
        return isinstance(value, (list, tuple)) and all(v == 1 for v in value)
    return value == default


def _softmax(group: Group) -> str:
    """A uint8 output whose probability 1 quantizes above 255 wraps in ONNX Runtime's
    QLinearSoftmax (measured 1.31); the QuantizeLinear saturates."""
    out = group.output
    if group.node.op_type != "Softmax" or out is None or out.output_type != _DT.UINT8:
        return ""
    scale, zero = _array(out, 1), _array(out, 2)
    if scale is None or scale.size != 1 or float(scale.reshape(-1)[0]) <= 0:
        return "softmax_wraps"
    offset = float(zero.reshape(-1)[0]) if zero is not None and zero.size else 0.0
    return "softmax_wraps" if round(1 / float(scale.reshape(-1)[0])) + offset > 255 else ""


def _same_parameters(a: QDQView, b: QDQView) -> bool:
    """The DequantizeLinear and QuantizeLinear hold one per-tensor scale and zero point."""
    if not (_per_tensor(a) and _per_tensor(b)) or a.x_type != b.output_type:
        return False
    scales, zeros = (_array(a, 1), _array(b, 1)), (_array(a, 2), _array(b, 2))
    if scales[0] is None or scales[1] is None:
        return a.node.inputs[1] is b.node.inputs[1] and _inputs_at(a, 2) is _inputs_at(b, 2)
    same_zero = (zeros[0] is None and zeros[1] is None) or (
        zeros[0] is not None and zeros[1] is not None and np.array_equal(zeros[0], zeros[1])
    )
    return bool(np.array_equal(scales[0], scales[1]) and same_zero)


def _inputs_at(view: QDQView, index: int) -> ir.Value | None:
    inputs = view.node.inputs
    return inputs[index] if index < len(inputs) else None


def _plan_move(group: Group) -> str:
    opset = group.scope.opset("")
    if opset is None or opset < MOVES[group.node.op_type]:
        return "opset"
    data, out = group.inputs[0], group.output
    if data is None or out is None or not _is_8bit(data, data.x_type):
        return "type"
    return "" if _same_parameters(data, out) else "parameters_differ"


def _dynamic_type(view: QDQView) -> ir.DataType | None:
    """The activation's type: DynamicQuantizeLinear's output is uint8 (its schema)."""
    source = view.node.inputs[0].producer() if view.node.inputs[0] is not None else None
    if source is not None and source.op_type == "DynamicQuantizeLinear":
        return _DT.UINT8
    return view.x_type


def _plan_dynamic(group: Group) -> str:
    op = group.node.op_type
    if op not in INTEGER_OPS:
        return "no_qoperator_form"
    a, w = [*group.inputs, None, None][:2]
    if a is None or w is None or _dynamic_type(a) != _DT.UINT8 or not _is_8bit(w, w.x_type):
        return "type"
    if w.granularity.blocked:
        return "blocked"
    rank = w.x.rank if w.x is not None else None
    if not _per_tensor(w) and (op == "Conv" or rank != 2 or w.axis % 2 != 1):
        return "per_channel"  # ConvInteger takes one weight zero point; MatMulInteger per column
    if len(group.node.inputs) > 2:
        return "bias"
    group.written = ("", INTEGER_OPS[op])
    return ""


def plan(group: Group, chosen: frozenset[str] | None) -> None:
    """Set ``group.written`` and ``group.row``, or ``group.reason``."""
    op = group.node.op_type
    if chosen is not None and op not in chosen:
        group.reason = "not_chosen"
        return
    if not group.activation_folds:
        group.reason = "activation"
        return
    if group.dynamic:
        group.reason = _plan_dynamic(group)
        return
    if op in MOVES and len(group.inputs) >= 1:
        group.reason = _plan_move(group)
        group.written = ("", op)
        return
    quantized = _quantized(group)
    if op not in FLOAT_OPS or not quantized or any(v is None for v in quantized):
        group.reason = "no_qoperator_form"
        return
    group.written = FLOAT_OPS[op]
    group.row = _row(group)
    if group.row is None:
        group.reason = "opset"
        return
    for check in (_types, _granularity, _bias, _attributes, _softmax):
        reason = check(group)
        if reason:
            group.reason = reason
            return


def _row(group: Group) -> opsets.QOperatorVersion | None:
    domain, op = group.written
    version = group.scope.opset(domain) or (1 if domain == MS_DOMAIN else None)
    row = opsets.lookup(domain, op, version) if version is not None else None
    return row if isinstance(row, opsets.QOperatorVersion) else None
