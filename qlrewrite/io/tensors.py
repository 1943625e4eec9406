"""Tensors and where their data lives: the one home of external and inline data, model walks.

- Walks: every graph of a ModelProto (main, functions, subgraphs nested anywhere) and
  every tensor in it (initializers, TENSOR / TENSORS attributes); the same over an
  ``ir.Model``, with a way to replace each tensor. Iterative: nesting depth costs no
  recursion.
- The size of a tensor from its shape and type (:func:`tensor_bytes`, through
  :func:`qlrewrite.toolkit.nbytes`).
- External data: :func:`external_path` is the one function that turns a tensor's
  ``location`` into a file, against the model's folder, or refuses it;
  :func:`resolve_external` makes every external tensor of a loaded model open its data
  through it (:mod:`qlrewrite.io.data_problems` validates every tensor without reading data);
  :func:`input_files` lists every file a model reads (the guards against overwriting
  an input use it).
- Inline data: a tensor the loader left in the model file (:mod:`qlrewrite.io.wire`'s
  skeleton) is an :class:`InlineTensor`, an external tensor of the model file itself: read
  when needed through the same code (mapped or copied from its file, released after use),
  judged by the same checks; :func:`is_external` tells the two apart.
- :func:`external_in_memory`: external tensors held in memory where they cannot be
  referenced (weight-free protos, attribute tensors of saved outputs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import mmap
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnx_ir as ir
from onnx_ir import _type_casting

from qlrewrite.io import reading
from qlrewrite.io.source import InlineFile
from qlrewrite.toolkit import GraphRef, all_graphs, nbytes, proto_graphs

__all__ = [
    "ExternalDataError",
    "InlineTensor",
    "TensorSlot",
    "data_file",
    "external_in_memory",
    "external_info",
    "external_path",
    "files_held",
    "in_memory",
    "initializer_bytes",
    "input_files",
    "ir_tensor_slots",
    "is_external",
    "mapped_bytes",
    "packed_bytes",
    "proto_tensors",
    "resolve_external",
    "serialize_without",
    "tensor_bytes",
    "uses_external_data",
]


# --------------------------------------------------------------------------- sizes


def tensor_bytes(tensor: ir.TensorProtocol) -> int:
    """Bytes of ``tensor`` from its shape and type (0 for strings): reads no data."""
    if isinstance(tensor, ir.TensorProtoTensor):  # as read: the proto's dims, no Shape made
        proto = tensor.raw
        return nbytes(ir.DataType(proto.data_type), proto.dims) or 0
    size = nbytes(tensor.dtype, [d if isinstance(d, int) else 0 for d in tensor.shape])
    return size or 0


# --------------------------------------------------------------------------- proto walks


def packed_bytes(tensor: ir.TensorProtocol) -> npt.NDArray[np.uint8]:
    """The bytes of ``tensor`` as ONNX stores them (values under 8 bits packed, low bits
    first), as uint8; an external tensor's are copied from its file, not unpacked and packed
    again as :meth:`~onnx_ir.ExternalTensor.tobytes` would."""
    if isinstance(tensor, ir.ExternalTensor):
        buffer = io.BytesIO()
        tensor.tofile(buffer)
        return np.frombuffer(buffer.getbuffer(), np.uint8)
    if isinstance(tensor, ir.PackedTensor):
        return np.asarray(tensor.numpy_packed(), np.uint8)
    return np.frombuffer(tensor.tobytes(), np.uint8)


def proto_tensors(proto: onnx.ModelProto) -> Iterator[tuple[GraphRef, onnx.TensorProto]]:
    """Every dense tensor of ``proto`` with its graph: initializers and TENSOR / TENSORS
    attribute values, in every graph, function and subgraph."""
    for ref, graph in proto_graphs(proto):
        if isinstance(graph, onnx.GraphProto):
            for tensor in graph.initializer:
                yield ref, tensor
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield ref, attr.t
                for tensor in attr.tensors:
                    yield ref, tensor


# --------------------------------------------------------------------------- ir walks


@dataclasses.dataclass(slots=True)
class TensorSlot:
    """Where a tensor of a model sits: an initializer's value or a node's attribute."""

    tensors: tuple[ir.TensorProtocol, ...]
    value: ir.Value | None = None  # an initializer
    node: ir.Node | None = None  # a TENSOR / TENSORS attribute of this node
    attr: ir.Attr | None = None

    def replace(self, tensors: Sequence[ir.TensorProtocol]) -> None:
        """Put ``tensors`` (one per tensor of the slot, in order) in the slot's place."""
        if self.value is not None:
            self.value.const_value = tensors[0]
            return
        assert self.node is not None and self.attr is not None
        many = self.attr.type == ir.AttributeType.TENSORS
        value = list(tensors) if many else tensors[0]
        self.node.attributes[self.attr.name] = ir.Attr(self.attr.name, self.attr.type, value)


def ir_tensor_slots(
    model: ir.Model, *, attributes: bool = True, external_only: bool = False
) -> Iterator[TensorSlot]:
    """Every tensor the model holds, in one walk of its graphs (functions' subgraphs
    included): each graph's initializers, then with ``attributes`` its nodes' TENSOR /
    TENSORS attribute values. With ``external_only``, only the slots holding an external
    tensor."""
    for container in all_graphs(model):
        graph = isinstance(container, ir.Graph)
        for value in container.initializers.values() if graph else ():
            tensor = value.const_value
            if tensor is not None and (not external_only or isinstance(tensor, ir.ExternalTensor)):
                yield TensorSlot((tensor,), value=value)
        for node in container if attributes else ():
            for attr in node.attributes.values():
                if attr.is_ref() or attr.type not in _TENSOR_ATTRIBUTES:
                    continue
                many = attr.type == ir.AttributeType.TENSORS
                values = tuple(attr.value) if many else (attr.value,)
                if not external_only or any(isinstance(t, ir.ExternalTensor) for t in values):
                    yield TensorSlot(values, node=node, attr=attr)


#: The attribute types whose value is a tensor or tensors.
_TENSOR_ATTRIBUTES = (ir.AttributeType.TENSOR, ir.AttributeType.TENSORS)


def _initializer_tensors(model: ir.Model) -> Iterator[ir.TensorProtocol]:
    for container in all_graphs(model):
        if isinstance(container, ir.Graph):
            for value in container.initializers.values():
                if value.const_value is not None:
                    yield value.const_value


def uses_external_data(model: ir.Model) -> bool:
    """True if any initializer of the model lives in an external data file."""
    return any(is_external(t) for t in _initializer_tensors(model))


def initializer_bytes(model: ir.Model) -> int:
    """Total bytes of the model's initializers (from shapes: reads no data)."""
    return sum(tensor_bytes(t) for t in _initializer_tensors(model))


# --------------------------------------------------------------------------- locations


class ExternalDataError(ValueError):
    """An external data location that cannot be used: ``kind`` is external-missing or
    external-escapes (see :class:`~qlrewrite.io.data_problems.DataProblem`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _cache_repo_root(folder: str) -> str | None:
    """The repository folder of a Hugging Face cache (``<repo>/snapshots/<revision>/...``
    with ``<repo>/blobs``) that ``folder`` lies in, or None."""
    parts = Path(folder).parts
    for index in range(len(parts) - 2, 0, -1):
        if parts[index] == "snapshots":
            repo = os.path.join(*parts[:index])
            if os.path.isdir(os.path.join(repo, "blobs")):
                return repo
    return None


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def external_path(location: str, folder: str | os.PathLike) -> Path:
    """The file an external data ``location`` names, against the model's ``folder``.

    The one place a location becomes a path. Refused (:class:`ExternalDataError`): an
    absolute location, one that leaves ``folder`` by its name (``..``), one whose links
    lead out of ``folder`` (in a Hugging Face cache, links into the repository's
    ``blobs`` folder are followed, as ONNX Runtime does), a missing file, and anything
    that is not a regular file (a FIFO or a device would block or never end). Hard
    links are files of the folder, as for ONNX Runtime.
    """
    base = os.path.abspath(folder)
    if not location:
        raise ExternalDataError("external-missing", "external data without a location")
    if "\0" in location:
        raise ExternalDataError(
            "external-missing",
            f"external data location {location!r} cannot be used (it holds a NUL character)",
        )
    if os.path.isabs(location) or Path(location).drive:
        raise ExternalDataError(
            "external-escapes", f"external data location '{location}' is an absolute path"
        )
    target = os.path.normpath(os.path.join(base, location))
    if not _inside(target, base):
        raise ExternalDataError(
            "external-escapes", f"external data location '{location}' escapes the model folder"
        )
    try:
        real = os.path.realpath(target, strict=False)
        root = _cache_repo_root(base) or base
        if not _inside(real, os.path.realpath(root)):
            raise ExternalDataError(
                "external-escapes",
                f"external data location '{location}' is a link that leads out of the model folder",
            )
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise ExternalDataError(
            "external-missing", f"external data file '{location}' not found"
        ) from None
    except OSError as exc:  # a name too long, a loop of links, no permission
        raise ExternalDataError(
            "external-missing",
            f"external data location '{location}' cannot be used ({exc.strerror or exc})",
        ) from exc
    if stat.S_ISDIR(mode):
        raise ExternalDataError(
            "external-missing", f"external data location '{location}' is a folder"
        )
    if not stat.S_ISREG(mode):
        raise ExternalDataError(
            "external-missing", f"external data location '{location}' is not a regular file"
        )
    return Path(real)


def data_file(tensor: ir.ExternalTensor) -> Path:
    """The file an external tensor of a loaded model reads, through
    :func:`external_path` (for code that maps the file itself)."""
    if not tensor.base_dir:
        raise ExternalDataError(
            "external-missing", f"tensor '{tensor.name}': external data without a model folder"
        )
    return external_path(os.fspath(tensor.location), tensor.base_dir)


class _FolderTensor(ir.ExternalTensor):
    """An external tensor whose file is checked by :func:`external_path` each time it
    is opened (instead of onnx_ir's check, which refuses hard links and the links of a
    Hugging Face cache)."""

    def _check_path_containment(self) -> None:
        external_path(os.fspath(self.location), self.base_dir)


#: Inline tensors this large are memory-mapped when read; smaller ones are read (mapping
#: one brings a whole folio of the page cache, up to megabytes, into the process).
_MAP_MIN_BYTES = 4 << 20


class InlineTensor(ir.ExternalTensor):
    """A tensor stored inside the model file, read from it when needed, as an external
    tensor is read from its data file: raw data memory-mapped at its position, a tensor in
    a typed field (float_data, int32_data, ...) parsed from its message. Its
    :meth:`materialized` form is the TensorProto as the file holds it."""

    __slots__ = ("_file", "_left")

    def __init__(self, file: InlineFile, tensor: ir.ExternalTensor) -> None:
        left = file.left_out[tensor.offset or 0]
        raw = left.data is not None
        super().__init__(
            file.marker,
            left.data if raw else left.start,
            left.data_length if raw else left.length,
            tensor.dtype,
            shape=tensor.shape,
            name=tensor.name or "",
            doc_string=tensor.doc_string,
            metadata_props=dict(tensor.metadata_props) or None,
        )
        self._file = file
        self._left = left

    @property
    def file(self) -> Path:
        """The model file the tensor is read from."""
        return self._file.path

    @property
    def path(self) -> str:
        """The model file (its location is a mark no file has: it is never written as a
        reference to a data file)."""
        return os.fspath(self._file.path)

    def _check_path_containment(self) -> None:
        """Read from the model file itself (checked as walked), never from a location."""

    def materialized(self) -> ir.TensorProtoTensor:
        """The tensor as the file holds it (its TensorProto, read and parsed), named as
        this tensor is."""
        left = self._left
        proto = onnx.TensorProto()
        proto.ParseFromString(b"".join(self._file.read(left, left.start, left.length)))
        tensor = ir.TensorProtoTensor(proto)
        tensor.name = self.name
        return tensor

    def without_data(self) -> onnx.TensorProto | None:
        """The tensor's TensorProto as the file holds it, without its raw_data (None: its
        values are in a typed field)."""
        left = self._left
        if left.data is None:
            return None
        key_at = left.data - len(left.head)
        end = left.start + left.length
        before = self._file.read(left, left.start, key_at - left.start)
        after = self._file.read(
            left, left.data + left.data_length, end - left.data - left.data_length
        )
        proto = onnx.TensorProto()
        proto.ParseFromString(b"".join([*before, *after]))
        return proto

    def _load(self) -> None:
        self._check_validity()
        if self._left.data is None:
            self._array = self.materialized().numpy()
            return
        if self._left.data_length < _MAP_MIN_BYTES:  # read: a map would bring in more
            data = b"".join(self._file.read(self._left, self._left.data, self._left.data_length))
            self._array = _unpacked(data, 0, self.dtype, self.shape)
            return
        self.raw = self._file.mapped(self._left)
        self._array = _unpacked(self.raw, self._left.data, self.dtype, self.shape)

    def stored(self) -> npt.NDArray[np.uint8]:
        """The tensor's bytes as ONNX stores them (values under 8 bits packed), as uint8:
        memory-mapped (the map closes when the array is dropped) or parsed."""
        if self._left.data is None:
            return np.frombuffer(self.tobytes(), np.uint8)
        mapped = self._file.mapped(self._left)
        return np.frombuffer(mapped, np.uint8, self._left.data_length, self._left.data)

    def tobytes(self) -> bytes:
        if self._left.data is None:
            return self.materialized().tobytes()
        return b"".join(self._file.read(self._left, self._left.data, self._left.data_length))

    def tofile(self, file: Any) -> None:  # a binary file object
        if self._left.data is None:
            file.write(self.tobytes())
            return
        self._file.copy(self._left, file)


def _unpacked(raw: mmap.mmap, offset: int, dtype: ir.DataType, shape: ir.Shape) -> npt.NDArray[Any]:
    """The array of ``dtype`` and ``shape`` stored at ``offset`` of ``raw`` (values under
    8 bits packed, as ONNX stores them), as onnx_ir reads external data."""
    dims = shape.numpy()
    if dtype.bitwidth < 8 or dtype.bitwidth == 6:
        packed = np.frombuffer(raw, np.uint8, count=nbytes(dtype, dims) or 0, offset=offset)
        unpack = {4: _type_casting.unpack_4bitx2, 2: _type_casting.unpack_2bitx4}.get(
            dtype.bitwidth, _type_casting.unpack_6bit
        )
        return unpack(packed, dims).view(dtype.numpy())
    count = math.prod(dims)
    array = np.frombuffer(raw, np.dtype(dtype.numpy()).newbyteorder("<"), count, offset)
    return array.reshape(dims)


def mapped_bytes(tensor: ir.ExternalTensor) -> npt.NDArray[np.uint8]:
    """The bytes of an external or inline tensor as ONNX stores them, as a 1-D uint8
    array memory-mapped from its file (the map closes when the array is dropped, so the
    pages read do not stay resident)."""
    length = tensor_bytes(tensor)
    if length == 0:
        return np.empty(0, np.uint8)
    if isinstance(tensor, InlineTensor):
        return tensor.stored()
    path = data_file(tensor)  # the model's folder only
    with reading.opened(path, "external data file", None) as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, np.uint8, count=length, offset=tensor.offset or 0)


def is_external(tensor: ir.TensorProtocol) -> bool:
    """True if ``tensor`` lives in an external data file (not inside the model file)."""
    return isinstance(tensor, ir.ExternalTensor) and not isinstance(tensor, InlineTensor)


def _anchored(tensor: ir.ExternalTensor, folder: str) -> ir.ExternalTensor:
    return _FolderTensor(
        tensor.location,
        tensor.offset,
        tensor.length,
        tensor.dtype,
        shape=tensor.shape,
        name=tensor.name or "",
        doc_string=tensor.doc_string,
        metadata_props=dict(tensor.metadata_props) or None,
        base_dir=folder,
    )


def resolve_external(
    model: ir.Model, folder: str | os.PathLike, inline: InlineFile | None = None
) -> int:
    """Make every external tensor ``model`` can reach (initializers and attribute
    tensors, in graphs, subgraphs and functions, nested anywhere) open its data through
    :func:`external_path` against ``folder``, and every tensor ``inline`` left out of the
    skeleton read from the model file (:class:`InlineTensor`). Returns how many slots
    changed."""
    folder = os.path.abspath(folder)

    def resolved(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
        if not isinstance(tensor, ir.ExternalTensor):
            return tensor
        if inline is not None and tensor.location == inline.marker:
            return InlineTensor(inline, tensor)
        return _anchored(tensor, folder)

    count = 0
    for slot in list(ir_tensor_slots(model, external_only=True)):
        slot.replace([resolved(t) for t in slot.tensors])
        count += 1
    return count


def files_held(model: ir.Model) -> list[Path]:
    """The files the external tensors of an in-memory model still read (resolved)."""
    found = {
        os.path.realpath(tensor.file if isinstance(tensor, InlineTensor) else tensor.path)
        for slot in ir_tensor_slots(model, external_only=True)
        for tensor in slot.tensors
        if isinstance(tensor, ir.ExternalTensor)
    }
    return [Path(p) for p in sorted(found)]


def external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    """The key-value pairs of a TensorProto's external_data (location, offset, length)."""
    return {entry.key: entry.value for entry in tensor.external_data}


def input_files(proto: onnx.ModelProto, folder: str | os.PathLike) -> list[Path]:
    """Every file the model's tensors read (resolved), once each, in order: initializers,
    Constant values and other tensor attributes, in every graph, subgraph and function.
    Locations that :func:`external_path` refuses are left out (nothing reads them)."""
    found: dict[str, Path] = {}
    for _, tensor in proto_tensors(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = external_info(tensor).get("location", "")
        if location in found:
            continue
        with contextlib.suppress(ExternalDataError):
            found[location] = external_path(location, folder)
    return list(dict.fromkeys(found.values()))


# --------------------------------------------------------------------------- in memory


def in_memory(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    """``tensor`` held in memory: an inline tensor as the model file holds it, an external
    one read in; any other as it is."""
    if isinstance(tensor, InlineTensor):
        return tensor.materialized()
    if not isinstance(tensor, ir.ExternalTensor):
        return tensor
    return ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=tensor.name)


@contextlib.contextmanager
def external_in_memory(
    model: ir.Model,
    *,
    initializers: Callable[[ir.TensorProtocol], bool] = lambda tensor: False,
) -> Iterator[None]:
    """Within the block, external attribute tensors (and the external initializers for
    which ``initializers(tensor)`` is true) are in-memory copies; restored afterwards.

    A serialized proto handed to ONNX's checker, shape inference or version converter
    has no folder to resolve external data against, and onnx_ir's save writes only
    initializers to the external data file.
    """
    swapped: list[tuple[TensorSlot, Iterable[ir.TensorProtocol]]] = []
    try:
        for slot in list(ir_tensor_slots(model, external_only=True)):
            if slot.value is not None and not initializers(slot.tensors[0]):
                continue
            copies = [in_memory(t) for t in slot.tensors]
            swapped.append((slot, slot.tensors))
            slot.replace(copies)
        yield
    finally:
        for slot, tensors in reversed(swapped):
            if slot.value is not None:
                slot.value.const_value = next(iter(tensors))
            else:
                assert slot.node is not None and slot.attr is not None
                slot.node.attributes[slot.attr.name] = slot.attr


def serialize_without(
    model: ir.Model, values: Iterable[ir.Value], placeholder: str
) -> onnx.ModelProto:
    """``model`` serialized with the tensors of ``values`` (initializers) left unread:
    each stands in the proto as an external tensor at location ``placeholder`` with its
    name, type and shape. Other external tensors are read in (:func:`external_in_memory`);
    the model is left as it was."""
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    try:
        for value in values:
            tensor = value.const_value
            assert tensor is not None
            swapped.append((value, tensor))
            value.const_value = ir.ExternalTensor(
                placeholder,
                0,
                tensor.nbytes,
                tensor.dtype,
                shape=ir.Shape(tensor.shape.numpy()),
                name=value.name or "",
            )
        with external_in_memory(model, initializers=lambda t: t.location != placeholder):
            return ir.serde.serialize_model(model)
    finally:
        for value, tensor in swapped:
            value.const_value = tensor
