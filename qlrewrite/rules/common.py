"""Helpers shared by rule modules (what several rules of one operator family read)."""

from __future__ import annotations

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.kernels.nbits import MatMulNBitsLayout
from qlrewrite.qdq import QOPERATOR, NodeView, QDQView, WeightOnlyView
from qlrewrite.qdq.view import ValueView

__all__ = [
    "FP_TYPES_TEXT",
    "PER_AXIS_OPSET",
    "QOPERATOR_KINDS",
    "QOPERATOR_VERSIONS",
    "WEIGHT_ONLY_VERSIONS",
    "constant_params",
    "layout_attrs",
    "matmul_nbits_layout",
    "quantized_type",
    "type_names",
    "weight_storage",
    "weight_type",
]

#: The ai.onnx opset that gives Q/DQ per-axis quantization (and the ``axis`` attribute):
#: the fixes of QL201 and QL402 upgrade to it.
PER_AXIS_OPSET = 13
#: Where the weight-only rules apply (the catalogue's ``versions``).
WEIGHT_ONLY_VERSIONS = "com.microsoft MatMulNBits 1, GatherBlockQuantized 1"
FP_TYPES_TEXT = "float8 / float4"
#: The node kinds of the QOperator rules, and where they apply (the catalogue's
#: ``versions``).
QOPERATOR_KINDS = (QOPERATOR,)
QOPERATOR_VERSIONS = "ai.onnx QLinearConv, QLinearMatMul, ...; com.microsoft QLinear*, QGemm, ..."


def weight_type(ctx: WeightOnlyView) -> ir.DataType | None:
    """The element type of a weight-only node's weight (None: omitted or unknown)."""
    view = ctx.operand(ctx.version.weight)
    return view.dtype if view is not None else None


def weight_storage(ctx: WeightOnlyView) -> opsets.WeightStorage | None:
    """How a weight-only node's weight is stored (None: its type is unknown or not allowed)."""
    dtype = weight_type(ctx)
    return ctx.version.storage.get(dtype) if dtype is not None else None


def type_names(types: frozenset[ir.DataType]) -> str:
    """``FLOAT, FLOAT16``: sorted element type names for messages."""
    return ", ".join(sorted(t.name for t in types))


def matmul_nbits_layout(ctx: WeightOnlyView) -> MatMulNBitsLayout | None:
    """A MatMulNBits node's layout (None: attributes other rules report)."""
    layout = ctx.weight_layout
    return layout if isinstance(layout, MatMulNBitsLayout) else None


def layout_attrs(form: MatMulNBitsLayout) -> str:
    """``K=.., N=.., bits=.., block_size=..`` for messages."""
    return f"K={form.K}, N={form.N}, bits={form.bits}, block_size={form.block_size}"


def quantized_type(view: NodeView) -> str | None:
    """The quantized element type's name of a Q/DQ node: QuantizeLinear's output type,
    DequantizeLinear's x type (None: not known)."""
    dtype = view.output_type if view.is_quantize else (view.x.dtype if view.x else None)
    return getattr(dtype, "name", None)


def constant_params(ctx: QDQView, node: ir.Node) -> tuple[ValueView, ValueView] | None:
    """The scale and zero point of a Q/DQ ``node`` (of ``ctx``'s graph), both constants
    read (``array`` set); None when either is absent or not read."""
    if len(node.inputs) < 3:
        return None
    scale = ctx.value_view(node.inputs[1], read=True)
    zero = ctx.value_view(node.inputs[2], read=True)
    if scale is None or zero is None or scale.array is None or zero.array is None:
        return None
    return scale, zero
