"""QL706's fix for an AveragePool that pads and counts its padding after a DequantizeLinear
whose zero point is not 0 (OpenVINO pads the integers with 0 there): the padding moved onto
the integers before the DequantizeLinear, with the zero point as the value, and the pool
left unpadded. Exact by the ONNX spec: the padded zero point dequantizes to 0, which is
what the pool counted."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq import QDQView
from qlrewrite.rules.registry import FixContext

__all__ = ["PADS", "move_padding", "padded_pool", "padding_movable"]

#: The attribute a QL706 finding its fix repairs names.
PADS = "pads"


def padded_pool(dequantize: ir.Node) -> ir.Node | None:
    """The AveragePool ``dequantize``'s output feeds that pads (explicit ``pads``, not
    auto_pad) and counts its padding; None if none."""
    for node in dequantize.outputs[0].consumers():
        if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx"):
            continue
        pads, counted = node.attributes.get("pads"), node.attributes.get("count_include_pad")
        auto_pad = node.attributes.get("auto_pad")
        if auto_pad is not None and auto_pad.as_string() not in ("", "NOTSET"):
            continue
        if pads is not None and any(pads.as_ints()) and counted is not None and counted.as_int():
            return node
    return None


def padding_movable(view: QDQView) -> bool:
    """Whether the fix can pad this DequantizeLinear's integers: per tensor, a constant
    zero point, and an ai.onnx opset with Pad's inputs (11 or newer)."""
    opset = view.site.scope.opset("")
    if view.is_quantize or opset is None or opset < 11:
        return False
    if view.granularity.kind != opsets.PER_TENSOR:
        return False
    zero_point = view.node.inputs[2] if len(view.node.inputs) > 2 else None
    found = view.value_view(zero_point, read=True) if zero_point is not None else None
    return found is not None and found.array is not None and found.array.size == 1


def _constant(fix: FixContext, base: str, array: np.ndarray, before: ir.Node) -> ir.Value:
    name = fix.names.fresh(base)
    node = ir.node("Constant", [], {"value": ir.tensor(array, name=name)}, name=name)
    node.outputs[0].name = name
    before.graph.insert_before(before, node)  # type: ignore[union-attr]
    return node.outputs[0]


def move_padding(fix: FixContext) -> str | None:
    """QL706's fix: a Pad of the DequantizeLinear's integers (the pool's pads on the spatial
    axes, the zero point as the value) read by the pool through the DequantizeLinear (a
    copy of it when the DequantizeLinear has other readers), the pool's pads removed."""
    dequantize, view = fix.site.node, fix.view
    pool = padded_pool(dequantize)
    if pool is None or not isinstance(view, QDQView) or dequantize.graph is None:
        return None
    if view.x_type is None:
        return None
    found = view.value_view(dequantize.inputs[2], read=True)
    if found is None or found.array is None:
        return None
    pads = list(pool.attributes["pads"].as_ints())
    half = len(pads) // 2
    spec = np.array([0, 0, *pads[:half], 0, 0, *pads[half:]], np.int64)
    widths = _constant(fix, f"{pool.name or 'pool'}_int_pads", spec, dequantize)
    zero_point = found.array.reshape(()).astype(view.x_type.numpy())  # read values may be widened
    value = _constant(fix, f"{pool.name or 'pool'}_pad_value", zero_point, dequantize)
    name = fix.names.fresh(f"{dequantize.inputs[0].name or 'x'}_padded")  # type: ignore[union-attr]
    pad = ir.node("Pad", [dequantize.inputs[0], widths, value], name=name)
    pad.outputs[0].name = name
    if view.x_type is not None:  # the integers' type, read or inferred
        pad.outputs[0].dtype = view.x_type
    dequantize.graph.insert_before(dequantize, pad)
    _read_padded(fix, dequantize, pool, pad.outputs[0])
    for attribute in ("pads", "count_include_pad"):
        pool.attributes.pop(attribute, None)
    return f"padding moved onto '{name}' before it ({pool.name or 'AveragePool'} unpadded: exact)"


def _read_padded(fix: FixContext, dequantize: ir.Node, pool: ir.Node, padded: ir.Value) -> None:
    """The pool reads ``padded`` dequantized: through ``dequantize`` when it is its only
    reader, else through a copy of it."""
    if len(dequantize.outputs[0].consumers()) == 1:
        dequantize.replace_input_with(0, padded)
        return
    name = fix.names.fresh(f"{dequantize.name or 'dq'}_padded")
    copy = ir.node(
        dequantize.op_type,
        [padded, *dequantize.inputs[1:]],
        {a.name: a for a in dequantize.attributes.values()},
        domain=dequantize.domain,
        name=name,
    )
    copy.outputs[0].name = name
    if dequantize.outputs[0].dtype is not None:
        copy.outputs[0].dtype = dequantize.outputs[0].dtype
    dequantize.graph.insert_after(dequantize, copy)  # type: ignore[union-attr]
    index = list(pool.inputs).index(dequantize.outputs[0])
    pool.replace_input_with(index, copy.outputs[0])
