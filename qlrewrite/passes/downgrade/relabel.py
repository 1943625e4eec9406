"""Ops a downgrade relabels instead of converting: where a newer version only widened the
types or added an attribute or optional input whose absence means the older behaviour.

ONNX's version converter has no down adapter for many of them (Reshape-14, Add-14,
Identity-14, Shape-15, ... measured with onnx 1.19-1.21), which stops the downgrade of
almost every model below opset 14. A node of such an op is written at the older version
unchanged when it uses nothing the older version lacks: every attribute exists there (or
is at the default that means the older behaviour), no input beyond the older version's,
and every known element type among the older version's (unknown types: not relabelled,
left to the converter). The versions listed are those ONNX's Changelog.md describes as
type extensions or such additions; a version not listed (Softmax-13 changed its meaning,
Squeeze-13 moved ``axes`` to an input) goes through the converter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import onnx
import onnx.defs
import onnx_ir as ir

from qlrewrite.qdq.inference import Inference
from qlrewrite.toolkit import GraphRef, iter_graphs

__all__ = ["ElementTypes", "relabel_problem"]

#: The element type of a value by name (None: unknown).
TypeOf = Callable[[str], int | None]

#: Type-only versions since opset 19 (float8, int4, float4, 2-bit, ...).
_NEW_TYPES = (19, 21, 23, 24, 25)
_BF16 = (13,)
#: Ops whose version 13 only added bfloat16.
_BF16_ONLY = [
    "MatMul",
    "Gemm",
    "Gather",
    "Concat",
    "Slice",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Sqrt",
    "Neg",
    "Exp",
    "Abs",
    "Floor",
    "Ceil",
    "Max",
    "Min",
    "Less",
    "Greater",
    "Equal",
    "Expand",
    "Tile",
    "Clip",
    "Log",
    "Reciprocal",
]
#: op -> {since_version: attributes that must be absent or at their default}.
_RELABEL: Mapping[str, Mapping[int, tuple[str, ...]]] = {
    **{op: dict.fromkeys((*_BF16, 14), ()) for op in ("Add", "Sub", "Mul", "Div", "Relu")},
    "Reshape": {**dict.fromkeys((*_BF16, *_NEW_TYPES), ()), 14: ("allowzero",)},
    "Identity": dict.fromkeys((*_BF16, 14, 16, *_NEW_TYPES), ()),
    "Shape": {**dict.fromkeys((*_BF16, *_NEW_TYPES), ()), 15: ("start", "end")},
    "Size": dict.fromkeys((*_BF16, *_NEW_TYPES), ()),
    "Transpose": dict.fromkeys((*_BF16, *_NEW_TYPES), ()),
    "Flatten": dict.fromkeys((*_BF16, *_NEW_TYPES), ()),
    "Cast": {**dict.fromkeys((*_BF16, *_NEW_TYPES), ()), 19: ("saturate",)},
    "Constant": dict.fromkeys((*_BF16, *_NEW_TYPES), ()),
    "ConstantOfShape": dict.fromkeys((20, 21, 23, 24, 25), ()),
    "Squeeze": dict.fromkeys(_NEW_TYPES, ()),
    "Unsqueeze": dict.fromkeys(_NEW_TYPES, ()),
    "Pow": dict.fromkeys((*_BF16, 15), ()),
    "CumSum": dict.fromkeys((14,), ()),
    "Split": {18: ("num_outputs",)},
    "Where": dict.fromkeys((16,), ()),
    "Pad": dict.fromkeys((*_BF16, 18, 19, *_NEW_TYPES), ()),
    **{op: dict.fromkeys(_BF16, ()) for op in _BF16_ONLY},
}

#: (op, attribute) -> string values a newer version added (Pad-19's ``wrap`` mode).
_NEW_VALUES: Mapping[tuple[str, str], tuple[bytes, ...]] = {("Pad", "mode"): (b"wrap",)}


class ElementTypes:
    """Element types by value name in the graphs of ``model`` (names of subgraphs
    flattened, the later graph's first, as in its proto; not a function's own values):
    declared, else the run's ``inference``, which runs only when an undeclared name is
    asked for. Called with a name; None when unknown."""

    def __init__(self, model: ir.Model, inference: Inference) -> None:
        self._inference = inference
        self._values: dict[str, tuple[ir.Value, GraphRef]] = {}
        for scope in iter_graphs(model):
            graph = scope.graph
            if not isinstance(graph, ir.Graph):
                continue
            outputs = (v for node in graph for v in node.outputs)
            for value in (*graph.inputs, *graph.initializers.values(), *outputs):
                if value.name:
                    self._values[value.name] = (value, scope.ref)

    def __call__(self, name: str) -> int | None:
        found = self._values.get(name)
        if found is None:
            return None
        value, ref = found
        tensor = value.const_value if value.is_initializer() else None
        if tensor is not None:
            return int(tensor.dtype)
        if isinstance(value.type, ir.TensorType) and value.type.dtype != ir.DataType.UNDEFINED:
            return int(value.type.dtype)
        dtype, _ = self._inference.scope(ref).get(name, (None, None))
        return int(dtype) if dtype else None


def relabel_problem(node: onnx.NodeProto, source: int, target: int, types: TypeOf) -> str | None:
    """Why ``node`` (ai.onnx, read at opset ``source``) cannot be written unchanged at
    opset ``target``; None when it can. ``types``: the element type of a value by name
    (:class:`ElementTypes`)."""
    try:
        new = onnx.defs.get_schema(node.op_type, source, "")
        old = onnx.defs.get_schema(node.op_type, target, "")
    except onnx.defs.SchemaError:
        return f"opset {target} has no {node.op_type}"
    if new.since_version == old.since_version:
        return None
    crossed = _versions_between(node.op_type, old.since_version, new.since_version)
    allowed = _RELABEL.get(node.op_type, {})
    if any(v not in allowed for v in crossed):
        return "not a type-only change"
    defaults = {n for v in crossed for n in allowed[v]}
    for attr in node.attribute:
        if attr.name not in old.attributes and not _at_default(attr, new, defaults):
            return f"attribute {attr.name} is new"
    if not _variadic(old) and any(node.input[len(old.inputs) :]):
        return "an input the older version lacks"
    for attr in node.attribute:
        if attr.s and attr.s in _NEW_VALUES.get((node.op_type, attr.name), ()):
            return f"{attr.name} {attr.s.decode(errors='replace')} is new"
    return _type_problem(node, old, types)


def _variadic(schema: onnx.defs.OpSchema) -> bool:
    last = schema.inputs[-1] if schema.inputs else None
    return last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic


def _versions_between(op: str, low: int, high: int) -> list[int]:
    """The since_versions of ``op`` in (low, high]."""
    found = []
    version = high
    while version > low:
        found.append(version)
        version = onnx.defs.get_schema(op, version - 1, "").since_version
    return found


def _at_default(attr: onnx.AttributeProto, schema: onnx.defs.OpSchema, names: set[str]) -> bool:
    """True if ``attr`` is one of ``names`` and equal to its default in ``schema``."""
    if attr.name not in names:
        return False
    declared = schema.attributes.get(attr.name)
    if declared is None or not declared.default_value.name:
        return False
    return bool(
        onnx.helper.get_attribute_value(attr)
        == onnx.helper.get_attribute_value(declared.default_value)
    )


def _type_problem(node: onnx.NodeProto, schema: onnx.defs.OpSchema, types: TypeOf) -> str | None:
    """Why a value of ``node`` has a type ``schema`` does not take (unknown: a problem)."""
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    pairs = [*zip(node.input, _formal(schema.inputs, len(node.input)), strict=True)]
    pairs += [*zip(node.output, _formal(schema.outputs, len(node.output)), strict=True)]
    for name, formal in pairs:
        if not name:
            continue
        elem = types(name)
        if elem is None:
            return f"the type of '{name}' is unknown"
        text = f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
        allowed = constraints.get(formal.type_str, {formal.type_str})
        if text not in allowed:
            return f"'{name}' is {text}, which opset's version does not take"
    return None


def _formal(
    params: Sequence[onnx.defs.OpSchema.FormalParameter], count: int
) -> list[onnx.defs.OpSchema.FormalParameter]:
    """The formal parameter of each of ``count`` actual inputs or outputs (the last one
    repeats when variadic)."""
    if not params:
        return []
    return [params[min(i, len(params) - 1)] for i in range(count)]
