"""The toolkit every rule and pass uses to walk and edit a model (nothing walks graphs,
reads opset import tables or invents names by hand):

- graphs: :func:`iter_graphs` is the one iterator over every graph of an onnx_ir model
  (main graph, subgraphs at any depth, model-local functions and the subgraphs inside
  them), each as a :class:`GraphScope` (graph, :class:`GraphRef` naming where it sits,
  the opset imports in force); :func:`all_graphs` lists the graphs alone;
  :func:`proto_graphs` / :func:`graphs_within` walk a ``ModelProto`` the same way;
- opset imports: :func:`imported_version` is the one reader of an import table (ai.onnx
  may be spelled ``""`` or ``"ai.onnx"``), :func:`ensure_import` the one writer,
  :func:`drop_unused_domain(s)` the one remover, :func:`implied_imports` what ONNX Runtime
  adds to a model that leaves an import out;
- names: :class:`FreshNames`, one source of unused names per model and pass;
- constants: :func:`add_constant`, a new tensor as an initializer, or in a function
  (which has none) as a Constant node before its first reader; a tensor's shape
  (:func:`tensor_shape`) and its size from its type and dims (:func:`nbytes`);
- files: :func:`model_folder`, the folder a model file's external data is relative to.

It sits at the bottom of the package (it reads only :mod:`qlrewrite.opsets`), below
:mod:`qlrewrite.io.tensors`, :mod:`qlrewrite.qdq` and everything that edits a model.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Union

import onnx
import onnx_ir as ir

from qlrewrite.opsets import IMPLIED_VERSIONS, MS_DOMAIN, ONNX_DOMAINS, normalize_domain

__all__ = [
    "MAIN",
    "MS_DOMAIN",
    "ONNX_DOMAINS",
    "FreshNames",
    "GraphRef",
    "GraphScope",
    "ProtoGraph",
    "add_constant",
    "all_graphs",
    "drop_unused_domain",
    "drop_unused_domains",
    "ensure_import",
    "ensure_import_at",
    "function_kinds",
    "functions_of",
    "graphs_within",
    "implied_imports",
    "import_table",
    "imported_version",
    "iter_graphs",
    "main_graphs",
    "model_folder",
    "nbytes",
    "nodes_post_order",
    "normalize_domain",
    "onnx_opset",
    "owner_label",
    "proto_graphs",
    "proto_import_table",
    "replace_value",
    "root_graphs",
    "subgraphs_of",
    "tensor_shape",
    "uses_domain",
]

ProtoGraph = Union[onnx.GraphProto, onnx.FunctionProto]  # noqa: UP007 (a runtime alias)


def imported_version(imports: Mapping[str, int], domain: str) -> int | None:
    """The version of ``domain`` in an opset import table (None: not imported).

    The ONNX domain is found under ``""`` or ``"ai.onnx"`` (``""`` first).
    """
    if normalize_domain(domain) == "":
        found = imports.get("")
        return found if found is not None else imports.get("ai.onnx")
    return imports.get(domain)


def import_table(owner: ir.Model | ir.Function) -> dict[str, int]:
    """A copy of the opset imports of a model or function, as written ({domain:
    version}; ai.onnx as ``""`` or ``"ai.onnx"``): for reports; to look a domain up use
    :func:`imported_version`."""
    return dict(owner.opset_imports)


def proto_import_table(owner: onnx.ModelProto | onnx.FunctionProto) -> dict[str, int]:
    """The opset imports of a ModelProto or FunctionProto as written ({domain: version};
    ai.onnx as ``""`` or ``"ai.onnx"``): to look a domain up use :func:`imported_version`."""
    return {o.domain: o.version for o in owner.opset_import}


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
    """Every graph of the model with where it sits and the opsets in force: the main graph
    and its subgraphs, then each model-local function and the subgraphs inside it (at any
    depth; parents before their subgraphs, in node order)."""
    yield from _walk(model.graph, MAIN, _resolved(model, model.graph))
    for function in model.functions.values():
        ref = GraphRef.of_function(function.domain, function.name)
        yield from _walk(function, ref, _resolved(model, function))


def root_graphs(model: ir.Model) -> list[tuple[GraphRef, ir.Graph | ir.Function]]:
    """The main graph and each model-local function with their references, without
    walking into subgraphs (cheap: no node is visited)."""
    roots: list[tuple[GraphRef, ir.Graph | ir.Function]] = [(MAIN, model.graph)]
    for function in model.functions.values():
        roots.append((GraphRef.of_function(function.domain, function.name), function))
    return roots


def all_graphs(model: ir.Model) -> list[ir.Graph | ir.Function]:
    """The graphs and functions :func:`iter_graphs` yields, alone."""
    return [scope.graph for scope in iter_graphs(model)]


def subgraphs_of(node: ir.Node) -> list[ir.Graph]:
    """The graphs held by ``node``'s GRAPH and GRAPHS attributes, in attribute order."""
    graphs: list[ir.Graph] = []
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH and not attr.is_ref():
            graphs.append(attr.value)
        elif attr.type == ir.AttributeType.GRAPHS and not attr.is_ref():
            graphs.extend(attr.value)
    return graphs


def nodes_post_order(root: ir.Graph | ir.Function) -> list[ir.Node]:
    """Every node of ``root`` and its subgraphs, each subgraph's nodes just before the
    node holding them (no recursion: nesting depth is the file's to choose)."""
    order: list[ir.Node] = []
    for top in root:
        if not top.attributes or not subgraphs_of(top):
            order.append(top)  # the common case, kept cheap
            continue
        stack: list[tuple[ir.Node, bool]] = [(top, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            stack.append((node, True))
            inner = [sub_node for graph in subgraphs_of(node) for sub_node in graph]
            stack.extend((sub_node, False) for sub_node in reversed(inner))
    return order


def main_graphs(model: ir.Model) -> list[ir.Graph]:
    """The main graph and its subgraphs (at any depth), in :func:`iter_graphs` order:
    the graphs whose initializers onnx_ir's save and ONNX's tools treat as the model's
    (``ir.Model.graphs()``); functions and their subgraphs left out."""
    return [
        scope.graph
        for scope in iter_graphs(model)
        if not scope.ref.in_function and isinstance(scope.graph, ir.Graph)
    ]


def _walk(
    root: ir.Graph | ir.Function, ref: GraphRef, imports: Mapping[str, int]
) -> Iterator[GraphScope]:
    stack: list[GraphScope] = [GraphScope(ref, root, imports)]
    while stack:
        scope = stack.pop()
        yield scope
        found = [sub for node in scope.graph for sub in _subgraphs(node, scope.ref, imports)]
        stack.extend(reversed(found))


_GRAPH_TYPES = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)


def _subgraphs(node: ir.Node, ref: GraphRef, imports: Mapping[str, int]) -> Iterator[GraphScope]:
    if not node.attributes:
        return
    owner = ""
    for attr in node.attributes.values():
        if attr.is_ref() or attr.type not in _GRAPH_TYPES:
            continue
        if not owner:  # named only for a node that has subgraphs
            first = (node.outputs[0].name or "") if node.outputs else ""
            owner = owner_label(node.name or "", node.op_type, first)
        if attr.type == ir.AttributeType.GRAPH:
            yield GraphScope(ref.subgraph(owner, attr.name), attr.value, imports)
        elif attr.type == ir.AttributeType.GRAPHS:
            for index, sub in enumerate(attr.value):
                yield GraphScope(ref.subgraph(owner, attr.name, index), sub, imports)


def proto_graphs(proto: onnx.ModelProto) -> Iterator[tuple[GraphRef, ProtoGraph]]:
    """Every graph of ``proto`` with its :class:`GraphRef` (as :func:`iter_graphs` makes
    them for the ir model): the main graph, each function and every subgraph nested in
    either."""
    yield from graphs_within(proto.graph, MAIN)
    for function in proto.functions:
        yield from graphs_within(function, GraphRef.of_function(function.domain, function.name))


def graphs_within(root: ProtoGraph, ref: GraphRef) -> Iterator[tuple[GraphRef, ProtoGraph]]:
    """``root`` (at ``ref``) and every subgraph nested in it, referenced as
    :func:`proto_graphs` does; parents before their subgraphs."""
    stack: list[tuple[GraphRef, ProtoGraph]] = [(ref, root)]
    while stack:
        ref, graph = stack.pop()
        yield ref, graph
        found = [sub for node in graph.node for sub in _proto_subgraphs(node, ref)]
        stack.extend(reversed(found))


def _proto_subgraphs(node: onnx.NodeProto, ref: GraphRef) -> Iterator[tuple[GraphRef, ProtoGraph]]:
    owner = ""
    for attr in node.attribute:
        has_graph = attr.HasField("g")
        if not has_graph and not attr.graphs:  # whatever its type says (hostile files)
            continue
        if not owner:  # named only for a node that has subgraphs
            owner = owner_label(node.name, node.op_type, node.output[0] if node.output else "")
        if has_graph:
            yield ref.subgraph(owner, attr.name), attr.g
        for index, sub in enumerate(attr.graphs):
            yield ref.subgraph(owner, attr.name, index), sub


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


def function_kinds(model: ir.Model) -> tuple[bool, bool]:
    """(has model-local functions, has a function with an overload)."""
    functions = model.functions.values()
    return bool(functions), any(f.overload for f in functions)


def uses_domain(model: ir.Model, domain: str) -> bool:
    """Whether a node of any graph or function (subgraphs included), or a model-local
    function itself, is of ``domain``."""
    if any(f.domain == domain for f in model.functions.values()):
        return True
    return any(node.domain == domain for graph in all_graphs(model) for node in graph)


def drop_unused_domains(model: ir.Model) -> int:
    """Remove every opset import nothing uses (see :func:`drop_unused_domain`); returns
    how many imports were removed (model and functions)."""
    before = _import_count(model)
    owners: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    domains = {d for g in owners for d in g.opset_imports}
    for domain in sorted(domains):
        drop_unused_domain(model, domain)
    return before - _import_count(model)


def _import_count(model: ir.Model) -> int:
    return len(model.opset_imports) + sum(len(f.opset_imports) for f in model.functions.values())


def functions_of(model: ir.Model, ref: GraphRef) -> list[ir.Function]:
    """The model-local functions ``ref`` may sit in: every overload of its function (a
    reference names the function, not the overload); empty for the main graph and its
    subgraphs."""
    root = ref.root.function
    if root is None:
        return []
    return [f for f in model.functions.values() if (f.domain, f.name) == root]


def ensure_import(owner: ir.Model | ir.Function, domain: str, version: int) -> bool:
    """Import ``domain`` at ``version`` in the model or function unless it already
    imports the domain (at any version: an existing import is never changed). Returns
    True if the import was added."""
    if imported_version(owner.opset_imports, domain) is not None:
        return False
    owner.opset_imports[domain] = version
    return True


def ensure_import_at(model: ir.Model, ref: GraphRef, domain: str, version: int) -> bool:
    """Make ``domain`` resolvable for a node of the graph at ``ref``: import it in the
    model and, for a graph inside a function, in that function too (a function resolves
    its nodes through its own imports). Returns True if an import was added."""
    added = ensure_import(model, domain, version)
    for function in functions_of(model, ref):
        added = ensure_import(function, domain, version) or added
    return added


class FreshNames:
    """Value names (graph inputs, initializers, node outputs) the model does not use: one
    source per model and pass (``nodes``: node names too, for a pass that names its new
    nodes from the same source). Built with one walk over every graph (functions and
    nested subgraphs included, so a new name never shadows a value of an enclosing
    graph); each :meth:`fresh` is O(1) on average."""

    def __init__(
        self, model: ir.Model | Iterable[ir.Graph | ir.Function], *, nodes: bool = False
    ) -> None:
        graphs = all_graphs(model) if isinstance(model, ir.Model) else list(model)
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}
        for graph in graphs:
            self._taken.update(v.name for v in graph.inputs if v.name)
            if isinstance(graph, ir.Graph):
                self._taken.update(graph.initializers)
            for node in graph:
                self._taken.update(v.name for v in node.outputs if v.name)
                if nodes and node.name:
                    self._taken.add(node.name)

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def fresh(self, base: str) -> str:
        """``base`` if unused, else ``base_N`` for the first unused N; the name is taken
        from then on."""
        name, index = base, self._next.get(base, 1)
        while name in self._taken:
            name, index = f"{base}_{index}", index + 1
        if name != base:
            self._next[base] = index
        self._taken.add(name)
        return name

    def take(self, name: str) -> None:
        """Mark ``name`` as used (a name chosen elsewhere, e.g. kept from the input)."""
        self._taken.add(name)


def replace_value(old: ir.Value, new: ir.Value) -> None:
    """Give ``new`` the place of ``old``: its uses, its graph output slots, its name and
    its declared type and shape (``old`` is left nameless and unused)."""
    name, dtype, shape = old.name, old.dtype, old.shape
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    old.name = None
    new.name = name
    if dtype is not None:
        new.dtype = dtype
    if shape is not None:
        new.shape = shape


def add_constant(
    graph: ir.Graph | ir.Function,
    tensor: ir.TensorProtocol,
    name: str,
    *,
    before: ir.Node | None = None,
    node_name: str | None = None,
) -> ir.Value:
    """``tensor`` as the value ``name``: an initializer of ``graph``, or, ``graph`` being a
    function (a site's graph: a node's own ``graph`` is the function's inner ir.Graph),
    the output of a Constant node (named ``node_name``) inserted before ``before`` (its
    first reader: a function's nodes are in order; None: the function's first node)."""
    tensor.name = name
    if isinstance(graph, ir.Function):
        node = ir.node("Constant", [], attributes={"value": tensor}, name=node_name)
        node.outputs[0].name = name
        anchor = before if before is not None else next(iter(graph), None)
        if anchor is None:
            graph.append(node)
        else:
            graph.insert_before(anchor, node)
        return node.outputs[0]
    value = ir.Value(
        name=name, type=ir.TensorType(tensor.dtype), shape=tensor_shape(tensor), const_value=tensor
    )
    graph.register_initializer(value)
    return value


def nbytes(dtype: ir.DataType | int, dims: Sequence[int]) -> int | None:
    """Bytes of a tensor of ``dtype`` and ``dims`` (sub-byte types packed, as ONNX stores
    them); None for strings, UNDEFINED, unknown types and negative dims."""
    try:
        dtype = ir.DataType(dtype)
    except ValueError:
        return None
    if dtype in (ir.DataType.STRING, ir.DataType.UNDEFINED) or any(d < 0 for d in dims):
        return None
    return (math.prod(dims) * dtype.bitwidth + 7) // 8


def tensor_shape(tensor: ir.TensorProtocol) -> ir.Shape:
    """``tensor``'s shape as an :class:`ir.Shape` (a tensor's dims are all known; the
    protocol types them as ``ShapeProtocol``): the shape itself, else a copy."""
    shape = tensor.shape
    return shape if isinstance(shape, ir.Shape) else ir.Shape(shape.numpy())


def model_folder(path: str | os.PathLike[str]) -> Path:
    """The folder a model file's external data locations are relative to: the file's
    folder as named, not through a link to the file (as ONNX Runtime resolves them; a
    Hugging Face cache links model files away)."""
    return Path(path).absolute().parent
