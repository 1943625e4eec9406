"""Where a model was read from: the file and the proto as read, kept for the model.

:func:`qlrewrite.io.model_io.load` records a :class:`Source` in this module's registry (a
weak mapping from each loaded ``ir.Model`` to its source, gone with the model: nothing is
written on the model itself); the checker, ``info`` and the
pipeline read it (a weight-free copy for shape inference without serializing again,
the folder external data is resolved against, the files an output must not overwrite).
The tensors left in the file when it was read (its weights) are read from it through its
:class:`InlineFile`, which refuses a file replaced or changed since.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import secrets
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import onnx
import onnx_ir as ir

from qlrewrite.errors import InputError
from qlrewrite.io.wire import LeftOut
from qlrewrite.toolkit import model_folder

__all__ = ["InlineFile", "Source", "set_source", "source_of"]

#: Marks, in a skeleton proto, a tensor whose data is in the model file itself (a NUL:
#: no external data location a file names can be one, see
#: :func:`qlrewrite.io.tensors.external_path`).
_INLINE_MARK = "\0qlrewrite-inline:"
#: Bytes read at once when an inline tensor is copied.
_COPY_STEP = 4 << 20


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


class InlineFile:
    """A model file whose tensors are read when needed, as the walk saw it: its identity
    (device, inode, size, modification time) and where each tensor left out of the
    skeleton is (:class:`~qlrewrite.io.wire.LeftOut`, by TensorProto position).

    The file is opened again for each read (nothing stays open: a command reading
    thousands of models holds no descriptor for them); a file replaced or changed since the
    walk is refused (InputError, one line), never read. Memory-mapped data keeps its map.
    """

    def __init__(self, path: Path, info: os.stat_result, left_out: dict[int, LeftOut]) -> None:
        self.path = path
        self.marker = _INLINE_MARK + secrets.token_hex(8)
        self.left_out = left_out
        self._identity = _identity(info)

    def _changed(self, how: str) -> InputError:
        return InputError(f"{self.path}: {how} since it was read; run the command again")

    @contextlib.contextmanager
    def opened(self, left: LeftOut) -> Iterator[int]:
        """The file open (a descriptor), once it is known to be the file walked, as walked
        where ``left`` is read: same device, inode, size and time, the same key and length
        before the bytes."""
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except OSError as exc:
            raise self._changed(f"gone ({exc.strerror or exc})") from exc
        try:
            found = _identity(os.fstat(fd))
            if found[:2] != self._identity[:2]:
                raise self._changed("replaced")
            head = len(left.head)
            if found != self._identity or os.pread(fd, head, left.read_at - head) != left.head:
                raise self._changed("changed")
            yield fd
        finally:
            os.close(fd)

    def read(self, left: LeftOut, start: int, length: int) -> Iterator[bytes]:
        """``length`` bytes at ``start`` of the file, in steps (``left``: what they are
        part of, checked first)."""
        with self.opened(left) as fd:
            while length > 0:
                chunk = os.pread(fd, min(length, _COPY_STEP), start)
                if not chunk:
                    raise self._changed("shortened")
                start, length = start + len(chunk), length - len(chunk)
                yield chunk

    def copy(self, left: LeftOut, file: BinaryIO) -> None:
        """Write the raw data of ``left`` into ``file`` (at its position): copied by the
        kernel (``copy_file_range``) where it can, else read and written in steps."""
        assert left.data is not None
        start, length = left.data, left.data_length
        copy_range = getattr(os, "copy_file_range", None)
        try:
            target = file.fileno()
        except (AttributeError, OSError, ValueError):  # not a file: in steps
            copy_range = None
        if copy_range is not None:
            file.flush()
            at = file.tell()
            with self.opened(left) as fd, contextlib.suppress(OSError):  # else: in steps
                while length > 0:
                    done = copy_range(fd, target, length, offset_src=start, offset_dst=at)
                    if done == 0:
                        raise self._changed("shortened")
                    start, length, at = start + done, length - done, at + done
            file.seek(at)
        for chunk in self.read(left, start, length):
            file.write(chunk)

    def mapped(self, left: LeftOut) -> mmap.mmap:
        """The whole file memory-mapped (read only), checked where ``left`` is read."""
        with self.opened(left) as fd:
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)


@dataclasses.dataclass(frozen=True)
class Source:
    """A model's file (None: a proto handed in, read as if from the current folder) and
    its proto as read (without external data, and without the data of inline tensors
    above a few bytes: see :attr:`inline`; the model may have changed since)."""

    path: Path | None
    proto: onnx.ModelProto
    #: What was derived from ``proto`` once, by whoever derived it (data problems, ...).
    facts: dict[str, object] = dataclasses.field(default_factory=dict, compare=False)
    #: Where the tensors left out of ``proto`` are read from (None: nothing left out).
    inline: InlineFile | None = None

    @property
    def folder(self) -> Path:
        """The folder external data locations are relative to: the file's folder as
        named (not through a link to the file, as ONNX Runtime resolves them)."""
        return model_folder(self.path) if self.path is not None else Path.cwd()


#: Each loaded model's :class:`Source`, held as long as the model lives (a source holds
#: the proto as read, never the model, so an entry goes with its model).
_SOURCES: weakref.WeakKeyDictionary[ir.Model, Source] = weakref.WeakKeyDictionary()


def source_of(model: ir.Model) -> Source | None:
    """The :class:`Source` recorded for ``model`` (None: built in memory)."""
    return _SOURCES.get(model)


def set_source(model: ir.Model, source: Source | None) -> None:
    """Record where ``model`` was read from (a model made from a loaded one keeps its
    source)."""
    if source is not None:
        _SOURCES[model] = source
