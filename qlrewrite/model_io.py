"""Loading and saving models: the only module that opens model files.

Loading keeps external data on disk (onnx_ir memory-maps it on demand) and validates
what can be validated without reading weights: the file is an ONNX model, every
tensor's data fits its dims, and external data stays inside the model's folder and
fits its file. Saving is atomic: everything is written into a temporary folder next
to the destination, flushed to disk, then renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import google.protobuf.descriptor
import onnx
import onnx_ir as ir

from qlrewrite.errors import InputError
from qlrewrite.materialize import external_in_memory
from qlrewrite.qdq.graphs import MAIN, GraphRef, owner_label

__all__ = [
    "EXTERNAL_DATA_THRESHOLD",
    "DataProblem",
    "SaveCallback",
    "Source",
    "data_problems",
    "external_data_files",
    "external_data_name",
    "initializer_bytes",
    "load",
    "same_file",
    "save",
    "set_source",
    "source_of",
    "tensor_bytes",
    "unwritable",
    "uses_external_data",
]

#: Called by :func:`save` before each tensor it writes to the external data file.
SaveCallback = Callable[[ir.TensorProtocol, ir.external_data.CallbackInfo], None]
#: Above this many initializer bytes, outputs get external data (protobuf caps at 2 GB).
EXTERNAL_DATA_THRESHOLD = int(1.8 * 1024**3)
_STRING = google.protobuf.descriptor.FieldDescriptor.TYPE_STRING
_MESSAGE = google.protobuf.descriptor.FieldDescriptor.TYPE_MESSAGE
#: Tensors at least this large go to the external data file when one is written.
EXTERNAL_TENSOR_MIN_BYTES = 1024

_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


@dataclasses.dataclass(frozen=True)
class DataProblem:
    """A tensor whose data cannot be trusted: the model is unreadable as it stands."""

    #: external-missing | external-escapes | external-range | negative-dims | data-length
    #: (the data does not fit the dims and type: its size, its field, an unknown type)
    kind: str
    tensor: str
    graph: str
    message: str


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a model was read from: its file (None: a proto handed in, read as if from the
    current folder) and the proto as read (without external data; the model may have
    changed since)."""

    path: Path | None
    proto: onnx.ModelProto

    @property
    def base_dir(self) -> Path:
        """The folder external data paths are relative to."""
        return self.path.resolve().parent if self.path is not None else Path.cwd()


_SOURCE_KEY = "qlrewrite.source"


def source_of(model: ir.Model) -> Source | None:
    """The :class:`Source` :func:`load` recorded on ``model`` (None: built in memory)."""
    return model.meta.get(_SOURCE_KEY)


def set_source(model: ir.Model, source: Source | None) -> None:
    """Record where ``model`` was read from (a new model made from a loaded one keeps
    its source)."""
    if source is not None:
        model.meta[_SOURCE_KEY] = source


# --------------------------------------------------------------------------- loading


def load(path: str | os.PathLike, *, check_data: bool = True) -> ir.Model:
    """Load a model lazily (external data stays on disk).

    Raises InputError for anything that is not a readable ONNX model, including a node
    that uses a value defined nowhere. With ``check_data`` (the default) a tensor whose
    data is missing, escapes the model's folder or does not match its dims is an
    InputError too; ``check_data=False`` leaves those to :func:`data_problems` (the
    checker reports them as findings).
    """
    path = Path(path)
    proto = _read_proto(path)
    model = _deserialize(proto, path)
    base_dir = path.resolve().parent
    ir.external_data.set_base_dir(model.graph, str(base_dir))
    for function in model.functions.values():
        for node in function:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR and isinstance(
                    attr.value, ir.ExternalTensor
                ):
                    attr.value.base_dir = str(base_dir)
    if check_data:
        problems = data_problems(model, proto=proto, base_dir=base_dir)
        if problems:
            first = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(f"{path}: {first.message}{more}")
    set_source(model, Source(path, proto))
    return model


class _Undefined(logging.Handler):
    """Collects onnx_ir's warnings about node inputs defined nowhere (and silences them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    _PATTERN = re.compile(r"Input '(.*)' of node '(.*)' \((.*)::(.*?):.*\) cannot be found")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "cannot be found in any scope" not in message:
            return
        match = self._PATTERN.match(message)
        if match is None:
            self.messages.append(message.split(" The model is invalid")[0])
            return
        value, node, domain, op = match.groups()
        where = f"node '{node}' ({domain + '::' if domain else ''}{op})" if node else op
        self.messages.append(
            f"{where} uses '{value}', which is not a graph input, an initializer or "
            "the output of any node"
        )


def _deserialize(proto: onnx.ModelProto, path: Path) -> ir.Model:
    logger = logging.getLogger("onnx_ir.serde")
    handler = _Undefined()
    propagate, level = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False  # the warnings become the InputError below, not stderr lines
    logger.setLevel(logging.WARNING)  # even when the CLI quiets onnx_ir
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as exc:  # onnx_ir raises many kinds on malformed protos
        raise InputError(f"{path}: not a valid ONNX model ({_one_line(exc)})") from exc
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        logger.setLevel(level)
    if handler.messages:
        first = handler.messages[0]
        more = f" (and {len(handler.messages) - 1} more)" if len(handler.messages) > 1 else ""
        raise InputError(f"{path}: not a valid ONNX model: {first}{more}")
    return model


def _read_proto(path: Path) -> onnx.ModelProto:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a model file")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    if size == 0:
        raise InputError(f"{path}: empty file")
    try:
        # The format is fixed: onnx would otherwise pick a text parser from the suffix.
        proto = onnx.load_model(str(path), format="protobuf", load_external_data=False)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except Exception as exc:  # DecodeError, RuntimeWarning-as-error, ...: all mean "not ONNX"
        raise InputError(f"{path}: not an ONNX model (cannot parse: {_one_line(exc)})") from exc
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise InputError(f"{path}: not an ONNX model (no graph or no IR version)")
    problem = _malformed(proto)
    if problem is not None:
        raise InputError(f"{path}: not a valid ONNX model ({problem})")
    sparse = _sparse_tensor(proto)
    if sparse is not None:
        raise InputError(
            f"{path}: {sparse} is a sparse tensor, which qlrewrite cannot read or write back "
            "(onnx_ir drops sparse initializers); store it as a dense tensor"
        )
    return proto


def _sparse_tensor(proto: onnx.ModelProto) -> str | None:
    """The first sparse initializer or sparse attribute of any graph or function, or None."""
    graphs: list[onnx.GraphProto] = [proto.graph]
    nodes: list[onnx.NodeProto] = [n for f in proto.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            if graph.sparse_initializer:
                return f"initializer '{graph.sparse_initializer[0].values.name}'"
            nodes.extend(graph.node)
            continue
        node = nodes.pop()
        for attr in node.attribute:
            if attr.type in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS):
                return f"attribute '{attr.name}' of {node.op_type} '{node.name}'"
            graphs.extend([attr.g] if attr.HasField("g") else attr.graphs)
    return None


#: Attribute types whose value is a message: the message must be there.
_ATTRIBUTE_VALUE = {
    onnx.AttributeProto.TENSOR: "t",
    onnx.AttributeProto.GRAPH: "g",
    onnx.AttributeProto.SPARSE_TENSOR: "sparse_tensor",
    onnx.AttributeProto.TYPE_PROTO: "tp",
}


def _malformed(proto: onnx.ModelProto) -> str | None:
    """What onnx_ir would read but not write back, or None: a string field that is not
    UTF-8 (protobuf hands out bytes), an attribute of a message type without its value
    (onnx_ir makes up an empty one). Tensor data is not looked at."""
    stack: list[Any] = [proto]
    while stack:
        message = stack.pop()
        if type(message) is onnx.TensorProto:
            if type(message.name) is bytes or type(message.doc_string) is bytes:
                return "a tensor name or doc_string is not UTF-8 text"
            stack.extend(message.external_data)
            stack.extend(message.metadata_props)
            continue
        if type(message) is onnx.AttributeProto and not message.ref_attr_name:
            value = _ATTRIBUTE_VALUE.get(message.type)
            if value is not None and not message.HasField(value):
                kind = onnx.AttributeProto.AttributeType.Name(message.type)
                return f"attribute '{message.name}' of type {kind} has no value"
        for field, value in message.ListFields():
            if field.type == _STRING:
                values = value if field.is_repeated else (value,)
                if any(type(v) is bytes for v in values):
                    return f"a {field.full_name.removeprefix('onnx.')} is not UTF-8 text"
            elif field.type == _MESSAGE:
                if field.is_repeated:
                    stack.extend(value)
                else:
                    stack.append(value)
    return None


def _one_line(exc: BaseException) -> str:
    """The first line of the innermost cause (onnx_ir wraps errors in vague SerdeErrors)."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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
    if proto is None and source is not None:
        proto = source.proto
    if base_dir is None:
        base_dir = source.base_dir if source is not None else Path.cwd()
    if proto is None:
        return []
    base = Path(base_dir)
    files: dict[str, tuple[str, str] | int] = {}  # location -> size or problem, once each
    return [
        problem
        for ref, tensor in _iter_tensor_protos(proto)
        if (problem := _tensor_problem(tensor, str(ref), base, files)) is not None
    ]


def _iter_tensor_protos(proto: onnx.ModelProto) -> Iterator[tuple[GraphRef, onnx.TensorProto]]:
    yield from _graph_tensors(proto.graph, MAIN)
    for function in proto.functions:
        ref = GraphRef.of_function(function.domain, function.name)
        for node in function.node:
            yield from _node_tensors(node, ref)


def _graph_tensors(
    graph: onnx.GraphProto, ref: GraphRef
) -> Iterator[tuple[GraphRef, onnx.TensorProto]]:
    for tensor in graph.initializer:
        yield ref, tensor
    for node in graph.node:
        yield from _node_tensors(node, ref)


def _node_tensors(
    node: onnx.NodeProto, ref: GraphRef
) -> Iterator[tuple[GraphRef, onnx.TensorProto]]:
    owner = owner_label(node.name, node.op_type, node.output[0] if node.output else "")
    for attr in node.attribute:
        if attr.HasField("t"):
            yield ref, attr.t
        for tensor in attr.tensors:
            yield ref, tensor
        if attr.HasField("g"):
            yield from _graph_tensors(attr.g, ref.subgraph(owner, attr.name))
        for index, sub in enumerate(attr.graphs):
            yield from _graph_tensors(sub, ref.subgraph(owner, attr.name, index))


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


def _typed_field(dtype: ir.DataType) -> str:
    """The TensorProto field that holds ``dtype`` values when raw_data is not used."""
    return _FIELD_OF_TYPE.get(dtype, "int32_data")  # every other type: int32_data


def _expected_nbytes(dtype: ir.DataType, count: int) -> int | None:
    if dtype == ir.DataType.STRING:
        return None
    return (count * dtype.bitwidth + 7) // 8


def _tensor_problem(
    tensor: onnx.TensorProto, graph: str, base: Path, files: dict[str, tuple[str, str] | int]
) -> DataProblem | None:
    name = tensor.name or "<unnamed>"

    def problem(kind: str, message: str) -> DataProblem:
        return DataProblem(kind, name, graph, f"tensor '{name}' ({graph}): {message}")

    try:
        dtype = ir.DataType(tensor.data_type)
    except ValueError:
        return problem("data-length", f"unknown data type {tensor.data_type}")
    if dtype == ir.DataType.UNDEFINED:
        return problem("data-length", "data type UNDEFINED (0)")
    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        return problem("negative-dims", f"negative dimension in dims {dims}")
    count = 1
    for d in dims:
        count *= d
    expected = _expected_nbytes(dtype, count)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        if dtype == ir.DataType.STRING:  # external data is raw bytes: strings cannot be
            return problem("data-length", "holds STRING data in an external data file")
        return _external_problem(tensor, expected, base, problem, files)
    fields = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    if tensor.HasField("raw_data"):
        if fields or dtype == ir.DataType.STRING:
            return problem(
                "data-length", f"holds {dtype.name} data in raw_data and in {', '.join(fields)}"
            )
        if expected is not None and len(tensor.raw_data) != expected:
            return problem(
                "data-length",
                f"holds {len(tensor.raw_data)} bytes of data but dims {dims} "
                f"of {dtype.name} need {expected}",
            )
        return None
    if not fields:
        if count == 0:
            return None
        return problem("data-length", f"has no data but dims {dims} need {count} elements")
    if len(fields) > 1 or _typed_field(dtype) != fields[0]:
        return problem(
            "data-length",
            f"holds {dtype.name} data in {', '.join(fields)} (ONNX keeps it in "
            f"{_typed_field(dtype)})",
        )
    n_values = len(getattr(tensor, fields[0]))
    if dtype == ir.DataType.STRING:
        wanted = count
    elif dtype.bitwidth < 8:
        per_value = 8 // dtype.bitwidth  # packed sub-byte values in int32_data
        wanted = (count + per_value - 1) // per_value
    elif dtype in (ir.DataType.COMPLEX64, ir.DataType.COMPLEX128):
        wanted = 2 * count
    else:
        wanted = count
    if n_values != wanted:
        return problem(
            "data-length", f"holds {n_values} values but dims {dims} need {wanted} values"
        )
    return None


def _external_problem(
    tensor: onnx.TensorProto,
    expected: int | None,
    base: Path,
    problem: Callable[[str, str], DataProblem],
    files: dict[str, tuple[str, str] | int],
) -> DataProblem | None:
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    if not location:
        return problem("external-missing", "external data without a location")
    if location not in files:
        try:
            files[location] = _locate(location, base)
        except (OSError, ValueError) as exc:  # a NUL byte, a name too long, a loop of links
            files[location] = (
                "external-missing",
                f"external data location {location!r} cannot be used ({_one_line(exc)})",
            )
    found = files[location]
    if not isinstance(found, int):
        return problem(*found)
    file_size = found
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        return problem("external-range", "external data offset/length are not integers")
    if offset < 0 or (length is not None and length < 0):
        return problem("external-range", f"negative external data offset/length in '{location}'")
    available = file_size - offset
    if length is not None and length > available:
        return problem(
            "external-range",
            f"external data '{location}' has {max(available, 0)} bytes at offset {offset}, "
            f"the tensor claims {length}",
        )
    size = length if length is not None else available
    if expected is not None and size != expected and (length is not None or size < expected):
        return problem(
            "data-length",
            f"external data holds {size} bytes but dims {list(tensor.dims)} need {expected}",
        )
    return None


def _locate(location: str, base: Path) -> tuple[str, str] | int:
    """The size of the external data file at ``location``, or the (kind, message) why not."""
    if os.path.isabs(location) or Path(location).drive:
        return "external-escapes", f"external data location '{location}' is an absolute path"
    target = base / location
    if not _inside(os.path.normpath(os.path.abspath(target)), os.path.abspath(base)):
        return "external-escapes", f"external data location '{location}' escapes the model folder"
    if not _inside(os.path.realpath(target), os.path.realpath(base)):
        return (
            "external-escapes",
            f"external data location '{location}' is a link that leads out of the model folder",
        )
    if not target.is_file():
        return "external-missing", f"external data file '{location}' not found"
    return target.stat().st_size


def _inside(path: str, folder: str) -> bool:
    folder = folder.rstrip(os.sep) + os.sep
    return path.startswith(folder)


# --------------------------------------------------------------------------- facts


def _initializer_tensors(model: ir.Model) -> Iterator[ir.TensorProtocol]:
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                yield value.const_value


def uses_external_data(model: ir.Model) -> bool:
    """True if any initializer of the model lives in an external data file."""
    return any(isinstance(t, ir.ExternalTensor) for t in _initializer_tensors(model))


def tensor_bytes(tensor: ir.TensorProtocol) -> int:
    """Bytes of ``tensor`` from its shape and type (0 for strings): reads no data."""
    if tensor.dtype in (ir.DataType.STRING, ir.DataType.UNDEFINED):
        return 0
    return tensor.nbytes


def external_data_files(model: ir.Model) -> set[Path]:
    """The files the model's external initializers live in (resolved paths)."""
    return {
        Path(os.path.realpath(t.path))
        for t in _initializer_tensors(model)
        if isinstance(t, ir.ExternalTensor)
    }


def unwritable(model: ir.Model) -> str | None:
    """Why onnx_ir could not write ``model`` back (an attribute of type UNDEFINED), or
    None. ``load`` accepts such models so that info and check can describe them."""
    graphs = [model.graph, *model.functions.values()]
    for graph in graphs:
        for node in ir.traversal.RecursiveGraphIterator(graph):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.UNDEFINED:
                    name = node.name or node.op_type
                    return f"attribute '{attr.name}' of node '{name}' has no type"
    return None


def initializer_bytes(model: ir.Model) -> int:
    """Total bytes of the model's initializers (from shapes: reads no data)."""
    return sum(tensor_bytes(t) for t in _initializer_tensors(model))


def external_data_name(output: str | os.PathLike) -> str:
    """The external data file written beside ``output``: ``<output file name>.data``."""
    return Path(output).name + ".data"


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True if both paths name the same file (resolving links)."""
    a, b = Path(a), Path(b)
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


# --------------------------------------------------------------------------- saving


def save(
    model: ir.Model,
    path: str | os.PathLike,
    *,
    external_data: bool | None = None,
    threshold: int = EXTERNAL_DATA_THRESHOLD,
    max_workers: int | None = None,
    callback: SaveCallback | None = None,
    before_commit: Callable[[Path], None] | None = None,
) -> Path | None:
    """Write ``model`` to ``path`` atomically; return the external data file, if any.

    ``external_data=None`` decides: external data if the model already uses it or its
    initializers exceed ``threshold`` bytes. The data file is ``<file name>.data``
    beside the output with a relative location. On any failure nothing is left behind:
    neither a partial output nor a temporary file. ``before_commit`` is called with the
    staged model file (data file beside it) before anything is moved into place; if it
    raises, nothing is written (``--verify`` uses it).
    """
    path = Path(path).absolute()
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"{path}: output folder does not exist")
    if path.is_dir():
        raise InputError(f"{path}: is a directory; give a file name for the output")
    if external_data is None:
        external_data = uses_external_data(model) or initializer_bytes(model) > threshold
    if not external_data and initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD:
        raise InputError(
            f"{path}: initializers exceed 2 GB, which a single ONNX file cannot hold; "
            "drop --no-external-data"
        )
    data_name = external_data_name(path)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder))
    except OSError as exc:
        raise InputError(f"{path}: cannot write in {folder} ({exc.strerror or exc})") from exc
    try:
        staged_model = staging / path.name
        # Node attribute tensors (Constant values) in external data are written into the
        # model: onnx_ir's save moves only initializers to the new data file.
        if external_data:
            with external_in_memory(model):
                ir.save(
                    model,
                    staged_model,
                    external_data=data_name,
                    size_threshold_bytes=EXTERNAL_TENSOR_MIN_BYTES,
                    max_workers=max_workers,
                    callback=callback,
                )
        else:
            with external_in_memory(model, initializers=lambda _: True):
                ir.save(model, staged_model)
        staged_data = staging / data_name
        if staged_data.exists() and staged_data.stat().st_size == 0:
            staged_data.unlink()  # every tensor was small enough to stay in the model
        written = [p for p in (staged_data, staged_model) if p.exists()]
        for staged in written:
            _fsync(staged)
        if before_commit is not None:
            before_commit(staged_model)
        _move_into_place(written, folder, staging)
        _fsync_dir(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / data_name if staged_data in written else None


def _move_into_place(staged_files: list[Path], folder: Path, staging: Path) -> None:
    """Rename the staged files into ``folder``, data first (the model never points at
    missing data); if a later rename fails, the earlier ones are undone."""
    done: list[tuple[Path, Path | None]] = []  # (destination, hard link to what it replaced)
    try:
        for staged in staged_files:
            dest = folder / staged.name
            backup: Path | None = None
            if dest.exists():  # an overwritten file keeps its permissions
                with contextlib.suppress(OSError):
                    os.chmod(staged, stat.S_IMODE(dest.stat().st_mode))
            if dest.exists() and staged is not staged_files[-1]:
                backup = staging / (staged.name + ".previous")
                try:
                    os.link(dest, backup)
                except OSError:
                    backup = None
            os.replace(staged, dest)
            done.append((dest, backup))
    except BaseException:
        for dest, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, dest)
                else:
                    dest.unlink()
        raise


def _fsync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
