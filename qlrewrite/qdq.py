"""Finding QuantizeLinear / DequantizeLinear nodes and describing them without reading data."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import onnx
import onnx_ir as ir

__all__ = [
    "MS_DOMAIN",
    "QDQ_OPS",
    "QDQSite",
    "drop_unused_domain",
    "granularity",
    "is_constant",
    "iter_graphs",
    "iter_qdq_nodes",
    "owner_label",
    "version_in_force",
]

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
MS_DOMAIN = "com.microsoft"
_ONNX_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass(frozen=True)
class QDQSite:
    """One Q/DQ node with where it sits and the opset version in force for it."""

    node: ir.Node
    graph: ir.Graph | ir.Function
    label: str  # "main", "main/<node>.<attr>" or "function:<domain>.<name>"
    domain: str  # "" for ai.onnx
    imported: int | None  # the version of the node's domain the model imports
    version: int | None  # the op's version in force (None: no such op at that opset)


@functools.cache  # one schema lookup per (op, domain, opset), not per node
def version_in_force(op_type: str, domain: str, imported: int | None) -> int | None:
    """The since_version of ``op_type`` in force at opset ``imported`` of ``domain``."""
    if imported is None:
        return None
    if domain == MS_DOMAIN:
        return 1 if imported >= 1 else None
    try:
        return onnx.defs.get_schema(op_type, imported, "").since_version
    except onnx.defs.SchemaError:
        return None


def iter_graphs(model: ir.Model) -> Iterator[tuple[str, ir.Graph | ir.Function]]:
    """The main graph, every subgraph (nested) and every model-local function, labelled."""
    yield from _walk_graph(model.graph, "main")
    for function in model.functions.values():
        label = f"function:{function.domain}.{function.name}"
        yield label, function
        for node in function:
            yield from _subgraphs(node, label)


def _walk_graph(graph: ir.Graph, label: str) -> Iterator[tuple[str, ir.Graph | ir.Function]]:
    yield label, graph
    for node in graph:
        yield from _subgraphs(node, label)


def owner_label(name: str, op_type: str, first_output: str) -> str:
    """How a node holding subgraphs appears in graph labels: its name, or for an unnamed
    node ``op_type(first output)`` (output names are unique; two unnamed If nodes are not)."""
    return name or f"{op_type}({first_output})"


def _subgraphs(node: ir.Node, label: str) -> Iterator[tuple[str, ir.Graph | ir.Function]]:
    first = (node.outputs[0].name or "") if node.outputs else ""
    owner = owner_label(node.name or "", node.op_type, first)
    for attr in node.attributes.values():
        base = f"{label}/{owner}.{attr.name}"
        if attr.type == ir.AttributeType.GRAPH:
            yield from _walk_graph(attr.value, base)
        elif attr.type == ir.AttributeType.GRAPHS:
            for index, sub in enumerate(attr.value):
                yield from _walk_graph(sub, f"{base}[{index}]")


def iter_qdq_nodes(model: ir.Model, ops: tuple[str, ...] = QDQ_OPS) -> Iterator[QDQSite]:
    """Every Q/DQ node (or node of ``ops``) of the ai.onnx and com.microsoft domains, in all
    graphs and functions."""
    for label, graph in iter_graphs(model):
        opsets = model.opset_imports if isinstance(graph, ir.Graph) else graph.opset_imports
        for node in graph:
            if node.op_type not in ops:
                continue
            domain = "" if node.domain in _ONNX_DOMAINS else node.domain
            if domain not in ("", MS_DOMAIN):
                continue
            imported = opsets.get(domain, opsets.get("ai.onnx") if domain == "" else None)
            if imported is None and domain == "" and isinstance(graph, ir.Function):
                imported = model.opset_imports.get("")
            version = version_in_force(node.op_type, domain, imported)
            yield QDQSite(node, graph, label, domain, imported, version)


def is_constant(value: ir.Value | None) -> bool:
    """True if ``value`` is an initializer that is not a graph input, or a Constant output."""
    if value is None:
        return True  # an omitted optional input
    producer = value.producer()
    if producer is not None:
        return producer.op_type == "Constant" and producer.domain in _ONNX_DOMAINS
    return value.is_initializer() and value.const_value is not None and not value.is_graph_input()


def granularity(node: ir.Node) -> str:
    """'per-tensor', 'per-axis(axis=A)', 'blocked(axis=A, block=B)' or '?' (unknown shape,
    or '? (axis is FLOAT)' when axis / block_size is not an integer attribute)."""
    attrs = node.attributes
    for name in ("axis", "block_size"):
        attr = attrs.get(name)
        if attr is not None and attr.type != ir.AttributeType.INT:
            return f"? ({name} is {attr.type.name})"
    axis = attrs["axis"].as_int() if "axis" in attrs else 1
    block = attrs["block_size"].as_int() if "block_size" in attrs else 0
    if block > 0:
        return f"blocked(axis={axis}, block={block})"
    scale = node.inputs[1] if len(node.inputs) > 1 else None
    shape = scale.shape if scale is not None else None
    if shape is None:
        return "?"
    if shape.rank() == 0 or (shape.rank() == 1 and shape[0] == 1):
        return "per-tensor"
    if shape.rank() == 1:
        return f"per-axis(axis={axis})"
    return f"rank-{shape.rank()} scale"


def drop_unused_domain(model: ir.Model, domain: str) -> bool:
    """Remove the opset import of ``domain`` wherever nothing uses it.

    Used means: a node of the graph or function importing it (nested subgraphs
    included); for the model's own imports also a node in any function, and the domain of
    a function (its call sites name it). The ai.onnx import is always kept (it fixes the
    meaning of the model's opset).
    """
    if domain in ("", "ai.onnx"):
        return False
    changed = False
    graph_likes: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for graph_like in graph_likes:
        if domain not in graph_like.opset_imports:
            continue
        scope = graph_likes if graph_like is model.graph else [graph_like]
        used = any(
            node.domain == domain
            for body in scope
            for node in ir.traversal.RecursiveGraphIterator(body)
        )
        if graph_like is model.graph:
            used = used or any(f.domain == domain for f in model.functions.values())
        if not used:
            del graph_like.opset_imports[domain]
            changed = True
    return changed


def drop_unused_domains(model: ir.Model) -> int:
    """Remove every opset import nothing uses (see :func:`drop_unused_domain`); returns
    how many imports were removed (model and functions)."""
    before = _import_count(model)
    domains = {d for g in (model.graph, *model.functions.values()) for d in g.opset_imports}
    for domain in sorted(domains):
        drop_unused_domain(model, domain)
    return before - _import_count(model)


def _import_count(model: ir.Model) -> int:
    return len(model.opset_imports) + sum(len(f.opset_imports) for f in model.functions.values())
