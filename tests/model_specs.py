"""Building the rules' example models from their specs: every builder name a
:class:`~qlrewrite.rules.model_spec.ModelSpec` may use, mapped to its function here in
tests/ (:mod:`example_models`, :mod:`qoperator_models`).

A rule's example names a builder below; a builder that fits a new rule's example is one
line here (its name and function), written with onnx.helper in :mod:`example_models`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import example_models as em
import family_models
import onnx
import openvino_models
import qoperator_models

from qlrewrite.rules.model_spec import ModelSpec

__all__ = ["BUILDERS", "UnknownBuilderError", "bind", "resolve", "resolve_model"]

#: Each builder a spec may name: the models, the edits of :func:`example_models.edited`
#: and the arrays a QOperator model's constants are overridden with.
BUILDERS: dict[str, Callable[..., Any]] = {
    "qdq": em.qdq_model,
    "matmul_nbits": em.matmul_nbits_model,
    "gather_block_quantized": em.gather_block_quantized_model,
    "function_qdq": em.function_qdq_model,
    "qoperator": qoperator_models.build,
    "float_relu": em.float_model,
    "dq_into_matmul": em.dq_into_matmul,
    "weight_dq_matmul": em.weight_dq_matmul,
    "qdq_matmul": em.qdq_matmul,
    "qdq_matmul_weight": em.qdq_matmul_weight,
    "qdq_weight_op": em.qdq_weight_op,
    "pad_pool": em.pad_pool,
    "qdq_biased_op": em.qdq_biased_op,
    "qdq_requantized": em.qdq_requantized,
    "openvino_sixteen_bit": openvino_models.sixteen_bit,
    "openvino_constant_operand": openvino_models.constant_operand,
    "openvino_boundary_pair": openvino_models.boundary_pair,
    "qdq_family": family_models.qdq_family,
    "edited": em.edited,
    "cut_inputs": em.cut_inputs,
    "reversed_nodes": em.reversed_nodes,
    "rewired": em.rewired,
    "external_data": em.external_data,
    "data_length": em.data_length,
    "ignore_metadata": em.ignore_metadata,
    "array": em.array,
}


class UnknownBuilderError(LookupError):
    """A spec names a builder that :data:`BUILDERS` does not hold."""


def _builder(spec: ModelSpec) -> Callable[..., Any]:
    try:
        return BUILDERS[spec.builder]
    except KeyError:
        raise UnknownBuilderError(
            f"{spec!r}: no builder named {spec.builder!r} in tests/model_specs.py BUILDERS "
            f"(known: {', '.join(sorted(BUILDERS))})"
        ) from None


def bind(spec: ModelSpec) -> None:
    """Check, without building anything, that ``spec`` and every spec nested in it name a
    known builder and that their arguments fit its signature (UnknownBuilderError or
    TypeError)."""
    for each in spec.specs():
        signature = inspect.signature(_builder(each))
        try:
            signature.bind(*each.args, **dict(each.kwargs))
        except TypeError as exc:
            raise TypeError(f"{each!r} does not fit {each.builder}{signature}: {exc}") from None


def resolve(spec: ModelSpec) -> Any:
    """What ``spec`` stands for: its builder called on its arguments, nested specs built
    first (each call gets fresh lists and dicts, never the spec's own)."""
    args = [_value(a) for a in spec.args]
    kwargs = {name: _value(v) for name, v in spec.kwargs}
    return _builder(spec)(*args, **kwargs)


def resolve_model(spec: ModelSpec) -> onnx.ModelProto:
    """The model ``spec`` stands for (TypeError when its builder gives something else)."""
    proto = resolve(spec)
    if not isinstance(proto, onnx.ModelProto):
        raise TypeError(f"{spec!r} gives a {type(proto).__name__}, not a model")
    return proto


def _value(value: Any) -> Any:
    if isinstance(value, ModelSpec):
        return resolve(value)
    if isinstance(value, tuple):
        return tuple(_value(v) for v in value)
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value
