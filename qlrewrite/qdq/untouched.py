"""Which nodes a rewrite left as the input check saw them: the output check re-checks
only the others (:func:`qlrewrite.pipeline.validate_output`).

A node rule's verdict on a QuantizeLinear / DequantizeLinear node is a function of what
its view reads: the node itself (op, domain, attributes), the opsets in force and the IR
version, and for each input and output its name, type and shape, its constant value and
the node producing it. :func:`node_facts` records exactly that for each such node of the
main graph, from a weight-free proto of the model and the types known for it (declared,
or inferred by ONNX); a node whose facts are equal before and after the passes gets
equal findings, and it had none on input (else it is re-checked), so skipping it changes
nothing. What the comparison cannot see is never skipped: nodes inside functions or
subgraphs, nodes with a subgraph attribute, a model with functions, any input or output
whose type or shape is unknown on either side, a constant scale or zero point too large
to be inline in the weight-free proto (its data is not compared), and every node when
the opset imports or the IR version changed. The values of x are never read by a Q/DQ
rule (only its type and shape: values are read for scales, zero points and g_idx,
:mod:`qlrewrite.qdq.constants`), so a large x is compared by type and shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

import onnx
import onnx_ir as ir

from qlrewrite.qdq.view import TypeShape
from qlrewrite.toolkit import proto_import_table

__all__ = ["Checked", "NodeFacts", "node_facts", "untouched"]

#: The node kinds whose verdict is decided from the facts recorded here.
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})

Key = tuple[object, ...]


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What the rules read of each Q/DQ node of a model's main graph, by first output
    name (None: nothing can be compared), and of the model (opsets, IR version)."""

    model: Key
    nodes: Mapping[str, Key | None]


@dataclasses.dataclass(frozen=True)
class Checked:
    """The input as its check saw it: its weight-free proto as read, the types known of
    the main graph's values, and the nodes it found something on (first output names).
    Facts are drawn from it only when the output can be compared (:func:`untouched`)."""

    proto: onnx.ModelProto
    types: Mapping[str, TypeShape]
    flagged: frozenset[str]


def _model_key(proto: onnx.ModelProto) -> Key:
    """What every node's verdict depends on: the IR version and the opset imports."""
    opsets = tuple(sorted(proto_import_table(proto).items()))
    return (proto.ir_version, opsets)


def node_facts(
    proto: onnx.ModelProto, types: Mapping[str, TypeShape], *, flagged: Collection[str] = ()
) -> NodeFacts:
    """The facts of ``proto``'s main-graph Q/DQ nodes; ``types``: name -> (type, shape)
    of the main graph's values (declared or inferred); the nodes named in ``flagged``
    (first output names: the input check found something on them) get none."""
    model = (*_model_key(proto), len(proto.functions))
    graph = proto.graph
    inline = {t.name: t.SerializeToString() for t in graph.initializer}
    types = {**{t.name: _type_of(t) for t in graph.initializer}, **types}
    produced: dict[str, bytes] = {}
    for node in graph.node:
        data = node.SerializeToString()
        for name in node.output:
            produced[name] = data
    nodes: dict[str, Key | None] = {}
    for node in graph.node:
        if node.op_type not in _QDQ or not node.output or not node.output[0]:
            continue
        flag = node.output[0] in flagged
        nodes[node.output[0]] = None if flag else _key(node, produced, inline, types)
    return NodeFacts(model, nodes)


def _key(
    node: onnx.NodeProto,
    produced: Mapping[str, bytes],
    inline: Mapping[str, bytes],
    types: Mapping[str, TypeShape],
) -> Key | None:
    """``node``'s facts, or None when one of them cannot be compared."""
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return None
    facts: list[object] = [produced[node.output[0]]]
    for index, name in enumerate([*node.input, *node.output]):
        if not name:
            facts.append(None)
            continue
        dtype, shape = types.get(name, (None, None))
        if dtype is None or shape is None or None in shape:
            return None
        data = inline.get(name)
        if data is None and 0 < index < len(node.input) and name not in produced:
            return None  # a scale or zero point left out of the proto: its data unseen
        facts.append(
            (name, dtype, shape, data, produced.get(name) if index < len(node.input) else None)
        )
    return tuple(facts)


def _type_of(tensor: onnx.TensorProto) -> TypeShape:
    try:
        return ir.DataType(tensor.data_type), tuple(tensor.dims)
    except ValueError:
        return None, None


def untouched(
    checked: Checked, proto: onnx.ModelProto, types: Mapping[str, TypeShape]
) -> frozenset[str]:
    """The first output names of the output's nodes whose facts are equal to the input's
    as ``checked`` (``proto``: the output's weight-free proto, ``types``: its main graph's
    types). Nothing is compared when the opsets or the IR version changed, or the model
    has functions (the facts are not even drawn: an upgrade pays nothing)."""
    if _model_key(checked.proto) != _model_key(proto) or proto.functions:
        return frozenset()
    before = node_facts(checked.proto, checked.types, flagged=checked.flagged)
    after = node_facts(proto, types)
    if before.model != after.model:
        return frozenset()
    return frozenset(
        name
        for name, key in after.nodes.items()
        if key is not None and before.nodes.get(name) == key
    )
