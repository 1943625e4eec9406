"""The form of a quantized node as the runtime tables key it: one string per node, read from
its :class:`~qlrewrite.qdq.NodeView`, the same for the probe that measured a form and for
the rule that looks it up.

A form names what decides whether a runtime has a kernel for the node: the operator and
its domain, the opset imported for that domain, the element types, the granularity, and
for the weight-only operators the attributes that pick a kernel (bits, accuracy_level)
and the optional inputs given (zero points and their kind, g_idx). Shapes and values are
left out: the probe measures one representative of each form (``docs/targets.md``).
"""

from __future__ import annotations

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq import NodeView, QDQView
from qlrewrite.qdq.kinds import GATHER_BLOCK_QUANTIZED, MATMUL_NBITS, QDQ, QOPERATOR

__all__ = ["QDQ_PATTERN", "WEIGHT_PATTERN", "form_of", "pattern_key"]

_GRANULARITY = {
    opsets.PER_TENSOR: "per-tensor",
    opsets.PER_AXIS: "per-axis",
    opsets.BLOCKED: "blocked",
}


def _name(dtype: object) -> str | None:
    return getattr(dtype, "name", None)


def _qdq_form(view: NodeView) -> str | None:
    output = view.output_type if view.is_quantize else None
    quantized = _name(output) if view.is_quantize else _name(view.x.dtype if view.x else None)
    scale = _name(view.scale.dtype) if view.scale is not None else None
    granularity = _GRANULARITY.get(view.granularity.kind)
    if None in (quantized, scale, granularity, view.imported):
        return None
    return (
        f"{view.domain_label} {view.op_type} opset={view.imported} {quantized} "
        f"scale={scale} {granularity}"
    )


def _zero_point_kind(view: NodeView) -> str:
    zero_point = view.operand("zero_points")
    if zero_point is None:
        return "none"
    return "float" if zero_point.dtype in opsets.FLOAT_TYPES else "packed"


def _matmul_nbits_form(view: NodeView) -> str | None:
    values = view.weight_attributes
    a = view.inputs[0] if view.inputs else None
    a_type = _name(a.dtype) if a is not None else None
    bits, level = values.get("bits"), values.get("accuracy_level")
    if None in (a_type, bits, level):
        return None
    g_idx = "yes" if view.operand("g_idx") is not None else "no"
    return (
        f"com.microsoft MatMulNBits bits={bits} accuracy_level={level} A={a_type} "
        f"zero_points={_zero_point_kind(view)} g_idx={g_idx}"
    )


def _gather_block_form(view: NodeView) -> str | None:
    values = view.weight_attributes
    data = _name(view.x.dtype) if view.x is not None else None
    scale = _name(view.scale.dtype) if view.scale is not None else None
    rank = view.x.rank if view.x is not None else None
    axis = values.get("quantize_axis")
    if None in (data, scale, rank, axis):
        return None
    last = "last" if axis in (-1, rank - 1) else "other"  # type: ignore[operator]
    zero_points = "yes" if view.zero_point is not None else "no"
    return (
        f"com.microsoft GatherBlockQuantized {data} bits={values.get('bits')} "
        f"quantize_axis={last} scale={scale} zero_points={zero_points}"
    )


def _qoperator_form(view: NodeView) -> str | None:
    """Each input's type; a scale or zero point of more than one element (per-channel) is
    marked ``[n]`` (runtimes take per-tensor and per-channel forms differently)."""
    names = [spec.name for spec in getattr(view.row, "inputs", ())]
    types = []
    for index, value in enumerate(view.inputs):
        if value is None:
            types.append("-")
            continue
        name = _name(value.dtype)
        if name is None:
            return None
        role = names[index] if index < len(names) else ""
        per_channel = role.endswith(("scale", "zero_point")) and value.size not in (None, 1)
        types.append(f"{name}[n]" if per_channel else name)
    while types and types[-1] == "-":
        types.pop()
    return f"{view.domain_label} {view.op_type} opset={view.imported} {','.join(types)}"


def form_of(view: NodeView) -> str | None:
    """The table key of the node seen by ``view`` (None: a type or attribute it needs is
    unknown, so no table can answer for it)."""
    kind = view.site.kind
    if kind is QDQ:
        return _qdq_form(view)
    if kind is MATMUL_NBITS:
        return _matmul_nbits_form(view)
    if kind is GATHER_BLOCK_QUANTIZED:
        return _gather_block_form(view)
    if kind is QOPERATOR:
        return _qoperator_form(view)
    return None


#: The weight patterns: a constant weight dequantized into a MatMul, keyed by the DQ's form
#: after this prefix.
WEIGHT_PATTERN = "weight DQ->MatMul: "
#: The QDQ MatMul patterns: the activation's type, then the weight DQ's form (and for a
#: blocked weight, its layout: :func:`pattern_key`).
QDQ_PATTERN = "QDQ MatMul: "


def _activation_type(matmul: ir.Node) -> str | None:
    """The quantized type of the MatMul's first input when a DequantizeLinear gives it: its
    x's declared type, else its zero point's (None: float, or not known)."""
    producer = matmul.inputs[0].producer() if matmul.inputs[0] is not None else None
    if producer is None or producer.op_type != "DequantizeLinear":
        return None
    for value in (producer.inputs[0], *producer.inputs[2:3]):
        if value is not None and value.dtype is not None:
            return value.dtype.name
    return None


def _blocked_layout(view: QDQView, matmul: ir.Node) -> str | None:
    """`` along=K|N blocks=one|many zero_point=yes|no output=quantized|float`` for a blocked
    2-D weight (what decides how ONNX Runtime's fused kernel misreads its scale); None when
    the weight's rank is unknown or not 2."""
    shape = view.x.shape if view.x is not None else None
    if shape is None or len(shape) != 2:
        return None
    axis = view.axis % 2
    dim = shape[axis]
    blocks = "one" if dim is not None and view.block_size >= dim else "many"
    zero_point = "yes" if view.zero_point is not None else "no"
    consumers = matmul.outputs[0].consumers() if matmul.outputs else ()
    quantized = bool(consumers) and all(n.op_type == "QuantizeLinear" for n in consumers)
    return (
        f" along={'KN'[axis]} blocks={blocks} zero_point={zero_point} "
        f"output={'quantized' if quantized else 'float'}"
    )


def pattern_key(view: NodeView, matmul: ir.Node) -> str | None:
    """The table key of the MatMul pattern whose weight (second input) ``view``'s
    DequantizeLinear gives: ``weight DQ->MatMul: <form>`` when the activation is float,
    ``QDQ MatMul: activation=<type> weight=<form>`` when a DequantizeLinear gives it (a
    blocked weight adds its layout). None: the weight has no form."""
    form = form_of(view)
    if form is None:
        return None
    activation = _activation_type(matmul)
    if activation is None:
        return WEIGHT_PATTERN + form
    key = f"{QDQ_PATTERN}activation={activation} weight={form}"
    if isinstance(view, QDQView) and view.granularity.blocked:
        layout = _blocked_layout(view, matmul)
        return None if layout is None else key + layout
    return key
