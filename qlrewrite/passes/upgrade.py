"""Upgrade a model's ai.onnx opset, on models of any size.

1. ONNX's version converter (``onnx.version_converter``) converts every op, on a
   weight-free copy (:meth:`qlrewrite.passes.context.RunContext.weightless`: large initializers
   become placeholder graph inputs, so nothing above a few bytes is serialized or read).
2. The converted graph is deserialized and the original tensor objects are put back as
   initializers of the graphs they came from; the placeholder inputs are removed.
3. The IR version is raised to what the opset and the element types need, and opset
   imports nothing uses any more are dropped.

``qlrewrite upgrade`` runs more passes after this one
(:func:`qlrewrite.passes.commands.upgrade_passes`): com.microsoft Q/DQ become ai.onnx
where the new opset expresses them, and with ``--convert-weight-only`` MatMulNBits /
GatherBlockQuantized become DequantizeLinear -> MatMul / Gather.

Findings of rules that declare ``upgrade_repairs`` (an op, attribute, type or
granularity newer than the input's opset; :class:`~qlrewrite.rules.registry.RuleCheck`)
do not refuse the input: the pass repairs them by raising the opset, and the rewritten
model is checked again in full.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import onnx
import onnx.version_converter
import onnx_ir as ir

from qlrewrite.errors import InputError, Refusal
from qlrewrite.io.ir_version import raise_ir_version
from qlrewrite.io.source import set_source, source_of
from qlrewrite.passes.context import ContextPass, RunContext
from qlrewrite.passes.convert.domain import divides_in_scale_type, keep_float32_division
from qlrewrite.passes.results import RepairsFindings, RewritePassResult
from qlrewrite.qdq import (
    WEIGHT_ONLY,
    drop_unused_domains,
    imported_version,
    iter_sites,
    normalize_domain,
    onnx_opset,
    site_view,
)
from qlrewrite.toolkit import main_graphs, proto_import_table

__all__ = ["UpgradePass", "UpgradeResult", "convert_weightless"]


@dataclasses.dataclass
class UpgradeResult(RewritePassResult):
    """:class:`~qlrewrite.passes.upgrade.UpgradePass`: opsets and IR versions before and
    after, nodes converted to ai.onnx and com.microsoft nodes left."""


#: Initializers above this many bytes never enter the proto handed to the converter.
_MAX_INLINE_BYTES = 1024


@dataclasses.dataclass(frozen=True)
class _Weight:
    """A large initializer left out of the converter's proto."""

    graph_index: int  # position in main_graphs(model)
    name: str
    tensor: ir.TensorProtocol
    is_input: bool  # also a main-graph input (an overridable initializer)


class UpgradePass(ContextPass, ir.passes.FunctionalPass, RepairsFindings):
    """Convert the model to ai.onnx opset ``opset`` (>= the current one); a new model.

    Raises InputError for a downgrade or an unknown opset, Refusal when ONNX's
    converter cannot convert the model. The
    :class:`~qlrewrite.passes.upgrade.UpgradeResult` says what changed. ``fixing``: the
    rule codes ``check --fix`` upgrades for (each gets a line in the result's
    ``changes``).
    """

    needs = frozenset({"weightless"})  # ONNX's converter runs on it
    keeps_types = False  # a new model

    def __init__(self, opset: int, *, fixing: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.opset = int(opset)
        self.fixing = fixing

    @property
    def repairs_rules(self) -> tuple[str, ...]:
        """The rules that declare an upgrade repairs their findings (read from the
        registry: :attr:`~qlrewrite.rules.registry.RuleCheck.upgrade_repairs`)."""
        from qlrewrite.rules import CHECKS  # every rule module: only when checking

        return tuple(code for code, unit in CHECKS.items() if unit.upgrade_repairs)

    def requires(self, model: ir.Model) -> None:
        current = onnx_opset(model)
        if current is None:
            raise InputError("the model imports no ai.onnx opset; nothing to upgrade")
        if self.opset < current:
            raise InputError(
                f"opset {self.opset} is below the model's ai.onnx opset {current}: "
                "to lower it, use `qlrewrite downgrade` (to move Q/DQ nodes between domains "
                "at the current opset, use `qlrewrite convert`)",
                parameter="opset",
            )
        latest = onnx.defs.onnx_opset_version()
        if self.opset > latest:
            raise InputError(
                f"opset {self.opset} is above {latest}, the newest opset this onnx "
                f"({onnx.__version__}) knows",
                parameter="opset",
            )

    def call(self, model: ir.Model) -> UpgradeResult:
        before = onnx_opset(model) or 0
        new = convert_weightless(model, self.opset, self.context(model))
        pinned = 0
        if divides_in_scale_type(self.opset) and not divides_in_scale_type(before):
            for site in iter_sites(new):
                view = site_view(new, site) if site.domain == "" else None
                if view is not None and view.scale is not None:
                    precision = view.int_attr("precision")
                    pinned += keep_float32_division(site.node, view.scale.dtype, precision)
        dropped = drop_unused_domains(new)
        raise_ir_version(new)
        summary = {
            "opset_before": before,
            "opset_after": self.opset,
            "precision_set": pinned,
            "weight_only_nodes": sum(1 for _ in iter_sites(new, WEIGHT_ONLY)),
            "opset_imports_dropped": int(dropped),
            "ir_version_before": model.ir_version,
            "ir_version_after": new.ir_version,
        }
        result = UpgradeResult(new, True, summary)
        what = f"ai.onnx opset upgraded to {self.opset}"
        result.changes.extend((code, "model", what) for code in self.fixing)
        return result


def _large_weights(model: ir.Model) -> list[_Weight]:
    main_inputs = {v.name for v in model.graph.inputs}
    weights = []
    for index, graph in enumerate(main_graphs(model)):
        for name, value in graph.initializers.items():
            tensor = value.const_value
            if tensor is None or tensor.nbytes <= _MAX_INLINE_BYTES:
                continue
            is_input = index == 0 and name in main_inputs
            weights.append(_Weight(index, name, tensor, is_input))
    counts = collections.Counter(w.name for w in weights)
    clashes = sorted(n for n, count in counts.items() if count > 1)
    clashes += sorted(
        w.name for w in weights if w.graph_index > 0 and w.name in main_inputs
    )  # a subgraph initializer shadowing a main input
    if clashes:
        raise Refusal(
            f"initializer name(s) {', '.join(clashes[:5])} are used in several graphs; "
            "rename them before upgrading (nothing written)"
        )
    return weights


def convert_weightless(
    model: ir.Model,
    opset: int,
    context: RunContext,
    *,
    prepare: Callable[[onnx.ModelProto], object] | None = None,
    lower: bool = False,
) -> ir.Model:
    """ONNX's version converter on a weight-free copy, with the original weights put back.

    The weight-free proto comes from the run's ``context`` (a copy of the one made when
    the model was read, when no pass ran before). ``prepare`` may change it first (the
    downgrade holds nodes aside);
    ``lower``: functions importing a newer opset are converted down too."""
    weights = _large_weights(model)
    proto = context.weightless(max_inline_bytes=_MAX_INLINE_BYTES)
    if prepare is not None:
        prepare(proto)
    # The converter fails (IndexError) on any model with local functions: convert the
    # main graph without them, then each function on its own.
    functions = list(proto.functions)
    del proto.functions[:]
    converted = _run_converter(proto, opset, "this model")
    converted.functions.extend(
        _convert_function(f, opset, proto.ir_version, lower=lower) for f in functions
    )
    new = ir.serde.deserialize_model(converted)
    graphs = main_graphs(new)
    if len(graphs) != len(main_graphs(model)):
        raise Refusal("ONNX's version converter changed the number of subgraphs; nothing written")
    inputs = {v.name: v for v in new.graph.inputs}
    for weight in weights:
        value = inputs.get(weight.name)
        if value is None:
            raise Refusal(
                f"ONNX's version converter dropped the weight '{weight.name}'; nothing written"
            )
        if not weight.is_input:
            new.graph.inputs.remove(value)
        value.const_value = weight.tensor
        graphs[weight.graph_index].register_initializer(value)
    for old_graph, new_graph in zip(main_graphs(model), graphs, strict=True):
        _reorder_initializers(new_graph, list(old_graph.initializers))
    original_inputs = [v.name for v in model.graph.inputs]
    if [v.name for v in new.graph.inputs] != original_inputs:
        raise Refusal("ONNX's version converter changed the graph inputs; nothing written")
    set_source(new, source_of(model))
    return new


def _reorder_initializers(graph: ir.Graph, order: list[str]) -> None:
    """Put ``graph``'s initializers in the original ``order`` (new ones last)."""
    current = list(graph.initializers)
    wanted = [n for n in order if n in graph.initializers]
    known = set(order)
    wanted += [n for n in current if n not in known]
    if wanted == current:
        return
    values = [graph.initializers.pop(name) for name in current]
    by_name = {v.name: v for v in values}
    for name in wanted:
        graph.register_initializer(by_name[name])


def _run_converter(proto: onnx.ModelProto, opset: int, what: str) -> onnx.ModelProto:
    try:
        return onnx.version_converter.convert_version(proto, opset)
    except Exception as exc:  # the converter raises RuntimeError, IndexError, ...
        lines = str(exc).strip().splitlines()
        # "/project/onnx/...: adapter_lookup: Assertion `false` failed: No Adapter From ..."
        first = lines[0].split(" failed: ", 1)[-1] if lines else type(exc).__name__
        raise Refusal(
            f"ONNX's version converter cannot convert {what} to opset {opset} ({first}); "
            "nothing written"
        ) from exc


def _convert_function(
    function: onnx.FunctionProto, opset: int, ir_version: int, *, lower: bool = False
) -> onnx.FunctionProto:
    """``function`` with its ai.onnx nodes converted to ``opset`` (as a one-graph model;
    ``lower``: also down to it)."""
    current = imported_version(proto_import_table(function), "")
    if current is None or current == opset or (current > opset and not lower):
        return function
    label = f"function {function.domain}.{function.name}"
    _refuse_attribute_references(function, current, opset, label)
    graph = onnx.helper.make_graph(
        list(function.node),
        function.name,
        [onnx.ValueInfoProto(name=name) for name in function.input],
        [onnx.ValueInfoProto(name=name) for name in function.output],
    )
    wrapper = onnx.helper.make_model(
        graph, opset_imports=list(function.opset_import), ir_version=ir_version
    )
    converted = _run_converter(wrapper, opset, label)
    result = onnx.FunctionProto()
    result.CopyFrom(function)
    del result.node[:]
    result.node.extend(converted.graph.node)
    del result.opset_import[:]
    result.opset_import.extend(converted.opset_import)
    return result


def _refuse_attribute_references(
    function: onnx.FunctionProto, current: int, opset: int, label: str
) -> None:
    """The converter silently writes wrong values for attribute references (``axes`` of a
    ReduceMean referring to a function attribute becomes an empty tensor): refuse them on
    any op whose version changes between the two opsets."""
    for node in function.node:
        if normalize_domain(node.domain) != "":
            continue
        if not any(attr.ref_attr_name for attr in node.attribute):
            continue
        try:
            before = onnx.defs.get_schema(node.op_type, current, "").since_version
            after = onnx.defs.get_schema(node.op_type, opset, "").since_version
        except onnx.defs.SchemaError:
            continue  # unknown op: the checker reports it
        if before != after:
            raise Refusal(
                f"{label}: {node.op_type} '{node.name}' takes an attribute from the function "
                f"and changes between opsets {current} and {opset}; ONNX's version converter "
                "would write a wrong value for it; nothing written"
            )
