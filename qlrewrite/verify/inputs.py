"""The inputs ``--verify`` and ``compare`` feed: which graph inputs, their concrete shapes
(``--input-shape`` for unknown dims) and one generated set of values per run.

Floats are drawn from N(0, 1), 8- and 16-bit integers over their full range (quantized
data), wider integers in [0, 4) (often indices or sizes), booleans uniformly; an input ONNX
Runtime's Python API cannot take makes the model :class:`Unverifiable`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from qlrewrite.errors import InputError

__all__ = [
    "InputSpec",
    "Unverifiable",
    "generate_inputs",
    "input_specs",
    "input_specs_or_refuse",
    "parse_input_shape",
]

#: Integer types drawn over their full range (quantized data); wider ints use a small range.
_FULL_RANGE = (ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16)
_SMALL_INT_HIGH = 4  # wider integer inputs (often indices or sizes) are drawn in [0, 4)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One graph input to generate: name, element type, concrete shape."""

    name: str
    dtype: ir.DataType
    shape: tuple[int, ...]


class Unverifiable(Exception):
    """ONNX Runtime cannot run this model (or take its inputs); the message is the reason."""


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``name=1,3,224,224`` -> ``("name", (1, 3, 224, 224))``; ValueError when malformed.

    The name is everything before the last ``=`` (input names may contain ``=``);
    ``name=`` is a scalar.
    """
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise ValueError(f"'{text}' is not NAME=D1,D2,... (e.g. input=1,3,224,224)")
    if not dims.strip():
        return name, ()
    shape = []
    for part in dims.split(","):
        dim = part.strip()
        if not dim.isdigit():
            raise ValueError(f"'{text}': dimension '{dim}' is not a non-negative integer")
        shape.append(int(dim))
    return name, tuple(shape)


def input_specs(model: ir.Model, shapes: Mapping[str, Sequence[int]]) -> list[InputSpec]:
    """The graph inputs to feed (those without an initializer), with concrete shapes.

    Raises InputError (usage) for an unknown dimension without ``shapes``, or ``shapes``
    naming no input or contradicting a declared shape; Unverifiable for inputs that
    are not tensors of a type ONNX Runtime's Python API can take.
    """
    graph = model.graph
    feeds = [v for v in graph.inputs if v.name not in graph.initializers]
    names = [v.name for v in feeds]
    for name in shapes:
        if name not in names:
            listed = ", ".join(names) or "none"
            raise InputError(
                f"--input-shape names '{name}', which is not a graph input (inputs: {listed})"
            )
    specs = []
    for value in feeds:
        if not isinstance(value.type, ir.TensorType):
            raise Unverifiable(f"input '{value.name}' is not a tensor ({value.type})")
        dtype = value.type.dtype
        unfed = (
            ir.DataType.STRING,
            ir.DataType.UNDEFINED,
            ir.DataType.COMPLEX64,
            ir.DataType.COMPLEX128,
        )
        if dtype in unfed or dtype.bitwidth < 8:
            raise Unverifiable(
                f"input '{value.name}' is {dtype.name}, which cannot be generated "
                "and fed to ONNX Runtime"
            )
        specs.append(InputSpec(value.name, dtype, _concrete_shape(value, shapes.get(value.name))))
    return specs


def input_specs_or_refuse(model: ir.Model, shapes: Mapping[str, Sequence[int]]) -> list[InputSpec]:
    """:func:`input_specs`; an input that cannot be generated is an InputError."""
    try:
        return input_specs(model, shapes)
    except Unverifiable as exc:
        raise InputError(f"cannot generate the inputs: {exc}") from None


def _concrete_shape(value: ir.Value, given: Sequence[int] | None) -> tuple[int, ...]:
    declared = value.shape
    hint = f"give it with --input-shape {value.name}=D1,D2,..."
    if given is None:
        if declared is None:
            raise InputError(f"input '{value.name}' has no declared shape; {hint}")
        for index, dim in enumerate(declared):
            if not isinstance(dim, int):
                label = f" ('{dim.value}')" if getattr(dim, "value", None) else ""
                raise InputError(
                    f"input '{value.name}' has unknown dimension {index}{label}; {hint}"
                )
        return tuple(int(d) for d in declared)
    given = tuple(given)
    if declared is not None:
        if len(declared) != len(given):
            raise InputError(
                f"--input-shape gives {len(given)} dimension(s) for input "
                f"'{value.name}', which has {len(declared)}"
            )
        for index, (dim, size) in enumerate(zip(declared, given, strict=True)):
            if isinstance(dim, int) and dim != size:
                raise InputError(
                    f"--input-shape gives {size} for dimension {index} of input "
                    f"'{value.name}', declared {dim}"
                )
    return given


def generate_inputs(specs: Sequence[InputSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One input set: floats ~ N(0, 1); 8- and 16-bit ints over their full range; wider
    ints in [0, 4); bools uniform."""
    feeds = {}
    for spec in specs:
        dtype = spec.dtype
        if dtype.is_floating_point():
            array = rng.standard_normal(spec.shape, dtype=np.float32).astype(dtype.numpy())
        elif dtype == ir.DataType.BOOL:
            array = rng.integers(0, 2, spec.shape, dtype=np.uint8).astype(np.bool_)
        elif dtype in _FULL_RANGE:
            info = np.iinfo(dtype.numpy())
            array = rng.integers(info.min, info.max, spec.shape, dtype=dtype.numpy(), endpoint=True)
        else:
            array = rng.integers(0, _SMALL_INT_HIGH, spec.shape).astype(dtype.numpy())
        feeds[spec.name] = np.ascontiguousarray(array)
    return feeds
