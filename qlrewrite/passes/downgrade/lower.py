"""The exact lowerings a downgrade writes (planned by
:mod:`qlrewrite.passes.downgrade.plan`), applied to the converted model.

- A blocked DequantizeLinear of a constant becomes ``Mul(Sub(Cast(x), Cast(zero_point)'),
  scale')`` where ``'`` repeats each scale (zero point) over its block along the axis
  (:func:`qlrewrite.passes.blocks.repeat_blocks`): the order
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

from qlrewrite.passes.blocks import Writer, repeat_blocks
from qlrewrite.passes.downgrade.plan import WIDER, Plan
from qlrewrite.passes.fold.tensor import release_tensor
from qlrewrite.qdq.constants import constant_tensor
from qlrewrite.toolkit import FreshNames, GraphRef, ensure_import_at, replace_value, tensor_shape

__all__ = ["lower_blocked", "to_microsoft", "widen"]

_FLOAT = int(ir.DataType.FLOAT)


def lower_blocked(node: ir.Node, plan: Plan, names: FreshNames) -> None:
    """Replace the blocked DequantizeLinear ``node`` by Cast / Sub / Mul (see module)."""
    writer = Writer(node, names, node.name or "dq")
    x, scale = node.inputs[0], node.inputs[1]
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    tensor = constant_tensor(x) if x is not None else None
    assert x is not None and scale is not None and tensor is not None
    length = tensor_shape(tensor).numpy()[plan.axis]
    scale_shape = _static_dims(scale)
    blocks = {"axis": plan.axis, "block": plan.block_size, "length": length}
    values = writer.node("Cast", [x], to=_FLOAT)
    if zero_point is not None:
        zero = writer.node("Cast", [zero_point], to=_FLOAT)
        zero = repeat_blocks(writer, zero, scale_shape, **blocks)
        values = writer.node("Sub", [values, zero])
    scales = repeat_blocks(writer, scale, scale_shape, **blocks)
    result = writer.node("Mul", [values, scales])
    replace_value(node.outputs[0], result)
    writer.graph.remove(node, safe=True)


def _static_dims(value: ir.Value) -> list[int]:
    """``value``'s dims: declared, else its constant's (the plan checked they are static)."""
    shape = value.shape
    if shape is not None and shape.is_static():
        return list(shape.numpy())
    tensor = constant_tensor(value)
    if tensor is not None:
        return list(tensor_shape(tensor).numpy())
    raise ValueError(f"the shape of '{value.name}' is not static")


def widen(value: ir.Value) -> int:
    """Store the int4 / uint4 initializer ``value`` as int8 / uint8; the bytes added."""
    tensor = value.const_value
    assert tensor is not None
    wide = WIDER[tensor.dtype]
    dtype = wide.numpy()

    def compute() -> ir.TensorProtocol:
        values = np.asarray(tensor.numpy()).astype(dtype)
        release_tensor(tensor)  # the input's pages, mapped while read, are not kept
        return ir.tensor(values, name=value.name)

    value.const_value = ir.LazyTensor(
        compute, dtype=wide, shape=tensor_shape(tensor), name=value.name
    )
    value.type = ir.TensorType(wide)
    return tensor.size - tensor.nbytes


def to_microsoft(model: ir.Model, node: ir.Node, ref: GraphRef, drop: tuple[str, ...]) -> None:
    """Make ``node`` the com.microsoft QuantizeLinear / DequantizeLinear."""
    node.domain = "com.microsoft"
    for name in drop:
        node.attributes.pop(name, None)
    ensure_import_at(model, ref, "com.microsoft", 1)
