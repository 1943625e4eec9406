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
from qlrewrite.targets.forms import counts_padding, own_pads

__all__ = ["PADS", "move_padding", "padded_pools", "padding_movable"]

#: The attribute a QL706 finding its fix repairs names.
PADS = "pads"


def padded_pools(dequantize: ir.Node) -> list[ir.Node]:
    """The AveragePools ``dequantize``'s output feeds that pad (explicit ``pads``, not
    auto_pad) and count their padding."""
    return [
        node
        for node in dequantize.outputs[0].consumers()
        if node.op_type == "AveragePool"
        and node.domain in ("", "ai.onnx")
        and own_pads(node)
        and counts_padding(node)
    ]


def padding_movable(view: QDQView, pool: ir.Node) -> bool:
    """Whether the fix can pad this DequantizeLinear's integers for ``pool``: the pool's
    pads explicit, per tensor, a constant zero point, and an ai.onnx opset with Pad's inputs
    (11 or newer)."""
    opset = view.site.scope.opset("")
    if view.is_quantize or opset is None or opset < 11 or pool not in padded_pools(view.node):
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
    """QL706's fix: for each padded pool the DequantizeLinear feeds, a Pad of its integers
    (the pool's pads on the spatial axes, the zero point as the value) read by the pool
    through the DequantizeLinear (a copy of it while the DequantizeLinear has other
    readers), the pool's pads removed."""
    dequantize, view = fix.site.node, fix.view
    pools = padded_pools(dequantize)
    if not pools or not isinstance(view, QDQView) or view.x_type is None:
        return None
    found = view.value_view(dequantize.inputs[2], read=True)
    if found is None or found.array is None:
        return None
    zero_point = found.array.reshape(()).astype(view.x_type.numpy())  # read values may be widened
    moved = [_pad_for(fix, view, pool, zero_point, view.x_type) for pool in pools]
    return f"padding moved onto {', '.join(moved)} before it (the pools unpadded: exact)"


def _pad_for(
    fix: FixContext, view: QDQView, pool: ir.Node, zero_point: np.ndarray, dtype: ir.DataType
) -> str:
    """A Pad of the DequantizeLinear's integers (of ``dtype``) by ``pool``'s pads, read by
    ``pool``; the name of the Pad's output."""
    dequantize = view.node
    pads = own_pads(pool) or []
    half = len(pads) // 2
    spec = np.array([0, 0, *pads[:half], 0, 0, *pads[half:]], np.int64)
    widths = _constant(fix, f"{pool.name or 'pool'}_int_pads", spec, dequantize)
    value = _constant(fix, f"{pool.name or 'pool'}_pad_value", zero_point, dequantize)
    name = fix.names.fresh(f"{dequantize.inputs[0].name or 'x'}_padded")  # type: ignore[union-attr]
    pad = ir.node("Pad", [dequantize.inputs[0], widths, value], name=name)
    pad.outputs[0].name, pad.outputs[0].dtype = name, dtype
    dequantize.graph.insert_before(dequantize, pad)  # type: ignore[union-attr]
    _read_padded(fix, dequantize, pool, pad.outputs[0])
    for attribute in ("pads", "count_include_pad"):
        pool.attributes.pop(attribute, None)
    return f"'{name}'"


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
