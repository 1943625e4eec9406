"""QL740-QL741: valid Q/DQ models that OpenVINO's CPU plugin computes wrong or refuses,
run only for ``--target openvino``: a 16-bit Q -> DQ pair on a one-sided range after a
producer that can be negative (QL740, stripped without its clamp) and an Add / Mul reading
a constant quantized in the graph (QL741, refused at compile). Measured with OpenVINO
2026.4.1 against ONNX Runtime 1.31.1 with ORT_DISABLE_ALL."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, TargetNode, rule

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
    if len(node.inputs) < 3:
        return None
    scale = ctx.value_view(node.inputs[1], read=True)
    zero = ctx.value_view(node.inputs[2], read=True)
    if scale is None or zero is None or scale.array is None or zero.array is None:
        return None
    return scale.array, zero.array


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


def _never_negative(ctx: QDQView, value: ir.Value | None) -> bool:
    """Whether ``value`` is made by an operator whose outputs are never negative."""
    producer = value.producer() if value is not None else None
    if producer is None or producer.op_type not in _NON_NEGATIVE:
        return value is not None and value.const_value is not None
    if producer.op_type != "Clip":
        return True
    low = producer.inputs[1] if len(producer.inputs) > 1 else None
    bound = ctx.value_view(low, read=True) if low is not None else None
    if bound is not None and bound.array is not None:
        return bool(np.all(bound.array >= 0))
    attr = producer.attributes.get("min")
    return attr is not None and attr.as_float() >= 0


@rule(
    "QL740",
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
    precision alike) against ORT 1.31.1 ORT_DISABLE_ALL: MatMul -> Q/DQ uint16 or int16
    (ai.onnx or com.microsoft) with the lowest zero point, 53% of the largest output
    off; ORT's own 16-bit quantize_static CNN 189%, MLP 45%, a 39-op-family CNN 16%.
    A two-sided 16-bit range is not flagged: only values beyond the calibrated range
    go unclamped (data-dependent; ORT's 16-bit CNNs at opset 13 / 17: 7-9% off).
    """,
    example="""
    bad:  MatMul -> Q(uint16, zero point 0) -> DQ            (--target openvino)
    good: MatMul -> Relu -> Q(uint16, zero point 0) -> DQ
    """,
    versions="--target openvino",
    scope="target-node",
    needs_version=False,
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
    params = _params(view, view.node)
    if params is None or view.output_type not in _LOWEST:
        return
    lowest = _LOWEST[view.output_type]
    if not bool(np.all(params[1] == lowest)) or _paired_dq(view, params) is None:
        return
    if _never_negative(view, view.node.inputs[0]):
        return
    yield ctx.report(
        f"this {view.output_type.name.lower()} Q -> DQ pair's range starts at 0 and its "
        "input can be negative: OpenVINO removes the pair without clamping, so negative "
        "values pass where ONNX Runtime gives 0",
        "insert a Relu before the QuantizeLinear (exact: Q(Relu(x)) == Q(x) when the "
        "zero point is the type's lowest value)",
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
    "QL741",
    "openvino-quantized-constant-operand",
    ERROR,
    summary="OpenVINO refuses to compile an Add / Mul of a dequantized activation and a "
    "constant quantized in the graph (Q -> DQ of a float constant).",
    explanation="""
    ORT's quantize_static with AddQDQPairToWeight (and other tools) keep a constant in
    float and quantize it in the graph: Q(constant) -> DQ. OpenVINO's low-precision
    transformations (AddTransformation, MultiplyPartialTransformation) fail on an Add or
    Mul whose operands are such a DQ and another DequantizeLinear's output ("index '0'
    out of range"): the model is refused at compile. Measured with OpenVINO 2026.4.1:
    Add and Mul, either operand order, int8; the same Add / Mul with a float operand,
    or reading DQ(int8 constant), and a MatMul weight as Q -> DQ of a constant compile
    and agree with ORT 1.31.1 (within 2e-7).
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
