"""The rules' example models as data: a :class:`ModelSpec` names a test-model builder and
its arguments; the builders themselves live with the tests, not in the package.

``ModelSpec("qdq", DQ, 12, x_type=DT.INT8, attrs={"axis": 0})`` stands for the call
``qdq(DQ, 12, x_type=DT.INT8, attrs={"axis": 0})`` of the builder named ``qdq``
(``tests/model_specs.py`` maps each name to its function in ``tests/`` and builds a
spec; a name it does not know fails the tests). Arguments are plain values (None, bool,
int, float, str, bytes, an :class:`onnx_ir.DataType`, tuples and lists of them, dicts
with str keys) and nested specs: a model to edit, an edit, an array. Nothing is built
when a rule module is imported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import onnx_ir as ir

from qlrewrite.opsets import MS_DOMAIN

__all__ = ["DQ", "DT", "MS", "ModelSpec", "Q"]

DT = ir.DataType
MS = MS_DOMAIN
Q = "QuantizeLinear"
DQ = "DequantizeLinear"

_SCALARS = (type(None), bool, int, float, str, bytes)


@dataclasses.dataclass(frozen=True, init=False, repr=False)
class ModelSpec:
    """The call ``builder(*args, **kwargs)`` of a test-model builder, as data."""

    builder: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]

    def __init__(self, builder: str, /, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "builder", builder)
        object.__setattr__(self, "args", tuple(_plain(a) for a in args))
        object.__setattr__(self, "kwargs", tuple((k, _plain(v)) for k, v in kwargs.items()))

    def __repr__(self) -> str:
        parts = [repr(self.builder), *map(_text, self.args)]
        parts += [f"{name}={_text(value)}" for name, value in self.kwargs]
        return f"ModelSpec({', '.join(parts)})"

    def specs(self) -> Iterator[ModelSpec]:
        """This spec and every spec nested in its arguments, outermost first."""
        yield self
        for value in (*self.args, *(v for _, v in self.kwargs)):
            yield from _nested(value)


def _plain(value: Any) -> Any:
    """``value`` as spec data (lists become tuples, dicts are copied), or TypeError."""
    if isinstance(value, (ModelSpec, ir.DataType, *_SCALARS)):
        return value
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise TypeError(
        f"a ModelSpec holds plain values and nested specs, not {type(value).__name__}: "
        f"{value!r} (write an array as ModelSpec('array', values, dtype, shape=...))"
    )


def _nested(value: Any) -> Iterator[ModelSpec]:
    if isinstance(value, ModelSpec):
        yield from value.specs()
    elif isinstance(value, tuple):
        for v in value:
            yield from _nested(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _nested(v)


def _text(value: Any) -> str:
    """``value`` as it is written in a rule module (``DT.INT8``, not ``<DataType...>``)."""
    if isinstance(value, ir.DataType):
        return f"DT.{value.name}"
    if isinstance(value, tuple):
        inner = ", ".join(map(_text, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_text(v)}" for k, v in value.items()) + "}"
    return repr(value)
