"""The exact lowerings a downgrade writes (planned by
:mod:`qlrewrite.passes.downgrade_plan`), applied to the converted model.

- A blocked DequantizeLinear of a constant becomes ``Mul(Sub(Cast(x), Cast(zero_point)'),
  scale')`` where ``'`` repeats each scale (zero point) over its block along the axis
  (Reshape / Expand / Reshape, and Slice when the last block is partial): the order
  DequantizeLinear computes, ``(x - zero_point) * scale`` in float32; the difference of
  two integers of at most 16 bits is exact in float32, so one rounding, as ONNX Runtime's
  kernel.
- An int4 / uint4 initializer is stored as int8 / uint8 (the same values; written lazily,
  one tensor at a time, when the model is saved).
- An int16 / uint16 node becomes com.microsoft QuantizeLinear / DequantizeLinear.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from qlrewrite.passes.downgrade_plan import WIDER, Plan
from qlrewrite.toolkit import FreshNames, GraphRef, ensure_import_at, replace_value

__all__ = ["lower_blocked", "to_microsoft", "widen"]

_FLOAT = int(ir.DataType.FLOAT)


class _Writer:
    """Adds nodes and int64 constants before ``anchor`` in its graph, with fresh names."""

    def __init__(self, anchor: ir.Node, names: FreshNames) -> None:
        self.anchor = anchor
        graph = anchor.graph
        assert isinstance(graph, ir.Graph)  # planned: never inside a function
        self.graph = graph
        self.names = names
        self.base = anchor.name or "dq"

    def ints(self, values: list[int]) -> ir.Value:
        name = self.names.fresh(f"{self.base}_shape")
        tensor = ir.tensor(np.array(values, dtype=np.int64), name=name)
        value = ir.Value(name=name, shape=ir.Shape([len(values)]), const_value=tensor)
        value.type = ir.TensorType(ir.DataType.INT64)
        self.graph.register_initializer(value)
        return value

    def node(self, op: str, inputs: list[ir.Value], **attributes: object) -> ir.Value:
        output = ir.Value(name=self.names.fresh(f"{self.base}_{op.lower()}"))
        node = ir.node(
            op,
            inputs,
            attributes,  # type: ignore[arg-type]
            outputs=[output],
            name=self.names.fresh(f"{self.base}/{op}"),
        )
        self.graph.insert_before(self.anchor, node)
        return output


def lower_blocked(node: ir.Node, plan: Plan, names: FreshNames) -> None:
    """Replace the blocked DequantizeLinear ``node`` by Cast / Sub / Mul (see module)."""
    writer = _Writer(node, names)
    x, scale = node.inputs[0], node.inputs[1]
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    assert x is not None and scale is not None and x.const_value is not None
    length = int(x.const_value.shape[plan.axis])
    scale_shape = [int(d) for d in (scale.shape or scale.const_value.shape)]  # type: ignore[union-attr]
    values = writer.node("Cast", [x], to=_FLOAT)
    if zero_point is not None:
        zero = writer.node("Cast", [zero_point], to=_FLOAT)
        zero = _per_element(writer, zero, scale_shape, plan, length)
        values = writer.node("Sub", [values, zero])
    scales = _per_element(writer, scale, scale_shape, plan, length)
    result = writer.node("Mul", [values, scales])
    replace_value(node.outputs[0], result)
    writer.graph.remove(node, safe=True)


def _per_element(
    writer: _Writer, value: ir.Value, shape: list[int], plan: Plan, length: int
) -> ir.Value:
    """``value`` (one entry per block along the axis) repeated over each block, cut to
    ``length`` along the axis."""
    axis, block = plan.axis, plan.block_size
    blocks = shape[axis]
    before, after = shape[:axis], shape[axis + 1 :]
    split = writer.node("Reshape", [value, writer.ints([*before, blocks, 1, *after])])
    wide = writer.node("Expand", [split, writer.ints([*before, blocks, block, *after])])
    joined = writer.node("Reshape", [wide, writer.ints([*before, blocks * block, *after])])
    if blocks * block == length:
        return joined
    starts, ends, axes = writer.ints([0]), writer.ints([length]), writer.ints([axis])
    return writer.node("Slice", [joined, starts, ends, axes])


def widen(value: ir.Value) -> int:
    """Store the int4 / uint4 initializer ``value`` as int8 / uint8; the bytes added."""
    tensor = value.const_value
    assert tensor is not None
    wide = WIDER[tensor.dtype]
    dtype = wide.numpy()

    def compute() -> ir.TensorProtocol:
        return ir.tensor(np.asarray(tensor.numpy()).astype(dtype), name=value.name)

    value.const_value = ir.LazyTensor(compute, dtype=wide, shape=tensor.shape, name=value.name)
    value.type = ir.TensorType(wide)
    return tensor.size - tensor.nbytes


def to_microsoft(model: ir.Model, node: ir.Node, ref: GraphRef, drop: tuple[str, ...]) -> None:
    """Make ``node`` the com.microsoft QuantizeLinear / DequantizeLinear."""
    node.domain = "com.microsoft"
    for name in drop:
        node.attributes.pop(name, None)
    ensure_import_at(model, ref, "com.microsoft", 1)
