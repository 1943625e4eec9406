"""float32 -> float16 / bfloat16 that keeps the Q/DQ nodes valid (onnxconverter-common
issue 304: the usual converters leave scales in float32, mismatch types or drop Q/DQ).

Every float32 value of the main graph becomes the target type, except:

- **Q/DQ nodes**: from ai.onnx opset 19 a QuantizeLinear's input and scale, and a
  DequantizeLinear's scale (its output type follows the scale), take the target type,
  the scale cast exactly when it is a normal number there. Below opset 19, in the
  com.microsoft domain, with a scale that is not a constant or that is subnormal or
  infinite in the target type, the node stays float32 with Casts around it (reported by
  name). A scale that rounds to **zero** is refused by name (its dequantized values
  would vanish; 1e-8 does in float16), except a DequantizeLinear of a constant (an int32
  bias of an int16 model: scale about 1e-9), which stays float32 (reported).
- **blocked ops** (``block``) and ops of other domains: computed in float32, Casts
  around them; an input whose schema takes no float16 / bfloat16 (Resize's ``scales``)
  stays float32 too.
- the model's **inputs and outputs** stay float32 (Casts after and before) unless
  ``convert_io``.

Float32 initializers are cast lazily (:mod:`~qlrewrite.passes.half.tensors`), once per
initializer, keeping their names where nothing else reads the float32 one; an
initializer that overflows the target type is refused by name. Cast nodes to float32
cast to the target; Constant nodes' float32 values are cast. Models with subgraphs or
functions are refused (not handled). Not exact: ``--verify`` measures the difference
(see :data:`HALF_BOUND`).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.tensor import link_initializers
from qlrewrite.passes.half.tensors import cast_tensor, overflows, underflow
from qlrewrite.passes.integer_io.to_integer import main_views
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import QDQView, constant_tensor
from qlrewrite.toolkit import MAIN, FreshNames, all_graphs, onnx_opset
from qlrewrite.verify.bound import Bound
from qlrewrite.verify.verify import output_steps

__all__ = ["HALF_BOUND", "HALF_TYPES", "HalfPass", "HalfResult"]


@dataclasses.dataclass
class HalfResult(RewritePassResult):
    """:class:`~qlrewrite.passes.half.HalfPass`: ``values_retyped``,
    ``initializers_cast``, ``casts_added``, ``qdq_in_target_type``, ``qdq_kept_float32``;
    a warning per Q/DQ node kept in float32 for its scale."""


_DT = ir.DataType
HALF_TYPES = {"float16": _DT.FLOAT16, "bfloat16": _DT.BFLOAT16}
#: The ai.onnx opset whose Q/DQ take float16 / bfloat16 scales and inputs.
_HALF_QDQ = 19
#: What ``--verify`` accepts: float16 keeps 11 significant bits (bfloat16: 8), every
#: node rounds its result, and a quantized tensor whose float value moved across a
#: rounding boundary moves by one step: no bound is proven, the difference is measured.
#: A pass adds, per output a DequantizeLinear writes, one step of its scale.
HALF_BOUND = Bound(
    reason="float16 / bfloat16 arithmetic: every node rounds to 11 (8) significant bits",
    relative=0.05,
)

_SCHEMA_TYPES = {_DT.FLOAT16: "tensor(float16)", _DT.BFLOAT16: "tensor(bfloat16)"}


def _accepts(schema: Any, index: int, formal: list[Any], dtype: ir.DataType) -> bool:
    """Whether the ``index``-th input or output of ``schema`` takes ``dtype``."""
    if not formal:
        return False
    param = formal[min(index, len(formal) - 1)]
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    return _SCHEMA_TYPES[dtype] in allowed.get(param.type_str, [param.type_str])


class _Run:
    """One rewrite: the target type, the casts and copies made, the counts."""

    def __init__(self, model: ir.Model, to: ir.DataType, block: frozenset[str]) -> None:
        self.model, self.to, self.block = model, to, block
        self.opset = onnx_opset(model) or 1
        self.names = FreshNames(model, nodes=True)
        self.casts: dict[tuple[int, ir.DataType], ir.Value] = {}
        self.copies: dict[int, tuple[ir.Value, ir.Value]] = {}
        self.counts: collections.Counter[str] = collections.Counter()

    def schema(self, node: ir.Node) -> Any:
        if node.domain not in ("", "ai.onnx") or node.op_type in self.block:
            return None
        try:
            return onnx.defs.get_schema(node.op_type, self.opset, "")
        except onnx.defs.SchemaError:
            return None

    def cast(self, value: ir.Value, dtype: ir.DataType, before: ir.Node) -> ir.Value:
        """``value`` as ``dtype``: an initializer's lazy copy, else one Cast node."""
        key = (id(value), dtype)
        if key in self.casts:
            return self.casts[key]
        tensor = constant_tensor(value) if value.is_initializer() else None
        if tensor is not None and value.dtype == _DT.FLOAT and dtype == self.to:
            made = self._copy(value, tensor)
        else:
            node = ir.node(
                "Cast", [value], {"to": dtype}, name=self.names.fresh(f"{value.name}_cast")
            )
            made = node.outputs[0]
            made.name = self.names.fresh(f"{value.name}_{dtype.name.lower()}")
            made.dtype, made.shape = dtype, value.shape
            self.model.graph.insert_before(before, node)
            self.counts["casts_added"] += 1
        self.casts[key] = made
        return made

    def _copy(self, value: ir.Value, tensor: ir.TensorProtocol) -> ir.Value:
        if overflows(tensor, self.to):
            raise Refusal(f"initializer {value.name!r} overflows {self.to.name}: block its reader")
        name = self.names.fresh(f"{value.name}_{self.to.name.lower()}")
        copy = ir.Value(name=name, const_value=cast_tensor(tensor, self.to))
        copy.dtype, copy.shape = self.to, value.shape
        self.model.graph.register_initializer(copy)
        self.copies[id(value)] = (value, copy)
        self.counts["initializers_cast"] += 1
        return copy


_Views = dict[ir.Node, QDQView]


def _dequantizes_a_constant(node: ir.Node) -> bool:
    """A DequantizeLinear of a constant (a weight or an int32 bias: int16 models' bias
    scales, x_scale x w_scale, are about 1e-9): kept float32, its values are what the
    model reads, not its scale."""
    x = node.inputs[0] if node.inputs else None
    return node.op_type == "DequantizeLinear" and x is not None and constant_tensor(x) is not None


def _qdq_modes(run: _Run, views: dict[ir.Node, QDQView]) -> tuple[set[ir.Node], list[str]]:
    """The Q/DQ nodes computed in the target type (the others stay float32), and one note
    per reason naming the scales kept in float32; raises Refusal on scales that round to
    zero (but a constant's DequantizeLinear's, kept float32)."""
    native: set[ir.Node] = set()
    kept: dict[str, list[str]] = {}
    refused = []
    for node, view in views.items():
        scale_value = node.inputs[1] if len(node.inputs) > 1 else None
        tensor = constant_tensor(scale_value) if scale_value is not None else None
        if tensor is None or view.domain != "" or run.opset < _HALF_QDQ:
            continue
        if tensor.dtype != _DT.FLOAT:
            continue
        problem = underflow(np.asarray(tensor.numpy()), run.to)
        name = repr(scale_value.name)  # type: ignore[union-attr]
        if problem == "zero" and not _dequantizes_a_constant(node):
            refused.append(f"scale {name} of {node.op_type} {node.name!r}")
        elif problem:
            why = "zero (DequantizeLinear of constants)" if problem == "zero" else problem
            kept.setdefault(f"{why} in {run.to.name}", []).append(name)
        else:
            native.add(node)
    if refused:
        raise Refusal(f"scales that round to zero in {run.to.name}: " + "; ".join(refused))
    return native, [_kept_note(why, names) for why, names in kept.items()]


def _kept_note(why: str, names: list[str], shown: int = 6) -> str:
    """``scales subnormal in FLOAT16 (3: 'a', 'b', 'c'): their Q/DQ stay float32``."""
    unique = list(dict.fromkeys(names))
    more = f" and {len(unique) - shown} more" if len(unique) > shown else ""
    listed = ", ".join(unique[:shown]) + more
    return f"scales {why} ({len(unique)}: {listed}): their Q/DQ stay float32"


def _wanted(
    run: _Run, node: ir.Node, index: int, views: _Views, native: set[ir.Node]
) -> ir.DataType:
    """The float type input ``index`` of ``node`` needs."""
    if node in views:
        return run.to if node in native and index < 2 else _DT.FLOAT
    schema = run.schema(node)
    if schema is None or not _accepts(schema, index, list(schema.inputs), run.to):
        return _DT.FLOAT
    return run.to


def _output_type(
    run: _Run, node: ir.Node, index: int, views: _Views, native: set[ir.Node]
) -> ir.DataType:
    if node in views:
        return run.to if node in native else _DT.FLOAT
    schema = run.schema(node)
    if schema is None or not _accepts(schema, index, list(schema.outputs), run.to):
        return _DT.FLOAT
    return run.to


def _known_type(value: ir.Value, types: dict[str, Any]) -> ir.DataType | None:
    """The value's type: declared, else inferred (None: unknown)."""
    return value.dtype or types.get(value.name or "", (None,))[0]


def _retype_node(
    run: _Run, node: ir.Node, types: dict[str, Any], views: _Views, native: set[ir.Node]
) -> None:
    """Inputs cast to what the node needs, then its float32 outputs retyped."""
    for index, value in enumerate(node.inputs):
        dtype = _known_type(value, types) if value is not None else None
        if value is None or dtype not in (_DT.FLOAT, run.to):
            continue
        value.dtype = dtype  # declared: a Cast or a reader's check needs it
        wanted = _wanted(run, node, index, views, native)
        if dtype != wanted:
            node.replace_input_with(index, run.cast(value, wanted, node))
    _retype_attributes(run, node)
    for index, output in enumerate(node.outputs):
        dtype = _known_type(output, types)
        if dtype is None and node in views:  # com.microsoft Q/DQ: no ONNX inference
            dtype = views[node].output_type
        elif dtype is None:  # inference stopped at an op it does not know
            dtype = _from_inputs(run, node, index)
        if dtype == _DT.FLOAT:
            output.dtype = _output_type(run, node, index, views, native)
            run.counts["values_retyped"] += output.dtype == run.to


def _from_inputs(run: _Run, node: ir.Node, index: int) -> ir.DataType | None:
    """FLOAT when output ``index`` shares its schema's type variable with a float input
    (float32 or the target, as cast by now), else None."""
    schema = run.schema(node)
    if schema is None or not schema.outputs:
        return None
    formal = schema.outputs[min(index, len(schema.outputs) - 1)].type_str
    for position, value in enumerate(node.inputs):
        param = schema.inputs[min(position, len(schema.inputs) - 1)] if schema.inputs else None
        same = param is not None and param.type_str == formal
        if same and value is not None and value.dtype in (_DT.FLOAT, run.to):
            return _DT.FLOAT
    return None


def _retype_attributes(run: _Run, node: ir.Node) -> None:
    """A Cast to float32 casts to the target; a Constant's float32 value is cast."""
    if node.domain not in ("", "ai.onnx"):
        return
    if node.op_type == "Cast":
        to = node.attributes.get("to")
        if to is not None and to.as_int() == _DT.FLOAT:
            node.attributes["to"] = ir.AttrInt64("to", int(run.to))
    elif node.op_type == "Constant" and (attr := node.attributes.get("value")) is not None:
        tensor = attr.as_tensor()
        if tensor.dtype == _DT.FLOAT:
            node.attributes["value"] = ir.AttrTensor("value", cast_tensor(tensor, run.to))


def _graph_io(run: _Run, *, convert_io: bool) -> None:
    """Inputs and outputs: retyped with ``convert_io``, else float32 with Casts."""
    graph = run.model.graph
    for value in graph.inputs:
        if convert_io and value.dtype == _DT.FLOAT:
            value.dtype = run.to
    for index, value in enumerate(list(graph.outputs)):
        if value.dtype != run.to or convert_io:
            continue
        name = value.name
        value.name = run.names.fresh(f"{name}_{run.to.name.lower()}")
        node = ir.node("Cast", [value], {"to": _DT.FLOAT}, name=run.names.fresh(f"{name}_cast"))
        node.outputs[0].name, node.outputs[0].dtype = name, _DT.FLOAT
        node.outputs[0].shape = value.shape
        graph.append(node)
        graph.outputs[index] = node.outputs[0]
        run.counts["casts_added"] += 1


def _keep_names(run: _Run) -> None:
    """An initializer whose float32 original nothing reads now takes its name."""
    graph = run.model.graph
    for original, copy in run.copies.values():
        if not list(original.uses()) and original not in graph.outputs:
            name = original.name
            del graph.initializers[name]  # type: ignore[arg-type]
            del graph.initializers[copy.name]  # type: ignore[arg-type]
            copy.name = name
            graph.register_initializer(copy)


class HalfPass(ContextPass, ir.passes.InPlacePass):
    """float32 -> float16 / bfloat16 keeping Q/DQ valid (see module)."""

    needs = frozenset({"inference"})  # the types of values nobody declared
    keeps_types = False  # values change their type under their names

    def __init__(
        self, to: str = "float16", *, block: tuple[str, ...] = (), convert_io: bool = False
    ) -> None:
        super().__init__()
        self.to = HALF_TYPES[to]
        self.block = frozenset(block)
        self.convert_io = convert_io

    def call(self, model: ir.Model) -> HalfResult:
        if len(all_graphs(model)) > 1:
            raise Refusal("subgraphs and functions are not converted to half precision yet")
        inference = self.context(model).inference
        types = inference.table(MAIN)
        steps = _output_steps(model)  # before the Casts the rewrite puts before the outputs
        run = _Run(model, self.to, self.block)
        views = main_views(model, inference)
        native, notes = _qdq_modes(run, views)
        if self.convert_io:  # inputs first: their readers then read the target type
            _graph_io(run, convert_io=True)
        for node in list(model.graph):
            _retype_node(run, node, types, views, native)
        if not self.convert_io:  # outputs last: their producers are retyped by now
            _graph_io(run, convert_io=False)
        _keep_names(run)
        link_initializers(model)
        run.counts["qdq_in_target_type"] = len(native)
        run.counts["qdq_kept_float32"] = len(views) - len(native)
        bound = dataclasses.replace(HALF_BOUND, per_output=steps)
        return HalfResult(
            model, modified=True, summary=dict(run.counts), warnings=notes, verify_bound=bound
        )


def _output_steps(model: ir.Model) -> tuple[tuple[str, float], ...]:
    """One quantization step of each model output a DequantizeLinear writes
    (:func:`~qlrewrite.verify.verify.output_steps`): a value that moved across a rounding
    boundary upstream moves by a step, which on a small output (a Softmax's) is more than
    5% of its largest value."""
    steps = {name: abs(step) for name, step in output_steps(model).items()}
    return tuple(sorted((n, s) for n, s in steps.items() if np.isfinite(s) and s > 0))
