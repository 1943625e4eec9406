"""The check pass: every rule of :mod:`qlrewrite.rules` on every Q/DQ node; changes nothing.

Nodes are found in the main graph, every nested subgraph and every model-local function.
A function's nodes are checked once per call site, with the function's inputs and
attribute references replaced by the call site's values. Types and shapes come from the
model, then from ONNX shape inference on a weight-free copy; values are read only for
small constant scales and zero points.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence

import onnx
import onnx_ir as ir

from qlrewrite import model_io, opsets
from qlrewrite.custom_quant import custom_quant_groups
from qlrewrite.errors import InputError
from qlrewrite.findings import Report
from qlrewrite.qdq import QDQSite, iter_graphs, iter_qdq_nodes, owner_label
from qlrewrite.rules import CHECKS, RULES
from qlrewrite.rules.context import Dims, ModelContext, NodeContext, view_of
from qlrewrite.rules.registry import ALL_OPS, QDQ_OPS
from qlrewrite.weightless import weightless_from_source, weightless_proto

__all__ = [
    "CheckPass",
    "check",
    "check_model",
    "check_path",
    "filter_report",
    "finish_report",
    "node_contexts",
    "parse_codes",
    "select_rules",
]


def check(
    model_or_path: ir.Model | onnx.ModelProto | str | os.PathLike,
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
) -> Report:
    """Check a model (``ir.Model``, ``onnx.ModelProto`` or a path): the findings of the CLI.

    ``select`` / ``ignore`` take rule codes or code prefixes (``"QL4"``), as ``qlrewrite
    check --select/--ignore``. Findings accepted by ``per_node_ignores`` (node or output
    name -> codes) or by a node's ``qlrewrite:ignore`` metadata move to ``.suppressed``
    (see :mod:`qlrewrite.suppress`). A path that cannot be read gives a Report with
    ``error``; a ``ModelProto`` is checked as if its file were in the current folder.
    """
    codes = select_rules(select, ignore)
    if isinstance(model_or_path, ir.Model):
        model = model_or_path
        report = check_model(model, path=model.meta.get("qlrewrite.source"))
    elif isinstance(model_or_path, onnx.ModelProto):
        try:
            model = ir.serde.deserialize_model(model_or_path)
        except Exception as exc:  # onnx_ir raises many kinds on malformed protos
            return Report(error=f"not a valid ONNX model ({exc})".splitlines()[0])
        model.meta["qlrewrite.proto"] = model_or_path
        report = check_model(model, weightless=weightless_from_source(model_or_path))
    else:
        return check_path(model_or_path, codes=codes, per_node_ignores=per_node_ignores)
    return finish_report(report, model, codes, per_node_ignores)


def finish_report(
    report: Report,
    model: ir.Model,
    codes: Collection[str],
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
) -> Report:
    """``report`` of ``model`` with only the rules in ``codes``, then suppressions applied."""
    from qlrewrite.suppress import apply_suppressions

    return apply_suppressions(filter_report(report, codes), model, per_node_ignores or {}, codes)


def select_rules(
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    *,
    extend_select: Iterable[str] = (),
    base: Collection[str] | None = None,
) -> frozenset[str]:
    """The rule codes enabled by ``select`` / ``ignore`` codes or prefixes, as ruff does.

    No ``select`` keeps ``base`` (default: every rule that is not opt-in); a ``select``
    starts afresh from what it names (``ALL``: every rule that is not opt-in).
    ``extend_select`` adds to either. An opt-in rule needs a select entry of at least its
    category (``QL5``, ``QL504``). When a code matches both sides, the longer (more
    specific) prefix wins; on a tie ``ignore`` wins. A code no entry matches keeps its
    state in ``base``. Layers stack: the configuration's result is the ``base`` of the
    command line's. An entry that matches no rule code raises InputError naming it.
    """
    selected = parse_codes(select, "--select")
    enabling = selected + parse_codes(extend_select, "--extend-select")
    ignored = parse_codes(ignore, "--ignore")
    before = {c for c, e in RULES.items() if not e.opt_in} if base is None else set(base)
    if selected:
        before = set()
    enabled = set()
    for code, entry in RULES.items():
        shortest = 3 if entry.opt_in else 0  # "QL5" names the category; "", "QL" do not
        best_select = max(
            (len(p) for p in enabling if code.startswith(p) and len(p) >= shortest), default=-1
        )
        best_ignore = max((len(p) for p in ignored if code.startswith(p)), default=-1)
        if best_select < 0 and best_ignore < 0:
            if code in before:
                enabled.add(code)
        elif best_select > best_ignore:
            enabled.add(code)
    return frozenset(enabled)


def parse_codes(entries: Iterable[str], where: str) -> list[str]:
    """Rule code prefixes from comma-separated entries (``ALL`` is ``""``, every code).

    Raises InputError starting with ``where`` for an entry that matches no rule code.
    """
    prefixes = []
    for entry in entries:
        for raw in entry.split(","):
            prefix = raw.strip().upper()
            if not prefix:
                continue
            if prefix == "ALL":
                prefix = ""
            elif not any(code.startswith(prefix) for code in RULES):
                raise InputError(f"{where}: unknown rule code or prefix '{raw.strip()}'")
            prefixes.append(prefix)
    return prefixes


def filter_report(report: Report, codes: Collection[str]) -> Report:
    """``report`` keeping only the findings of rules in ``codes``."""
    if all(f.rule in codes for f in report.findings):
        return report
    return dataclasses.replace(report, findings=[f for f in report.findings if f.rule in codes])


def check_path(
    path: str | os.PathLike,
    *,
    codes: Collection[str] | None = None,
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
) -> Report:
    """Load and check one model file; an unreadable file gives a Report with ``error``.

    Missing or corrupt tensor data is reported as findings (QL6xx), not as an error. The
    error is one line without the path (the Report has it). With ``codes`` (the enabled
    rules) the report is finished as :func:`finish_report` does.
    """
    try:
        model = model_io.load(path, check_data=False)
    except InputError as exc:
        return Report(path=str(path), error=str(exc).removeprefix(f"{path}: "))
    source = model.meta.get("qlrewrite.proto")
    weightless = weightless_from_source(source) if source is not None else None
    report = check_model(model, path=str(path), weightless=weightless)
    if codes is None:
        return report
    return finish_report(report, model, codes, per_node_ignores)


def check_model(
    model: ir.Model, *, path: str | None = None, weightless: onnx.ModelProto | None = None
) -> Report:
    """Every finding of every rule on ``model`` (which is not modified).

    ``weightless``: a weight-free proto of ``model`` as it is now (from
    :func:`~qlrewrite.weightless.weightless_proto` or, for a model just loaded,
    :func:`~qlrewrite.weightless.weightless_from_source`), for shape inference; without
    it the model is serialized again if inference is needed.
    """
    report = Report(path=path, custom_quant=custom_quant_groups(model))
    model_ctx = ModelContext(model, path)
    for check in CHECKS.values():
        if check.scope == "model":
            report.findings.extend(check.func(model_ctx))
    node_checks = [c for c in CHECKS.values() if c.scope == "node"]
    seen: set[tuple[str, str, int, str]] = set()
    for site, contexts in node_contexts(model, weightless=weightless, ops=ALL_OPS):
        report.nodes_checked += 1
        for ctx in contexts:
            for check in node_checks:
                if ctx.op_type not in check.ops or (check.needs_version and ctx.row is None):
                    continue
                for finding in check.func(ctx):
                    message = finding.message.replace(ctx.call_site_note, "", 1)
                    key = (finding.rule, finding.graph, id(site.node), message)
                    if key not in seen:
                        seen.add(key)
                        report.findings.append(finding)
    return report


def node_contexts(
    model: ir.Model,
    *,
    weightless: onnx.ModelProto | None = None,
    ops: tuple[str, ...] = QDQ_OPS,
) -> Iterator[tuple[QDQSite, list[NodeContext]]]:
    """Every Q/DQ node (or node of ``ops``) with what the rules see of it: one context per
    call site for a node inside a function, else one. Shape inference runs once, on first
    need (on ``weightless`` when given, see :func:`check_model`)."""
    inference = _Inference(model, weightless)
    call_sites = _call_sites(model)
    for site in iter_qdq_nodes(model, ops):
        function = _function_label(site.label)
        bindings = call_sites.get(function, [None]) if function else [None]
        yield site, [_node_context(site, model, inference, b) for b in bindings]


class CheckPass(ir.passes.InPlacePass):
    """Runs :func:`check_model`; never modifies the model. The result is in ``.report``."""

    def __init__(self, path: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.report: Report | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.report = check_model(model, path=self.path)
        return ir.passes.PassResult(model, modified=False)


# --------------------------------------------------------------------------- call sites


@dataclasses.dataclass
class _Binding:
    """One call site of a function: actual values and attributes for the formal ones."""

    values: dict[int, ir.Value | None]  # id(formal input) -> actual value
    attributes: Mapping[str, ir.Attr]
    where: str  # "'<call node>' in <graph label>"
    graph: str  # the graph label of the call node


def _function_label(label: str) -> str | None:
    if not label.startswith("function:"):
        return None
    return label.split("/", 1)[0]


def _call_sites(model: ir.Model) -> dict[str, list[_Binding | None]]:
    """Per function label, one binding per call site anywhere in the model."""
    if not model.functions:
        return {}
    sites: dict[str, list[_Binding | None]] = {}
    for graph_label, graph in iter_graphs(model):
        for node in graph:
            function = model.functions.get((node.domain, node.op_type, node.overload))
            if function is None:
                continue
            values = {
                id(formal): (node.inputs[i] if i < len(node.inputs) else None)
                for i, formal in enumerate(function.inputs)
            }
            attrs = {**function.attributes, **node.attributes}
            label = f"function:{function.domain}.{function.name}"
            where = f"'{node.name or node.op_type}' in {graph_label}"
            sites.setdefault(label, []).append(_Binding(values, attrs, where, graph_label))
    return sites


def _resolve_attributes(node: ir.Node, binding: _Binding | None) -> dict[str, ir.Attr]:
    attrs: dict[str, ir.Attr] = {}
    for name, attr in node.attributes.items():
        if attr.is_ref():
            actual = binding.attributes.get(attr.ref_attr_name) if binding else None
            if isinstance(actual, ir.Attr) and actual.value is not None:
                attrs[name] = ir.Attr(name, actual.type, actual.value)
            continue
        attrs[name] = attr
    return attrs


# --------------------------------------------------------------------------- contexts


def _node_context(
    site: QDQSite, model: ir.Model, inference: _Inference, binding: _Binding | None
) -> NodeContext:
    # Inference covers the main graph and its subgraphs; inside a function only the call
    # site's actual values have inferred facts.
    local = {} if site.label.startswith("function:") else inference.scope(site.label)

    def view(value: ir.Value | None, read: bool = False):
        if value is not None and binding is not None and id(value) in binding.values:
            actual = binding.values[id(value)]
            return view_of(actual, inference.scope(binding.graph), read=read)
        return view_of(value, local, read=read)

    node = site.node
    # Q/DQ: scales and zero points are read when small; weight-only ops: g_idx only.
    read = [i > 0 if node.op_type in QDQ_OPS else i == 4 for i in range(len(node.inputs))]
    inputs = [view(v, read=r) for v, r in zip(node.inputs, read, strict=True)]
    outputs = list(node.outputs)
    return NodeContext(
        node=node,
        graph=site.label,
        domain=site.domain,
        imported=site.imported,
        row=opsets.lookup(site.domain, node.op_type, site.imported),
        ir_version=model.ir_version,
        inputs=inputs,
        output=view(outputs[0]) if outputs else None,
        attributes=_resolve_attributes(node, binding),
        call_site=binding.where if binding is not None else "",
    )


Info = tuple[ir.DataType | None, Dims | None]


class _Inference:
    """ONNX shape inference on a weight-free copy, run once on first use, per graph label."""

    def __init__(self, model: ir.Model, weightless: onnx.ModelProto | None = None) -> None:
        self._model = model
        self._weightless = weightless
        self._tables: dict[str, dict[str, Info]] | None = None
        self._visible: dict[str, dict[str, Info]] = {}

    def table(self, label: str) -> dict[str, Info]:
        """Name -> (type, shape) visible in the graph ``label`` (inner scopes first);
        merged once per label."""
        if label in self._visible:
            return self._visible[label]
        if self._tables is None:
            self._tables = _infer(self._model, self._weightless)
        outer = self.table(label.rsplit("/", 1)[0]) if "/" in label else {}
        merged = {**outer, **self._tables.get(label, {})}
        self._visible[label] = merged
        return merged

    def scope(self, label: str) -> _Scope:
        """A lazy mapping for graph ``label``."""
        return _Scope(self, label)


class _Scope(Mapping[str, Info]):
    """The names visible in one graph; inference runs only if a lookup needs it."""

    def __init__(self, inference: _Inference, label: str) -> None:
        self._inference = inference
        self._label = label
        self._table: dict[str, Info] | None = None

    @property
    def _names(self) -> dict[str, Info]:
        if self._table is None:
            self._table = self._inference.table(self._label)
        return self._table

    def __getitem__(self, key: str) -> Info:
        return self._names[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, key: object) -> bool:
        return key in self._names


def _infer(
    model: ir.Model, weightless: onnx.ModelProto | None = None
) -> dict[str, dict[str, Info]]:
    """Graph label -> name -> (type, shape) from shape inference; {} when it cannot run."""
    try:
        proto = onnx.shape_inference.infer_shapes(
            weightless if weightless is not None else weightless_proto(model),
            check_type=False,
            strict_mode=False,
            data_prop=False,
        )
    except Exception:  # inference is a bonus: never fail the check on it
        return {}
    tables: dict[str, dict[str, Info]] = {}
    _collect(proto.graph, "main", tables)
    return tables


def _collect(graph: onnx.GraphProto, label: str, tables: dict[str, dict[str, Info]]) -> None:
    """Fill ``tables[label]``; subgraph labels follow :func:`qlrewrite.qdq.iter_graphs`."""
    table = tables.setdefault(label, {})
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name in table or not info.type.HasField("tensor_type"):
            continue
        tensor_type = info.type.tensor_type
        try:
            dtype = ir.DataType(tensor_type.elem_type) if tensor_type.elem_type else None
        except ValueError:
            dtype = None
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim
            )
        table[info.name] = (dtype, shape)
    for node in graph.node:
        for attr in node.attribute:
            owner = owner_label(node.name, node.op_type, node.output[0] if node.output else "")
            base = f"{label}/{owner}.{attr.name}"
            if attr.HasField("g"):
                _collect(attr.g, base, tables)
            for index, sub in enumerate(attr.graphs):
                _collect(sub, f"{base}[{index}]", tables)
