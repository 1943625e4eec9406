"""Where quantized nodes sit: the main graph, nested subgraphs and model-local functions.

A :class:`GraphRef` names one of them (typed and hashable; ``str()`` gives the label that
findings show, e.g. ``main/loop.body`` or ``function:custom.f``). A :class:`GraphScope` is
a graph with its reference and its opset imports, resolved once. :func:`imported_version`
is the one place an opset import table is read (ai.onnx may be spelled ``""`` or
``"ai.onnx"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import onnx_ir as ir

from qlrewrite.opsets import IMPLIED_VERSIONS, MS_DOMAIN, ONNX_DOMAINS, normalize_domain

__all__ = [
    "MAIN",
    "MS_DOMAIN",
    "ONNX_DOMAINS",
    "GraphRef",
    "GraphScope",
    "drop_unused_domain",
    "drop_unused_domains",
    "implied_imports",
    "imported_version",
    "iter_graphs",
    "normalize_domain",
    "onnx_opset",
    "owner_label",
]


def imported_version(imports: Mapping[str, int], domain: str) -> int | None:
    """The version of ``domain`` in an opset import table (None: not imported).

    The ONNX domain is found under ``""`` or ``"ai.onnx"`` (``""`` first).
    """
    if normalize_domain(domain) == "":
        found = imports.get("")
        return found if found is not None else imports.get("ai.onnx")
    return imports.get(domain)


def onnx_opset(model: ir.Model) -> int | None:
    """The ai.onnx opset the model imports (None: none)."""
    return imported_version(model.opset_imports, "")


def owner_label(name: str, op_type: str, first_output: str) -> str:
    """How a node holding subgraphs appears in graph labels: its name, or for an unnamed
    node ``op_type(first output)`` (output names are unique; two unnamed If nodes are not)."""
    return name or f"{op_type}({first_output})"


@dataclasses.dataclass(frozen=True)
class GraphRef:
    """Where one graph sits in a model: the main graph, a model-local function, or a
    subgraph held by an attribute of a node of its ``parent``."""

    parent: GraphRef | None = None
    owner: str = ""  # subgraph: the holding node (see owner_label)
    attribute: str = ""  # subgraph: the attribute holding it
    index: int | None = None  # subgraph in a GRAPHS attribute: its position
    function: tuple[str, str] | None = None  # a function (root): (domain, name)

    @classmethod
    def of_function(cls, domain: str, name: str) -> GraphRef:
        """The reference of model-local function ``domain.name``."""
        return cls(function=(domain, name))

    def subgraph(self, owner: str, attribute: str, index: int | None = None) -> GraphRef:
        """The subgraph of this graph held by ``owner``'s ``attribute`` (at ``index``)."""
        return GraphRef(self, owner, attribute, index)

    @property
    def root(self) -> GraphRef:
        """The main graph or the function this graph is nested in (itself at the root)."""
        ref = self
        while ref.parent is not None:
            ref = ref.parent
        return ref

    @property
    def depth(self) -> int:
        """How many subgraph levels below the main graph or its function (0 at the root)."""
        depth, ref = 0, self
        while ref.parent is not None:
            depth, ref = depth + 1, ref.parent
        return depth

    @property
    def in_function(self) -> bool:
        """True for a function and the subgraphs nested in one."""
        return self.root.function is not None

    def __str__(self) -> str:
        if self.parent is not None:
            suffix = f"[{self.index}]" if self.index is not None else ""
            return f"{self.parent}/{self.owner}.{self.attribute}{suffix}"
        if self.function is not None:
            return f"function:{self.function[0]}.{self.function[1]}"
        return "main"


#: The main graph.
MAIN = GraphRef()


@dataclasses.dataclass(frozen=True)
class GraphScope:
    """One graph or function of a model, with its reference and the opset versions in
    force for its nodes (a function's own imports; for ai.onnx, the model's if it has
    none)."""

    ref: GraphRef
    graph: ir.Graph | ir.Function
    imports: Mapping[str, int]  # normalized domain -> version

    def opset(self, domain: str) -> int | None:
        """The version of ``domain`` in force for this graph's nodes (None: not imported)."""
        return self.imports.get(normalize_domain(domain))


def _resolved(model: ir.Model, graph_like: ir.Graph | ir.Function) -> dict[str, int]:
    own = graph_like.opset_imports if isinstance(graph_like, ir.Function) else model.opset_imports
    imports = {normalize_domain(d): v for d, v in own.items() if d != "ai.onnx"}
    onnx = imported_version(own, "")
    if onnx is None and isinstance(graph_like, ir.Function):
        onnx = onnx_opset(model)
    if onnx is not None:
        imports[""] = onnx
    return imports


def iter_graphs(model: ir.Model) -> Iterator[GraphScope]:
    """The main graph, every subgraph (nested) and every model-local function."""
    main_imports = _resolved(model, model.graph)
    yield from _walk(model.graph, MAIN, main_imports)
    for function in model.functions.values():
        ref = GraphRef.of_function(function.domain, function.name)
        imports = _resolved(model, function)
        yield GraphScope(ref, function, imports)
        for node in function:
            yield from _subgraphs(node, ref, imports)


def _walk(graph: ir.Graph, ref: GraphRef, imports: Mapping[str, int]) -> Iterator[GraphScope]:
    yield GraphScope(ref, graph, imports)
    for node in graph:
        yield from _subgraphs(node, ref, imports)


def _subgraphs(node: ir.Node, ref: GraphRef, imports: Mapping[str, int]) -> Iterator[GraphScope]:
    first = (node.outputs[0].name or "") if node.outputs else ""
    owner = owner_label(node.name or "", node.op_type, first)
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            yield from _walk(attr.value, ref.subgraph(owner, attr.name), imports)
        elif attr.type == ir.AttributeType.GRAPHS:
            for index, sub in enumerate(attr.value):
                yield from _walk(sub, ref.subgraph(owner, attr.name, index), imports)


def implied_imports(model: ir.Model) -> dict[str, int]:
    """The imports ONNX Runtime adds when it loads the model: domains that nodes of the main
    graph (or its subgraphs) use, that the model does not import, and whose version it
    implies (:data:`qlrewrite.opsets.IMPLIED_VERSIONS`: com.microsoft 1)."""
    missing: dict[str, int] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        domain = node.domain
        if domain in IMPLIED_VERSIONS and domain not in model.opset_imports:
            missing[domain] = IMPLIED_VERSIONS[domain]
    return missing


def drop_unused_domain(model: ir.Model, domain: str) -> bool:
    """Remove the opset import of ``domain`` wherever nothing uses it.

    Used means: a node of the graph or function importing it (nested subgraphs
    included); for the model's own imports also a node in any function, and the domain of
    a function (its call sites name it). The ai.onnx import is always kept (it fixes the
    meaning of the model's opset).
    """
    if normalize_domain(domain) == "":
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
