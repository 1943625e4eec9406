"""Dequantized constants written in float ops: the lowered form a downgrade writes.

``qlrewrite downgrade`` writes a blocked DequantizeLinear of a constant, which the target
opset cannot hold, as ``Mul(Sub(Cast(x), zero_point), scale)``
(:mod:`qlrewrite.passes.downgrade.lower`): the same values, no Q/DQ node left. This module
recognises that form, so ``check`` knows such a model is quantized (no QL607 "is this the
float model?" on the tool's own output): a ``Cast`` of a constant integer tensor of at
most 16 bits to a float type, read by a ``Sub`` (the zero point) or ``Mul`` (the scale).
"""

from __future__ import annotations

import onnx_ir as ir

from qlrewrite.qdq.constants import constant_tensor
from qlrewrite.toolkit import iter_graphs, normalize_domain

__all__ = ["has_lowered_dequantize", "is_lowered_dequantize"]

_DT = ir.DataType
#: The integer types a quantized constant is stored in (int4 / uint4 widened to 8 bits).
_QUANTIZED = frozenset({_DT.INT4, _DT.UINT4, _DT.INT8, _DT.UINT8, _DT.INT16, _DT.UINT16})
_FLOATS = frozenset({int(_DT.FLOAT), int(_DT.FLOAT16), int(_DT.BFLOAT16)})


def is_lowered_dequantize(node: ir.Node) -> bool:
    """``node`` is the Cast of a lowered DequantizeLinear (see the module)."""
    if node.op_type != "Cast" or normalize_domain(node.domain) != "" or not node.inputs:
        return False
    to = node.attributes.get("to")
    source = node.inputs[0]
    if to is None or to.as_int() not in _FLOATS or source is None:
        return False
    tensor = constant_tensor(source)
    if tensor is None or tensor.dtype not in _QUANTIZED:
        return False
    return any(_reads_as_dequantize(reader) for reader in node.outputs[0].consumers())


def _reads_as_dequantize(reader: ir.Node) -> bool:
    return reader.op_type in ("Sub", "Mul") and normalize_domain(reader.domain) == ""


def has_lowered_dequantize(model: ir.Model) -> bool:
    """Whether some graph or function of ``model`` holds a lowered DequantizeLinear."""
    return any(is_lowered_dequantize(node) for scope in iter_graphs(model) for node in scope.graph)
