"""The fold pass: QuantizeLinear / DequantizeLinear of constants become constants.

Every Q/DQ node (ai.onnx and com.microsoft) whose inputs are all constant (initializers
that no graph input overrides, or Constant nodes) is replaced by a lazily computed
:class:`~qlrewrite.passes.fold_tensor.FoldedTensor` named like the node's output, so
consumers and graph outputs need no renaming. In graphs (main and subgraphs) it becomes
an initializer; in model-local functions, which have no initializers, a Constant node.
Q -> DQ chains fold into one float tensor computed without the intermediate. With
``keep_dq`` only Q nodes fold and the model stays in QDQ form. Nodes and initializers
that only fed folded nodes are removed, then opset imports nothing uses any more.
Attribute defaults and output types come from :mod:`qlrewrite.opsets`.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.passes.fold_tensor import (
    ConstOperand,
    FoldedTensor,
    FoldSpec,
    Operand,
    StreamedTensor,
    link_in_order,
)
from qlrewrite.qdq import QDQSite, drop_unused_domains, is_constant, iter_qdq_nodes
from qlrewrite.rules.context import constant_tensor

__all__ = ["FoldPass", "fold"]


def fold(model: ir.Model, *, keep_dq: bool = False) -> ir.Model:
    """Fold the model's constant Q/DQ nodes in place and return it.

    Values are computed lazily: when the model is saved or a tensor is read.
    """
    return FoldPass(keep_dq=keep_dq)(model).model


class FoldPass(ir.passes.InPlacePass):
    """Constant-fold Q/DQ nodes; ``.summary`` counts what was folded and removed.

    ``summary``: ``dq_folded`` and ``q_folded`` (nodes folded), ``chains_folded`` (DQ
    nodes whose input was a folded Q), ``nodes_removed`` (folded nodes plus Constant
    nodes nothing uses any more), ``initializers_removed``, ``opsets_removed``.
    """

    def __init__(self, *, keep_dq: bool = False) -> None:
        super().__init__()
        self.keep_dq = keep_dq
        self.summary: dict[str, int] = {}
        self.warnings: list[str] = []

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.summary = dict.fromkeys(
            (
                "dq_folded",
                "q_folded",
                "chains_folded",
                "nodes_removed",
                "initializers_removed",
                "opsets_removed",
            ),
            0,
        )
        self.warnings = []
        # Every graph and function, listed once: folding adds and removes no subgraph.
        containers = [*model.graphs(), *model.functions.values()]
        overridable = 0
        for site in list(iter_qdq_nodes(model)):
            if self.keep_dq and site.node.op_type == "DequantizeLinear":
                continue
            folded = _folded_tensor(site)
            if folded is not None:
                self._replace(containers, site, folded)
            elif _overridable(site.node):
                overridable += 1
        if overridable:
            self.warnings.append(
                f"{overridable} Q/DQ node(s) not folded: an input is a graph input (an "
                "initializer listed as a graph input can be overridden by the caller); "
                "export without keep_initializers_as_inputs to fold them"
            )
        if any(self.summary.values()):
            link_in_order(_initializer_order(model))
            self.summary["opsets_removed"] = drop_unused_domains(model)
        return ir.passes.PassResult(model, modified=any(self.summary.values()))

    def _replace(
        self, containers: list[ir.Graph | ir.Function], site: QDQSite, folded: FoldedTensor
    ) -> None:
        node, graph = site.node, site.graph
        old = node.outputs[0]
        name = old.name
        quantize = node.op_type == "QuantizeLinear"
        self.summary["q_folded" if quantize else "dq_folded"] += 1
        if not quantize and isinstance(folded.x, FoldedTensor):
            self.summary["chains_folded"] += 1
        inputs = [v for v in node.inputs if v is not None]
        if isinstance(graph, ir.Function):
            constant = ir.node("Constant", [], attributes={"value": folded})
            graph.insert_before(node, constant)
            new = constant.outputs[0]
        else:
            new = ir.Value(
                type=ir.TensorType(folded.dtype),
                shape=ir.Shape(folded.shape.numpy()),
                const_value=folded,
            )
        _replace_outputs(containers, old, new)
        old.replace_all_uses_with(new)
        graph.remove(node, safe=True)
        self.summary["nodes_removed"] += 1
        old.name = None
        new.name = name
        if isinstance(graph, ir.Graph):
            graph.register_initializer(new)
        for value in [new, *inputs]:
            self._drop_if_unused(value)

    def _drop_if_unused(self, value: ir.Value) -> None:
        """Remove ``value`` (Constant node or initializer) if nothing uses it any more."""
        if value.uses() or value.is_graph_output() or value.is_graph_input():
            return
        producer = value.producer()
        if producer is not None:
            unused = not any(o.uses() or o.is_graph_output() for o in producer.outputs)
            if producer.op_type == "Constant" and producer.graph is not None and unused:
                producer.graph.remove(producer, safe=True)
                self.summary["nodes_removed"] += 1
            return
        graph = value.graph
        if value.is_initializer() and graph is not None and value.name in graph.initializers:
            del graph.initializers[value.name]
            self.summary["initializers_removed"] += 1


def _overridable(node: ir.Node) -> bool:
    """True if the node would fold but for inputs that are initializers and graph inputs."""
    inputs = [v for v in node.inputs if v is not None]
    overridden = [v for v in inputs if v.is_initializer() and v.is_graph_input()]
    return bool(overridden) and all(v in overridden or is_constant(v) for v in inputs)


def _folded_tensor(site: QDQSite) -> FoldedTensor | None:
    """The lazy value of a foldable node, None if it cannot fold."""
    node = site.node
    row = opsets.lookup(site.domain, node.op_type, site.imported)
    if row is None or len(node.outputs) != 1 or len(node.inputs) < 2:
        return None
    if any(attr.is_ref() for attr in node.attributes.values()):
        return None  # an attribute of the enclosing function: unknown here
    x, scale = node.inputs[0], node.inputs[1]
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    if x is None or scale is None or not all(is_constant(v) for v in (x, scale, zero_point)):
        return None
    x_tensor, scale_tensor = constant_tensor(x), constant_tensor(scale)
    zp_tensor = constant_tensor(zero_point) if zero_point is not None else None
    if x_tensor is None or scale_tensor is None or (zero_point is not None and zp_tensor is None):
        return None
    output_dtype = _int_attr(node, row, "output_dtype")
    out_type = opsets.output_type(
        row,
        scale_type=scale_tensor.dtype,
        zero_point_type=zp_tensor.dtype if zp_tensor is not None else None,
        output_dtype=output_dtype or None,
    )
    if out_type is None:
        return None
    axis = _int_attr(node, row, "axis")
    spec = FoldSpec(
        quantize=row.is_quantize,
        axis=1 if axis is None else axis,  # com.microsoft: no default; ORT applies axis 1
        block_size=_int_attr(node, row, "block_size") or 0,
        output_dtype=out_type,
        saturate=_int_attr(node, row, "saturate", 1),
        precision=_int_attr(node, row, "precision") or 0,
    )
    operand: Operand = x_tensor if isinstance(x_tensor, StreamedTensor) else ConstOperand(x_tensor)
    return FoldedTensor(spec, operand, scale_tensor, zp_tensor, name=node.outputs[0].name)


def _int_attr(node: ir.Node, row: opsets.OpVersion, name: str, absent: Any = None) -> Any:
    """The attribute's value, else the row's default, else ``absent`` (not in this version)."""
    if name not in row.attributes:
        return absent
    attr = node.attributes.get(name)
    if attr is not None:
        return attr.as_int()
    return row.default(name)


def _replace_outputs(
    containers: list[ir.Graph | ir.Function], old: ir.Value, new: ir.Value
) -> None:
    """Point every graph or function output that is ``old`` at ``new``."""
    for graph in containers:
        outputs = graph.outputs
        for index, value in enumerate(outputs):
            if value is old:
                outputs[index] = new


def _initializer_order(model: ir.Model) -> list[StreamedTensor]:
    """Streamed initializers in the order onnx_ir's save writes them."""
    return [
        value.const_value
        for graph in model.graphs()
        for value in graph.initializers.values()
        if isinstance(value.const_value, StreamedTensor)
    ]
