"""MatMulNBits / GatherBlockQuantized (com.microsoft) -> standard ONNX.

- ``MatMulNBits(A, B, scales, zero_points, bias)`` becomes
  ``MatMul(A, DequantizeLinear(x, scale, zero_point))`` (then ``Add(bias)``): x is the
  weight laid out ``[K, N]``, blocked along K (axis 0), or per-axis (axis 1, scale ``[N]``)
  when one block covers K. With zero points x is unsigned (uint2 / uint4 / uint8) and the
  zero points follow; without, x is signed (int2 / int4 / int8: ``q - 2**(bits-1)``, the
  default zero point taken out) and has no zero point. Either way the dequantized weight is
  bit-identical to the one ONNX Runtime's kernel computes (``float32(q - zp) * scale``).
- ``GatherBlockQuantized(data, indices, scales, zero_points)`` becomes
  ``Gather(DequantizeLinear(data, scales, zero_points), indices)``, blocked along
  ``quantize_axis``; uint8 data holding 2 or 4 bits per value is read as uint2 / uint4
  (int2 / int4 / int8 without zero points, as above).
- ``dequantize=True`` (``fold --dequantize-weights``): the DequantizeLinear is not written;
  its value is, as a float initializer computed while the model is saved.

What a node needs that the target cannot express is refused with the node named and the
lowest ai.onnx opset that would: int4 and blocks need opset 21, int2 opset 25.
Zero points in the scale type (HQQ; ONNX Runtime computes ``q * scale - scale * zp``, 4
bits and float32 only) become ``DequantizeLinear(q, scale) - scale * zp`` (the products
rounded as ORT rounds them; see :func:`_plan_float_zero_points`). Not converted
(bit-exactness could not hold): ``g_idx``, prepacked B, FP8 / FP4 data.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.errors import Refusal
from qlrewrite.io.ir_version import raise_ir_version
from qlrewrite.kernels.nbits import MatMulNBitsLayout, unpack
from qlrewrite.passes.blocks import Writer, repeat_blocks
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.tensor import (
    FLOAT16_MODES,
    ConstOperand,
    Float16Mode,
    FoldedTensor,
    FoldSpec,
    RowReader,
    StreamedTensor,
    link_initializers,
)
from qlrewrite.passes.nbits.tensor import (
    MappedTensor,
    MatMulNBitsFloat,
    MatMulNBitsWeight,
    RetypedTensor,
    int_type,
)
from qlrewrite.passes.results import NBitsResult
from qlrewrite.qdq import (
    MS_DOMAIN,
    WEIGHT_ONLY,
    QuantizedSite,
    WeightOnlyView,
    constant_tensor,
    drop_unused_domain,
    is_constant,
    iter_sites,
    site_view,
)
from qlrewrite.text import grouped
from qlrewrite.toolkit import FreshNames, add_constant, ensure_import, replace_value, tensor_shape
from qlrewrite.verify.verify import EXACT_BOUND, Bound, summation_order_bound

__all__ = [
    "HALF_BOUND",
    "NBITS_OPS",
    "ORDER_REASON",
    "NBitsToOnnxPass",
    "min_block",
]

NBITS_OPS = opsets.WEIGHT_ONLY_OPS

#: What ``--verify`` says when a float16 / bfloat16 MatMulNBits was rewritten, and the
#: difference it accepts (a fraction of each output's largest magnitude; 8.4e-4 measured
#: at K = 4096, 2, 4 and 8 bits, accuracy levels 0 and 4).
HALF_BOUND = Bound(
    "float16/bfloat16 MatMulNBits: ONNX Runtime keeps its dequantized weight in float32 and "
    "rounds once at the end, DequantizeLinear -> MatMul rounds the weight to the scale type "
    "first (the ONNX formula), so outputs differ in the last bits; quantized weights, scales "
    "and zero points are carried over bit for bit (float32: bit-identical outputs)",
    relative=2e-3,
)

#: Why a rewrite between MatMulNBits and DequantizeLinear -> MatMul may change ONNX
#: Runtime's outputs in their last bits (its CPU kernels, weight prepacking off as
#: --verify runs them; measured with ORT 1.31.1 and 1.32.0).
ORDER_REASON = (
    "MatMulNBits and DequantizeLinear -> MatMul multiply the same float32 weights (bit for "
    "bit), but ONNX Runtime's CPU GEMM sums the products in another order when A has one "
    "row (MLAS's M = 1 kernels) or the weight one column (N = 1), and MatMulNBits adds its "
    "bias before the last K panel instead of after; bit-identical when every such node "
    "sees 2 or more rows of A, has N of 2 or more and no bias"
)

_DT = ir.DataType
_FLOATS = (_DT.FLOAT, _DT.FLOAT16, _DT.BFLOAT16)


def _where(site: QuantizedSite) -> str:
    """How refusals name the node."""
    name = site.node.name or f"({site.node.outputs[0].name})"
    return f"{site.ref}: {site.node.op_type} '{name}'"


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _input_name(node: ir.Node, index: int, default: str) -> str:
    """The name of input ``index`` (``default`` when omitted or unnamed)."""
    value = _input(node, index)
    return (value.name if value is not None else None) or default


def min_block(k: int) -> int:
    """The smallest block size MatMulNBits allows that covers ``k`` in one block."""
    return max(16, 1 << max(0, (k - 1).bit_length()))


@dataclasses.dataclass
class _Weight:
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
class _Plan:
    view: WeightOnlyView
    row: opsets.WeightOnlyVersion  # the version in force (sites without one are skipped)
    problems: list[str] = dataclasses.field(default_factory=list)
    lowest_opset: int | None = None
    weight: _Weight | None = None
    gather_axis: int = 0


def _tensors(
    node: ir.Node, indices: tuple[int, ...], plan: _Plan
) -> list[ir.TensorProtocol | None]:
    """The constant tensors of inputs ``indices`` (None for an omitted input)."""
    found: list[ir.TensorProtocol | None] = []
    for index in indices:
        value = _input(node, index)
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


def _weight_indices(site: QuantizedSite) -> tuple[int, int, int]:
    """Positions of the quantized weight, its scales and its zero points."""
    roles = site.kind.roles
    return roles["x"], roles["scale"], roles["zero_point"]


def _check_form(plan: _Plan, opset: int | None, form: opsets.NodeForm) -> None:
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
    plan: _Plan,
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


def _plan_matmul_nbits(
    view: WeightOnlyView, row: opsets.WeightOnlyVersion, opset: int | None, dequantize: bool
) -> _Plan:
    """What a MatMulNBits becomes: a DequantizeLinear (or folded) weight, or its problems."""
    plan = _Plan(view, row)
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


def _matmul_nbits_inputs(view: WeightOnlyView, plan: _Plan) -> _NBitsInputs | None:
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
    if _input(node, row.input_index("g_idx")) is not None:
        plan.problems.append(
            "g_idx is given: ONNX Runtime then dequantizes as q * scale - scale * zp (and "
            "ignores uint8 zero points), which DequantizeLinear cannot reproduce"
        )
    indices = _weight_indices(site)
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


def _require_given(plan: _Plan, node: ir.Node, **indices: int) -> None:
    """A problem for each required input omitted (one given but not constant is
    :func:`_tensors`' problem)."""
    plan.problems.extend(
        f"{name} is omitted" for name, index in indices.items() if _input(node, index) is None
    )


def _check_matmul_nbits_tensors(plan: _Plan, found: _NBitsInputs) -> None:
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
    plan: _Plan, found: _NBitsInputs, opset: int | None, dequantize: bool
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
    plan.weight = _Weight(
        x,
        scale,
        zp,
        axis=1 if flat else 0,
        block_size=0 if flat else layout.block_size,
        out_type=scales.dtype,
    )


def _plan_float_zero_points(
    plan: _Plan,
    layout: MatMulNBitsLayout,
    opset: int | None,
    *,
    b: ir.TensorProtocol,
    scales: ir.TensorProtocol,
    zero_points: ir.TensorProtocol,
    dequantize: bool,
) -> None:
    """Zero points in the scale type (HQQ): ONNX Runtime's kernel (4 bits, float32 only:
    for float16 it ignores them) computes ``q * scale - scale * zp``, each product rounded
    to float32. Written as ``DequantizeLinear(q, scale)`` (uint4, no zero point: ``q *
    scale``, one rounding) minus the precomputed ``scale * zp`` repeated over each block:
    the same two roundings, then the same subtraction; ``fold --dequantize-weights``
    writes that weight itself."""
    if layout.bits != 4 or scales.dtype != _DT.FLOAT or zero_points.dtype != _DT.FLOAT:
        plan.problems.append(
            "zero points in the scale type are only computed by ONNX Runtime for 4 bits "
            "and float32 (float16 ones it ignores)"
        )
        return
    if zero_points.size != layout.N * layout.k_blocks:
        plan.problems.append(f"zero points are not {layout.N} x {layout.k_blocks} floats")
        return
    if dequantize:
        folded = MatMulNBitsFloat(layout, b=b, scales=scales, zero_points=zero_points)
        plan.weight = _Weight(
            b, scales, zero_points, 0, layout.block_size, _DT.FLOAT, folded=folded
        )
        return
    _check_dq_form(plan, opset, _DT.UINT4, _DT.FLOAT, zero_point=False)
    name = _input_name(plan.view.node, 1, "B")
    x = MatMulNBitsWeight(
        "x", layout, _DT.UINT4, b=b, scales=scales, zero_points=None, name=f"{name}_q"
    )
    scale = MatMulNBitsWeight("scale", layout, _DT.FLOAT, b=b, scales=scales, zero_points=None)
    zero = MatMulNBitsWeight("scale", layout, _DT.FLOAT, b=b, scales=zero_points, zero_points=None)

    def offset() -> ir.TensorProtocol:  # ORT's scale * zp, rounded to float32 once
        return ir.tensor(np.multiply(scale.numpy(), zero.numpy(), dtype=np.float32))

    scale.name = f"{name}_s"
    plan.weight = _Weight(
        x,
        scale,
        None,
        axis=0,
        block_size=layout.block_size,
        out_type=_DT.FLOAT,
        offset=ir.LazyTensor(offset, dtype=_DT.FLOAT, shape=scale.shape, name=f"{name}_offset"),
    )


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


def _plan_gather(
    view: WeightOnlyView, row: opsets.WeightOnlyVersion, opset: int | None, dequantize: bool
) -> _Plan:
    """What a GatherBlockQuantized becomes: a DequantizeLinear (or folded) weight, or its
    problems."""
    plan = _Plan(view, row)
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


def _gather_inputs(view: WeightOnlyView, plan: _Plan) -> _GatherInputs | None:
    """The node's constant inputs and attributes, None (with the problems) when not constant."""
    node = view.node
    indices = _weight_indices(view.site)
    source = _input(node, indices[0])
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


def _gather_axes_in_range(plan: _Plan, found: _GatherInputs) -> bool:
    """Whether both axes are within the data's rank (then made non-negative)."""
    rank = len(found.data_dims)
    if not (-rank <= found.gather_axis < rank and -rank <= found.quantize_axis < rank):
        plan.problems.append("gather_axis or quantize_axis is out of range")
        return False
    found.gather_axis %= rank
    found.quantize_axis %= rank
    plan.gather_axis = found.gather_axis
    return True


def _gather_storage(plan: _Plan, found: _GatherInputs) -> opsets.WeightStorage | None:
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


def _gather_scale_blocks(plan: _Plan, found: _GatherInputs, packed: bool) -> list[int] | None:
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
    plan: _Plan,
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
    plan.weight = _Weight(
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


class NBitsToOnnxPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite MatMulNBits / GatherBlockQuantized as DequantizeLinear -> MatMul / Gather.

    ``strict`` (default): refuse (:class:`~qlrewrite.errors.Refusal`) if any node cannot
    be converted, before changing anything; ``strict=False`` converts what can be.
    ``dequantize``: write the dequantized weight as a float initializer instead of the
    DequantizeLinear (``fold --dequantize-weights``; no opset limit then). ``float16``
    (with ``dequantize``): "exact" writes a float16 MatMulNBits weight as ONNX Runtime's
    kernel holds it, in float32, then a Cast to float16; "compact" writes float16.
    ``.summary`` counts what changed; ``.warnings`` says what was left and why.
    """

    def __init__(
        self, *, strict: bool = True, dequantize: bool = False, float16: Float16Mode = "exact"
    ) -> None:
        super().__init__()
        if float16 not in FLOAT16_MODES:
            raise ValueError(f"float16 must be one of {FLOAT16_MODES}, got {float16!r}")
        self.strict = strict
        self.dequantize = dequantize
        self.float16 = float16

    def call(self, model: ir.Model) -> NBitsResult:
        plans = []
        for site in iter_sites(model, WEIGHT_ONLY):
            view = site_view(model, site)
            row = view.row if isinstance(view, WeightOnlyView) else None
            if not isinstance(view, WeightOnlyView) or row is None:
                continue  # no version the table knows at the imported com.microsoft opset
            planner = _plan_matmul_nbits if site.node.op_type == "MatMulNBits" else _plan_gather
            plans.append(planner(view, row, site.scope.opset(""), self.dequantize))
        failed = [p for p in plans if p.problems]
        if failed and self.strict:
            raise Refusal(_refusal(failed, self.dequantize))
        warnings = [
            f"{_where(p.view.site)} left as it is: {'; '.join(dict.fromkeys(p.problems))}"
            for p in failed
        ]
        done = [p for p in plans if not p.problems]
        rewriter = _Rewriter(model, self.dequantize, widen=self.float16 == "exact")
        for plan in done:
            rewriter.apply(plan)
        if done:
            link_initializers(model)
        dropped = drop_unused_domain(model, MS_DOMAIN) if done else False
        if done and not self.dequantize:
            ensure_import(model, "", 21)
            raise_ir_version(model)
        count = {op: sum(p.view.op_type == op for p in done) for op in NBITS_OPS}
        # float16 weights written in float32 (fold, --float16 exact) keep ORT's outputs
        widened = self.dequantize and self.float16 == "exact"
        half = not widened and any(
            p.view.op_type == "MatMulNBits"
            and p.weight is not None
            and p.weight.out_type != _DT.FLOAT
            for p in done
        )
        summary = {
            "matmul_nbits_converted": count["MatMulNBits"],
            "gather_block_quantized_converted": count["GatherBlockQuantized"],
            "nbits_nodes_left": len(failed),
            "initializers_removed": rewriter.removed,
            "opset_imports_dropped": int(dropped),
        }
        ks = [
            p.view.weight_attributes.get("K") or 0 for p in done if p.view.op_type == "MatMulNBits"
        ]
        bound = summation_order_bound(max(ks), ORDER_REASON) if ks else EXACT_BOUND
        bound = bound.join(HALF_BOUND) if half else bound
        return NBitsResult(model, bool(done), summary, warnings, verify_bound=bound)


def _refusal(failed: list[_Plan], dequantize: bool) -> str:
    described = grouped((_where(p.view.site), p.problems) for p in failed)
    lowest = [p.lowest_opset for p in failed]
    hint = ""
    if all(v is not None for v in lowest):
        opset = max(v for v in lowest if v is not None)
        hint = (
            f"; the lowest ai.onnx opset that expresses them is {opset}: "
            f"run `qlrewrite upgrade --opset {opset} --convert-weight-only`"
        )
    what = "dequantize" if dequantize else "convert"
    return f"cannot {what} {len(failed)} node(s){hint}; nothing written: {described}"


class _Rewriter:
    """Builds the replacement nodes and initializers, sharing converted weights."""

    def __init__(self, model: ir.Model, dequantize: bool, *, widen: bool = True) -> None:
        self.model = model
        self.dequantize = dequantize
        self.widen = widen
        self.removed = 0
        self._names = FreshNames(model)
        self._cache: dict[tuple[object, ...], ir.Value] = {}

    def _name(self, base: str) -> str:
        return self._names.fresh(base)

    def _constant(
        self, graph: ir.Graph | ir.Function, node: ir.Node, tensor: ir.TensorProtocol, base: str
    ) -> ir.Value:
        """``tensor`` as an initializer of ``graph``, or in a function a Constant node
        before ``node`` (its first reader: a function's nodes are in order)."""
        name = self._name(base)
        node_name = self._name(name) if isinstance(graph, ir.Function) else None
        return add_constant(graph, tensor, name, before=node, node_name=node_name)

    def _weight(self, plan: _Plan) -> ir.Value:
        """The value standing for the float weight: a DQ output, or a folded initializer."""
        view, weight = plan.view, plan.weight
        site = view.site
        assert weight is not None
        graph, node = site.graph, site.node
        attrs = tuple(sorted((k, view.attr_or_default(k)) for k in plan.row.attributes))
        inputs = (_input(node, i) for i in _weight_indices(site))
        key = (id(graph), tuple(id(v) for v in inputs), attrs)
        if key in self._cache:
            return self._cache[key]
        base = (node.name or node.outputs[0].name or "w") + "_w"
        if self.dequantize and weight.folded is not None:
            value = self._constant(graph, node, weight.folded, base)
        elif self.dequantize:
            value = self._dequantized(graph, node, weight, base)
        else:
            value = self._dequantize_linear(graph, node, weight, base)
        self._cache[key] = value
        return value

    def _dequantized(
        self, graph: ir.Graph | ir.Function, node: ir.Node, weight: _Weight, base: str
    ) -> ir.Value:
        """The weight folded to a float initializer (float32 then a Cast for a widened
        float16 / bfloat16 MatMulNBits weight), before ``node`` in ``graph``."""
        x = weight.x
        # ORT's MatMulNBits keeps a float16 weight in float32 (its GatherBlockQuantized
        # rounds each value to float16): float32, then a Cast, keeps that value
        widen = self.widen and node.op_type == "MatMulNBits" and weight.out_type != _DT.FLOAT
        folded = FoldedTensor(
            FoldSpec(
                quantize=False,
                axis=weight.axis,
                block_size=weight.block_size,
                output_dtype=_DT.FLOAT if widen else weight.out_type,
            ),
            x if isinstance(x, StreamedTensor) else ConstOperand(x),
            weight.scale,
            weight.zero_point,
        )
        value = self._constant(graph, node, folded, base + ("_float32" if widen else ""))
        if not widen:
            return value
        cast = ir.node(
            "Cast", [value], attributes={"to": weight.out_type}, name=self._name(base + "_cast")
        )
        cast.outputs[0].name = self._name(base)
        cast.outputs[0].dtype = weight.out_type
        cast.outputs[0].shape = value.shape
        graph.insert_before(node, cast)
        return cast.outputs[0]

    def _dequantize_linear(
        self, graph: ir.Graph | ir.Function, node: ir.Node, weight: _Weight, base: str
    ) -> ir.Value:
        """The output of a DequantizeLinear of the weight, inserted before ``node`` in ``graph``."""
        inputs = [
            weight.reuse_x or self._constant(graph, node, weight.x, weight.x.name or base + "_q"),
            weight.reuse_scale
            or self._constant(graph, node, weight.scale, weight.scale.name or base + "_s"),
        ]
        if weight.zero_point is not None:
            inputs.append(
                weight.reuse_zero_point
                or self._constant(graph, node, weight.zero_point, weight.zero_point.name or base)
            )
        attributes = {"axis": weight.axis}
        if weight.block_size:
            attributes["block_size"] = weight.block_size
        dq = ir.node(
            "DequantizeLinear", inputs, attributes=attributes, name=self._name(base + "_dq")
        )
        dq.outputs[0].name = self._name(base)
        dq.outputs[0].dtype = weight.out_type
        dq.outputs[0].shape = ir.Shape(weight.x.shape.numpy())
        graph.insert_before(node, dq)
        if weight.offset is None:
            return dq.outputs[0]
        return self._minus_offset(graph, node, weight, dq.outputs[0], base)

    def _minus_offset(
        self,
        graph: ir.Graph | ir.Function,
        node: ir.Node,
        weight: _Weight,
        dequantized: ir.Value,
        base: str,
    ) -> ir.Value:
        """``dequantized`` minus the weight's offset repeated over each block."""
        assert weight.offset is not None
        offset = self._constant(graph, node, weight.offset, base + "_offset")
        writer = Writer(node, self._names, base, graph=graph)
        shape = [int(d) for d in weight.offset.shape.numpy()]
        length = tensor_shape(weight.x).numpy()[0]
        per_element = repeat_blocks(
            writer, offset, shape, axis=0, block=weight.block_size, length=length
        )
        result = writer.node("Sub", [dequantized, per_element])
        result.dtype, result.shape = weight.out_type, dequantized.shape
        return result

    def apply(self, plan: _Plan) -> None:
        node, graph = plan.view.node, plan.view.site.graph
        weight = self._weight(plan)
        old_inputs = list(node.inputs)
        output = node.outputs[0]
        new_nodes: list[ir.Node] = []
        if node.op_type == "MatMulNBits":
            bias = _input(node, plan.row.input_index("bias"))
            matmul = ir.node("MatMul", [node.inputs[0], weight], name=node.name or None)
            new_nodes.append(matmul)
            result = matmul.outputs[0]
            if bias is not None:
                add = ir.node("Add", [result, bias], name=self._name((node.name or "") + "_bias"))
                result.name = self._name((output.name or "y") + "_matmul")
                new_nodes.append(add)
                result = add.outputs[0]
        else:
            gather = ir.node(
                "Gather",
                [weight, node.inputs[1]],
                attributes={"axis": plan.gather_axis},
                name=node.name or None,
            )
            new_nodes.append(gather)
            result = gather.outputs[0]
        graph.insert_after(node, new_nodes)
        replace_value(output, result)
        graph.remove(node, safe=True)
        for value in old_inputs:
            self._drop_if_unused(graph, value)

    def _drop_if_unused(self, graph: ir.Graph | ir.Function, value: ir.Value | None) -> None:
        if value is None or value.uses() or value.is_graph_output() or value.is_graph_input():
            return
        producer = value.producer()
        if producer is not None:
            unused = not any(o.uses() or o.is_graph_output() for o in producer.outputs)
            if producer.op_type in ("Constant", "Reshape") and producer.graph and unused:
                inputs = list(producer.inputs)
                producer.graph.remove(producer, safe=True)
                for source in inputs:  # a Reshape's data and shape
                    self._drop_if_unused(graph, source)
            return
        owner, name = value.graph, value.name
        if not value.is_initializer() or owner is None or name is None:
            return
        if name in owner.initializers:
            del owner.initializers[name]
            self.removed += 1
