"""Standard ONNX -> MatMulNBits / GatherBlockQuantized (com.microsoft), where exact.

- ``MatMul(A, DequantizeLinear(x, scale, zero_point))``, optionally through the
  ``Transpose(perm=[1, 0])`` exporters put before MatMul's B, then optionally ``Add`` of a
  constant ``[N]`` bias, becomes one MatMulNBits when x is a constant 2-D int2 / uint2 /
  int4 / uint4 / int8 / uint8 tensor dequantized blockwise along K (block size a power of
  two >= 16) or per output channel, to the type of A. Signed x without zero point is stored
  as ``x + 2**(bits-1)`` (MatMulNBits' default zero point); signed x with one shifts both.
  The dequantized weight is unchanged bit for bit (``float32(q - zp) * scale``).
- ``Gather(DequantizeLinear(x, scale, zero_point), indices)`` of a constant int4 / uint4 x
  dequantized blockwise becomes GatherBlockQuantized (same data, scales and zero points).

Every other node keeps today's behaviour. ``accuracy_level`` (default 0: A is not
quantized, float math) is written on every MatMulNBits made.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.kernels.nbits import MatMulNBitsLayout, transpose
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.tensor import RowReader, link_initializers
from qlrewrite.passes.nbits.tensor import MappedTensor, MatMulNBitsB
from qlrewrite.passes.nbits.to_onnx import HALF_BOUND, ORDER_REASON, NBitsResult, min_block
from qlrewrite.qdq import (
    MS_DOMAIN,
    ONNX_DOMAINS,
    QDQView,
    constant_tensor,
    is_constant,
    iter_graphs,
    iter_sites,
    site_view,
)
from qlrewrite.toolkit import FreshNames, add_constant, ensure_import_at
from qlrewrite.verify.bound import EXACT_BOUND, Bound, summation_order_bound

__all__ = ["NBitsFromOnnxPass"]

_DT = ir.DataType
_FLOATS = (_DT.FLOAT, _DT.FLOAT16, _DT.BFLOAT16)
_NBITS_TYPES = (_DT.INT2, _DT.UINT2, _DT.INT4, _DT.UINT4, _DT.INT8, _DT.UINT8)
_ONNX = ONNX_DOMAINS
#: The attributes of a DequantizeLinear this pass reads: refused when not plain integers.
_DQ_ATTRIBUTES = ("axis", "block_size", "output_dtype")


@dataclasses.dataclass
class _Match:
    """A DQ feeding a MatMul's B or a Gather's data, with everything it needs."""

    consumer: ir.Node
    dq: ir.Node
    transpose: ir.Node | None
    x: ir.TensorProtocol
    scale: ir.TensorProtocol
    zero_point: ir.TensorProtocol | None
    axis: int
    block_size: int


def _gather_axis(gather: ir.Node) -> int | None:
    """Gather's axis (default 0); None when it is not a plain integer."""
    attr = gather.attributes.get("axis")
    if attr is None:
        return 0
    if attr.is_ref() or attr.type != ir.AttributeType.INT:
        return None
    return attr.as_int()


def _single_use(value: ir.Value) -> bool:
    return len(value.uses()) == 1 and not value.is_graph_output()


def _match(consumer: ir.Node, index: int, views: dict[int, QDQView]) -> _Match | None:
    """The constant DequantizeLinear feeding ``consumer.inputs[index]`` (via a Transpose);
    ``views``: the view of every DequantizeLinear by ``id(node)``."""
    value = consumer.inputs[index] if index < len(consumer.inputs) else None
    if value is None or not _single_use(value):
        return None
    found = _dequantize_linear_feeding(value)
    if found is None:
        return None
    producer, transpose = found
    constants = _constant_inputs(producer)
    view = views.get(id(producer))
    if constants is None or view is None or view.row is None or not _int_attributes(producer):
        return None
    x, scale, zero_point = constants
    axis = view.axis
    block_size = view.block_size
    output_dtype = view.attr_or_default("output_dtype") or 0
    if output_dtype not in (0, int(scale.dtype)):
        return None
    rank = x.shape.rank()
    if not -rank <= axis < rank:
        return None
    return _Match(consumer, producer, transpose, x, scale, zero_point, axis % rank, block_size)


def _dequantize_linear_feeding(value: ir.Value) -> tuple[ir.Node, ir.Node | None] | None:
    """The ai.onnx DequantizeLinear producing ``value``, directly or through a single-use
    2-D Transpose (returned too); None when there is none."""
    producer = value.producer()
    transpose = None
    if producer is not None and producer.op_type == "Transpose" and producer.domain in _ONNX:
        perm = producer.attributes.get("perm")
        if perm is None or list(perm.as_ints()) != [1, 0]:
            return None
        transpose = producer
        source = producer.inputs[0]
        if source is None or not _single_use(source):
            return None
        producer = source.producer()
    if producer is None or producer.op_type != "DequantizeLinear" or producer.domain not in _ONNX:
        return None
    return producer, transpose


def _constant_inputs(
    dq: ir.Node,
) -> tuple[ir.TensorProtocol, ir.TensorProtocol, ir.TensorProtocol | None] | None:
    """A DequantizeLinear's x, scale and zero point (None if omitted) when all are
    constants with readable tensors; None otherwise."""
    inputs = list(dq.inputs) + [None] * (3 - len(dq.inputs))
    if not all(v is None or is_constant(v) for v in inputs[:3]):
        return None
    if inputs[0] is None or inputs[1] is None:  # x or the scale omitted (invalid)
        return None
    x, scale = constant_tensor(inputs[0]), constant_tensor(inputs[1])
    zero_point = constant_tensor(inputs[2]) if inputs[2] is not None else None
    if x is None or scale is None or (inputs[2] is not None and zero_point is None):
        return None
    return x, scale, zero_point


def _int_attributes(dq: ir.Node) -> bool:
    """Whether the DequantizeLinear's attributes are plain integers (not references)."""
    for name in _DQ_ATTRIBUTES:
        attr = dq.attributes.get(name)
        if attr is not None and (attr.is_ref() or attr.type != ir.AttributeType.INT):
            return False
    return True


#: The largest block ONNX Runtime's MatMulNBits kernels take (16, 32, 64, 128, 256).
_MAX_BLOCK = 256


def _nbits_layout(match: _Match) -> tuple[MatMulNBitsLayout, bool, int] | None:
    """The MatMulNBits layout of a matched weight, whether x is laid out [N, K], and the
    DequantizeLinear's own block along K (K for per-axis scales). A block larger than
    ONNX Runtime takes is split into blocks of 256 sharing its scale and zero point (the
    same values; the packed weight padded to at most the next block, never to the
    DequantizeLinear's block size: third audit, item 15)."""
    x, scale = match.x, match.scale
    if x.dtype not in _NBITS_TYPES or x.shape.rank() != 2 or scale.dtype not in _FLOATS:
        return None
    transposed = match.transpose is not None
    rows, cols = x.shape.numpy()
    k, n = (cols, rows) if transposed else (rows, cols)
    if k < 1 or n < 1:  # an empty weight: MatMulNBits has no form for it, the DQ stays
        return None
    k_axis = 1 if transposed else 0
    if match.block_size > 0:
        block = match.block_size
        if match.axis != k_axis or block < 16 or block & (block - 1):
            return None
        expected = [n, -(-k // block)] if transposed else [-(-k // block), n]
    else:
        block = k
        if match.axis == k_axis or scale.shape.rank() != 1:
            return None
        expected = [n]
    if list(scale.shape.numpy()) != expected:
        return None
    zero_point = match.zero_point
    if zero_point is not None and (
        zero_point.dtype != x.dtype or list(zero_point.shape.numpy()) != expected
    ):
        return None
    source_block = min(block, k)
    made = min(min_block(source_block), _MAX_BLOCK)
    layout = MatMulNBitsLayout(K=k, N=n, bits=x.dtype.bitwidth, block_size=made)
    return layout, transposed, source_block


def _bias(matmul: ir.Node, n: int, dtype: ir.DataType) -> tuple[ir.Node, ir.Value] | None:
    """An Add of a constant [N] bias of ``dtype`` consuming the MatMul output, if any."""
    output = matmul.outputs[0]
    if not _single_use(output):
        return None
    add, _ = next(iter(output.uses()))
    if add.op_type != "Add" or add.domain not in _ONNX or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] is output else add.inputs[0]
    if other is None or not is_constant(other):
        return None
    tensor = constant_tensor(other)
    if tensor is None or tensor.dtype != dtype or list(tensor.shape.numpy()) != [n]:
        return None
    return add, other


def _stays_exact(match: _Match) -> bool:
    """Whether an 8-bit weight's DequantizeLinear, left as it is, converts to com.microsoft
    exactly: com.microsoft's has no block_size, and with a float16 scale ONNX Runtime
    computes it differently (ConvertDomainPass refuses both; MatMulNBits holds them)."""
    return match.block_size == 0 and match.scale.dtype == _DT.FLOAT


def _eight_bit_note(count: int) -> str:
    """Why ``count`` 8-bit weights stayed DequantizeLinear -> MatMul."""
    return (
        f"{count} 8-bit weight(s) left as DequantizeLinear -> MatMul: ONNX Runtime's default "
        "session runs them faster as they are (it fuses them into MatMulIntegerToFloat, or "
        "into its own MatMulNBits at accuracy_level 4); an 8-bit MatMulNBits at "
        "accuracy_level 0 ran 2-35x slower (ORT 1.31.1, benchmarks/convert_8bit.py). "
        "--include-8bit "
        "converts them (with --accuracy-level 4 to keep the speed)"
    )


class NBitsFromOnnxPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite constant DequantizeLinear -> MatMul / Gather as MatMulNBits /
    GatherBlockQuantized where the weight stays bit-identical; the
    :class:`~qlrewrite.passes.nbits.to_onnx.NBitsResult` counts them."""

    needs = frozenset({"inference"})  # the outputs it replaces, before the first change

    def __init__(self, *, accuracy_level: int = 0, include_8bit: bool = False) -> None:
        super().__init__()
        if accuracy_level not in opsets.ACCURACY_LEVELS:
            raise ValueError(
                f"accuracy_level must be {list(opsets.ACCURACY_LEVELS)}, got {accuracy_level}"
            )
        self.accuracy_level = accuracy_level
        #: 8-bit weights become MatMulNBits too (left as DequantizeLinear by default).
        self.include_8bit = include_8bit
        self._eight_bit_left = 0
        self._views: dict[int, QDQView] = {}
        self._half = False
        self._k_max = 0

    def call(self, model: ir.Model) -> NBitsResult:
        counts = {"MatMulNBits": 0, "GatherBlockQuantized": 0}
        self._half, self._k_max, self._eight_bit_left = False, 0, 0
        self._views = {
            id(site.node): view
            for site in iter_sites(model)
            if site.node.op_type == "DequantizeLinear"
            and site.domain == ""
            and isinstance(view := site_view(model, site), QDQView)
        }
        # Types and shapes of the outputs it replaces, inferred before the first change:
        # ONNX inference stops at MatMulNBits, so later passes (convert's Q/DQ planning)
        # would no longer know the types downstream of a shapeless output.
        self._inference = self.context(model).inference
        self._names = FreshNames(model)
        for scope in list(iter_graphs(model)):
            graph = scope.graph
            self._ref = scope.ref
            for node in list(graph):
                if node.domain not in _ONNX or node.graph is None:
                    continue
                if node.op_type == "MatMul":
                    done = self._matmul(graph, node)
                elif node.op_type == "Gather":
                    done = self._gather(graph, node)
                else:
                    continue
                if done:
                    counts[done] += 1
                    ensure_import_at(model, scope.ref, MS_DOMAIN, 1)
        if any(counts.values()):
            link_initializers(model)
        summary = {
            "matmul_nbits_made": counts["MatMulNBits"],
            "gather_block_quantized_made": counts["GatherBlockQuantized"],
            "8bit_weights_left": self._eight_bit_left,
        }
        warnings = [_eight_bit_note(self._eight_bit_left)] if self._eight_bit_left else []
        return NBitsResult(
            model, any(counts.values()), summary, warnings, verify_bound=self._bound()
        )

    def _bound(self) -> Bound:
        """What --verify accepts of the MatMulNBits made (exact when none was)."""
        if not self._k_max:
            return EXACT_BOUND
        bound = summation_order_bound(self._k_max, ORDER_REASON)
        return bound.join(HALF_BOUND) if self._half else bound

    def _matmul(self, graph: ir.Graph | ir.Function, matmul: ir.Node) -> str | None:
        match = _match(matmul, 1, self._views)
        found = _nbits_layout(match) if match is not None else None
        if match is None or found is None:
            return None
        layout, transposed, source_block = found
        if layout.bits == 8 and not self.include_8bit and _stays_exact(match):
            self._eight_bit_left += 1
            return None
        a = matmul.inputs[0]
        if a is None or (a.dtype is not None and a.dtype != match.scale.dtype):
            return None
        x_value = match.dq.inputs[0]
        base = (x_value.name if x_value is not None else None) or "B"
        zero_point = match.zero_point
        half = layout.default_zero_point
        b = MatMulNBitsB(layout, match.x, transposed=transposed, name=f"{base}_nbits")
        inputs: list[ir.Value | None] = [a, self._constant(graph, b)]
        same_blocks = source_block == layout.block_size
        scales = _scales(match.scale, layout, transposed, source_block, f"{base}_scales")
        inputs.append(
            match.dq.inputs[1]
            if transposed and match.block_size and same_blocks
            else self._constant(graph, scales)
        )
        signed = match.x.dtype.is_signed()
        if zero_point is not None or not signed:
            shift = half if signed else 0
            zp = _zero_points(zero_point, layout, transposed, source_block, shift)
            zp.name = f"{base}_zero_points"
            inputs.append(self._constant(graph, zp))
        bias = _bias(matmul, layout.N, match.scale.dtype)
        last = matmul
        if bias is not None:
            inputs += [None] * (5 - len(inputs)) + [bias[1]]
            last = bias[0]
        attributes = {"K": layout.K, "N": layout.N, "bits": layout.bits}
        attributes["block_size"] = layout.block_size
        if self.accuracy_level:
            attributes["accuracy_level"] = self.accuracy_level
        node = ir.node(
            "MatMulNBits", inputs, attributes=attributes, domain=MS_DOMAIN, name=matmul.name
        )
        self._swap(graph, [n for n in (match.dq, match.transpose, matmul) if n], last, node)
        self._half |= match.scale.dtype != _DT.FLOAT
        self._k_max = max(self._k_max, layout.K)
        return "MatMulNBits"

    def _gather(self, graph: ir.Graph | ir.Function, gather: ir.Node) -> str | None:
        match = _match(gather, 0, self._views)
        if match is None or match.transpose is not None or match.block_size < 16:
            return None
        x, scale = match.x, match.scale
        block = match.block_size
        if x.dtype not in (_DT.INT4, _DT.UINT4) or block & (block - 1):
            return None
        if scale.dtype not in _FLOATS:
            return None
        dims = list(x.shape.numpy())
        dims[match.axis] = -(-dims[match.axis] // block)
        if list(scale.shape.numpy()) != dims:
            return None
        gather_axis = _gather_axis(gather)
        if gather_axis is None:
            return None
        inputs = [match.dq.inputs[0], gather.inputs[1], match.dq.inputs[1]]
        if match.zero_point is not None:
            inputs.append(match.dq.inputs[2])
        attributes = {
            "bits": 4,
            "block_size": block,
            "gather_axis": gather_axis % x.shape.rank(),
            "quantize_axis": match.axis,
        }
        node = ir.node(
            "GatherBlockQuantized",
            inputs,
            attributes=attributes,
            domain=MS_DOMAIN,
            name=gather.name,
        )
        self._swap(graph, [match.dq, gather], gather, node)
        return "GatherBlockQuantized"

    def _swap(
        self, graph: ir.Graph | ir.Function, old: list[ir.Node], last: ir.Node, new: ir.Node
    ) -> None:
        """Put ``new`` in place of the ``old`` chain ending at ``last``; its output keeps the
        declared, else the inferred, type and shape of ``last``'s."""
        output = last.outputs[0]
        name, dtype, shape = output.name, output.dtype, output.shape
        if dtype is None or shape is None:
            inferred_type, dims = self._inference.table(self._ref).get(name or "", (None, None))
            dtype = dtype if dtype is not None else inferred_type
            if shape is None and dims is not None:
                shape = ir.Shape(dims)
        graph.insert_after(last, new)
        output.replace_all_uses_with(new.outputs[0], replace_graph_outputs=True)
        output.name = None
        new.outputs[0].name = name
        if dtype is not None:
            new.outputs[0].dtype = dtype
        if shape is not None:
            new.outputs[0].shape = shape
        removed = [*old, last] if last not in old else old
        inputs = [v for n in removed for v in n.inputs if v is not None]
        graph.remove(list(dict.fromkeys(removed)), safe=True)
        for value in inputs:
            if value.uses() or value.is_graph_input() or value.is_graph_output():
                continue
            owner, name = value.graph, value.name
            if value.is_initializer() and owner is not None and name is not None:
                owner.initializers.pop(name, None)

    def _constant(self, graph: ir.Graph | ir.Function, tensor: ir.TensorProtocol) -> ir.Value:
        """``tensor`` as a new initializer (a Constant node in a function), uniquely named
        (the model's names are gathered once, not per tensor)."""
        name = self._names.fresh(tensor.name or "w")
        tensor.name = name
        return add_constant(graph, tensor, name)


def _blocks_of(layout: MatMulNBitsLayout, source_block: int) -> npt.NDArray[np.integer[Any]]:
    """For each MatMulNBits block along K, the DequantizeLinear block it lies in."""
    return np.arange(layout.k_blocks) * layout.block_size // source_block


def _pick_blocks(
    rows: npt.NDArray[Any], layout: MatMulNBitsLayout, source_block: int
) -> npt.NDArray[Any]:
    """``[N, source blocks]`` -> ``[N, k_blocks]``, C-contiguous (no copy when the blocks are
    the same)."""
    blocks = _blocks_of(layout, source_block)
    if rows.shape[1] == len(blocks) and np.array_equal(blocks, np.arange(len(blocks))):
        return np.ascontiguousarray(rows)
    return np.ascontiguousarray(rows[:, blocks])


def _scales(
    scale: ir.TensorProtocol,
    layout: MatMulNBitsLayout,
    transposed: bool,
    source_block: int,
    name: str,
) -> MappedTensor:
    """MatMulNBits scales ``[N, k_blocks]`` from the DQ scale (``[k_blocks, N]`` or ``[N]``;
    blocks of ``source_block`` along K)."""

    def reader() -> RowReader:
        array = np.asarray(scale.numpy()).reshape(-1, layout.N if not transposed else 1)
        whole = array.reshape(layout.N, -1) if transposed else transpose(array)
        whole = _pick_blocks(whole, layout, source_block)
        return lambda r0, r1: whole[r0:r1]

    shape = [layout.N, layout.k_blocks]
    return MappedTensor(reader, scale.dtype, shape, sources=(scale,), name=name)


def _zero_points(
    zero_point: ir.TensorProtocol | None,
    layout: MatMulNBitsLayout,
    transposed: bool,
    source_block: int,
    shift: int,
) -> MappedTensor:
    """Packed uint8 zero points ``[N, ceil(k_blocks * bits / 8)]`` from the DQ's (0 if
    None), plus ``shift`` (the default zero point, for signed types)."""

    def reader() -> RowReader:
        if zero_point is None:
            values = np.zeros((layout.N, layout.k_blocks), np.int16)
        else:
            values = np.asarray(zero_point.numpy())
            values = (
                values.reshape(layout.N, -1)
                if transposed
                else transpose(values.reshape(-1, layout.N))
            )
            values = _pick_blocks(values, layout, source_block).astype(np.int16)
        packed = layout.pack_zero_points((values + shift).astype(np.uint8))
        return lambda r0, r1: packed[r0:r1]

    shape = [layout.N, layout.zero_point_row]
    sources = (zero_point,) if zero_point is not None else ()
    return MappedTensor(reader, _DT.UINT8, shape, sources=sources)
