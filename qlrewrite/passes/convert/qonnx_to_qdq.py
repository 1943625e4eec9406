"""QONNX ``Quant`` (Brevitas' QONNX export, FINN) and QCDQ -> standard Q/DQ.

QONNX's ``Quant(x, scale, zeropt, bitwidth)`` (``qonnx.custom_op.general``, earlier
``finn.custom_op.general`` and ``onnx.brevitas``; ``IntQuant`` is its newer name) computes,
in its executor (``qonnx.custom_op.general.intquant.int_quant``): ``q = round(clamp(x /
scale + zeropt, min, max))`` with ``min`` / ``max`` from ``bitwidth``, ``signed`` and
``narrow``, then ``(q - zeropt) * scale``. With a zero point of 0 and rounding ``ROUND`` /
``HALF_EVEN`` that is exactly ``DequantizeLinear(QuantizeLinear(x))``: float32 division,
round half to even, and clamping to integer bounds commutes with rounding. It becomes:

- ``QuantizeLinear -> DequantizeLinear`` on the storage type whose range is exactly
  ``[min, max]`` (int4 / uint4 at opset 21+, int8 / uint8, int16 / uint16 at 21+);
- ``QuantizeLinear -> Clip -> DequantizeLinear`` (QCDQ) on 8 bits otherwise (narrow
  ranges, 2, 3, 5, 6 or 7 bits; 4 bits below opset 21); 9 to 15 bits (and narrow 16) would
  need a Clip on int16, which ONNX Runtime's CPU provider has no kernel for: refused;
- a scale with one non-1 dimension is per-axis (``axis`` that dimension of x).

Refused with the reason: a zero point other than 0 (QONNX adds it to the float quotient
before rounding, which moves results next to a .5 tie: not what QuantizeLinear's integer
addition gives), other rounding modes, non-constant or non-integer bit widths, bit widths
of 1 or above 16, ``BipolarQuant``, ``FloatQuant``, ``Trunc``, and nodes in functions.

QCDQ that standard ONNX can hold more simply is collapsed: ``QuantizeLinear (int8 /
uint8) -> Clip`` to exactly int4's / uint4's range ``-> DequantizeLinear`` becomes int4 /
uint4 Q/DQ at opset 21+ (saturating to that range is the same clamp).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.kernels import int_range
from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorResult
from qlrewrite.passes.results import ConvertsCustomOps
from qlrewrite.qdq import QDQView, constant_tensor, node_views, normalize_domain, onnx_opset
from qlrewrite.qdq.constants import small_array
from qlrewrite.qdq.custom_ops import QONNX_DOMAINS
from qlrewrite.text import grouped
from qlrewrite.toolkit import (
    FreshNames,
    drop_unused_domain,
    ensure_import,
    iter_graphs,
    replace_value,
)

__all__ = ["QonnxToQdqPass"]

_DT = ir.DataType
_QUANT_OPS = ("Quant", "IntQuant")
_INT4_OPSET = 21
#: Storage types by (bits, signed): (type, the opset it needs).
_STORAGE = {
    (4, True): (_DT.INT4, _INT4_OPSET),
    (4, False): (_DT.UINT4, _INT4_OPSET),
    (8, True): (_DT.INT8, 10),
    (8, False): (_DT.UINT8, 10),
    (16, True): (_DT.INT16, _INT4_OPSET),
    (16, False): (_DT.UINT16, _INT4_OPSET),
}
_ROUNDING = ("ROUND", "HALF_EVEN")
_OVERRIDABLE = (
    "{} Quant node(s) read a scale, zero point or bit width from an initializer that is "
    "also a graph input (overridable): converted with the initializer's value, which a "
    "value given for that input no longer changes"
)
_NARROWER = {_DT.INT8: _DT.INT4, _DT.UINT8: _DT.UINT4}
#: The lowest ai.onnx opset with per-axis QuantizeLinear / DequantizeLinear.
_PER_AXIS_OPSET = 13


@dataclasses.dataclass
class _Plan:
    """What one Quant node becomes, or why not."""

    node: ir.Node
    graph: ir.Graph | ir.Function  # a function's: refused (a problem)
    problems: list[str] = dataclasses.field(default_factory=list)
    storage: ir.DataType = _DT.UNDEFINED
    low: int = 0
    high: int = 0
    clip: bool = False
    scale: npt.NDArray[Any] | None = None
    axis: int | None = None
    overridable: bool = False  # a parameter is an initializer listed as a graph input

    @property
    def where(self) -> str:
        return f"{self.node.op_type} '{self.node.name or self.node.outputs[0].name}'"


class QonnxToQdqPass(ir.passes.InPlacePass, ConvertsCustomOps):
    """QONNX ``Quant`` to Q/DQ (or QCDQ), exactly, and QCDQ collapsed to 4-bit Q/DQ where
    the opset has it (see module); raises Refusal naming every Quant it cannot convert."""

    custom_ops = frozenset((domain, op) for domain in QONNX_DOMAINS for op in _QUANT_OPS)

    def call(self, model: ir.Model) -> QOperatorResult:
        opset = onnx_opset(model) or 0
        plans = [_plan(node, graph, opset) for node, graph in _quant_nodes(model)]
        _refuse([p for p in plans if p.problems])
        names = FreshNames(model, nodes=True)
        counts = collections.Counter(_write(plan, names) for plan in plans)
        if plans:
            for domain in {p.node.domain for p in plans}:
                drop_unused_domain(model, domain)
            ensure_import(model, "", _PER_AXIS_OPSET)
        counts["qcdq_collapsed"] = _collapse_qcdq(model, names) if opset >= _INT4_OPSET else 0
        overridable = sum(p.overridable for p in plans)
        warnings = [_OVERRIDABLE.format(overridable)] if overridable else []
        summary = {
            "quant_to_qdq": counts["qdq"],
            "quant_to_qcdq": counts["qcdq"],
            "qcdq_collapsed": counts["qcdq_collapsed"],
        }
        return QOperatorResult(model, any(summary.values()), summary, warnings)


def _quant_nodes(model: ir.Model) -> list[tuple[ir.Node, ir.Graph | ir.Function]]:
    """Every QONNX Quant node with its graph (a node in a function is refused later)."""
    found: list[tuple[ir.Node, ir.Graph | ir.Function]] = []
    for scope in iter_graphs(model):
        for node in scope.graph:
            if node.domain in QONNX_DOMAINS and node.op_type in _QUANT_OPS:
                found.append((node, scope.graph))
    return found


def _constant(node: ir.Node, index: int) -> npt.NDArray[Any] | None:
    """The small constant value of input ``index`` (None: not a constant)."""
    value = node.inputs[index] if index < len(node.inputs) else None
    tensor = constant_tensor(value) if value is not None else None
    return small_array(tensor) if tensor is not None else None


def _parameter(node: ir.Node, index: int) -> tuple[npt.NDArray[Any] | None, bool]:
    """A Quant parameter's value and whether it is overridable: an initializer that is also
    a graph input (PyTorch's exporter lists Brevitas' lifted tensors so) is read at its
    initializer's value."""
    value = node.inputs[index] if index < len(node.inputs) else None
    if value is not None and value.is_graph_input() and value.const_value is not None:
        return small_array(value.const_value), True
    return _constant(node, index), False


def _attribute(node: ir.Node, name: str, default: object) -> object:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _plan(node: ir.Node, graph: ir.Graph | ir.Function, opset: int) -> _Plan:
    plan = _Plan(node, graph)
    if not isinstance(graph, ir.Graph):
        plan.problems.append("a Quant inside a function is not converted")
        return plan
    (scale, s_in), (zero, z_in), (bits, b_in) = (_parameter(node, i) for i in (1, 2, 3))
    plan.overridable = s_in or z_in or b_in
    rounding = str(_attribute(node, "rounding_mode", "ROUND")).upper()
    if rounding not in _ROUNDING:
        plan.problems.append(f"rounding mode {rounding}: QuantizeLinear rounds half to even")
    if scale is None or zero is None or bits is None:
        plan.problems.append("scale, zero point and bit width must be constants")
        return plan
    if np.any(zero != 0):
        plan.problems.append(
            "a zero point other than 0: QONNX adds it to the float quotient before rounding, "
            "QuantizeLinear after (results differ next to .5 ties)"
        )
    _plan_range(plan, bits, opset)
    _plan_scale(plan, scale, node, opset)
    return plan


def _plan_range(plan: _Plan, bits: npt.NDArray[Any], opset: int) -> None:
    """The integer range, the storage type holding it and whether a Clip is needed."""
    if bits.size != 1 or not np.isfinite(bits).all() or float(bits.ravel()[0]) % 1:
        plan.problems.append("the bit width must be one integer")
        return
    width = int(bits.ravel()[0])
    if not 2 <= width <= 16:
        plan.problems.append(f"bit width {width}: only 2 to 16 bits have a storage type")
        return
    signed = bool(_attribute(plan.node, "signed", 1))
    narrow = bool(_attribute(plan.node, "narrow", 0))
    plan.low = -(1 << (width - 1)) + narrow if signed else 0
    plan.high = (1 << (width - 1)) - 1 if signed else (1 << width) - 1 - narrow
    for storage_bits in (4, 8, 16):
        storage, needs = _STORAGE[(storage_bits, signed)]
        exact = int_range(storage) == (plan.low, plan.high)
        if width <= storage_bits and opset >= needs and (exact or storage_bits == 8):
            plan.storage, plan.clip = storage, not exact
            return
    if width == 16 and not narrow:
        plan.problems.append(f"16 bits need opset {_INT4_OPSET} (int16 QuantizeLinear)")
    elif width > 8:
        plan.problems.append(
            f"{width} bits{' narrow' if narrow else ''}: a Clip on int16 / uint16, which ONNX "
            "Runtime's CPU provider has no kernel for (ONNX allows it)"
        )
    else:
        plan.problems.append(f"opset {opset} has no QuantizeLinear")


def _plan_scale(plan: _Plan, scale: npt.NDArray[Any], node: ir.Node, opset: int) -> None:
    """Per-tensor (one value) or per-axis (one non-1 dimension, aligned to x's rank).
    A scale that is 0, infinite or NaN is refused: there QONNX's ``x / scale`` and
    QuantizeLinear's saturation part (0 / 0 is NaN in QONNX, 0 after DequantizeLinear)."""
    if not np.isfinite(scale).all() or not scale.all():
        plan.problems.append("a scale that is 0, infinite or NaN (QONNX's result is NaN there)")
        return
    if scale.size == 1:
        plan.scale = scale.reshape(())
        return
    x = node.inputs[0]
    rank = len(x.shape) if x is not None and x.shape is not None else None
    wide = [i for i, d in enumerate(scale.shape) if d != 1]
    if rank is None or len(wide) != 1 or scale.ndim > rank:
        plan.problems.append(
            f"a scale of shape {list(scale.shape)} is neither per-tensor nor per-axis"
        )
        return
    if opset < _PER_AXIS_OPSET:
        plan.problems.append(f"per-axis scales need opset {_PER_AXIS_OPSET}")
    plan.axis = rank - scale.ndim + wide[0]
    plan.scale = scale.reshape(-1)


def _refuse(refused: list[_Plan]) -> None:
    if refused:
        reasons = grouped((p.where, p.problems) for p in refused)
        raise Refusal(f"cannot convert QONNX Quant exactly: {reasons}; nothing written")


def _initializer(
    graph: ir.Graph, names: FreshNames, base: str, array: npt.NDArray[Any], dtype: ir.DataType
) -> ir.Value:
    name = names.fresh(base)
    value = ir.Value(name=name, shape=ir.Shape(array.shape))
    value.const_value = ir.tensor(array.astype(dtype.numpy()), dtype=dtype, name=name)
    value.type = ir.TensorType(dtype)
    graph.register_initializer(value)
    return value


def _write(plan: _Plan, names: FreshNames) -> str:
    """Replace the Quant node by Q -> (Clip ->) DQ; "qdq" or "qcdq"."""
    node, graph = plan.node, plan.graph
    base = node.name or node.outputs[0].name or "quant"
    assert plan.scale is not None and isinstance(graph, ir.Graph)  # else a problem of _plan
    scale_type = node.inputs[1].dtype if node.inputs[1] is not None else None
    scale = _initializer(graph, names, f"{base}_scale", plan.scale, scale_type or _DT.FLOAT)
    zero = _initializer(
        graph, names, f"{base}_zero_point", np.zeros(plan.scale.shape), plan.storage
    )
    attrs = {} if plan.axis is None else {"axis": plan.axis}
    nodes = [
        ir.node(
            "QuantizeLinear", [node.inputs[0], scale, zero], attrs, name=names.fresh(f"{base}_q")
        )
    ]
    quantized = nodes[0].outputs[0]
    quantized.name = names.fresh(f"{base}_quantized")
    if plan.clip:
        low = _initializer(graph, names, f"{base}_min", np.array(plan.low), plan.storage)
        high = _initializer(graph, names, f"{base}_max", np.array(plan.high), plan.storage)
        nodes.append(ir.node("Clip", [quantized, low, high], name=names.fresh(f"{base}_clip")))
        quantized = nodes[-1].outputs[0]
        quantized.name = names.fresh(f"{base}_clipped")
    nodes.append(
        ir.node("DequantizeLinear", [quantized, scale, zero], attrs, name=names.fresh(f"{base}_dq"))
    )
    graph.insert_before(node, nodes)
    replace_value(node.outputs[0], nodes[-1].outputs[0])
    graph.remove(node, safe=True)
    return "qcdq" if plan.clip else "qdq"


def _collapse_qcdq(model: ir.Model, names: FreshNames) -> int:
    """Q (int8 / uint8) -> Clip to int4's / uint4's range -> DQ, as int4 / uint4 Q/DQ."""
    views = {
        id(site.node): v[0]
        for site, v in node_views(model)
        if len(v) == 1 and isinstance(v[0], QDQView)
    }
    collapsed = 0
    for scope in iter_graphs(model):
        graph = scope.graph
        if not isinstance(graph, ir.Graph) or (scope.opset("") or 0) < _INT4_OPSET:
            continue
        for clip in [n for n in graph if n.op_type == "Clip" and normalize_domain(n.domain) == ""]:
            found = _qcdq(clip, views)
            if found is not None:
                _narrow_qcdq(clip, found, names)
                collapsed += 1
    return collapsed


class _Qcdq(NamedTuple):
    quantize: QDQView
    readers: list[QDQView]
    narrow: ir.DataType
    zeros: list[npt.NDArray[Any]]


def _qcdq(clip: ir.Node, views: dict[int, QDQView]) -> _Qcdq | None:
    """(Q view, DQ views, narrow type) when ``clip`` sits in a QCDQ that clamps exactly to
    int4's / uint4's range, with zero points that fit it; None otherwise."""
    source = clip.inputs[0] if clip.inputs else None
    producer = source.producer() if source is not None else None
    quantize = views.get(id(producer)) if producer is not None else None
    if quantize is None or not quantize.is_quantize or quantize.output_type not in _NARROWER:
        return None
    narrow = _NARROWER[quantize.output_type]
    bounds = int_range(narrow)
    assert bounds is not None  # int4 / uint4
    low, high = _constant(clip, 1), _constant(clip, 2)
    if low is None or high is None or (low.item(), high.item()) != bounds:
        return None
    uses = clip.outputs[0].uses()
    readers = [views[id(node)] for node, index in uses if index == 0 and id(node) in views]
    if len(readers) != len(uses) or clip.outputs[0].is_graph_output():
        return None
    if any(r.is_quantize for r in readers) or source is None or len(source.uses()) != 1:
        return None
    members = [quantize, *readers]
    found = [_constant(m.node, 2) if len(m.node.inputs) > 2 else np.zeros(()) for m in members]
    zeros = [z for z in found if z is not None and bounds[0] <= z.min() and z.max() <= bounds[1]]
    if len(zeros) != len(found):
        return None
    return _Qcdq(quantize, readers, narrow, zeros)


def _narrow_qcdq(clip: ir.Node, found: _Qcdq, names: FreshNames) -> None:
    """Write the QCDQ ``found`` around ``clip`` as Q/DQ of the narrower type."""
    quantize, readers, narrow, zeros = found
    graph = clip.graph
    assert isinstance(graph, ir.Graph)
    for member, zero in zip([quantize, *readers], zeros, strict=True):
        node = member.node
        value = _initializer(graph, names, f"{node.name or 'qdq'}_zero_point", zero, narrow)
        if len(node.inputs) < 3:
            node.resize_inputs(3)
        node.replace_input_with(2, value)
    output = quantize.node.outputs[0]
    output.type = ir.TensorType(narrow)
    for reader in readers:
        reader.node.replace_input_with(0, output)
    graph.remove(clip, safe=True)
