"""Integer model inputs and outputs: remove the QuantizeLinear nodes that read a float
graph input and the DequantizeLinear that writes a float graph output, so the model
takes and returns the quantized type (onnxruntime issue 21138).

Exact by construction: the nodes left compute what they computed, on the value the
removed node made; feeding ``Q(x)`` gives ``Q(y)`` bit for bit. Each input's and
output's scale and zero point go in the model's metadata
(:mod:`~qlrewrite.passes.integer_io.record`), read back by
:class:`~qlrewrite.passes.integer_io.to_float.FloatIOPass`.

Which are rewritten: a float graph input every reader of which is a per-tensor
QuantizeLinear with constant parameters, all the same (several such nodes become one
input); a float graph output written by a per-tensor DequantizeLinear with constant
parameters that nothing else reads. Refused, naming the tensor (nothing written): an
input also read as float (by another node or as a graph output: there is no float
path left to keep it on), readers with different parameters, a per-axis or blocked
node, an output whose DequantizeLinear's float value is also read inside the graph, or
whose quantized value is an initializer, a graph input or another output. Inputs and
outputs of other forms are left as they are (counted).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.integer_io.record import Record, key_of
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import QDQ, QDQView, constant_tensor, node_views
from qlrewrite.qdq.inference import Inference

__all__ = ["FLOAT_TYPES", "IntegerIOPass", "IntegerIOResult"]


@dataclasses.dataclass
class IntegerIOResult(RewritePassResult):
    """:class:`~qlrewrite.passes.integer_io.IntegerIOPass`: ``inputs_made_integer``,
    ``outputs_made_integer``, ``quantize_nodes_merged`` (an input read by several equal
    QuantizeLinear nodes), ``inputs_left``, ``outputs_left``;
    :class:`~qlrewrite.passes.integer_io.FloatIOPass`: ``inputs_made_float``,
    ``outputs_made_float``."""


_DT = ir.DataType
FLOAT_TYPES = frozenset({_DT.FLOAT, _DT.FLOAT16, _DT.BFLOAT16, _DT.DOUBLE})


@dataclasses.dataclass
class _Plan:
    """One graph input or output to rewrite, or why not."""

    value: ir.Value
    nodes: list[ir.Node] = dataclasses.field(default_factory=list)
    record: Record | None = None
    problem: str = ""


def main_views(model: ir.Model, inference: Inference) -> dict[ir.Node, QDQView]:
    """The Q/DQ nodes of the main graph with their views."""
    found: dict[ir.Node, QDQView] = {}
    for site, views in node_views(model, inference=inference, kinds=(QDQ,)):
        if site.graph is model.graph and isinstance(views[0], QDQView):
            found[site.node] = views[0]
    return found


def _constant(value: ir.Value | None) -> np.ndarray | None:
    tensor = constant_tensor(value) if value is not None else None
    return None if tensor is None else np.asarray(tensor.numpy())


def _parameters(view: QDQView) -> tuple[np.ndarray, np.ndarray | None] | str:
    """The scale and zero point of a per-tensor node with constant parameters, or why
    not."""
    scale = _constant(view.node.inputs[1] if len(view.node.inputs) > 1 else None)
    zero_input = view.node.inputs[2] if len(view.node.inputs) > 2 else None
    zero = _constant(zero_input)
    if scale is None or (zero_input is not None and zero is None):
        return "its scale or zero point is not a constant"
    if scale.size != 1 or (zero is not None and zero.size != 1):
        return f"{view.op_type} {view.node.name!r} is {view.granularity} (per-tensor only)"
    return scale, zero


def _node_entry(node: ir.Node, position: int, quantized: ir.Value) -> dict[str, object]:
    """The node as the metadata keeps it (see record)."""
    attributes = {}
    for name, attr in node.attributes.items():
        if attr.type != ir.AttributeType.INT:
            raise Refusal(f"{node.op_type} {node.name!r}: attribute {name} is not an integer")
        attributes[name] = attr.as_int()
    inputs = [v.name if v is not None else None for v in node.inputs[1:]]
    return {
        "name": node.name,
        "domain": node.domain,
        "attributes": attributes,
        "position": position,
        "scale": inputs[0],
        "zero_point_name": inputs[1] if len(inputs) > 1 else None,
        "value": quantized.name,
        "value_type": None if quantized.dtype is None else quantized.dtype.name,
        "value_shape": _dims(quantized.shape),
    }


def _dims(shape: ir.Shape | None) -> list[object] | None:
    if shape is None:
        return None
    return [d if isinstance(d, int) else (d.value if d is not None else None) for d in shape]


def _key(view: QDQView, scale: np.ndarray, zero: np.ndarray | None) -> tuple[object, ...]:
    attributes = tuple(sorted((n, repr(a.value)) for n, a in view.node.attributes.items()))
    zero_key = None if zero is None else (zero.dtype.str, zero.tobytes())
    return (view.output_type, view.domain, scale.dtype.str, scale.tobytes(), zero_key, attributes)


def _shared_parameters(views: list[QDQView]) -> tuple[np.ndarray, np.ndarray | None] | str:
    """The parameters every node of ``views`` shares, or why there are none."""
    keys, first = set(), None
    for view in views:
        found = _parameters(view)
        if isinstance(found, str):
            return found
        keys.add(_key(view, *found))
        first = first or found
    if len(keys) > 1 or first is None:
        return "is quantized with different parameters by its readers"
    return first


def plan_input(
    value: ir.Value, views: dict[ir.Node, QDQView], graph: ir.Graph, positions: dict[ir.Node, int]
) -> _Plan | None:
    """What becomes of a float graph input (None: left as it is)."""
    uses = list(value.uses())
    quantizers = [u.node for u in uses if u.node in views and views[u.node].is_quantize]
    if value.dtype not in FLOAT_TYPES or not quantizers:
        return None
    plan = _Plan(value, sorted(set(quantizers), key=positions.__getitem__))
    if len(quantizers) != len(uses) or value in graph.outputs:
        plan.problem = "is also read as float (no float path is kept)"
        return plan
    found = _shared_parameters([views[node] for node in plan.nodes])
    if isinstance(found, str):
        plan.problem = found
        return plan
    plan.record = _record("input", value, views[plan.nodes[0]], found, positions)
    return plan


def plan_output(
    value: ir.Value, views: dict[ir.Node, QDQView], graph: ir.Graph, positions: dict[ir.Node, int]
) -> _Plan | None:
    """What becomes of a float graph output (None: left as it is)."""
    node = value.producer()
    if node is None or node not in views or views[node].is_quantize:
        return None
    plan = _Plan(value, [node])
    quantized = node.inputs[0]
    if list(value.uses()) or graph.outputs.count(value) > 1:
        plan.problem = "is also read inside the graph"
    elif quantized is None or quantized.producer() is None or quantized in graph.outputs:
        plan.problem = "its quantized value is not computed by a node, or is an output"
    elif isinstance(found := _parameters(views[node]), str):
        plan.problem = found
    else:
        plan.record = _record("output", value, views[node], found, positions)
    return plan


def _record(
    role: str,
    value: ir.Value,
    view: QDQView,
    parameters: tuple[np.ndarray, np.ndarray | None],
    positions: dict[ir.Node, int],
) -> Record:
    quantized = view.node.outputs[0] if role == "input" else view.node.inputs[0]
    assert quantized is not None and value.name is not None and view.output_type is not None
    q_type = view.output_type if role == "input" else view.x_type
    entry = _node_entry(view.node, positions[view.node], quantized)
    return Record(
        role, value.name, q_type or _DT.UINT8, value.dtype or _DT.FLOAT, *parameters, entry
    )


class IntegerIOPass(ContextPass, ir.passes.InPlacePass):
    """Make the model's quantized inputs and outputs integer (see module); raises
    Refusal naming every input or output that cannot be."""

    needs = frozenset({"inference"})  # the Q/DQ output types, when undeclared
    keeps_types = False  # an input or output changes its type under its name

    def call(self, model: ir.Model) -> IntegerIOResult:
        graph = model.graph
        views = main_views(model, self.context(model).inference)
        positions = {node: i for i, node in enumerate(graph)}
        inputs = [plan_input(v, views, graph, positions) for v in graph.inputs]
        outputs = [plan_output(v, views, graph, positions) for v in graph.outputs]
        plans = [p for p in inputs + outputs if p is not None]
        refused = [f"{p.value.name!r} {p.problem}" for p in plans if p.problem]
        if refused:
            raise Refusal("cannot make integer: " + "; ".join(refused))
        taken = [p.record.role + " " + p.record.name for p in plans if p.record]
        clash = [k for k in taken if key_of(*k.split(" ", 1)) in model.metadata_props]
        if clash:
            raise Refusal(f"metadata already records {', '.join(clash)}")
        counts: collections.Counter[str] = collections.Counter()
        for plan in plans:
            assert plan.record is not None
            _apply(plan, graph)
            model.metadata_props[key_of(plan.record.role, plan.record.name)] = plan.record.to_json()
            counts[f"{plan.record.role}s_made_integer"] += 1
            counts["quantize_nodes_merged"] += max(0, len(plan.nodes) - 1)
        counts["inputs_left"] = sum(p is None for p in inputs)
        counts["outputs_left"] = sum(p is None for p in outputs)
        return IntegerIOResult(model, modified=bool(plans), summary=dict(counts))


def _apply(plan: _Plan, graph: ir.Graph) -> None:
    assert plan.record is not None
    value, record = plan.value, plan.record
    if record.role == "input":
        for node in plan.nodes:
            node.outputs[0].replace_all_uses_with(value, replace_graph_outputs=True)
            graph.remove(node, safe=True)
        value.dtype = record.quantized_type
    else:
        node = plan.nodes[0]
        quantized = node.inputs[0]
        assert quantized is not None
        name, shape = value.name, value.shape
        index = list(graph.outputs).index(value)
        graph.outputs[index] = quantized
        graph.remove(node, safe=True)
        value.name = None
        quantized.name = name
        quantized.dtype = record.quantized_type
        if quantized.shape is None:
            quantized.shape = shape
    _drop_unused(graph, record.node)


def _drop_unused(graph: ir.Graph, entry: dict[str, object]) -> None:
    """Remove the removed node's scale and zero point initializers nothing reads now."""
    for name in (entry["scale"], entry["zero_point_name"]):
        value = graph.initializers.get(name) if isinstance(name, str) else None
        if value is not None and not list(value.uses()) and value not in graph.outputs:
            del graph.initializers[name]  # type: ignore[arg-type]
