"""Tidy the Q/DQ form, exactly, for runtimes that stumble on it.

- ``drop_redundant``: ``DequantizeLinear -> QuantizeLinear`` with the same type, scale,
  zero point and granularity gives back its input: the QuantizeLinear's readers read the
  DequantizeLinear's input instead (the DequantizeLinear goes when nothing else reads
  it). Proven per node, not assumed: every value of the quantized type is dequantized and
  quantized again with the kernels (bit-exact with ONNX Runtime's) for every (scale, zero
  point) pair; a node whose proof would take more than 2^24 evaluations is kept.
- ``split_shared``: a DequantizeLinear read by several nodes becomes one per reader, and an
  initializer read by several Q/DQ nodes becomes one per node (the same tensor, written
  once per name: ONNX Runtime 1.25 crashed on shared DequantizeLinear weights,
  microsoft/onnxruntime#28306).
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import onnx_ir as ir

from qlrewrite.kernels import dequantize, int_range, quantize
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.retarget.retarget_pass import RetargetResult
from qlrewrite.qdq import QDQ, QDQView, constant_tensor, node_views
from qlrewrite.qdq.constants import small_array
from qlrewrite.qdq.inference import Inference
from qlrewrite.toolkit import FreshNames, tensor_shape

__all__ = ["QdqTidyPass"]

#: The most (value, scale) evaluations one proof of a redundant pair may take.
_MAX_PROOF = 1 << 24


class QdqTidyPass(ContextPass, ir.passes.InPlacePass):
    """Remove redundant DequantizeLinear -> QuantizeLinear pairs and split shared Q/DQ
    inputs (see module)."""

    needs = frozenset({"inference"})  # the types of the Q/DQ nodes, when undeclared
    # keeps_types: a removed pair's readers read a value of the same type; each copy gets
    # a fresh name and its original's type

    def __init__(self, *, drop_redundant: bool = False, split_shared: bool = False) -> None:
        super().__init__()
        self.drop_redundant = drop_redundant
        self.split_shared = split_shared

    def call(self, model: ir.Model) -> RetargetResult:
        counts: collections.Counter[str] = collections.Counter()
        inference = self.context(model).inference
        if self.drop_redundant:
            counts["redundant_pairs_removed"] = _drop_redundant(_single_views(model, inference))
        if self.split_shared:
            names = FreshNames(model, nodes=True)
            views = _single_views(model, inference)
            counts["shared_dequantize_split"] = _split_dequantize(views, names)
            views = _single_views(model, inference)  # with the copies just made
            counts["shared_initializers_split"] = _split_initializers(views, names)
        summary = dict(counts)
        return RetargetResult(model, any(summary.values()), summary)


def _single_views(model: ir.Model, inference: Inference) -> dict[int, QDQView]:
    """The view of each Q/DQ node outside functions (one call site), by node id."""
    return {
        id(site.node): views[0]
        for site, views in node_views(model, kinds=(QDQ,), inference=inference)
        if len(views) == 1 and isinstance(views[0], QDQView)
    }


def _drop_redundant(views: dict[int, QDQView]) -> int:
    removed = 0
    for view in [v for v in views.values() if v.is_quantize]:
        source = view.node.inputs[0]
        producer = source.producer() if source is not None else None
        dq = views.get(id(producer)) if producer is not None else None
        if producer is None or dq is None or dq.is_quantize or not _same_parameters(dq, view):
            continue
        output, graph, original = view.node.outputs[0], view.node.graph, producer.inputs[0]
        if output.is_graph_output() or not _proven(dq) or graph is None or original is None:
            continue
        output.replace_all_uses_with(original)
        graph.remove(view.node, safe=True)
        removed += 1
        unread = not producer.outputs[0].uses() and not producer.outputs[0].is_graph_output()
        if unread and producer.graph is not None:
            producer.graph.remove(producer, safe=True)
    return removed


class _Parameters(NamedTuple):
    """What a Q/DQ node computes with, when every part is a known constant."""

    dtype: ir.DataType  # the quantized type
    scale: npt.NDArray[Any]
    zero: npt.NDArray[Any]
    axis: int | None  # None: per-tensor
    block: int


def _parameters(view: QDQView) -> _Parameters | None:
    """(type, scale array, zero point array, axis, block) when all are known constants."""
    inputs = view.node.inputs
    scale = _array(inputs[1]) if len(inputs) > 1 else None
    zero = _array(inputs[2]) if len(inputs) > 2 else None
    dtype = view.output_type if view.is_quantize else view.x_type
    if scale is None or dtype is None:
        return None
    if zero is None and len(inputs) > 2 and inputs[2] is not None:
        return None
    zero = np.zeros_like(scale) if zero is None else zero
    granular = view.granularity.per_axis or view.granularity.blocked
    return _Parameters(dtype, scale, zero, view.axis if granular else None, view.block_size)


def _array(value: ir.Value | None) -> npt.NDArray[Any] | None:
    tensor = constant_tensor(value) if value is not None else None
    return small_array(tensor) if tensor is not None else None


def _same_parameters(dq: QDQView, q: QDQView) -> bool:
    first, second = _parameters(dq), _parameters(q)
    if first is None or second is None:
        return False
    (t1, s1, z1, a1, b1), (t2, s2, z2, a2, b2) = first, second
    same_scale = s1.shape == s2.shape and np.array_equal(s1, s2)
    same_zero = z1.shape == z2.shape and np.array_equal(z1, z2)
    scale_types = dq.scale is not None and q.scale is not None and dq.scale.dtype == q.scale.dtype
    return t1 == t2 and same_scale and same_zero and (a1, b1) == (a2, b2) and scale_types


def _proven(dq: QDQView) -> bool:
    """True if Q(DQ(v)) == v for every value v of the type and every (scale, zero point)
    pair of ``dq`` (computed with the kernels, in the scale's own type)."""
    params = _parameters(dq)
    if params is None or dq.scale is None or dq.scale.dtype is None:
        return False
    dtype, scale, zero, _, _ = params
    bounds = int_range(dtype)
    if bounds is None:
        return False
    kind = dtype.numpy()
    values = np.arange(bounds[0], bounds[1] + 1)
    pairs = np.unique(np.stack([scale.ravel(), zero.ravel()], axis=1), axis=0)
    if pairs.shape[0] * values.size > _MAX_PROOF:
        return False
    scale_type = dq.scale.dtype.numpy()
    grid = np.broadcast_to(values, (pairs.shape[0], values.size)).astype(kind)
    scales = pairs[:, 0].astype(scale_type)
    zeros = pairs[:, 1].astype(kind)
    floats = dequantize(grid, scales, zeros, axis=0)
    back = quantize(floats, scales, zeros, axis=0)
    return bool(np.array_equal(back, grid))


def _split_dequantize(views: dict[int, QDQView], names: FreshNames) -> int:
    """One DequantizeLinear per reader; the number of copies made."""
    copies = 0
    for view in list(views.values()):
        node = view.node
        if view.is_quantize or not isinstance(node.graph, ir.Graph):
            continue
        for reader, index in list(node.outputs[0].uses())[1:]:
            output = ir.Value(name=names.fresh(node.outputs[0].name or "dq"))
            clone = ir.Node(
                node.domain,
                node.op_type,
                list(node.inputs),
                list(node.attributes.values()),
                outputs=[output],
                name=names.fresh(node.name or "dq"),
            )
            output.type, output.shape = node.outputs[0].type, node.outputs[0].shape
            node.graph.insert_after(node, clone)
            reader.replace_input_with(index, output)
            copies += 1
    return copies


def _alias(tensor: ir.TensorProtocol, name: str | None) -> ir.TensorProtocol:
    """A tensor of its own name reading ``tensor``'s data (sharing the tensor object itself
    would let serialization rename it, and with it the input model's initializer)."""
    return ir.LazyTensor(lambda: tensor, dtype=tensor.dtype, shape=tensor_shape(tensor), name=name)


def _split_initializers(views: dict[int, QDQView], names: FreshNames) -> int:
    """One initializer per Q/DQ reader; the number of initializers added."""
    added = 0
    for view in views.values():
        node = view.node
        graph = node.graph
        if not isinstance(graph, ir.Graph):
            continue
        for index, value in enumerate(node.inputs):
            tensor = value.const_value if value is not None else None
            if value is None or tensor is None or not value.is_initializer():
                continue
            if value.is_graph_input():
                continue
            if len(value.uses()) < 2 or next(iter(value.uses()))[0] is node:
                continue
            copy = ir.Value(name=names.fresh(value.name or "init"))
            copy.const_value = _alias(tensor, copy.name)
            copy.type, copy.shape = value.type, value.shape
            graph.register_initializer(copy)
            node.replace_input_with(index, copy)
            added += 1
    return added
