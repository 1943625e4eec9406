"""Whether a model's tensors can be trusted, judged without reading their data: every
tensor's type, dims and data (in the proto's fields, in an external data file, or left in
the model file) checked against each other.

- :func:`data_problems`: every tensor whose data is missing, out of bounds, escaping the
  model folder or of the wrong size, once per model file read (kept in its
  :class:`~qlrewrite.io.source.Source`'s facts);
- :func:`malformed_external_numbers`: an external offset or length no reader can load;
- :func:`stored_size`: what a valid tensor holds in a TensorProto field (the wire walk of
  :mod:`qlrewrite.io.wire` asks it of the tensors it leaves in the model file).

Locations become files only through :func:`qlrewrite.io.tensors.external_path`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx
import onnx_ir as ir

from qlrewrite.io.source import source_of
from qlrewrite.io.tensors import (
    ExternalDataError,
    external_info,
    external_path,
    proto_tensors,
)
from qlrewrite.toolkit import nbytes

__all__ = ["DataProblem", "data_problems", "malformed_external_numbers", "stored_size"]


@dataclasses.dataclass(frozen=True)
class DataProblem:
    """A tensor whose data cannot be trusted: the model is unreadable as it stands."""

    #: external-missing | external-escapes | external-range | negative-dims | data-length
    #: (the data does not fit the dims and type: its size, its field, an unknown type)
    kind: str
    tensor: str
    graph: str
    message: str


_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)
_FIELD_OF_TYPE = {
    ir.DataType.FLOAT: "float_data",
    ir.DataType.COMPLEX64: "float_data",
    ir.DataType.DOUBLE: "double_data",
    ir.DataType.COMPLEX128: "double_data",
    ir.DataType.INT64: "int64_data",
    ir.DataType.UINT32: "uint64_data",
    ir.DataType.UINT64: "uint64_data",
    ir.DataType.STRING: "string_data",
}
#: An external data offset or length: decimal digits only.
_DECIMAL = re.compile(r"[0-9]+")
#: The largest tensor any reader can hold (numpy's and onnx_ir's sizes are int64).
_MAX_TENSOR_BYTES = 2**62


def _typed_field(dtype: ir.DataType) -> str:
    """The TensorProto field that holds ``dtype`` values when raw_data is not used."""
    return _FIELD_OF_TYPE.get(dtype, "int32_data")  # every other type: int32_data


def data_problems(
    model: ir.Model,
    *,
    proto: onnx.ModelProto | None = None,
    base_dir: str | os.PathLike | None = None,
) -> list[DataProblem]:
    """Every tensor (initializers and tensor attributes, in all graphs and functions)
    whose data is missing, out of bounds, escaping the model folder or of the wrong size.

    Reads no tensor data: only sizes of files and of in-proto fields.
    """
    source = source_of(model)
    as_read = source is not None and proto in (None, source.proto) and base_dir is None
    if as_read and "data_problems" in source.facts:  # once per model file read
        return list(source.facts["data_problems"])  # type: ignore[call-overload]
    if proto is None and source is not None:
        proto = source.proto
    if base_dir is None:
        base_dir = source.folder if source is not None else Path.cwd()
    if proto is None:
        return []
    files: dict[str, tuple[str, str] | int] = {}  # location -> size or problem, once each
    inline = source.inline if source is not None else None
    if inline is not None:  # left out of the skeleton: the walk judged them
        files[inline.marker] = -1
    found = [
        problem
        for ref, tensor in proto_tensors(proto)
        if (problem := _tensor_problem(tensor, str(ref), str(base_dir), files)) is not None
    ]
    if as_read:
        source.facts["data_problems"] = found
    return list(found)


def _tensor_problem(
    tensor: onnx.TensorProto, graph: str, base: str, files: dict[str, tuple[str, str] | int]
) -> DataProblem | None:
    """What is wrong with one tensor's type, dims or data (None: nothing)."""
    name = tensor.name or "<unnamed>"

    def problem(kind: str, message: str) -> DataProblem:
        return DataProblem(kind, name, graph, f"tensor '{name}' ({graph}): {message}")

    try:
        dtype = ir.DataType(tensor.data_type)
    except ValueError:
        return problem("data-length", f"unknown data type {tensor.data_type}")
    header = _type_and_dims_problem(dtype, list(tensor.dims))
    if header is not None:
        return problem(*header)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        if dtype == ir.DataType.STRING:  # external data is raw bytes: strings cannot be
            return problem("data-length", "holds STRING data in an external data file")
        expected = nbytes(dtype, tensor.dims)
        return _external_problem(tensor, expected, base, problem, files)
    fields = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    in_fields = _raw_data_problem if tensor.HasField("raw_data") else _typed_data_problem
    message = in_fields(tensor, dtype, fields)
    return None if message is None else problem("data-length", message)


def _type_and_dims_problem(dtype: ir.DataType, dims: list[int]) -> tuple[str, str] | None:
    """Why no tensor can have this type and these dims, as (kind, message); None: one can."""
    if dtype == ir.DataType.UNDEFINED:
        return "data-length", "data type UNDEFINED (0)"
    if any(d < 0 for d in dims):
        return "negative-dims", f"negative dimension in dims {dims}"
    # numpy (and ONNX Runtime) refuse a shape whose non-zero dims overflow, even empty
    width = 1 if dtype == ir.DataType.STRING else max(dtype.bitwidth // 8, 1)
    if math.prod(max(d, 1) for d in dims) * width >= _MAX_TENSOR_BYTES:
        return "data-length", f"dims {dims} are too large for any tensor"
    return None


def _raw_data_problem(
    tensor: onnx.TensorProto, dtype: ir.DataType, fields: list[str]
) -> str | None:
    """Why raw_data is not the tensor's only data, of the size its dims need (None: it is)."""
    dims = list(tensor.dims)
    expected = nbytes(dtype, dims)
    if fields or dtype == ir.DataType.STRING:
        return f"holds {dtype.name} data in raw_data and in {', '.join(fields)}"
    if expected is not None and len(tensor.raw_data) != expected:
        return (
            f"holds {len(tensor.raw_data)} bytes of data but dims {dims} "
            f"of {dtype.name} need {expected}"
        )
    return None


def _typed_data_problem(
    tensor: onnx.TensorProto, dtype: ir.DataType, fields: list[str]
) -> str | None:
    """Why the typed field holding the data (none: no data) is not the one ONNX keeps
    ``dtype`` in, or has not as many values as the dims need (None: it is, it has)."""
    dims = list(tensor.dims)
    count = math.prod(dims)
    if not fields:
        return None if count == 0 else f"has no data but dims {dims} need {count} elements"
    if len(fields) > 1 or _typed_field(dtype) != fields[0]:
        return (
            f"holds {dtype.name} data in {', '.join(fields)} (ONNX keeps it in "
            f"{_typed_field(dtype)})"
        )
    n_values = len(getattr(tensor, fields[0]))
    wanted = _typed_values(dtype, count)
    if n_values != wanted:
        return f"holds {n_values} values but dims {dims} need {wanted} values"
    return None


def _typed_values(dtype: ir.DataType, count: int) -> int:
    """How many values a typed field holds for ``count`` elements of ``dtype``."""
    if dtype == ir.DataType.STRING:
        return count
    if dtype.bitwidth < 8:
        per_value = 8 // dtype.bitwidth  # packed sub-byte values in int32_data
        return (count + per_value - 1) // per_value
    if dtype in (ir.DataType.COMPLEX64, ir.DataType.COMPLEX128):
        return 2 * count
    return count


def stored_size(data_type: int, dims: Sequence[int], field: int) -> int | None:
    """What a tensor of ``data_type`` and ``dims`` holds in TensorProto field number
    ``field``: bytes of raw_data (9), values of the typed field ONNX keeps the type in;
    None when no valid tensor holds its data there (strings, a wrong field, bad dims)."""
    try:
        dtype = ir.DataType(data_type)
    except ValueError:
        return None
    if dtype == ir.DataType.STRING or _type_and_dims_problem(dtype, list(dims)) is not None:
        return None
    if field == _RAW_DATA_FIELD:
        return nbytes(dtype, dims)
    typed = onnx.TensorProto.DESCRIPTOR.fields_by_number.get(field)
    if typed is None or typed.name != _typed_field(dtype):
        return None
    return _typed_values(dtype, math.prod(dims))


_RAW_DATA_FIELD = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number


def _external_problem(
    tensor: onnx.TensorProto,
    expected: int | None,
    base: str,
    problem: Callable[[str, str], DataProblem],
    files: dict[str, tuple[str, str] | int],
) -> DataProblem | None:
    info = external_info(tensor)
    location = info.get("location", "")
    if location not in files:
        try:
            files[location] = external_path(location, base).stat().st_size
        except ExternalDataError as exc:
            files[location] = (exc.kind, str(exc))
        except OSError as exc:
            files[location] = ("external-missing", f"external data file '{location}': {exc}")
    found = files[location]
    if not isinstance(found, int):
        return problem(*found)
    if found < 0:  # the model file's own bytes (an inline tensor), judged when walked
        return None
    file_size = found
    numbers = _offset_length(info)
    if isinstance(numbers, str):
        return problem("external-range", numbers)
    offset, length = numbers
    available = file_size - offset
    if length is not None and length > available:
        return problem(
            "external-range",
            f"external data '{location}' has {max(available, 0)} bytes at offset {offset}, "
            f"the tensor claims {length}",
        )
    if available < 0:
        return problem(
            "external-range",
            f"external data offset {offset} is past the end of '{location}' ({file_size} bytes)",
        )
    size = length if length is not None else available
    if expected is not None and size != expected and (length is not None or size < expected):
        return problem(
            "data-length",
            f"external data holds {size} bytes but dims {list(tensor.dims)} need {expected}",
        )
    return None


def _offset_length(info: dict[str, str]) -> tuple[int, int | None] | str:
    """(offset, length or None) of an external tensor, or why they are not numbers of
    bytes: decimal digits only (ONNX Runtime refuses "-1", "0_0", "+1" and " 1", some of
    which Python's int() takes)."""
    numbers = []
    for key in ("offset", "length"):
        text = info.get(key, "")
        if text and not _DECIMAL.fullmatch(text):
            location = info.get("location", "")
            return f"external data {key} {text!r} in '{location}' is not a whole number of bytes"
        numbers.append(int(text) if text else None)
    return numbers[0] or 0, numbers[1]


def malformed_external_numbers(proto: onnx.ModelProto) -> str | None:
    """The first external tensor whose offset or length is not a number of bytes (no
    reader can load the model: onnx_ir fails with an internal error), or None."""
    for label, tensor in proto_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            numbers = _offset_length(external_info(tensor))
            if isinstance(numbers, str):
                return f"tensor '{tensor.name or '<unnamed>'}' ({label}): {numbers}"
    return None
