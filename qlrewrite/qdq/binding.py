"""Building node views: every quantized node with what it means at each place it runs.

A node in the main graph or a subgraph has one view. A node inside a model-local function
has one view per call site anywhere in the model: the function's inputs are replaced by
the call's actual values (with their inferred types) and its attribute references by the
call's attributes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import onnx
import onnx_ir as ir

from qlrewrite.qdq.inference import Inference
from qlrewrite.qdq.kinds import QDQ, iter_sites, view_class
from qlrewrite.qdq.sites import QuantizedSite, SiteKind
from qlrewrite.qdq.view import NodeView, ValueView, view_of
from qlrewrite.toolkit import GraphRef, iter_graphs

__all__ = ["node_views", "site_view"]


@dataclasses.dataclass
class _Binding:
    """One call site of a function: actual values and attributes for the formal ones."""

    values: dict[int, ir.Value | None]  # id(formal input) -> actual value
    attributes: Mapping[str, ir.Attr]
    where: str  # "'<call node>' in <graph label>"
    graph: GraphRef  # the graph of the call node


def _call_sites(model: ir.Model) -> dict[tuple[str, str], list[_Binding | None]]:
    """Per function (domain, name), one binding per call site anywhere in the model."""
    if not model.functions:
        return {}
    sites: dict[tuple[str, str], list[_Binding | None]] = {}
    for scope in iter_graphs(model):
        for node in scope.graph:
            function = model.functions.get((node.domain, node.op_type, node.overload))
            if function is None:
                continue
            values = {
                id(formal): (node.inputs[i] if i < len(node.inputs) else None)
                for i, formal in enumerate(function.inputs)
            }
            attrs = {**function.attributes, **node.attributes}
            where = f"'{node.name or node.op_type}' in {scope.ref}"
            key = (function.domain, function.name)
            sites.setdefault(key, []).append(_Binding(values, attrs, where, scope.ref))
    return sites


def _resolve_attributes(node: ir.Node, binding: _Binding | None) -> dict[str, ir.Attr]:
    attrs: dict[str, ir.Attr] = {}
    for name, attr in node.attributes.items():
        if attr.is_ref():
            ref = attr.ref_attr_name
            actual = binding.attributes.get(ref) if binding and ref is not None else None
            if isinstance(actual, ir.Attr) and actual.value is not None:
                attrs[name] = ir.Attr(name, actual.type, actual.value)
            continue
        attrs[name] = attr
    return attrs


class _Builder:
    """Makes the views of one model, sharing one inference and the site of every node."""

    def __init__(self, model: ir.Model, inference: Inference | None, read: bool = True) -> None:
        self.model = model
        self.inference = inference
        self.read = read
        self.sites: dict[int, QuantizedSite] = {}
        # (value, binding, read) -> its view: a value several nodes share (a scale, the
        # output of one node read by the next) is looked at once; the value is kept
        # alive with its view, so its id is not reused while the builder lives.
        self._views: dict[tuple[int, int, bool], tuple[ir.Value, ValueView | None]] = {}
        self._parents: dict[tuple[int, int], NodeView] = {}  # (node, binding) -> its view

    def view(self, site: QuantizedSite, binding: _Binding | None) -> NodeView:
        inference = self.inference
        local = inference.scope(site.ref) if inference is not None else {}
        outer = inference.scope(binding.graph) if inference and binding else {}
        views = self._views

        def lookup(value: ir.Value | None, read: bool) -> ValueView | None:
            if value is None:
                return None
            key = (id(value), id(binding), read)
            if key not in views:
                if binding is not None and id(value) in binding.values:
                    found = view_of(binding.values[id(value)], outer, read=read)
                else:
                    found = view_of(value, local, read=read)
                if value.producer() is None and len(value.uses()) <= 1:
                    return found  # a constant of one node: not kept (its values can be MBs)
                views[key] = (value, found)
            return views[key][1]

        def producer(node: ir.Node) -> NodeView | None:
            parent = self.sites.get(id(node))
            if parent is None:
                return None
            key = (id(node), id(binding))  # one view per producer: a chain is read once,
            if key not in self._parents:  # and a cycle (invalid) ends at a view in progress
                self._parents[key] = self.view(parent, binding)
            return self._parents[key]

        return view_class(site)(
            site,
            lookup=lookup,
            attributes=_resolve_attributes(site.node, binding),
            ir_version=self.model.ir_version,
            call_site=binding.where if binding is not None else "",
            producer=producer,
            read_constants=self.read,
        )


def node_views(
    model: ir.Model,
    *,
    weightless: onnx.ModelProto | None = None,
    inference: Inference | None = None,
    kinds: tuple[SiteKind, ...] = (QDQ,),
    read: bool = True,
    calls: bool = True,
) -> Iterator[tuple[QuantizedSite, list[NodeView]]]:
    """Every node of ``kinds`` with its views: one per call site for a node inside a
    function, else one. Shape inference runs once, on first need: ``inference`` when
    given (a run's, :class:`~qlrewrite.passes.context.RunContext`), else a new one, on
    ``weightless`` when given. ``read``: the views read the values of
    small constant scales and zero points (the rules need them). ``calls=False``: a node
    inside a function gets one view, from the function's own declarations."""
    if inference is None:
        inference = Inference(model, weightless)
    builder = _Builder(model, inference, read)
    sites = list(iter_sites(model, kinds))
    builder.sites = {id(site.node): site for site in sites}
    call_sites = _call_sites(model) if calls else {}
    for site in sites:
        function = site.ref.root.function
        bindings = call_sites.get(function, [None]) if function is not None else [None]
        yield site, [builder.view(site, binding) for binding in bindings]


def site_view(model: ir.Model, site: QuantizedSite) -> NodeView:
    """The view of ``site`` from constants and declared types only: no inference, no call
    site (attribute references stay unresolved), no constant values read."""
    return _Builder(model, None, read=False).view(site, None)
