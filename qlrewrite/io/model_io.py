"""Loading and saving models: the only module that opens model files.

Loading keeps external data on disk (onnx_ir memory-maps it on demand) and validates
what can be validated without reading weights: the file is an ONNX model, every
tensor's data fits its dims, and external data stays inside the model's folder and
fits its file (resolution and validation live in :mod:`qlrewrite.io.tensors`). Saving is
atomic: everything is written into a locked staging folder next to the destination,
flushed to disk, then committed by :func:`qlrewrite.io.atomic.commit_model`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import google.protobuf.descriptor
import onnx
import onnx_ir as ir

from qlrewrite.errors import InputError
from qlrewrite.io import atomic, data_problems, reading, tensors, wire
from qlrewrite.io.inline_save import save_inline
from qlrewrite.io.limits import LIMITS, Limits
from qlrewrite.io.output_plan import destination
from qlrewrite.io.source import InlineFile, Source, set_source, source_of
from qlrewrite.io.tensors import external_in_memory
from qlrewrite.toolkit import (
    GraphRef,
    all_graphs,
    graphs_within,
    iter_graphs,
    model_folder,
    proto_graphs,
)

__all__ = [
    "EXTERNAL_DATA_THRESHOLD",
    "LIMITS",
    "Limits",
    "SaveCallback",
    "files_read",
    "files_read_by",
    "from_proto",
    "load",
    "load_bytes",
    "read_stdin_model",
    "save",
    "unwritable",
]

#: Called by :func:`save` before each tensor it writes to the external data file.
SaveCallback = Callable[[ir.TensorProtocol, ir.external_data.CallbackInfo], None]
#: Above this many initializer bytes, outputs get external data (protobuf caps at 2 GB).
EXTERNAL_DATA_THRESHOLD = int(1.8 * 1024**3)
_STRING = google.protobuf.descriptor.FieldDescriptor.TYPE_STRING
_MESSAGE = google.protobuf.descriptor.FieldDescriptor.TYPE_MESSAGE
#: Tensors at least this large go to the external data file when one is written.
EXTERNAL_TENSOR_MIN_BYTES = 1024


# --------------------------------------------------------------------------- loading


def _over_limits(proto: onnx.ModelProto, limits: Limits) -> str | None:
    """Why ``proto`` is beyond ``limits`` (or calls functions in a cycle), or None.
    Stops as soon as a limit is passed: a refusal costs little whatever the file holds."""
    raise_it = "raise the limit with `qlrewrite --max-nodes N COMMAND ...`"
    nodes = len(proto.graph.node)
    for ref, graph in proto_graphs(proto):
        if graph is not proto.graph:
            nodes += len(graph.node)
        if nodes > limits.max_nodes:
            return f"more than {limits.max_nodes:,} nodes; {raise_it}"
        if ref.depth > limits.max_depth:
            return (
                f"subgraphs nested more than {limits.max_depth} deep; raise the limit with "
                "`qlrewrite --max-depth N COMMAND ...`"
            )
    return _function_chain_problem(proto, limits.max_depth)


_Key = tuple[str, str]  # a function's (domain, name)


def _function_chain_problem(proto: onnx.ModelProto, max_depth: int) -> str | None:
    """A function that calls itself (directly or not: ONNX forbids it), or a chain of
    calls longer than ``max_depth``; in time linear in the calls."""
    calls = _function_calls(proto)
    if not calls:
        return None
    # Longest chain by Kahn's order over "is called by": what is left over is a cycle.
    callers = dict.fromkeys(calls, 0)
    for callees in calls.values():
        for callee in callees:
            callers[callee] += 1
    depth = dict.fromkeys(calls, 1)
    ready = [key for key, count in callers.items() if count == 0]
    done = 0
    while ready:
        key = ready.pop()
        done += 1
        for callee in calls[key]:
            depth[callee] = max(depth[callee], depth[key] + 1)
            if depth[callee] > max_depth:
                return (
                    f"functions call functions more than {max_depth} deep; raise the limit "
                    "with `qlrewrite --max-depth N COMMAND ...`"
                )
            callers[callee] -= 1
            if callers[callee] == 0:
                ready.append(callee)
    if done < len(calls):
        cycle = sorted(f"{d}.{n}" for (d, n), count in callers.items() if count > 0)
        return f"not a valid ONNX model (function {cycle[0]} calls itself, through its calls)"
    return None


def _function_calls(proto: onnx.ModelProto) -> dict[_Key, set[_Key]]:
    """Each model-local function with the model-local functions its nodes call (in its
    subgraphs too)."""
    keys = {(f.domain, f.name) for f in proto.functions}
    calls: dict[_Key, set[_Key]] = {key: set() for key in keys}
    for function in proto.functions:
        root = GraphRef.of_function(function.domain, function.name)
        for _, graph in graphs_within(function, root):
            calls[function.domain, function.name].update(
                (node.domain, node.op_type)
                for node in graph.node
                if (node.domain, node.op_type) in keys
            )
    return calls


def load(path: str | os.PathLike, *, check_data: bool = True) -> ir.Model:
    """Load a model lazily (external data stays on disk).

    Raises InputError for anything that is not a readable ONNX model, including a node
    that uses a value defined nowhere. With ``check_data`` (the default) a tensor whose
    data is missing, escapes the model's folder or does not match its dims is an
    InputError too; ``check_data=False`` leaves those to
    :func:`~qlrewrite.io.data_problems.data_problems` (the checker reports them as findings).
    """
    path = Path(path)
    proto, inline = _read_skeleton(path)
    model = _deserialize(proto, path)
    source = Source(path, proto, inline=inline)
    tensors.resolve_external(model, source.folder, inline)
    set_source(model, source)
    if check_data:
        problems = data_problems.data_problems(model)
        if problems:
            first = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(f"{path}: {first.message}{more}")
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


def from_proto(proto: onnx.ModelProto, label: str | os.PathLike = "model") -> ir.Model:
    """An ``onnx_ir.Model`` of ``proto`` (its tensors wrapped, not copied), recorded as
    read from ``proto`` (:mod:`qlrewrite.io.source`): the one place a ModelProto becomes a
    model. InputError (``<label>: not a valid ONNX model ...``, one line) for a proto
    onnx_ir cannot read or a node input defined nowhere."""
    model = _deserialize(proto, label)
    set_source(model, Source(None, proto))
    return model


def _deserialize(proto: onnx.ModelProto, path: str | os.PathLike) -> ir.Model:
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


def _what_it_is(data: bytes) -> str | None:
    """What bytes onnx cannot parse are, from their wire format
    (:func:`qlrewrite.io.wire.diagnose`)."""
    return wire.diagnose(io.BytesIO(data), len(data))


def read_stdin_model() -> bytes:
    """The bytes of a model piped into stdin (``check -``, as ruff reads ``-``): up to
    2 GiB, into memory. A terminal (nothing piped) and empty input are refused."""
    data = reading.read_stdin("model file", reading.MODEL_BYTES)
    if not data:
        raise InputError(f"{reading.STDIN}: empty input")
    return data


def load_bytes(data: bytes, label: str = "-") -> ir.Model:
    """A model read from ``data`` (stdin), judged as a file is. It may not name external
    data: there is no folder to find it in (InputError: give the model's path)."""
    proto = _parse_proto(data, label)
    for _, tensor in tensors.proto_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise InputError(
                f"{label}: tensor '{tensor.name}' is in external data, which a model read "
                "from stdin has no folder to find: give the model's path instead"
            )
    return from_proto(proto, label)


def _read_proto(path: Path) -> onnx.ModelProto:
    """The ModelProto of ``path`` (no external data read), refused as an InputError
    unless it is an ONNX model onnx_ir can read and write back within the limits; the
    data of its tensors above a few bytes left out (:func:`_read_skeleton`)."""
    return _read_skeleton(path)[0]


#: Inline tensors whose data is larger are left in the file, read when needed.
INLINE_TENSOR_MIN_BYTES = 1024
#: Smaller model files are read and parsed whole (at most twice this in memory; a walk of
#: a 10,000-node graph costs about 30 ms, protobuf parses it in 5).
WALK_MIN_BYTES = 1 << 20


def _read_skeleton(path: Path) -> tuple[onnx.ModelProto, InlineFile | None]:
    """The ModelProto of ``path`` as :func:`_read_proto` judges it, without the data of
    the tensors it holds above :data:`INLINE_TENSOR_MIN_BYTES` (each stands in it as an
    external tensor of the :class:`~qlrewrite.io.InlineFile` returned, None when
    none was left out): the file is walked
    (:class:`~qlrewrite.io.wire.Skeleton`), its weights never read. A file that does not
    walk as a model is read whole and parsed, for protobuf to say what is wrong with it.
    The file is opened once, through :mod:`qlrewrite.io.reading`."""
    with reading.opened(path, "model file", reading.MODEL_BYTES) as handle:
        info = os.fstat(handle.fileno())
        if info.st_size == 0:
            raise InputError(f"{path}: empty file")
        walked = _walked(handle.fileno(), path, info) if info.st_size >= WALK_MIN_BYTES else None
        if walked is None:  # small, or not a model: read whole (protobuf says what is wrong)
            handle.seek(0)
            data = reading.read_stream(handle, str(path), "model file", reading.MODEL_BYTES)
    if walked is not None:
        proto, inline = walked
        return _judged(proto, path), inline if inline.left_out else None
    if not data:
        raise InputError(f"{path}: empty file")
    return _parse_proto(data, path), None


def _walked(fd: int, path: Path, info: os.stat_result) -> tuple[onnx.ModelProto, InlineFile] | None:
    """The skeleton of the open model file ``fd`` parsed, and where its left-out tensors
    are; None when it does not walk or parse as a model."""
    inline = InlineFile(Path(os.path.abspath(path)), info, {})
    budget = 8 * LIMITS.get().max_nodes
    walk = wire.Skeleton(
        wire.Window(fd, info.st_size),
        inline.marker,
        INLINE_TENSOR_MIN_BYTES,
        budget,
        data_problems.stored_size,
    )
    try:
        proto = onnx.load_model_from_string(walk.walk(info.st_size), format="protobuf")
    except Exception:  # Malformed, DecodeError, an OSError reading: judged whole
        return None
    inline.left_out.update(walk.left_out)
    return proto, inline


def _parse_proto(data: bytes, path: str | os.PathLike) -> onnx.ModelProto:
    """The ModelProto in ``data`` (read from ``path``), judged as :func:`_read_proto` says."""
    try:
        # The format is fixed: onnx would otherwise pick a text parser from the suffix.
        proto = onnx.load_model_from_string(data, format="protobuf")
    except Exception as exc:  # DecodeError, RuntimeWarning-as-error, ...: all mean "not ONNX"
        what = _what_it_is(data)
        if what is not None:
            raise InputError(f"{path}: {what}") from exc
        raise InputError(f"{path}: not an ONNX model (cannot parse: {_one_line(exc)})") from exc
    del data
    return _judged(proto, path)


def _judged(proto: onnx.ModelProto, path: str | os.PathLike) -> onnx.ModelProto:
    """``proto`` (read from ``path``) unless :func:`_read_proto` refuses it."""
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise InputError(f"{path}: not an ONNX model (no graph or no IR version)")
    over = _over_limits(proto, LIMITS.get())
    if over is not None:
        raise InputError(f"{path}: {over}")
    problem = _malformed(proto) or data_problems.malformed_external_numbers(proto)
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
    for _, graph in proto_graphs(proto):
        if isinstance(graph, onnx.GraphProto) and graph.sparse_initializer:
            return f"initializer '{graph.sparse_initializer[0].values.name}'"
        for node in graph.node:
            for attr in node.attribute:
                if attr.type in (
                    onnx.AttributeProto.SPARSE_TENSOR,
                    onnx.AttributeProto.SPARSE_TENSORS,
                ):
                    return f"attribute '{attr.name}' of {node.op_type} '{node.name}'"
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
        problem = _fields_problem(message, stack)
        if problem is not None:
            return problem
    return None


def _fields_problem(message: Any, stack: list[Any]) -> str | None:
    """A string field of ``message`` that is not UTF-8, or None; its message fields are
    pushed on ``stack``."""
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


# --------------------------------------------------------------------------- facts


def unwritable(model: ir.Model) -> str | None:
    """Why onnx_ir could not write ``model`` back (an attribute of type UNDEFINED), or
    None. ``load`` accepts such models so that info and check can describe them."""
    for container in all_graphs(model):
        for node in container:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.UNDEFINED:
                    name = node.name or node.op_type
                    return f"attribute '{attr.name}' of node '{name}' has no type"
    return None


def files_read(model: ir.Model) -> list[Path]:
    """Every file a loaded model reads: the model file, then each external data file of
    its initializers, Constant values and other tensor attributes, in every graph,
    subgraph and function (resolved paths). Guards against overwriting an input use it."""
    source = source_of(model)
    if source is None or source.path is None:
        raise ValueError("files_read needs a model loaded from a file (model_io.load)")
    found = tensors.input_files(source.proto, source.folder)
    return [Path(os.path.realpath(source.path)), *found]


def files_read_by(path: str | os.PathLike) -> list[Path]:
    """:func:`files_read` of the model at ``path`` (parsed, no data read); an unreadable
    file reads only itself."""
    path = Path(path)
    try:
        proto = _read_proto(path)
    except InputError:
        return [Path(os.path.realpath(path))]
    return [Path(os.path.realpath(path)), *tensors.input_files(proto, model_folder(path))]


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
    keep: Collection[Path] | None = None,
    unchanged: Callable[[], None] | None = None,
    weightless: onnx.ModelProto | None = None,
) -> Path | None:
    """Write ``model`` to ``path`` atomically; return the external data file, if any.

    ``external_data=None`` decides: external data if the model already uses it or its
    initializers exceed ``threshold`` bytes. The data file goes beside the output with
    a relative location, named ``<file name>.data`` (``<file name>.<8 hex>.data`` when
    that name is taken): see :func:`qlrewrite.io.atomic.commit_model`, which also removes
    the replaced output's data files except those in ``keep`` (default: the files
    ``model`` itself still reads, so it stays usable). On any failure nothing
    is left behind: neither a partial output nor a temporary file. ``before_commit`` is
    called with the staged model file (data file beside it) before anything is moved
    into place; if it raises, nothing is written (``--verify`` uses it). ``unchanged`` is
    called under the commit lock just before the commit (an in-place rewrite refuses there
    when another run replaced the input meanwhile). ``weightless``: the
    :func:`~qlrewrite.io.weightless.weightless_proto` of ``model`` as it is now, if the caller
    has it: a file without external data is written from it, not serialized again.
    """
    path = _output_path(path)
    folder = path.parent
    external_data = _uses_external_data(model, path, external_data, threshold)
    if keep is None:
        keep = tensors.files_held(model)
    data_name = atomic.free_data_name(folder, path.name)
    with atomic.Staging(folder, str(path)) as staging:
        staged_model = staging / path.name
        try:
            data = data_name if external_data else None
            _write(model, staged_model, data, max_workers, callback, weightless=weightless)
        except OSError as exc:
            raise atomic.write_error(path, exc) from exc
        atomic._step("staged")
        staged_data = _written_data(staging / data_name)
        for staged in (staged_data, staged_model):
            if staged is not None:
                atomic.fsync_file(staged)
        if before_commit is not None:
            before_commit(staged_model)
        try:
            return atomic.commit_model(
                staged_model, staged_data, path, keep=keep, unchanged=unchanged
            )
        except OSError as exc:
            raise atomic.write_error(path, exc) from exc


def _uses_external_data(
    model: ir.Model, path: Path, external_data: bool | None, threshold: int
) -> bool:
    """Whether the output gets a data file (None: if the model already uses one or its
    initializers exceed ``threshold``); refused inline above 2 GB."""
    if external_data or (external_data is None and tensors.uses_external_data(model)):
        return True
    size = tensors.initializer_bytes(model)  # once: a walk of every initializer
    if external_data is None and size > threshold:
        return True
    if size > EXTERNAL_DATA_THRESHOLD:
        raise InputError(
            f"{path}: initializers exceed 2 GB, which a single ONNX file cannot hold; "
            "drop --no-external-data"
        )
    return False


def _written_data(staged_data: Path) -> Path | None:
    """The staged data file, or None when none was written or it is empty (every tensor
    was small enough to stay in the model: the empty file is removed)."""
    if not staged_data.exists():
        return None
    if staged_data.stat().st_size == 0:
        staged_data.unlink()
        return None
    return staged_data


def _output_path(path: str | os.PathLike) -> Path:
    """``path`` made absolute; refused unless a regular file may be written there."""
    path = Path(path).absolute()
    if not path.parent.is_dir():
        raise InputError(f"{path}: output folder does not exist")
    if path.is_dir():
        raise InputError(f"{path}: is a directory; give a file name for the output")
    where = destination(path)
    if where.stream:
        raise InputError(
            f"{path}: not a regular file (a device, FIFO, socket or a descriptor such as "
            "/dev/stdout); models are written to regular files only"
        )
    if where.link:
        raise InputError(
            f"{path}: is a link; a model and its data file are never written through a link: "
            "give the file itself or another name (nothing written)"
        )
    return path


def _initializers_save_leaves(model: ir.Model) -> set[int]:
    """The initializer tensors onnx_ir's save leaves where they are (those of subgraphs
    inside functions), by identity."""
    return {
        id(value.const_value)
        for scope in iter_graphs(model)
        if scope.ref.in_function and isinstance(scope.graph, ir.Graph)
        for value in scope.graph.initializers.values()
    }


class _Writeback:
    """A save callback that has the system start writing the data file's bytes to disk as
    soon as each tensor is written (at the next tensor's start), then calls ``then``.

    A hint (``posix_fadvise`` DONTNEED, which starts writing back the dirty pages of the
    range and lets the page cache drop them once written): the fsync before the commit
    still waits for every byte, but the disk now works while later tensors are computed
    and copied, instead of all of it at the fsync. Without the call, nothing is done.
    """

    def __init__(self, data: Path, then: SaveCallback | None) -> None:
        self._data = data
        self._then = then
        self._fd: int | None = None
        self._done = 0  # bytes already handed to the system

    def __enter__(self) -> _Writeback:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __call__(self, tensor: ir.TensorProtocol, info: ir.external_data.CallbackInfo) -> None:
        self._advise(info.offset)
        if self._then is not None:
            self._then(tensor, info)

    def _advise(self, upto: int) -> None:
        """Hand the bytes before ``upto`` (all written: tensors are written in order)."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or upto <= self._done:
            return
        with contextlib.suppress(OSError):
            if self._fd is None:
                self._fd = os.open(self._written(), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            advise(self._fd, self._done, upto - self._done, os.POSIX_FADV_DONTNEED)
            self._done = upto

    def _written(self) -> Path:
        """The file being written: onnx_ir writes the data file in a temporary folder
        beside it (``.NAME.XXXXXXXX/NAME``), then moves it to its name; the staging folder
        holds this save's files alone."""
        prefix = f".{self._data.name}."
        for entry in self._data.parent.iterdir():
            if entry.name.startswith(prefix) and (entry / self._data.name).is_file():
                return entry / self._data.name
        return self._data


def _write(
    model: ir.Model,
    staged: Path,
    data_name: str | None,
    max_workers: int | None,
    callback: SaveCallback | None,
    *,
    weightless: onnx.ModelProto | None = None,
) -> None:
    # Node attribute tensors (Constant values) in external data, and initializers of
    # subgraphs inside functions, are written into the model: onnx_ir's save moves only
    # the initializers of the main graph and its subgraphs to the new data file.
    if data_name is not None:
        unmoved = _initializers_save_leaves(model)
        with (
            external_in_memory(model, initializers=lambda tensor: id(tensor) in unmoved),
            _Writeback(staged.parent / data_name, callback) as writeback,
        ):
            ir.save(
                model,
                staged,
                external_data=data_name,
                size_threshold_bytes=EXTERNAL_TENSOR_MIN_BYTES,
                max_workers=max_workers,
                callback=writeback,
            )
    else:  # one tensor at a time, not the whole model serialized twice in memory
        save_inline(model, staged, callback=callback, weightless=weightless)
