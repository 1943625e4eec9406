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

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq import NodeView, QDQView
from qlrewrite.qdq.kinds import GATHER_BLOCK_QUANTIZED, MATMUL_NBITS, QDQ, QOPERATOR
from qlrewrite.qdq.qoperator import triples

__all__ = [
    "FAMILY_OPS",
    "QDQ_PATTERN",
    "QOPERATOR_VALUES",
    "WEIGHT_OPS",
    "WEIGHT_PATTERN",
    "bias_key",
    "counts_padding",
    "family_key",
    "form_of",
    "own_pads",
    "pad_pool_key",
    "pattern_key",
    "qoperator_form",
    "qoperator_values_key",
    "values_key",
    "zero_point_class",
]

_GRANULARITY = {
    opsets.PER_TENSOR: "per-tensor",
    opsets.PER_AXIS: "per-axis",
    opsets.BLOCKED: "blocked",
}


def _name(dtype: object) -> str | None:
    return getattr(dtype, "name", None)


def _qdq_form(view: NodeView) -> str | None:
    output = view.output_type if view.is_quantize else None
    quantized = _name(output) if view.is_quantize else _name(view.x_type)
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
    if "accuracy_level" not in view.node.attributes:  # ORT 1.15-1.16 refuse it written
        level = "absent"
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


#: An input's (element type, element count), None when omitted.
_Typed = tuple[ir.DataType | None, int | None] | None


def _qoperator_form(view: NodeView) -> str | None:
    """Each input's type; a scale or zero point of more than one element (per-channel) is
    marked ``[n]`` (runtimes take per-tensor and per-channel forms differently)."""
    specs = tuple(getattr(view.row, "inputs", ()))
    # a data input no inference reached (after a com.microsoft node): its triple's type,
    # which its zero point gives
    typed = {id(t.values[0]): t.dtype for t in triples(view) if t.values[0] is not None}
    inputs = [
        (v.dtype or typed.get(id(value)), v.size) if v is not None else None
        for v, value in zip(view.inputs, view.node.inputs, strict=False)
    ]
    return _form_key(view.domain_label, view.op_type, view.imported, specs, inputs)


def qoperator_form(
    row: opsets.QOperatorVersion, imported: int | None, inputs: Sequence[_Typed]
) -> str | None:
    """The table key of a QOperator node of ``row`` at the ``imported`` opset whose inputs
    have these (element type, element count) (None: omitted); None when a type is
    unknown. Read for a node written (``convert --to qoperator --target``) as for one read."""
    return _form_key(row.domain or "ai.onnx", row.op_type, imported, row.inputs, inputs)


def _form_key(
    label: str,
    op_type: str,
    imported: int | None,
    specs: Sequence[opsets.Operand],
    inputs: Sequence[_Typed],
) -> str | None:
    names = [spec.name for spec in specs]
    types = []
    for index, value in enumerate(inputs):
        if value is None:
            types.append("-")
            continue
        name = _name(value[0])
        if name is None:
            return None
        role = names[index] if index < len(names) else ""
        per_channel = role.endswith(("scale", "zero_point")) and value[1] not in (None, 1)
        types.append(f"{name}[n]" if per_channel else name)
    while types and types[-1] == "-":
        types.pop()
    return f"{label} {op_type} opset={imported} {','.join(types)}"


#: The QOperator nodes whose values the probe compared with the reference: the node's form
#: and the class of each of its zero points (:func:`qoperator_values_key`).
QOPERATOR_VALUES = "QOperator values: "


def zero_point_class(role: str, array: np.ndarray | None, dtype: ir.DataType | None) -> str | None:
    """A zero point's class in :func:`values_key`: "zero", "nonzero", "differ" (per
    channel, not all one value) or, for an ``role`` "output", "lowest" / "highest" (its
    type's end: a result beyond it saturates); None: not known. ``array`` None: no zero
    point (0)."""
    flat = np.zeros(1) if array is None else np.asarray(array).ravel()
    if flat.size == 0:
        return None
    if (flat != flat[0]).any():
        return "differ"
    kind = np.dtype(dtype.numpy()).kind if dtype is not None else ""
    if role == "output" and kind in ("i", "u"):
        ends = np.iinfo(dtype.numpy())  # type: ignore[union-attr]
        if flat[0] in (ends.min, ends.max):
            return "lowest" if flat[0] == ends.min else "highest"
    return "zero" if flat[0] == 0 else "nonzero"


def values_key(form: str | None, classes: Sequence[tuple[str, str | None]]) -> str | None:
    """The key of a QOperator node's value-compared row: :data:`QOPERATOR_VALUES`, its
    ``form`` and each (role, zero point class) of its triples in schema order
    (``zero_points=input:nonzero,weight:differ,output:nonzero``); None when one is not
    known."""
    if form is None or any(c is None for _, c in classes):
        return None
    named = ",".join(f"{role}:{c}" for role, c in classes)
    return f"{QOPERATOR_VALUES}{form} zero_points={named}"


def qoperator_values_key(view: NodeView) -> str | None:
    """:func:`values_key` of a QOperator node, read from its view (a zero point that is
    not a constant: None)."""
    classes = []
    for triple in triples(view):
        if triple.values[2] is not None and (
            triple.zero_point is None or triple.zero_point.array is None
        ):
            return None
        array = triple.zero_point.array if triple.zero_point is not None else None
        classes.append((triple.role, zero_point_class(triple.role, array, triple.dtype)))
    return values_key(_qoperator_form(view), classes)


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
    """`` along=K|N blocks=one|many zero_point=yes|no`` for a blocked
    2-D weight (what decides how ONNX Runtime's fused kernel misreads its scale); None when
    the weight's rank is unknown or not 2."""
    shape = view.x.shape if view.x is not None else None
    if shape is None or len(shape) != 2:
        return None
    axis = view.axis % 2
    dim = shape[axis]
    blocks = "one" if dim is not None and view.block_size >= dim else "many"
    zero_point = "yes" if view.zero_point is not None else "no"
    return f" along={'KN'[axis]} blocks={blocks} zero_point={zero_point}"


def _quantize_consumers(op: ir.Node) -> list[ir.Node] | None:
    """The QuantizeLinear nodes ``op``'s output feeds when it feeds nothing else (its output
    is quantized again: ONNX Runtime fuses the group into a QLinear kernel); None when the
    output is float (a graph output, or a float op reads it)."""
    consumers = list(op.outputs[0].consumers()) if op.outputs else []
    quantized = bool(consumers) and all(n.op_type == "QuantizeLinear" for n in consumers)
    return consumers if quantized else None


def _output_kind(op: ir.Node) -> str:
    """`` output=quantized|float``: whether ``op``'s output is quantized again."""
    return f" output={'float' if _quantize_consumers(op) is None else 'quantized'}"


#: The ai.onnx operators whose second input a weight's DequantizeLinear gives in the patterns
#: the tables record (ONNX Runtime's QDQ selectors fuse each into an integer kernel).
WEIGHT_OPS = ("MatMul", "Conv", "ConvTranspose", "Gemm")


def _zero_points(view: QDQView) -> str | None:
    """``no``, ``equal`` (one value everywhere) or ``differ``; None: not a read constant."""
    node_input = view.node.inputs[2] if len(view.node.inputs) > 2 else None
    if node_input is None:
        return "no"
    found = view.value_view(node_input, read=True)
    array = found.array if found is not None else None
    if array is None:
        return None
    return "equal" if array.size == 0 or (array == array.flat[0]).all() else "differ"


def _weight_layout(view: QDQView, op: ir.Node) -> str | None:
    """`` axis=N [blocks=one|many] zero_points=no|equal|differ [transB=0|1]`` of the weight of
    a Conv, ConvTranspose or Gemm pattern (what decides how ONNX Runtime's fused kernel
    reads its scales and zero points); None when the weight's rank or zero points are
    unknown."""
    shape = view.x.shape if view.x is not None else None
    zero_points = _zero_points(view)
    if shape is None or zero_points is None:
        return None
    layout = ""
    if view.granularity.kind != opsets.PER_TENSOR:
        layout = f" axis={view.axis % len(shape)}"
    if view.granularity.blocked:
        dim = shape[view.axis % len(shape)]
        layout += f" blocks={'one' if dim is not None and view.block_size >= dim else 'many'}"
    layout += f" zero_points={zero_points}"
    if op.op_type == "Gemm":
        trans_b = op.attributes.get("transB")
        layout += f" transB={trans_b.as_int() if trans_b is not None else 0}"
    return layout


def pattern_key(view: NodeView, consumer: ir.Node) -> str | None:
    """The table key of the pattern whose weight (second input) ``view``'s DequantizeLinear
    gives to ``consumer``: ``weight DQ-><op>: <form>`` when the activation is float;
    ``QDQ <op>: activation=<type> weight=<form>`` when a DequantizeLinear gives it, with a
    blocked MatMul weight's layout, or for the other :data:`WEIGHT_OPS` the weight's layout
    (:func:`_weight_layout`). None: the weight has no form, or no pattern of that kind is
    recorded. Every QDQ pattern ends with whether the op's output is quantized again
    (:func:`_output_kind`: a QLinear kernel, or MatMulIntegerToFloat / no fusion)."""
    form = form_of(view)
    if form is None:
        return None
    op = (
        consumer.op_type
        if consumer.domain in ("", "ai.onnx")
        else f"{consumer.domain}:{consumer.op_type}"
    )
    activation = _activation_type(consumer)
    if activation is None:
        return f"weight DQ->{op}: {form}"
    key = f"QDQ {op}: activation={activation} weight={form}"
    layout: str | None = ""
    if op != "MatMul":
        layout = _weight_layout(view, consumer) if isinstance(view, QDQView) else None
    elif isinstance(view, QDQView) and view.granularity.blocked:
        layout = _blocked_layout(view, consumer)
    if op == "ConvTranspose" and layout is not None and isinstance(view, QDQView):
        layout = _with_activation_zero(view, consumer, layout)
    return None if layout is None else key + layout + _output_kind(consumer)


def _with_activation_zero(view: QDQView, op: ir.Node, layout: str) -> str | None:
    """``layout`` and `` activation_zero_point=zero|nonzero``: whether the DequantizeLinear
    giving ``op``'s activation has a zero point other than 0 (OpenVINO 2026.4.1 computes a
    uint8 x uint8 ConvTranspose right with one and wrong without, measured); None when it
    is not a read constant."""
    producer = op.inputs[0].producer() if op.inputs[0] is not None else None
    zero_point = producer.inputs[2] if producer is not None and len(producer.inputs) > 2 else None
    if zero_point is None:
        return f"{layout} activation_zero_point=zero"
    found = view.value_view(zero_point, read=True)
    if found is None or found.array is None:
        return None
    return f"{layout} activation_zero_point={'nonzero' if found.array.any() else 'zero'}"


#: The ai.onnx operators of the activation-only QDQ node groups the tables record: those
#: ONNX Runtime's QDQ selectors (onnxruntime/core/optimizer/qdq_transformer/
#: selectors_actions/qdq_selector_action_transformer.cc) replace with a QLinear kernel
#: (unary, binary, variadic, Where) or whose Q/DQ pair they drop (Reshape, MaxPool, ...), and
#: those other providers' selectors group (Pad, InstanceNormalization) or ORT folds into
#: the QuantizeLinear (Relu, Clip).
FAMILY_OPS = (
    "AveragePool",
    "GlobalAveragePool",
    "LeakyRelu",
    "Sigmoid",
    "Softmax",
    "Add",
    "Mul",
    "Concat",
    "Where",
    "MaxPool",
    "Resize",
    "Reshape",
    "Transpose",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Slice",
    "Gather",
    "ReduceMax",
    "ArgMax",
    "Pad",
    "InstanceNormalization",
    "Relu",
    "Clip",
)


def _parameters(view: QDQView, node: ir.Node) -> tuple[bytes, ...] | None:
    """A Q or DQ node's scale and zero point as bytes (None: not a read constant)."""
    found = []
    for value in node.inputs[1:3]:
        array = view.value_view(value, read=True) if value is not None else None
        if array is None or array.array is None:
            return None
        found.append(array.array.tobytes() + str(array.array.shape).encode())
    return tuple(found)


def _group_params(view: QDQView, op: ir.Node, outputs: list[ir.Node]) -> str:
    """``equal`` when every DequantizeLinear giving ``op`` and every QuantizeLinear of its
    output hold the same scale and zero point, else ``differ``."""
    producers = [v.producer() for v in op.inputs if v is not None]
    group = [n for n in producers if n is not None and n.op_type == "DequantizeLinear"]
    found = {_parameters(view, n) for n in [*group, *outputs]}
    return "equal" if len(found) == 1 and None not in found else "differ"


def _quantized_type(quantize: ir.Node) -> str:
    """The element type a QuantizeLinear writes: its output's, else its zero point's, else
    uint8 (the default without one)."""
    for value in (quantize.outputs[0], *quantize.inputs[2:3]):
        if value is not None and value.dtype is not None:
            return value.dtype.name
    return "UINT8"


def family_key(view: NodeView, op: ir.Node) -> str | None:
    """The table key of the activation-only QDQ node group whose input ``view``'s
    DequantizeLinear gives to ``op`` (one of :data:`FAMILY_OPS`): ``QDQ <op>: input=<the
    DequantizeLinear's form> output=<the QuantizeLinear's type, or float>
    params=equal|differ`` (whether every Q/DQ of the group has one scale and zero point).
    None: not such a group, or the DequantizeLinear has no form."""
    if op.op_type not in FAMILY_OPS or op.domain not in ("", "ai.onnx"):
        return None
    form = form_of(view) if isinstance(view, QDQView) and not view.is_quantize else None
    if form is None or not isinstance(view, QDQView):
        return None
    consumers = _quantize_consumers(op)
    output = _quantized_type(consumers[0]) if consumers else "float"
    params = _group_params(view, op, consumers or [])
    padding = _pool_padding(view, op) if op.op_type == "AveragePool" else ""
    if padding is None:
        return None
    return f"QDQ {op.op_type}: input={form} output={output} params={params}{padding}"


def own_pads(pool: ir.Node) -> list[int] | None:
    """A pool's own ``pads`` ([] when it pads nothing); None when auto_pad sets them (their
    values depend on the input's shape)."""
    auto_pad = pool.attributes.get("auto_pad")
    if auto_pad is not None and auto_pad.as_string() not in ("", "NOTSET", "VALID"):
        return None
    pads = pool.attributes.get("pads")
    return list(pads.as_ints()) if pads is not None and any(pads.as_ints()) else []


def counts_padding(pool: ir.Node) -> bool:
    """Whether an AveragePool counts padding in its average (count_include_pad, default 0)."""
    counted = pool.attributes.get("count_include_pad")
    return counted is not None and counted.as_int() != 0


def _pool_padding(view: QDQView, op: ir.Node) -> str | None:
    """`` pads=counted zero_point=zero|nonzero`` for an AveragePool that pads and counts the
    padding in the average (count_include_pad=1: what a runtime that moves the
    DequantizeLinear past the pool gets wrong when the zero point is not 0),
    `` pads=excluded`` when it pads without counting, else empty. None: the zero point is
    not a read constant."""
    if own_pads(op) == []:
        return ""
    if not counts_padding(op):
        return " pads=excluded"
    zero_point = view.node.inputs[2] if len(view.node.inputs) > 2 else None
    found = view.value_view(zero_point, read=True) if zero_point is not None else None
    if zero_point is not None and (found is None or found.array is None):
        return None
    nonzero = found is not None and found.array is not None and bool(found.array.any())
    return f" pads=counted zero_point={'nonzero' if nonzero else 'zero'}"


def _weight_granularity(op: ir.Node) -> str | None:
    """``per-tensor`` or ``per-axis``: how the DequantizeLinear giving ``op``'s weight
    (second input) is quantized (None: no DequantizeLinear, or its scale's shape unknown)."""
    weight = op.inputs[1] if len(op.inputs) > 1 else None
    producer = weight.producer() if weight is not None else None
    if producer is None or producer.op_type != "DequantizeLinear" or len(producer.inputs) < 2:
        return None
    scale = producer.inputs[1]
    shape = scale.shape if scale is not None else None
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    size = 1
    for dim in shape:
        size *= dim  # type: ignore[operator]
    return "per-tensor" if size == 1 else "per-axis"


def bias_key(view: NodeView, op: ir.Node) -> str | None:
    """The table key of the bias (third input) ``view``'s DequantizeLinear gives a QDQ Conv
    or Gemm: ``QDQ <op> bias: activation=<type> weight=per-tensor|per-axis bias=<the
    DequantizeLinear's form>``. None: not a bias of such a pattern, or no form."""
    if op.op_type not in ("Conv", "Gemm") or op.domain not in ("", "ai.onnx"):
        return None
    outputs = view.node.outputs
    if len(op.inputs) < 3 or not outputs or op.inputs[2] is not outputs[0]:
        return None
    form = form_of(view)
    activation = _activation_type(op)
    weight = _weight_granularity(op)
    if None in (form, activation, weight):
        return None
    return f"QDQ {op.op_type} bias: activation={activation} weight={weight} bias={form}"


#: The Pad -> AveragePool pairs: ``Pad->AveragePool: opset=N count_include_pad=0|1
#: input=float|dq-zero|dq-nonzero``.
PAD_POOL = "Pad->AveragePool: "


def _zero_constant(pad: ir.Node) -> bool:
    """Whether ``pad`` pads with the constant 0 (mode constant, no value or a read 0)."""
    mode = pad.attributes.get("mode")
    if mode is not None and mode.as_string() != "constant":
        return False
    value = pad.inputs[2] if len(pad.inputs) > 2 else None
    if value is None:
        return True
    constant = value.const_value
    return constant is not None and not constant.numpy().any()


#: The ops a runtime moves a dequantization through on its way to a Pad (one data input).
_DEQUANTIZE_THROUGH = ("MaxPool", "Relu", "Reshape", "Transpose", "Identity")


def _padded_input(pad: ir.Node) -> str | None:
    """``float``, or ``dq-zero`` / ``dq-nonzero``: the zero point of the DequantizeLinear the
    Pad's data comes from (directly or through :data:`_DEQUANTIZE_THROUGH`, where OpenVINO
    moves the dequantization past the Pad); None when that zero point is not a constant."""
    node = pad
    for _ in range(4):
        value = node.inputs[0] if node.inputs else None
        node = value.producer() if value is not None else None
        if node is None or node.op_type not in (*_DEQUANTIZE_THROUGH, "DequantizeLinear"):
            return "float"
        if node.op_type == "DequantizeLinear":
            zero_point = node.inputs[2] if len(node.inputs) > 2 else None
            if zero_point is None:
                return "dq-zero"
            constant = zero_point.const_value
            if constant is None:
                return None
            return "dq-nonzero" if constant.numpy().any() else "dq-zero"
    return "float"


def pad_pool_key(pool: ir.Node, opset: int | None) -> str | None:
    """The table key of an AveragePool (no pads of its own) whose input is a Pad with the
    constant 0 that feeds nothing else, at ai.onnx ``opset``, with what the Pad's data is
    (:func:`_padded_input`): the pair ONNX Runtime's PadFusion folds into the pool (for the
    Pad versions it knows). None: not such a pair."""
    if opset is None:
        return None
    if pool.op_type != "AveragePool" or pool.domain not in ("", "ai.onnx"):
        return None
    pad = pool.inputs[0].producer() if pool.inputs and pool.inputs[0] is not None else None
    if pad is None or pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx"):
        return None
    if len(pad.outputs[0].consumers()) != 1 or not _zero_constant(pad):
        return None
    padded = _padded_input(pad)
    if own_pads(pool) != [] or padded is None:
        return None
    count = int(counts_padding(pool))
    return f"{PAD_POOL}opset={opset} count_include_pad={count} input={padded}"
