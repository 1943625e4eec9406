"""What MatMulNBits / GatherBlockQuantized -> standard ONNX does with each node: the
plan (:class:`Plan`) of :class:`~qlrewrite.passes.nbits.to_onnx.NBitsToOnnxPass`.

Each node's constant weight, scales and zero points are read and checked against what
the target's DequantizeLinear expresses (blocked along K, or per-axis when one block
covers K; int4 and blocks need ai.onnx opset 21, int2 opset 25); a node that cannot be
converted bit-exactly gets its problems and the lowest opset that would express it.
Zero points in the scale type (HQQ) are planned as ``DequantizeLinear(q, scale) - scale *
zp`` (:func:`_plan_float_zero_points`). Nothing is changed here: the pass writes the plans.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.kernels.nbits import MatMulNBitsLayout, unpack
from qlrewrite.passes.fold.tensor import (
    RowReader,
    StreamedTensor,
)
from qlrewrite.passes.nbits.tensor import (
    MappedTensor,
    MatMulNBitsFloat,
    MatMulNBitsWeight,
    RetypedTensor,
    int_type,
)
from qlrewrite.qdq import (
    QuantizedSite,
    WeightOnlyView,
    constant_tensor,
    is_constant,
)
from qlrewrite.toolkit import tensor_shape

__all__ = [
    "Plan",
    "Weight",
    "input_at",
    "min_block",
    "plan_gather",
    "plan_matmul_nbits",
    "weight_indices",
    "where",
]

_DT = ir.DataType
_FLOATS = (_DT.FLOAT, _DT.FLOAT16, _DT.BFLOAT16)


def where(site: QuantizedSite) -> str:
    """How refusals name the node."""
    name = site.node.name or f"({site.node.outputs[0].name})"
    return f"{site.ref}: {site.node.op_type} '{name}'"


def input_at(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _input_name(node: ir.Node, index: int, default: str) -> str:
    """The name of input ``index`` (``default`` when omitted or unnamed)."""
    value = input_at(node, index)
    return (value.name if value is not None else None) or default


def min_block(k: int) -> int:
    """The smallest block size MatMulNBits allows that covers ``k`` in one block."""
    return max(16, 1 << max(0, (k - 1).bit_length()))


@dataclasses.dataclass
class Weight:
    """The DequantizeLinear a node's weight becomes: inputs and attributes."""

    x: ir.TensorProtocol
    scale: ir.TensorProtocol
    zero_point: ir.TensorProtocol | None
    axis: int
    block_size: int  # 0: per-axis
    out_type: ir.DataType
    reuse_x: ir.Value | None = None  # GatherBlockQuantized int4/uint4: the data value itself
    reuse_scale: ir.Value | None = None
    reuse_zero_point: ir.Value | None = None
    #: The float weight itself, when no DequantizeLinear computes it (dequantize only).
    folded: StreamedTensor | None = None
    #: Subtracted after the DequantizeLinear, repeated over each block (``[k_blocks, N]``):
    #: ``scale * zp`` for zero points in the scale type (HQQ).
    offset: ir.TensorProtocol | None = None


@dataclasses.dataclass
class Plan:
    view: WeightOnlyView
    row: opsets.WeightOnlyVersion  # the version in force (sites without one are skipped)
    problems: list[str] = dataclasses.field(default_factory=list)
    lowest_opset: int | None = None
    weight: Weight | None = None
    gather_axis: int = 0


def _tensors(node: ir.Node, indices: tuple[int, ...], plan: Plan) -> list[ir.TensorProtocol | None]:
    """The constant tensors of inputs ``indices`` (None for an omitted input)."""
    found: list[ir.TensorProtocol | None] = []
    for index in indices:
        value = input_at(node, index)
        if value is None:
            found.append(None)
            continue
        tensor = constant_tensor(value) if is_constant(value) else None
        if tensor is None:
            plan.problems.append(f"input {index} ('{value.name}') is not a constant")
        found.append(tensor)
    return found


def _reshaped_constant(value: ir.Value) -> tuple[ir.TensorProtocol | None, list[int]]:
    """The constant tensor of ``value`` and the dims it is read with: an initializer or
    Constant, or a Reshape of one to constant positive dims (ONNX Runtime GenAI's model
    builder feeds its tied embeddings' GatherBlockQuantized with ``Reshape(lm_head B)``)."""
    tensor = constant_tensor(value) if is_constant(value) else None
    if tensor is not None:
        return tensor, list(tensor.shape.numpy())
    producer = value.producer()
    if producer is None or producer.op_type != "Reshape" or producer.domain not in ("", "ai.onnx"):
        return None, []
    source, shape = [*producer.inputs, None, None][:2]
    if source is None or shape is None or not (is_constant(source) and is_constant(shape)):
        return None, []
    tensor, dims_tensor = constant_tensor(source), constant_tensor(shape)
    if tensor is None or dims_tensor is None or tensor.dtype.bitwidth < 8:
        return None, []
    dims = [int(d) for d in np.asarray(dims_tensor.numpy()).reshape(-1)]
    if any(d <= 0 for d in dims) or int(np.prod(dims)) != tensor.size:
        return None, []
    return tensor, dims


def weight_indices(site: QuantizedSite) -> tuple[int, int, int]:
    """Positions of the quantized weight, its scales and its zero points."""
    roles = site.kind.roles
    return roles["x"], roles["scale"], roles["zero_point"]


def _check_form(plan: Plan, opset: int | None, form: opsets.NodeForm) -> None:
    row = opsets.qdq_version("", "DequantizeLinear", opset)
    problems = (
        [f"ai.onnx opset {opset} has no DequantizeLinear"]
        if row is None
        else opsets.expression_problems(row, form)
    )
    if problems:
        plan.problems.extend(problems)
        plan.lowest_opset = opsets.lowest_onnx_opset("DequantizeLinear", form)


class _NBitsInputs(NamedTuple):
    """A MatMulNBits' layout and its constant B, scales and zero points."""

    layout: MatMulNBitsLayout
    b: ir.TensorProtocol
    scales: ir.TensorProtocol
    zero_points: ir.TensorProtocol | None


def _check_dq_form(
    plan: Plan,
    opset: int | None,
    x_type: ir.DataType,
    scale_type: ir.DataType,
    *,
    zero_point: bool,
    per_axis: bool = False,
) -> None:
    """Whether ai.onnx ``opset``'s DequantizeLinear expresses the weight (blocked or per-axis)."""
    form = opsets.NodeForm(
        x_type=x_type,
        scale_type=scale_type,
        zero_point_type=x_type if zero_point else None,
        attributes=("axis",) if per_axis else ("axis", "block_size"),
        blocked=not per_axis,
        per_axis=per_axis,
    )
    _check_form(plan, opset, form)


def plan_matmul_nbits(
    view: WeightOnlyView, row: opsets.WeightOnlyVersion, opset: int | None, dequantize: bool
) -> Plan:
    """What a MatMulNBits becomes: a DequantizeLinear (or folded) weight, or its problems."""
    plan = Plan(view, row)
    found = _matmul_nbits_inputs(view, plan)
    if found is None:
        return plan
    _check_matmul_nbits_tensors(plan, found)
    layout, b, scales, zero_points = found
    if zero_points is not None and zero_points.dtype != _DT.UINT8:
        _plan_float_zero_points(
            plan, layout, opset, b=b, scales=scales, zero_points=zero_points, dequantize=dequantize
        )
    elif not plan.problems:
        _plan_matmul_nbits_weight(plan, found, opset, dequantize)
    return plan


def _matmul_nbits_inputs(view: WeightOnlyView, plan: Plan) -> _NBitsInputs | None:
    """The node's attributes and constant inputs, None (with the problems) when unusable."""
    site, row = view.site, plan.row
    node = site.node
    values = {name: view.attr_or_default(name) for name in row.attributes}
    given = {name: value for name, value in values.items() if value is not None}
    missing = [name for name in values if name not in given]
    if missing:
        plan.problems.append(f"attribute {', '.join(missing)} missing")
        return None
    if given["weight_prepacked"]:
        plan.problems.append("B is prepacked for a CUDA kernel (weight_prepacked)")
    if input_at(node, row.input_index("g_idx")) is not None:
        plan.problems.append(
            "g_idx is given: ONNX Runtime then dequantizes as q * scale - scale * zp (and "
            "ignores uint8 zero points), which DequantizeLinear cannot reproduce"
        )
    indices = weight_indices(site)
    b, scales, zero_points = _tensors(node, indices, plan)
    _require_given(plan, node, B=indices[0], scales=indices[1])
    if plan.problems or b is None or scales is None:
        return None
    try:
        layout = MatMulNBitsLayout(given["K"], given["N"], given["bits"], given["block_size"])
    except ValueError as err:
        plan.problems.append(str(err))
        return None
    return _NBitsInputs(layout, b, scales, zero_points)


def _require_given(plan: Plan, node: ir.Node, **indices: int) -> None:
    """A problem for each required input omitted (one given but not constant is
    :func:`_tensors`' problem)."""
    plan.problems.extend(
        f"{name} is omitted" for name, index in indices.items() if input_at(node, index) is None
    )


def _check_matmul_nbits_tensors(plan: Plan, found: _NBitsInputs) -> None:
    """Whether B, the scales and uint8 zero points have the types and sizes the layout says."""
    layout, b, scales, zero_points = found
    if b.dtype != _DT.UINT8 or b.size != np.prod(layout.b_shape):
        plan.problems.append(f"B is not uint8 of shape {list(layout.b_shape)}")
    if scales.dtype not in _FLOATS or scales.size != layout.N * layout.k_blocks:
        plan.problems.append(f"scales are not {layout.N} x {layout.k_blocks} floats")
    if (
        zero_points is not None
        and zero_points.dtype == _DT.UINT8
        and zero_points.size != layout.N * layout.zero_point_row
    ):
        plan.problems.append(f"zero points are not {layout.N} x {layout.zero_point_row} bytes")


def _plan_matmul_nbits_weight(
    plan: Plan, found: _NBitsInputs, opset: int | None, dequantize: bool
) -> None:
    """The DequantizeLinear a checked MatMulNBits' B becomes: per-axis when one block of the
    smallest size covers K (or the opset has no blocks), blocked along K otherwise."""
    layout, b, scales, zero_points = found
    x_type = int_type(layout.bits, signed=zero_points is None)
    per_axis = layout.k_blocks == 1 and (
        layout.block_size == min_block(layout.K) or (opset or 0) < 21
    )
    if not dequantize:
        _check_dq_form(
            plan, opset, x_type, scales.dtype, zero_point=zero_points is not None, per_axis=per_axis
        )
    name = _input_name(plan.view.node, 1, "B")
    zp_type = int_type(layout.bits, signed=False)

    def weight(role: str, dtype: ir.DataType, suffix: str) -> MatMulNBitsWeight:
        return MatMulNBitsWeight(
            role, layout, dtype, b=b, scales=scales, zero_points=zero_points, name=name + suffix
        )

    x = weight("x", x_type, "_q")
    scale: ir.TensorProtocol = weight("scale", scales.dtype, "_s")
    zp: ir.TensorProtocol | None = None
    if zero_points is not None:
        zp = weight("zero_point", zp_type, "_zp")
    flat = per_axis and not dequantize
    if flat:
        scale = _flattened(scale)
        zp = _flattened(zp) if zp is not None else None
    plan.weight = Weight(
        x,
        scale,
        zp,
        axis=1 if flat else 0,
        block_size=0 if flat else layout.block_size,
        out_type=scales.dtype,
    )


def _plan_float_zero_points(
    plan: Plan,
    layout: MatMulNBitsLayout,
    opset: int | None,
    *,
    b: ir.TensorProtocol,
    scales: ir.TensorProtocol,
    zero_points: ir.TensorProtocol,
    dequantize: bool,
) -> None:
    """Zero points in the scale type (HQQ): ONNX Runtime's kernel (2 and 4 bits, float32
    only: for float16 it ignores them) computes ``q * scale - scale * zp``, each product
    rounded to float32 (measured bit-exact on the CPU provider, optimizations off: 4 bits
    in 1.18 to 1.32, 2 bits in 1.27 to 1.32; older releases refuse them, and every
    release 1.15 to 1.32 refuses 8 bits). Written as ``DequantizeLinear(q, scale)``
    (uint4 / uint2, no zero point: ``q * scale``, one rounding) minus the precomputed
    ``scale * zp`` repeated over each block: the same two roundings, then the same
    subtraction; ``fold --dequantize-weights`` writes that weight itself."""
    problem = _float_zero_point_problem(layout.bits, scales.dtype, zero_points.dtype)
    if problem:
        plan.problems.append(problem)
        return
    if zero_points.size != layout.N * layout.k_blocks:
        plan.problems.append(f"zero points are not {layout.N} x {layout.k_blocks} floats")
        return
    if dequantize:
        folded = MatMulNBitsFloat(layout, b=b, scales=scales, zero_points=zero_points)
        plan.weight = Weight(b, scales, zero_points, 0, layout.block_size, _DT.FLOAT, folded=folded)
        return
    x_type = int_type(layout.bits, signed=False)
    _check_dq_form(plan, opset, x_type, _DT.FLOAT, zero_point=False)
    name = _input_name(plan.view.node, 1, "B")
    x = MatMulNBitsWeight(
        "x", layout, x_type, b=b, scales=scales, zero_points=None, name=f"{name}_q"
    )
    scale = MatMulNBitsWeight("scale", layout, _DT.FLOAT, b=b, scales=scales, zero_points=None)
    zero = MatMulNBitsWeight("scale", layout, _DT.FLOAT, b=b, scales=zero_points, zero_points=None)

    def offset() -> ir.TensorProtocol:  # ORT's scale * zp, rounded to float32 once
        return ir.tensor(np.multiply(scale.numpy(), zero.numpy(), dtype=np.float32))

    scale.name = f"{name}_s"
    plan.weight = Weight(
        x,
        scale,
        None,
        axis=0,
        block_size=layout.block_size,
        out_type=_DT.FLOAT,
        offset=ir.LazyTensor(offset, dtype=_DT.FLOAT, shape=scale.shape, name=f"{name}_offset"),
    )


def _float_zero_point_problem(bits: int, scale_type: int, zero_point_type: int) -> str:
    """Why ONNX Runtime does not compute these zero points in the scale type ("": it does,
    as :func:`_plan_float_zero_points` writes them)."""
    if bits == 8:
        return (
            "8-bit zero points in the scale type: ONNX Runtime's CPU kernel refuses them "
            "(measured in every release 1.15 to 1.32)"
        )
    if bits not in (2, 4) or scale_type != _DT.FLOAT or zero_point_type != _DT.FLOAT:
        return (
            "zero points in the scale type are only computed by ONNX Runtime for 2 and 4 "
            "bits and float32 (float16 ones it ignores)"
        )
    return ""


def _flattened(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    """A ``[1, N]`` lazy tensor as ``[N]`` (a per-axis scale or zero point)."""
    n = tensor_shape(tensor).numpy()[1]

    def reader() -> RowReader:
        whole = np.asarray(tensor.numpy()).reshape(n)
        return lambda r0, r1: whole[r0:r1]

    return MappedTensor(reader, tensor.dtype, [n], name=tensor.name)


@dataclasses.dataclass
class _GatherInputs:
    """A GatherBlockQuantized's constant data, scales and zero points, and its attributes
    (the axes made non-negative once checked)."""

    data: ir.TensorProtocol
    data_dims: list[int]  # as the node reads data (through a Reshape, if any)
    scales: ir.TensorProtocol
    zero_points: ir.TensorProtocol | None
    bits: int
    block: int
    gather_axis: int
    quantize_axis: int


def plan_gather(
    view: WeightOnlyView, row: opsets.WeightOnlyVersion, opset: int | None, dequantize: bool
) -> Plan:
    """What a GatherBlockQuantized becomes: a DequantizeLinear (or folded) weight, or its
    problems."""
    plan = Plan(view, row)
    found = _gather_inputs(view, plan)
    if found is None or not _gather_axes_in_range(plan, found):
        return plan
    storage = _gather_storage(plan, found)
    if storage is None:
        return plan
    blocks = _gather_scale_blocks(plan, found, storage.packed)
    if blocks is not None:
        _plan_gather_weight(plan, found, storage, blocks, opset=opset, dequantize=dequantize)
    return plan


def _gather_inputs(view: WeightOnlyView, plan: Plan) -> _GatherInputs | None:
    """The node's constant inputs and attributes, None (with the problems) when not constant."""
    node = view.node
    indices = weight_indices(view.site)
    source = input_at(node, indices[0])
    data, data_dims = _reshaped_constant(source) if source is not None else (None, [])
    scales, zero_points = _tensors(node, indices[1:], plan)
    if data is None:
        plan.problems.append(f"data ('{_input_name(node, indices[0], '')}') is not a constant")
    _require_given(plan, node, scales=indices[1])
    names = ("bits", "block_size", "gather_axis", "quantize_axis")
    values = {name: view.attr_or_default(name) for name in names}
    given = {name: value for name, value in values.items() if value is not None}
    if len(given) < len(values):
        missing = [name for name in names if name not in given]
        plan.problems.append(f"attribute {', '.join(missing)} missing")
    if plan.problems or data is None or scales is None:
        return None
    return _GatherInputs(
        data,
        data_dims,
        scales,
        zero_points,
        bits=given["bits"],
        block=given["block_size"],
        gather_axis=given["gather_axis"],
        quantize_axis=given["quantize_axis"],
    )


def _gather_axes_in_range(plan: Plan, found: _GatherInputs) -> bool:
    """Whether both axes are within the data's rank (then made non-negative)."""
    rank = len(found.data_dims)
    if not (-rank <= found.gather_axis < rank and -rank <= found.quantize_axis < rank):
        plan.problems.append("gather_axis or quantize_axis is out of range")
        return False
    found.gather_axis %= rank
    found.quantize_axis %= rank
    plan.gather_axis = found.gather_axis
    return True


def _gather_storage(plan: Plan, found: _GatherInputs) -> opsets.WeightStorage | None:
    """How the data type holds its values, None (with the problems) when the table's
    version does not allow this data type, bits, axes, block size or scale type."""
    row, data = plan.row, found.data
    storage = row.storage.get(data.dtype)
    if storage is None or storage.zero_point == "none":
        plan.problems.append(f"{data.dtype.name} data is not supported (int4, uint4, uint8)")
        return None
    if found.bits not in storage.bits:
        plan.problems.append(f"{data.dtype.name} data with bits={found.bits}")
    if (storage.gather_axis_zero and found.gather_axis != 0) or (
        storage.quantize_axis_last and found.quantize_axis != len(found.data_dims) - 1
    ):
        plan.problems.append(f"{data.dtype.name} data needs gather_axis 0 and quantize_axis -1")
    block = found.block
    if block < row.min_block_size or block & (block - 1):
        plan.problems.append(f"block_size must be a power of 2 >= 16, got {block}")
    if found.scales.dtype not in _FLOATS:
        plan.problems.append(f"scales of type {found.scales.dtype.name}")
    return None if plan.problems else storage


def _gather_scale_blocks(plan: Plan, found: _GatherInputs, packed: bool) -> list[int] | None:
    """The scales' shape the data asks for (its values' dims, blocked along the quantize
    axis), None (with the problem) when the scales or a Reshape do not fit."""
    data, data_dims, axis = found.data, found.data_dims, found.quantize_axis
    if data_dims != list(data.shape.numpy()) and not packed:
        plan.problems.append(f"{data.dtype.name} data behind a Reshape")
        return None
    dims = list(data_dims)
    dims[-1 if packed else axis] *= 8 // found.bits if packed else 1
    blocks = list(dims)
    blocks[axis] = -(-dims[axis] // found.block)
    if list(found.scales.shape.numpy()) != blocks:
        plan.problems.append(f"scales of shape {list(found.scales.shape)}, expected {blocks}")
        return None
    return blocks


def _plan_gather_weight(
    plan: Plan,
    found: _GatherInputs,
    storage: opsets.WeightStorage,
    blocks: list[int],
    *,
    opset: int | None,
    dequantize: bool,
) -> None:
    """The DequantizeLinear a checked GatherBlockQuantized's data becomes: packed uint8 read
    as (u)int2 / (u)int4, other types reused as they are."""
    node, bits, zero_points = plan.view.node, found.bits, found.zero_points
    packed = storage.packed
    reuse_zp = None
    x: ir.TensorProtocol
    if packed:
        signed = zero_points is None and storage.default_zero_point(bits) != 0
        x_type = int_type(bits, signed=signed)
        x = RetypedTensor(
            found.data,
            x_type,
            bits,
            source_dims=found.data_dims,
            name=_input_name(node, 0, "") + "_q",
        )
        zp = None
        if zero_points is not None:
            zp = _unpacked_zero_points(zero_points, bits, blocks)
    else:
        x_type, x, zp = found.data.dtype, found.data, zero_points
        reuse_zp = node.inputs[3] if zero_points is not None else None
    if zp is not None and zp.dtype != (x_type if not packed else int_type(bits, False)):
        plan.problems.append("zero points of another type than data")
        return
    scale_type = found.scales.dtype
    if not dequantize:
        _check_dq_form(plan, opset, x_type, scale_type, zero_point=zp is not None)
    plan.weight = Weight(
        x,
        found.scales,
        zp,
        axis=found.quantize_axis,
        block_size=found.block,
        out_type=scale_type,
        reuse_x=None if packed else node.inputs[0],
        reuse_scale=node.inputs[2],
        reuse_zero_point=reuse_zp,
    )


def _unpacked_zero_points(
    zero_points: ir.TensorProtocol, bits: int, shape: list[int]
) -> ir.TensorProtocol:
    """uint8 zero points packed along the last axis as an unsigned ``bits``-wide tensor."""
    last = shape[-1]

    def reader() -> RowReader:
        values = unpack(np.asarray(zero_points.numpy(), dtype=np.uint8), bits)[..., :last]
        return lambda r0, r1: values[r0:r1]

    return MappedTensor(reader, int_type(bits, signed=False), shape, sources=(zero_points,))
