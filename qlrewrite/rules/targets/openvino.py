"""QL750-QL752: valid quantized models that OpenVINO's CPU plugin computes wrong or
refuses, run only for ``--target openvino``: a 16-bit Q -> DQ pair on a one-sided range
after a producer that can be negative (QL750, stripped without its clamp), an Add / Mul
reading a constant quantized in the graph (QL751, refused at compile) and a com.microsoft
QLinearAdd / QLinearMul whose output range ends where its result goes on (QL752, wraps
around instead of saturating). Measured with OpenVINO
2026.4.1 against ONNX Runtime 1.31.1 with ORT_DISABLE_ALL."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import ERROR, SAFE, Finding
from qlrewrite.qdq import QOPERATOR, QDQView
from qlrewrite.qdq.qoperator import TripleView, triples
from qlrewrite.qdq.view import QOperatorView
from qlrewrite.rules.common import constant_params
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, Fix, FixContext, TargetNode, rule
from qlrewrite.toolkit import MAIN

__all__: list[str] = []

#: The 16-bit types whose Q -> DQ pairs OpenVINO's FQStrippingTransformation removes
#: (FakeQuantize of 65536 levels), with their lowest value.
_LOWEST = {ir.DataType.UINT16: 0, ir.DataType.INT16: -32768}

#: Float producers whose outputs are never negative (Clip: when its min is >= 0).
_NON_NEGATIVE = frozenset(
    {"Relu", "Sigmoid", "Softmax", "Abs", "Exp", "Sqrt", "Softplus", "HardSigmoid", "Clip"}
)

#: The operators whose input read from a constant's Q -> DQ OpenVINO refuses to compile.
_ARITHMETIC = frozenset({"Add", "Mul"})


def _params(ctx: QDQView, node: ir.Node) -> tuple[np.ndarray, np.ndarray] | None:
    """The constant scale and zero point of a Q/DQ ``node`` (None when not both read)."""
    read = constant_params(ctx, node)
    if read is None or read[0].array is None or read[1].array is None:
        return None
    return read[0].array, read[1].array


def _same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return all(x.shape == y.shape and bool(np.array_equal(x, y)) for x, y in zip(a, b, strict=True))


def _paired_dq(ctx: QDQView, params: tuple[np.ndarray, np.ndarray]) -> ir.Node | None:
    """The DequantizeLinear reading the Q's output with the Q's own parameters."""
    for use in ctx.node.outputs[0].uses():
        node = use.node
        if node.op_type == "DequantizeLinear" and node.domain == ctx.node.domain:
            other = _params(ctx, node)
            if other is not None and _same(params, other):
                return node
    return None


#: Operators whose output is never negative when their data inputs are not.
_PRESERVING = frozenset(
    {
        *("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"),
        *("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity"),
        *("Concat", "Slice", "Gather", "Split", "Expand", "Tile", "Resize", "Pad"),
        *("DepthToSpace", "SpaceToDepth", "Max", "Min", "Add", "Mul", "Div", "Sum"),
        *("Mean", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "Where"),
        *("LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "HardSwish", "Tanh", "Erf", "Gelu"),
        *("Floor", "Ceil", "Round", "Pow"),
    }
)
#: The inputs of a _PRESERVING operator that carry its data (None: all).
_DATA_INPUTS = {"Concat": None, "Max": None, "Min": None, "Add": None, "Mul": None}


def _lowest_dq(ctx: QDQView, node: ir.Node) -> bool:
    """A DequantizeLinear whose zero point is its type's lowest value (never negative)."""
    if node.op_type != "DequantizeLinear":
        return False
    if len(node.inputs) < 3 or node.inputs[2] is None:  # zero point 0: unsigned lowest
        source = node.inputs[0] if node.inputs else None
        return source is not None and source.dtype in (ir.DataType.UINT8, ir.DataType.UINT16)
    read = constant_params(ctx, node)
    zero = read[1] if read is not None else None
    if zero is None or zero.dtype is None:
        return False
    lowest = {**_LOWEST, ir.DataType.UINT8: 0, ir.DataType.INT8: -128}.get(zero.dtype)
    return lowest is not None and zero.array is not None and bool(np.all(zero.array == lowest))


def _data_inputs(node: ir.Node) -> list[ir.Value | None]:
    inputs = list(node.inputs)
    if node.op_type == "Where":
        return inputs[1:]
    return inputs if node.op_type in _DATA_INPUTS or node.op_type in ("Sum", "Mean") else inputs[:1]


def _never_negative(ctx: QDQView, value: ir.Value | None, depth: int = 0) -> bool:
    """Whether ``value`` is not known to go negative: a graph input or constant (its
    range is what was calibrated), a DequantizeLinear of a one-sided range, an operator
    never negative, or one that keeps its non-negative data inputs so (a few levels)."""
    producer = value.producer() if value is not None else None
    if producer is None:
        return True
    if _lowest_dq(ctx, producer):
        return True
    if producer.op_type in _PRESERVING and depth < 4:
        data = [v for v in _data_inputs(producer) if v is not None]
        return bool(data) and all(_never_negative(ctx, v, depth + 1) for v in data)
    if producer.op_type not in _NON_NEGATIVE:
        return False
    if producer.op_type != "Clip":
        return True
    low = producer.inputs[1] if len(producer.inputs) > 1 else None
    bound = ctx.value_view(low, read=True) if low is not None else None
    if bound is not None and bound.array is not None:
        return bool(np.all(bound.array >= 0))
    attr = producer.attributes.get("min")
    return attr is not None and attr.as_float() >= 0


#: The types of a QuantizeLinear's input QL750's fix puts a Relu before: ONNX Runtime's
#: CPU provider has a Relu kernel for them (measured, 1.15.1 to 1.32.0: none for bfloat16).
_RELU_TYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})
#: The attribute a QL750 finding its fix repairs names.
_RELU = "relu"


def _relu_fixable(view: QDQView) -> bool:
    """Whether QL750's fix can insert a Relu before this QuantizeLinear: its input is
    float32 / float16 and its graph imports ai.onnx (Relu's domain)."""
    return view.x_type in _RELU_TYPES and view.site.scope.opset("") is not None


def insert_relu(fix: FixContext) -> str | None:
    """QL750's fix: a Relu on the QuantizeLinear's input edge only (the tensor's other
    readers and a graph output of that name keep the unclamped values); one Relu per
    tensor and graph when several such QuantizeLinear read it. Exact: the zero point is
    the type's lowest value, so Q(Relu(x)) == Q(x)."""
    node = fix.site.node
    source, graph = node.inputs[0] if node.inputs else None, node.graph
    if source is None or graph is None:
        return None
    relu = fix.memo.get((id(graph), id(source)))
    if relu is None:
        name = fix.names.fresh(f"{source.name or 'x'}_relu")
        made = ir.node("Relu", [source], name=name)
        made.outputs[0].name = name
        if source.dtype is not None:  # a declared type: the Relu's output has it too
            made.outputs[0].dtype, made.outputs[0].shape = source.dtype, source.shape
        graph.insert_before(node, made)
        relu = fix.memo[id(graph), id(source)] = made.outputs[0]
    node.replace_input_with(0, relu)
    return f"Relu inserted before it on '{source.name}' (Q(Relu(x)) == Q(x): exact)"


@rule(
    "QL750",
    "openvino-16bit-unclamped",
    ERROR,
    summary="OpenVINO removes a 16-bit Q -> DQ pair without its clamp: a one-sided range "
    "after a producer that can be negative lets the negative values through.",
    explanation="""
    OpenVINO's CPU plugin reads a QuantizeLinear -> DequantizeLinear pair with the same
    scale and zero point as a FakeQuantize and, for 16-bit types (65536 levels), its
    FQStrippingTransformation replaces it by its input: no rounding and no clamp to the
    type's range. ORT's quantizer drops a Relu before a Q whose range is [0, max] (zero
    point the type's lowest value), relying on that clamp; OpenVINO then computes with
    the negative values. Measured with OpenVINO 2026.4.1 (f32 and bf16 inference
    precision alike) against ORT 1.31.1 ORT_DISABLE_ALL, tests/rules/test_rules_openvino.py:
    MatMul -> Q/DQ uint16 or int16 (ai.onnx or com.microsoft) with the lowest zero point,
    35% of the largest output off (inputs in [-20, 20]); ORT's own int16 quantize_static
    CNN 1.8 times the largest output, its MLP 46% (a calibration input). The way out,
    inserting a Relu before the Q, is exact: Q(Relu(x)) == Q(x) when the zero point is
    the type's lowest value (ORT 1.18.1 to 1.32.0, default session and ORT_DISABLE_ALL,
    bit for bit), and brings OpenVINO within 1e-4 of the largest output at f32
    (tests/rules/test_openvino_fix.py). A Q
    reading a graph input or a constant is not flagged (its calibrated range is the
    data's), nor one inside an If or Loop body (OpenVINO computes it clamped, measured).
    A two-sided 16-bit range is not flagged: only values beyond the calibrated range go
    unclamped (data-dependent).
    """,
    example="""
    bad:  MatMul -> Q(uint16, zero point 0) -> DQ            (--target openvino)
    good: MatMul -> Relu -> Q(uint16, zero point 0) -> DQ
    """,
    versions="--target openvino",
    scope="target-node",
    needs_version=False,
    fix=Fix(
        SAFE,
        """
        Inserts a Relu on the QuantizeLinear's input edge (`check --fix --target
        openvino`): exact, as Q(Relu(x)) == Q(x) when the zero point is the type's lowest
        value; the tensor's other readers, and a graph output of that name, are left as
        they were. Only for a float32 or float16 input (ONNX Runtime has no bfloat16 Relu
        on CPU) in a graph that imports ai.onnx.
        """,
        applies=lambda finding: finding.attribute == _RELU,
        node=insert_relu,
    ),
    examples=[
        Example(
            "uint16-zero-point-0-after-matmul",
            ModelSpec("openvino_sixteen_bit", "uint16", 0),
            ModelSpec("openvino_sixteen_bit", "uint16", 0, relu=True),
            targets=("openvino",),
        ),
    ],
)
def openvino_16bit_unclamped(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    view = ctx.view
    if ctx.target.runtime != "openvino" or not view.is_quantize or not view.node.outputs:
        return
    if view.ref != MAIN:  # OpenVINO computes a pair in an If / Loop body clamped
        return
    params = _params(view, view.node)
    if params is None or view.output_type not in _LOWEST:
        return
    lowest = _LOWEST[view.output_type]
    if not bool(np.all(params[1] == lowest)) or _paired_dq(view, params) is None:
        return
    if _never_negative(view, view.node.inputs[0]):
        return
    fixable = _relu_fixable(view)
    yield ctx.report(
        f"this {view.output_type.name.lower()} Q -> DQ pair's range starts at 0 and its "
        "input can be negative: OpenVINO removes the pair without clamping, so negative "
        "values pass where ONNX Runtime gives 0",
        "insert a Relu before the QuantizeLinear (exact: Q(Relu(x)) == Q(x) when the "
        "zero point is the type's lowest value" + ("; check --fix does it)" if fixable else ")"),
        attribute=_RELU if fixable else "",
    )


def _constant_pair(ctx: QDQView) -> bool:
    """Whether the DequantizeLinear ``ctx`` reads a QuantizeLinear of a constant."""
    source = ctx.node.inputs[0] if ctx.node.inputs else None
    producer = source.producer() if source is not None else None
    if producer is None or producer.op_type != "QuantizeLinear" or not producer.inputs:
        return False
    x = producer.inputs[0]
    return x is not None and x.const_value is not None


def _quantized_other(node: ir.Node, value: ir.Value) -> bool:
    """Whether ``node``'s other input is a DequantizeLinear's output."""
    for other in node.inputs:
        producer = other.producer() if other is not None and other is not value else None
        if producer is not None and producer.op_type == "DequantizeLinear":
            return True
    return False


@rule(
    "QL751",
    "openvino-quantized-constant-operand",
    ERROR,
    summary="OpenVINO refuses to compile an Add / Mul of a dequantized activation and a "
    "constant quantized in the graph (Q -> DQ of a float constant).",
    explanation="""
    ORT's quantize_static with AddQDQPairToWeight (and other tools) keep a constant in
    float and quantize it in the graph: Q(constant) -> DQ. OpenVINO's low-precision
    transformations (AddTransformation, MultiplyPartialTransformation) fail on an Add or
    Mul whose operands are such a DQ and another DequantizeLinear's output ("index '0'
    out of range"): the model is refused at compile. Measured with OpenVINO 2026.4.1
    (tests/rules/test_rules_openvino.py): Add and Mul, int8; the same Add / Mul reading
    DQ(int8 constant) compiles and agrees with ORT 1.31.1. `qlrewrite fold --keep-dq`
    folds the constant's Q, bit-exact with ONNX Runtime.
    """,
    example="""
    bad:  Add(DQ(Q(x)), DQ(Q(bias: float constant)))    (--target openvino)
    good: Add(DQ(Q(x)), DQ(bias: int8 constant))
    """,
    versions="--target openvino",
    scope="target-node",
    needs_version=False,
    examples=[
        Example(
            "add-of-constant-quantized-in-graph",
            ModelSpec("openvino_constant_operand", "Add", True),
            ModelSpec("openvino_constant_operand", "Add", False),
            targets=("openvino",),
        ),
    ],
)
def openvino_quantized_constant_operand(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    view = ctx.view
    if ctx.target.runtime != "openvino" or view.is_quantize or not view.node.outputs:
        return
    if not _constant_pair(view):
        return
    value = view.node.outputs[0]
    for use in value.uses():
        node = use.node
        arithmetic = node.op_type in _ARITHMETIC and node.domain in ("", "ai.onnx")
        if arithmetic and _quantized_other(node, value):
            yield ctx.report(
                f"{node.op_type} {node.name or '(unnamed)'} reads this Q -> DQ of a "
                "constant and a dequantized activation: OpenVINO refuses it when "
                "compiling",
                "fold the QuantizeLinear of the constant (`qlrewrite fold --keep-dq`, "
                "bit-exact with ONNX Runtime)",
            )
            return


#: The ends of the 8-bit types a QLinearAdd / QLinearMul output saturates at in ORT.
_ENDS = {ir.DataType.UINT8: (0, 255), ir.DataType.INT8: (-128, 127)}


def _zero_point(triple: TripleView) -> int | None:
    """The constant scalar zero point of a triple (0 when absent; None: not known)."""
    if triple.zero_point is None:
        return 0 if triple.values[2] is None else None
    array = triple.zero_point.array
    return int(array.ravel()[0]) if array is not None and array.size == 1 else None


def _wrapped_end(found: list[TripleView]) -> int | None:
    """The end of the output type its zero point sits at while an input's range goes
    past it (None: no such end, or not known)."""
    output = [t for t in found if t.role == "output"]
    inputs = [_zero_point(t) for t in found if t.role != "output"]
    if len(output) != 1 or output[0].dtype not in _ENDS or None in inputs:
        return None
    zero, ends = _zero_point(output[0]), _ENDS[output[0].dtype]
    for end in ends:
        if zero == end and any(z != end for z in inputs):
            return end
    return None


@rule(
    "QL752",
    "openvino-qlinear-binary-wraps",
    ERROR,
    summary="OpenVINO computes com.microsoft QLinearAdd / QLinearMul without saturating: a "
    "result beyond the output's range wraps around (0 becomes 255).",
    explanation="""
    ONNX Runtime saturates a QLinearAdd / QLinearMul result to the output type's range;
    OpenVINO 2026.4.1's CPU plugin converts it to uint8 / int8 without a clamp, so a
    result below the range wraps to the top and one above to the bottom. Measured (one
    node, uint8, random inputs, against ORT 1.31.1 ORT_DISABLE_ALL,
    tests/rules/test_rules_openvino.py): output zero point 0, over 200 steps off. ORT's
    QOperator quantizer folds a Relu after an Add into the Add's output range (zero
    point 0): its QOperator MLP's bias QLinearAdd is computed wrong. Flagged: an output
    zero point at an end of its type while an input's range goes past it (data-dependent
    saturation of a two-sided range is not flagged).
    """,
    example="""
    bad:  com.microsoft.QLinearAdd(A (zp 128), B (zp 100), C_zero_point=0)   (--target openvino)
    good: com.microsoft.QLinearAdd(A (zp 128), B (zp 100), C_zero_point=128)
    """,
    versions="--target openvino",
    scope="target-node",
    needs_version=False,
    kinds=(QOPERATOR,),
    examples=[
        Example(
            "qlinear-add-output-zero-point-0",
            ModelSpec("qoperator", "QLinearAdd", C_zero_point=ModelSpec("array", 0, DT.UINT8)),
            ModelSpec("qoperator", "QLinearAdd"),
            targets=("openvino",),
        ),
    ],
)
def openvino_qlinear_binary_wraps(ctx: TargetNode[QOperatorView]) -> Iterator[Finding]:
    view = ctx.view
    if ctx.target.runtime != "openvino" or view.node.domain != "com.microsoft":
        return
    if view.op_type not in ("QLinearAdd", "QLinearMul"):
        return
    end = _wrapped_end(triples(view))
    if end is not None:
        where = "lowest" if end in (0, -128) else "highest"
        yield ctx.report(
            f"the output's zero point {end} is its type's {where} value while an input's "
            "range goes past it: ONNX Runtime saturates there, OpenVINO wraps around",
            "a two-sided output range (and a Relu after the node, as ORT's QDQ format "
            "writes it: `qlrewrite convert --to onnx`), or do not deploy the QOperator "
            "form to OpenVINO",
        )
