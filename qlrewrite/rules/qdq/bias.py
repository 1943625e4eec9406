"""QL505, QL508: an int32 bias DequantizeLinear against the activation and weight it is
added to: its scale against the product of theirs (ONNX Runtime's fused kernels read the
bias in units of it), its values against int32's range left by the accumulator."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import SAFE, WARNING, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, Fix, FixContext, rule

__all__ = ["RESCALE", "Mismatch", "mismatch", "rescale_bias"]

#: Relative difference between the bias scale and x_scale x w_scale below which the two
#: are the same number (ORT's quantizer writes the float32 product exactly).
_RTOL = 1e-6
#: The finding's ``attribute`` when the fix can rescale the bias exactly.
RESCALE = "bias-scale"
_INT32 = np.iinfo(np.int32)


@dataclasses.dataclass(frozen=True)
class _Bias:
    """An int32 bias DequantizeLinear and what it is added to: ``op`` the Conv / Gemm /
    MatMul, ``expected`` the float32 x_scale x w_scale per bias element, ``scale`` and
    ``values`` the bias's own (float32, int32 as float64), broadcast to the bias's size."""

    op: ir.Node
    expected: np.ndarray
    scale: np.ndarray
    values: np.ndarray


def _dq_scale(ctx: QDQView, value: ir.Value | None) -> np.ndarray | None:
    """The flat float32 scale of the DequantizeLinear producing ``value`` (None: not a DQ
    with a small constant float32 scale)."""
    node = value.producer() if value is not None else None
    if node is None or node.op_type != "DequantizeLinear" or len(node.inputs) < 2:
        return None
    scale = ctx.value_view(node.inputs[1], read=True)
    if scale is None or scale.array is None or scale.dtype != ir.DataType.FLOAT:
        return None
    return scale.array.astype(np.float32).ravel()


def _unit_gemm(node: ir.Node) -> bool:
    """A Gemm whose alpha and beta are 1 (the only ones the rule reads)."""
    return all(
        (attr := node.attributes.get(name)) is None or attr.as_float() == 1.0
        for name in ("alpha", "beta")
    )


def _operands(out: ir.Value) -> tuple[ir.Node, ir.Value | None, ir.Value | None] | None:
    """The Conv / Gemm reading ``out`` as its bias, or the MatMul of an Add of ``out``: the
    op, its x and its weight."""
    for node in out.consumers():
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in ("Conv", "Gemm") and len(node.inputs) > 2 and node.inputs[2] is out:
            if node.op_type == "Gemm" and not _unit_gemm(node):
                continue
            return node, node.inputs[0], node.inputs[1]
        if node.op_type == "Add" and len(node.inputs) == 2:
            other = node.inputs[1] if node.inputs[0] is out else node.inputs[0]
            mm = other.producer() if other is not None else None
            if mm is not None and mm.op_type == "MatMul" and mm.domain in ("", "ai.onnx"):
                return mm, mm.inputs[0], mm.inputs[1]
    return None


def _bias(ctx: QDQView) -> _Bias | None:
    """The bias this DequantizeLinear is, when it is one and every scale is known."""
    if ctx.is_quantize or ctx.x_type != ir.DataType.INT32 or not ctx.node.outputs:
        return None
    found = _operands(ctx.node.outputs[0])
    scale = ctx.scale
    if found is None or scale is None or scale.array is None:
        return None
    op, x, w = found
    x_scale, w_scale = _dq_scale(ctx, x), _dq_scale(ctx, w)
    read = ctx.value_view(ctx.node.inputs[0], read=True)
    if x_scale is None or w_scale is None or x_scale.size != 1 or read is None:
        return None
    if read.array is None:
        return None
    values = read.array.ravel()
    b_scale = scale.array.astype(np.float32).ravel()
    if {w_scale.size, b_scale.size} - {1, values.size}:
        return None  # a scale that does not match the bias's length: other rules say it
    ones = np.ones(values.size, np.float32)
    expected = ones * (x_scale[0] * w_scale)
    return _Bias(op, expected, ones * b_scale, values)


def _rescaled(bias: _Bias) -> np.ndarray | None:
    """The bias requantized to x_scale x w_scale when that is exact: every value an
    integer in int32's range whose float32 product with the new scale is, bit for bit, the
    float32 value DequantizeLinear computes now (None otherwise)."""
    ratio = bias.scale.astype(np.float64) / bias.expected.astype(np.float64)
    new = bias.values * ratio
    if not np.all(np.isfinite(new)) or np.any(new != np.round(new)):
        return None
    if new.size and (new.min() < _INT32.min or new.max() > _INT32.max):
        return None
    now = bias.values.astype(np.float32) * bias.scale
    then = new.astype(np.int32).astype(np.float32) * bias.expected
    return new.astype(np.int32) if np.array_equal(now.view(np.int32), then.view(np.int32)) else None


def _new_scale(bias: _Bias, per_tensor: bool) -> np.ndarray | None:
    """x_scale x w_scale in the bias scale's granularity (None: a per-tensor bias scale
    whose product differs per channel, which would need an axis)."""
    if not per_tensor:
        return bias.expected
    if bias.expected.size and np.any(bias.expected != bias.expected[0]):
        return None
    return bias.expected[:1]


def _sole_initializer(value: ir.Value | None, graph: object) -> ir.TensorProtocol | None:
    """The tensor of ``value`` when it is an initializer of ``graph`` only this node reads."""
    if value is None or not isinstance(graph, ir.Graph) or value.name not in graph.initializers:
        return None
    if len(value.uses()) != 1 or value.is_graph_output():
        return None
    return value.const_value


def _fixable(bias: _Bias, node: ir.Node, graph: object) -> tuple[np.ndarray, np.ndarray] | None:
    """The new bias values and scale when the fix is exact and rewrites only this node's
    own initializers."""
    b = _sole_initializer(node.inputs[0], graph)
    s = _sole_initializer(node.inputs[1], graph)
    new = _rescaled(bias)
    if b is None or s is None or new is None:
        return None
    scale = _new_scale(bias, s.size == 1)
    if scale is None:
        return None
    return new.reshape(b.shape.numpy()), scale.reshape(s.shape.numpy())


def rescale_bias(fix: FixContext) -> str | None:
    """QL505's fix: the bias requantized to x_scale x w_scale (exact, see :func:`_rescaled`)."""
    view, node = fix.view, fix.site.node
    bias = _bias(view) if isinstance(view, QDQView) else None
    found = _fixable(bias, node, fix.site.graph) if bias is not None else None
    b, s = node.inputs[0], node.inputs[1]
    if found is None or b is None or s is None:
        return None
    b.const_value = ir.Tensor(found[0], name=b.name)
    s.const_value = ir.Tensor(found[1], name=s.name)
    return f"bias '{b.name}' requantized to scale x_scale x w_scale (scale '{s.name}')"


@rule(
    "QL505",
    "bias-scale",
    WARNING,
    summary="An int32 bias's scale is not x_scale x w_scale of the op it is added to.",
    explanation="""
    A QDQ Conv, Gemm or MatMul + Add with an int32 bias DequantizeLinear is fused by ONNX
    Runtime into one integer kernel (QLinearConv, QGemm, ...) that adds the int32 bias
    to the int32 accumulator, in units of x_scale x w_scale: the bias's own scale is
    dropped. When it differs, the default session computes other values than the graph
    (ORT_DISABLE_ALL and the spec). Measured with a bias scale 4 x the product, default session
    against ORT_DISABLE_ALL (`tests/rules/test_bias_scale.py`): Conv off by 14% of the largest
    output in ORT 1.15.1 to 1.26.0 (1.27.0 onwards leave the Conv unfused when the scales differ by
    more than 1%: onnxruntime PR 28229), and by one output step in every release 1.15.1 to 1.32.0
    when they differ by 0.5%; Gemm and MatMul + Add off by 32% in every release 1.15.1 to 1.32.0.
    ONNX Runtime's quantizer always writes the product.
    """,
    example="""
    warn: Conv(DQ(x, 0.05), DQ(w, 0.01), DQ(b: int32, 0.002))     # 0.05 x 0.01 = 0.0005
    good: Conv(DQ(x, 0.05), DQ(w, 0.01), DQ(4 x b: int32, 0.0005))
    """,
    versions="ai.onnx 10+",
    fix=Fix(
        SAFE,
        """
        Requantizes the bias to x_scale x w_scale: b x b_scale / (x_scale x w_scale), when
        that is an integer in int32's range for every value and its float32 product with
        the new scale is, bit for bit, the float32 value DequantizeLinear computed before
        (so the graph's outputs are unchanged, and the fused kernel now computes them), and
        the bias and its scale are initializers no other node reads. Else not fixed.
        """,
        applies=lambda finding: finding.attribute == RESCALE,
        node=rescale_bias,
    ),
    examples=[
        Example(
            f"{op.lower()}-bias-scale-x4",
            ModelSpec("qdq_biased_op", op, bias_factor=4.0),
            ModelSpec("qdq_biased_op", op),
        )
        for op in ("Conv", "Gemm", "MatMul")
    ],
)
def bias_scale(ctx: QDQView) -> Iterator[Finding]:
    found = mismatch(ctx)
    if found is not None:
        yield ctx.report(found.message, found.hint, attribute=RESCALE if found.exact else "")


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """An int32 bias whose scale is not x_scale x w_scale (QL505, and QL730 for ``--target
    ort``): ``op_type`` Conv, Gemm or MatMul; ``worst`` the largest relative difference;
    ``exact``: the fix applies."""

    op_type: str
    worst: float
    exact: bool
    message: str
    hint: str


def mismatch(ctx: QDQView) -> Mismatch | None:
    """The :class:`Mismatch` of this DequantizeLinear (None: not a bias, or it matches)."""
    bias = _bias(ctx)
    if bias is None:
        return None
    relative = np.abs(bias.scale - bias.expected) / np.abs(bias.expected)
    differ = ~(relative <= _RTOL)
    if not differ.any():
        return None
    first = int(np.argmax(differ))
    scale, product = bias.scale[first], bias.expected[first]
    exact = _fixable(bias, ctx.node, ctx.site.graph) is not None
    name = ctx.node.inputs[0].name if ctx.node.inputs[0] is not None else "?"
    message = (
        f"int32 bias '{name}' of {bias.op.op_type} '{bias.op.name}' has scale {scale:.6g} "
        f"where x_scale x w_scale is {product:.6g} (x{scale / product:.6g}, "
        f"{int(differ.sum())} of {differ.size} channel(s)): ONNX Runtime's fused kernels "
        "read the bias in units of x_scale x w_scale"
    )
    hint = (
        "requantize the bias to x_scale x w_scale (exact here; check --fix does it)"
        if exact
        else f"requantize bias '{name}' to x_scale x w_scale (not exact here: its values "
        "are not whole multiples, overflow int32 or are shared), or keep it float"
    )
    worst = float(np.nan_to_num(relative[differ], nan=np.inf).max())
    return Mismatch(bias.op.op_type, worst, exact, message, hint)


#: The integer ranges of the activation and weight types the bound reads: the 8-bit types
#: ONNX Runtime's integer kernels take (it has no 16-bit QLinearConv / QGemm: a 16-bit
#: DQ -> op is computed in float, with no int32 accumulator to overflow).
_INT_RANGES = {
    ir.DataType.UINT8: (0, 255),
    ir.DataType.INT8: (-128, 127),
}


def _reach(ctx: QDQView, value: ir.Value | None) -> tuple[int, tuple[int, ...] | None] | None:
    """The largest |q - zero point| of the DequantizeLinear producing ``value`` (from its
    type and constant zero point), and its integer input's shape."""
    node = value.producer() if value is not None else None
    if node is None or node.op_type != "DequantizeLinear" or not node.inputs:
        return None
    data = ctx.value_view(node.inputs[0])
    if data is None or data.dtype not in _INT_RANGES:
        return None
    low, high = _INT_RANGES[data.dtype]
    zero = ctx.value_view(node.inputs[2], read=True) if len(node.inputs) > 2 else None
    zeros = zero.array.ravel() if zero is not None and zero.array is not None else np.zeros(1)
    if zero is not None and zero.array is None:
        zeros = np.array([low, high])  # unknown: the widest
    reach = int(max(np.abs(high - zeros).max(), np.abs(zeros - low).max()))
    dims = tuple(d for d in data.shape or () if d is not None)
    known = data.shape is not None and len(dims) == len(data.shape)
    return reach, dims if known else None


def _depth(op: ir.Node, shape: tuple[int, ...]) -> int | None:
    """How many products the op adds into one accumulator (its reduction length)."""
    if op.op_type == "Conv" and len(shape) >= 2:
        return int(np.prod(shape[1:]))
    if op.op_type == "Gemm" and len(shape) == 2:
        trans = op.attributes.get("transB")
        return shape[1] if trans is not None and trans.as_int() else shape[0]
    return shape[-2] if op.op_type == "MatMul" and len(shape) >= 2 else None


@rule(
    "QL508",
    "int32-bias-overflow",
    WARNING,
    summary="An int32 bias plus the largest accumulator its op can reach overflows int32.",
    explanation="""
    ONNX Runtime's fused integer kernels (QLinearConv, QGemm, ...) add the int32 bias to
    the int32 accumulator of the products (x - x_zero_point) x (w - w_zero_point), which
    wraps around past int32's range, where DequantizeLinear and the float op compute the
    graph's value. The bound is the bias's largest magnitude plus the reduction length
    times the largest |x - zero point| and |w - zero point| the types and zero points
    allow. Measured with biases at 2^31 - 1, -2^31 and 2^31 - 1000 (Conv, Gemm and
    MatMul + Add, uint8 x int8): the default session off by the whole output range against
    ORT_DISABLE_ALL in ORT 1.15.1, 1.24.4, 1.31.1 and 1.32.0. A bias at int32's limits is
    also what a quantizer writes when it clipped a bias too large for x_scale x w_scale.
    """,
    example="""
    warn: Gemm(DQ(x: uint8), DQ(w: int8 [16, 8]), DQ(b: int32 = 2147483647))
    good: Gemm(DQ(x: uint8), DQ(w: int8 [16, 8]), DQ(b: int32 = 2000))
    """,
    versions="ai.onnx 10+",
    examples=[
        Example(
            "gemm-bias-at-int32-max",
            ModelSpec("qdq_biased_op", "Gemm", bias=[2**31 - 1] * 8),
            ModelSpec("qdq_biased_op", "Gemm"),
        ),
    ],
)
def int32_bias_overflow(ctx: QDQView) -> Iterator[Finding]:
    if ctx.is_quantize or ctx.x_type != ir.DataType.INT32 or not ctx.node.outputs:
        return
    found = _operands(ctx.node.outputs[0])
    values = ctx.value_view(ctx.node.inputs[0], read=True)
    if found is None or values is None or values.array is None or not values.array.size:
        return
    x, w = _reach(ctx, found[1]), _reach(ctx, found[2])
    depth = _depth(found[0], w[1]) if w is not None and w[1] is not None else None
    if x is None or w is None or depth is None:
        return
    largest = int(np.abs(values.array).max())
    bound = largest + depth * x[0] * w[0]
    if bound > _INT32.max:
        yield ctx.report(
            f"int32 bias '{values.name}' of {found[0].op_type} '{found[0].name}' reaches "
            f"{largest}; with {depth} products of up to {x[0]} x {w[0]} the accumulator can "
            f"reach {bound}, past int32's {_INT32.max}: fused integer kernels wrap around",
            "quantize the bias with a larger scale (x_scale x w_scale larger: a larger weight "
            "scale), or keep it float",
        )
