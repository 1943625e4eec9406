"""Opening files to read: one guard for every file qlrewrite reads (models, external
data, configuration files, journals).

Each file is opened without blocking (``O_NONBLOCK``: opening a FIFO never waits for a
writer) and judged on the open descriptor (``fstat``: no race between a check and the
open): only a regular file is read, and only up to the size its kind may have (a link
to ``/dev/zero`` or a 10 GB "configuration file" is refused before a byte is read). A
refusal is one line naming the file (:class:`~qlrewrite.errors.InputError`, exit 2).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from qlrewrite.errors import InputError

__all__ = [
    "CONFIG_BYTES",
    "DOCUMENT_BYTES",
    "JOURNAL_BYTES",
    "MODEL_BYTES",
    "STDIN",
    "opened",
    "read_bytes",
    "read_stdin",
    "read_stream",
    "read_text",
]

#: A model file: protobuf cannot parse a message of 2 GiB or more (weights beyond that
#: live in external data files, which have no cap: they are mapped, never read whole).
MODEL_BYTES = 2**31 - 1
#: How a command line names standard input, as ruff does (``check -``).
STDIN = "-"
#: A configuration file (``pyproject.toml``, ``qlrewrite.toml``, ``--config``).
CONFIG_BYTES = 1 << 20
#: A commit journal of a staging folder (a few names).
JOURNAL_BYTES = 64 << 10
#: A text file the package rewrites for its documentation (``docs/rules.md``).
DOCUMENT_BYTES = 16 << 20


def _refusal(path: str | os.PathLike, what: str, exc: OSError) -> InputError:
    if exc.errno == errno.ENOENT:
        return InputError(f"{path}: no such file")
    if exc.errno == errno.ELOOP:
        return InputError(f"{path}: is a link; a {what} is read only from a plain file")
    return InputError(f"{path}: cannot read {what} ({exc.strerror or exc})")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


@contextlib.contextmanager
def opened(
    path: str | os.PathLike, what: str, max_bytes: int | None, *, follow_links: bool = True
) -> Iterator[BinaryIO]:
    """``path`` open for binary reading, once it is known to be a regular file of at most
    ``max_bytes`` bytes (None: any size). ``what`` names the kind in refusals ("model
    file"). ``follow_links=False``: a link is refused (``O_NOFOLLOW``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _refusal(path, what, exc) from exc
    try:
        _judge(path, fd, what, max_bytes)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def _judge(path: str | os.PathLike, fd: int, what: str, max_bytes: int | None) -> None:
    """Refuse the open ``fd`` unless it is a regular file within ``max_bytes``."""
    mode, size = (info := os.fstat(fd)).st_mode, info.st_size
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        raise InputError(
            f"{path}: not a regular file ({_kind(mode)}); a {what} is read only from a regular file"
        )
    if max_bytes is not None and size > max_bytes:
        raise InputError(
            f"{path}: {size:,} bytes, more than a {what} may hold ({max_bytes:,}); refused unread"
        )


def read_bytes(
    path: str | os.PathLike, what: str, max_bytes: int, *, follow_links: bool = True
) -> bytes:
    """The whole of ``path`` (see :func:`opened`); a file that grows past ``max_bytes``
    while it is read is refused too."""
    with opened(path, what, max_bytes, follow_links=follow_links) as handle:
        try:
            data = _read_bounded(handle, max_bytes)
        except OSError as exc:
            raise _refusal(path, what, exc) from exc
    if data is None:
        raise InputError(f"{path}: more than a {what} may hold ({max_bytes:,} bytes)")
    return data


def read_stream(handle: BinaryIO, label: str, what: str, max_bytes: int) -> bytes:
    """The whole of an open stream (a pipe: ``check -`` reads stdin), at most
    ``max_bytes`` (more is refused, one line naming ``label``), read in 1 MiB steps."""
    try:
        data = _read_bounded(handle, max_bytes)
    except OSError as exc:
        raise InputError(f"{label}: cannot read {what} ({exc.strerror or exc})") from exc
    if data is None:
        raise InputError(f"{label}: more than a {what} may hold ({max_bytes:,} bytes)")
    return data


def read_stdin(what: str, max_bytes: int) -> bytes:
    """Standard input (``-``), judged as a file is: closed, a terminal or a device (a
    ``/dev/zero``) is refused unread, a regular file beyond ``max_bytes`` too; a pipe is
    read up to ``max_bytes`` (more is refused)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None or stream.closed:
        raise InputError(f"{STDIN}: stdin is closed; pipe a {what} into it")
    try:
        fd = stream.fileno()
    except io.UnsupportedOperation:  # a stream in memory (an embedding caller's): read it
        return read_stream(stream, STDIN, what, max_bytes)
    try:
        mode, size = (info := os.fstat(fd)).st_mode, info.st_size
    except (OSError, ValueError):
        raise InputError(f"{STDIN}: stdin is closed; pipe a {what} into it") from None
    if os.isatty(fd):
        raise InputError(f"{STDIN}: stdin is a terminal; pipe a {what} into it")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise InputError(
            f"{STDIN}: stdin is {_kind(mode)}, not a pipe or a file; a {what} is not read from it"
        )
    if stat.S_ISREG(mode) and size > max_bytes:
        raise InputError(
            f"{STDIN}: {size:,} bytes, more than a {what} may hold ({max_bytes:,}); refused unread"
        )
    assert stream is not None
    return read_stream(stream, STDIN, what, max_bytes)


def _read_bounded(handle: BinaryIO, max_bytes: int) -> bytes | None:
    """The whole of ``handle``, or None when it holds more than ``max_bytes``: read to
    its size as ``fstat`` gives it, and one more byte to see it grow (then in 1 MiB
    steps: a pipe, or a file of ``/proc``, says 0); never a buffer of ``max_bytes``
    allocated up front."""
    try:
        size = os.fstat(handle.fileno()).st_size
    except (OSError, ValueError):  # a stream without a descriptor: read in steps
        size = 0
    first = handle.read(min(size, max_bytes) + 1)
    if len(first) > max_bytes:
        return None
    if len(first) <= size:
        return first
    data = bytearray(first)  # grown in place: never the chunks and their join at once
    while len(data) <= max_bytes:
        more = handle.read(min(1 << 20, max_bytes + 1 - len(data)))
        if not more:
            break
        data += more
    return bytes(data) if len(data) <= max_bytes else None


def read_text(
    path: str | os.PathLike, what: str, max_bytes: int, *, follow_links: bool = True
) -> str:
    """:func:`read_bytes` decoded as UTF-8 (anything else is refused)."""
    data = read_bytes(path, what, max_bytes, follow_links=follow_links)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{Path(path)}: not UTF-8 text (byte {exc.start}); not a {what}") from exc
