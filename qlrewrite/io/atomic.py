"""Writing files so that no reader ever sees a partial or mismatched state.

- :class:`Staging`: a hidden folder beside the destination (``.qlrewrite-staging-*``)
  where files are written and flushed before they are moved into place. Its owner holds
  a lock on it for its whole life; a staging folder nobody holds is a leftover of a
  killed run (the kernel drops the lock of a dead process), and the next run into the
  same folder removes it.
- :func:`commit_model`: moves a staged model and its external data file into place.
  The data file gets a name no current file has (``<model>.data``, or
  ``<model>.<8 hex>.data`` when that is taken) and goes in first; the model's rename is
  the single commit point; only then are the data files the replaced model named removed
  (never a file found by its name alone). A commit killed before its model went in
  leaves a journal in its staging folder; the next run into the folder removes the data
  file it names unless a model there reads it, and only if it is still the very file the
  journal recorded (a journal this tool did not write is ignored with a warning).
  A reader sees the old pair or the new pair, never one's model with the other's data,
  whatever kills or concurrent writers do. Commits in one folder take turns (a lock
  on the folder), which also makes removing leftovers safe.
- :class:`PendingFile`: one text file (a report) written the same way.

The journal's format is :mod:`qlrewrite.io.journal`'s; the names of the output and its
data file are :mod:`qlrewrite.io.output_plan`'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import onnx

from qlrewrite.errors import InputError
from qlrewrite.io import reading, wire
from qlrewrite.io.journal import JOURNAL, Foreign, read_journal, unlink_if_same, write_journal
from qlrewrite.io.output_plan import (
    Destination,
    data_names,
    data_stem,
    destination,
    fitted_stem,
    free_data_name,
    is_data_name,
    refuse_long_name,
    usable_data_name,
)
from qlrewrite.text import escape

__all__ = [
    "COMMIT_LOCK_SECONDS",
    "PendingFile",
    "Staging",
    "commit_model",
    "data_stem",
    "fitted_stem",
    "free_data_name",
    "fsync_dir",
    "fsync_file",
    "is_data_name",
    "refuse_long_name",
    "remove_stale",
    "write_error",
]

_STAGING = ".qlrewrite-staging-"
_NEW = ".qlrewrite-new-"
#: A half-created staging folder (killed between creating and locking it) is removed
#: once it is this old: nothing creates one for longer than a moment.
_NEW_STALE_SECONDS = 3600
#: How long a commit waits for another one in the same folder before refusing.
COMMIT_LOCK_SECONDS = 120.0

_SIGNALS = {signal.SIGINT, signal.SIGTERM}
#: Called with the name of each step of a commit (tests inject faults and kills here).
_step: Callable[[str], None] = lambda name: None  # noqa: E731


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def remove_stale(folder: Path) -> list[str]:
    """Remove the staging folders of killed runs in ``folder`` (those nobody holds and
    this user owns); return their names. A live run's staging folder is never touched,
    nor another user's."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.startswith(_NEW):
            if _remove_half_created(entry):
                removed.append(entry.name)
        elif entry.name.startswith(_STAGING) and _remove_unheld(folder, Path(entry.path)):
            removed.append(entry.name)
    return removed


def _remove_half_created(entry: os.DirEntry[str]) -> bool:
    """Remove a staging folder killed before it was locked, once it is old enough."""
    with contextlib.suppress(OSError):
        info = entry.stat(follow_symlinks=False)
        if info.st_uid == os.geteuid() and time.time() - info.st_mtime > _NEW_STALE_SECONDS:
            shutil.rmtree(entry.path)
            return True
    return False


def _remove_unheld(folder: Path, staging: Path) -> bool:
    """Finish or undo the commit of ``staging`` and remove it, if its owner is gone."""
    try:
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_uid != os.geteuid() or not _try_lock(fd):
            return False  # another user's, or its owner is alive
        _remove_uncommitted_data(folder, staging)
        shutil.rmtree(staging, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def _remove_uncommitted_data(folder: Path, staging: Path) -> None:
    """A killed commit (its journal says what it did): if its model went in, remove the
    replaced data files the model there does not name; else remove the data file it
    moved in. A file is removed only if it is still the very file the journal recorded
    (device, inode, size, modification time); files named by the model now in place
    never are. A journal this tool did not write is one warning line, and changes
    nothing."""
    journal = staging / JOURNAL
    try:
        commit = read_journal(journal)
    except Foreign as exc:
        print(
            f"qlrewrite: warning: {escape(str(journal))}: not a commit journal of "
            f"qlrewrite ({exc}); ignored, no file removed",
            file=sys.stderr,
        )
        return
    if commit is None:
        return
    model, data, replaced = commit
    pattern = data_names(model, folder)
    named = set(_named_data_files(folder / model, pattern))
    doomed = replaced if data[0] in named else [data]
    for name, ident in doomed:
        if name not in named and pattern.fullmatch(name):
            unlink_if_same(folder / name, ident)


class Staging:
    """A locked hidden folder in ``folder`` for files about to be moved into place;
    removed (with whatever is left in it) when the block ends."""

    def __init__(self, folder: Path, label: str) -> None:
        self.folder = folder
        self.label = label
        self.path: Path | None = None
        self._fd: int | None = None

    def __enter__(self) -> Path:
        remove_stale(self.folder)
        # No signal between creating the folder and owning it: a leftover is always
        # either locked by its live owner or provably stale.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            self.path = self._create()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return self.path

    def _create(self) -> Path:
        try:
            new = tempfile.mkdtemp(prefix=_NEW, dir=self.folder)
        except OSError as exc:
            raise InputError(
                f"{self.label}: cannot write in {self.folder} ({exc.strerror or exc})"
            ) from exc
        path = self.folder / (_STAGING + Path(new).name.removeprefix(_NEW))
        try:
            self._fd = os.open(new, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            os.rename(new, path)  # only ever seen by others as a locked staging folder
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            shutil.rmtree(path, ignore_errors=True)
            self._close()
            raise
        return path

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def _folder_lock(folder: Path, label: str) -> Iterator[None]:
    """Commits into ``folder`` take turns; refuse after waiting COMMIT_LOCK_SECONDS."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + COMMIT_LOCK_SECONDS
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise InputError(
                    f"{label}: another qlrewrite has been committing into {folder} for "
                    f"{COMMIT_LOCK_SECONDS:.0f} s; nothing written"
                )
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to disk."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries (renames) to disk, where the system allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _model_proto(path: Path) -> onnx.ModelProto:
    """The model at ``path`` (no external data), read through :mod:`qlrewrite.io.reading`."""
    data = reading.read_bytes(path, "model file", reading.MODEL_BYTES)
    return onnx.load_model_from_string(data, format="protobuf")


def _relocate(staged_model: Path, old: str, new: str) -> None:
    """Point the staged model's external data at ``new`` instead of ``old``."""
    proto = _model_proto(staged_model)
    from qlrewrite.io.tensors import proto_tensors

    for _, tensor in proto_tensors(proto):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value == old:
                entry.value = new
    staged_model.write_bytes(proto.SerializeToString())
    fsync_file(staged_model)


def _move_new(source: Path, dest: Path) -> None:
    """Move ``source`` to ``dest``, which must not exist (never replaces a file). The
    file keeps one link (ONNX's loader refuses data files with several)."""
    try:
        os.link(source, dest)
    except FileExistsError:
        raise
    except OSError as exc:  # a file system without hard links
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, "exists", str(dest)) from exc
        os.rename(source, dest)
        return
    os.unlink(source)


def commit_model(
    staged_model: Path,
    staged_data: Path | None,
    dest: Path,
    *,
    keep: Collection[Path] = (),
    unchanged: Callable[[], None] | None = None,
) -> Path | None:
    """Move ``staged_model`` (and ``staged_data``, the file its external data names) to
    ``dest``; return where the data file went. See the module docstring for the order.

    Afterwards the data files the replaced model itself named (``<name>.data`` or
    ``<name>.<8 hex>.data`` beside it, read from that model just before it is replaced)
    are removed, except the files in ``keep`` (what the input reads) and the new one: a
    file is never removed because of its name alone (another model may read it). On a
    failure before the model's rename, the new data file is removed and the existing
    files are as they were. ``unchanged`` is called once the folder is locked (it raises
    to refuse the commit).
    """
    folder = dest.parent
    pattern = data_names(dest.name, folder)
    with _folder_lock(folder, str(dest)):
        _step("locked")
        if unchanged is not None:
            unchanged()
        replaced = _named_data_files(dest, pattern, any_name=True)
        data_dest: Path | None = None
        old_mode: int | None = None
        with contextlib.suppress(OSError):
            old_mode = stat.S_IMODE(os.stat(dest).st_mode)
        try:
            if staged_data is not None:
                name = _ready_data(
                    staged_model, staged_data, dest, pattern, replaced=replaced, keep=keep
                )
                _move_new(staged_data, folder / name)
                data_dest = folder / name
                fsync_dir(folder)
                _step("data-in-place")
            if old_mode is not None:  # an overwritten model keeps its permissions
                os.chmod(staged_model, old_mode)
            _step("before-model-rename")
            os.replace(staged_model, dest)
        except BaseException:
            if data_dest is not None:
                with contextlib.suppress(OSError):
                    data_dest.unlink()
            raise
        fsync_dir(folder)
        _step("model-in-place")
        new_name = data_dest.name if data_dest is not None else ""
        removable = _removable(folder, replaced, new_name, keep, dest=dest, pattern=pattern)
        _unlink_all(folder, removable)
        _step("cleaned")
    return data_dest


def _ready_data(
    staged_model: Path,
    staged_data: Path,
    dest: Path,
    pattern: re.Pattern[str],
    *,
    replaced: Collection[str],
    keep: Collection[Path],
) -> str:
    """Ready the staged data file to move beside ``dest``: the name it takes (a free one,
    the staged model relocated to it, if its own was taken since it was staged), the
    permissions of the data file it replaces (``pattern``: the model's data-file names),
    and the journal of the commit written."""
    folder = dest.parent
    name = staged_data.name
    if not usable_data_name(folder, name, dest.name):  # taken since it was staged
        name = free_data_name(folder, dest.name)
        _relocate(staged_model, staged_data.name, name)
        _step("relocated")
    data_mode = _data_mode(folder, pattern)
    if data_mode is not None:
        os.chmod(staged_data, data_mode)
    doomed = _removable(folder, replaced, name, keep, dest=dest, pattern=pattern)
    write_journal(staged_model.parent, (name, staged_data), dest.name, doomed)
    return name


def _data_mode(folder: Path, pattern: re.Pattern[str]) -> int | None:
    """The permissions of the data file being replaced (the new one keeps them)."""
    for entry in sorted(os.scandir(folder), key=lambda e: len(e.name)):
        if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                return stat.S_IMODE(entry.stat().st_mode)
    return None


def _named_data_files(dest: Path, pattern: re.Pattern[str], *, any_name: bool = False) -> list[str]:
    """The data files beside ``dest`` that the model now at ``dest`` names (its external
    data locations with a data-file name of ``dest``; with ``any_name`` every plain file
    name of its folder); none when there is no readable model there."""
    if not dest.is_file():
        return []
    names = _locations(dest)
    if names is None:  # not a model: it names nothing
        return []
    return sorted(
        n for n in names if pattern.fullmatch(n) or (any_name and _is_name(n) and n != dest.name)
    )


def _is_name(name: str) -> bool:
    """A file name of the folder itself (no folder part, not ``.`` or ``..``)."""
    return Path(name).name == name and name not in ("", ".", "..")


def _locations(model: Path) -> set[str] | None:
    """The external data locations ``model`` names (None: not a readable model)."""
    from qlrewrite.io.tensors import proto_tensors

    try:
        proto = _model_skeleton(model)
    except Exception:  # not a model, or not a file qlrewrite reads: it names nothing
        return None
    return {
        entry.value
        for _, tensor in proto_tensors(proto)
        for entry in tensor.external_data
        if entry.key == "location" and entry.value != _LEFT_OUT
    }


#: Where a model read by :func:`_model_skeleton` says its left-out inline data is: never a
#: data file's name (a colon is in none this tool writes, and the walk's mark is ignored).
_LEFT_OUT = "qlrewrite:left-out"


def _model_skeleton(path: Path) -> onnx.ModelProto:
    """The model at ``path`` without its inline tensors' data (a model of 1 MiB or more is
    walked, as :func:`qlrewrite.io.model_io.load` reads it: the model a commit replaces
    may hold gigabytes inline, and only its external data locations are wanted)."""
    from qlrewrite.io.data_problems import stored_size
    from qlrewrite.io.limits import LIMITS

    with reading.opened(path, "model file", reading.MODEL_BYTES) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size >= 1 << 20:
            budget = 8 * LIMITS.get().max_nodes
            window = wire.Window(handle.fileno(), size)
            walk = wire.Skeleton(window, _LEFT_OUT, 1024, budget, stored_size)
            with contextlib.suppress(wire.Malformed):
                return onnx.load_model_from_string(walk.walk(size), format="protobuf")
    return _model_proto(path)


#: A model beside the output larger than this is not read to learn whether it names a
#: replaced data file of another name: that file is then kept.
OTHER_MODEL_READ_LIMIT = 64 * 1024 * 1024


def _named_by_others(folder: Path, names: Collection[str], model_name: str) -> set[str]:
    """Of ``names``, those another model of ``folder`` (``*.onnx`` other than
    ``model_name``) names, or may name: every one when such a model is too large to read
    (:data:`OTHER_MODEL_READ_LIMIT`) or cannot be listed."""
    if not names:
        return set()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return set(names)
    named: set[str] = set()
    for entry in entries:
        if entry.name == model_name or not entry.name.lower().endswith(".onnx"):
            continue
        try:
            if not entry.is_file() or entry.stat().st_size > OTHER_MODEL_READ_LIMIT:
                return set(names)
        except OSError:
            return set(names)
        named |= (_locations(Path(entry.path)) or set()) & set(names)
    return named


def _removable(
    folder: Path,
    replaced: Collection[str],
    new: str,
    keep: Collection[Path],
    *,
    dest: Path,
    pattern: re.Pattern[str],
) -> list[str]:
    """Of the data files the replaced model named, those to remove once the new model is
    in: not the new data file, not a file in ``keep``, only plain files. A file whose name
    is not one of ``dest``'s data-file names (``pattern``: a producer's ``weights.bin``)
    is removed only when no other name links to it and no other model of the folder
    names it."""
    kept = {os.path.realpath(p) for p in keep}
    candidates = [
        name
        for name in replaced
        if name != new
        and os.path.realpath(folder / name) not in kept
        and (folder / name).is_file()
        and not (folder / name).is_symlink()
    ]
    foreign = [n for n in candidates if not pattern.fullmatch(n)]
    lone = [n for n in foreign if _single_link(folder / n)]
    shared = _named_by_others(folder, lone, dest.name)
    return [n for n in candidates if pattern.fullmatch(n) or (n in lone and n not in shared)]


def _single_link(path: Path) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_nlink == 1
    except OSError:
        return False


def _unlink_all(folder: Path, names: Collection[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(folder / name)


def _write_synced(path: Path, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


class PendingFile:
    """A text file (a report) staged beside ``path``: :meth:`commit` moves it into place
    atomically; leaving the block without committing leaves ``path`` untouched.

    Creating it checks that the folder exists and takes files, so a report that cannot
    be written refuses before anything else is. A stream (a FIFO, device or socket, or a
    path whose links lead through ``/proc/*/fd``, ``/dev/fd`` or ``/dev/std*``: see
    :func:`~qlrewrite.io.output_plan.destination`) is written into at commit, never
    replaced; ``/dev/stdout`` and the like through this process's own descriptor. A link
    of this user's to a regular file is written through: the file it points to is
    replaced atomically, the link stays. Any other link is refused.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        refuse_long_name(self.path, "the report")
        self._text: str | bytes | None = None
        where = destination(self.path)
        self._stream, self._fd = where.stream, where.fd
        if self._stream:
            _check_descriptor(self.path, self._fd)
            return
        self._target = _link_target(where) if where.link else self.path
        folder = self._target.absolute().parent
        if not folder.is_dir():
            raise InputError(f"{path}: output folder does not exist")
        if self._target.is_dir():
            raise InputError(f"{path}: is a directory; give a file name")
        self._staging = Staging(folder, str(path))
        self._staged = self._staging.__enter__() / self._target.name
        try:
            self._staged.write_bytes(b"")
        except OSError as exc:
            self.discard()
            raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from exc

    def __enter__(self) -> PendingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def write(self, text: str | bytes) -> None:
        """Stage ``text`` (UTF-8; or bytes: an image) flushed to disk: nothing is visible
        at ``path`` yet."""
        if self._stream:
            self._text = text
            return
        try:
            _write_synced(self._staged, text)
        except OSError as exc:
            raise write_error(self.path, exc, "the report") from exc

    def commit(self) -> None:
        """Move the staged text to ``path`` (permissions: the replaced file's, else the
        umask's, as for any file the user creates); into a stream, written."""
        if self._stream:
            self._write_stream()
            return
        try:
            mode = stat.S_IMODE(os.stat(self._target).st_mode)
        except OSError:
            mode = 0o666 & ~_umask()
        try:
            os.chmod(self._staged, mode)
            os.replace(self._staged, self._target)
        except OSError as exc:
            raise write_error(self.path, exc, "the report") from exc
        fsync_dir(self._target.absolute().parent)
        self.discard()

    def _write_stream(self) -> None:
        """The text into the stream: through this process's descriptor when ``path``
        names one (after what Python buffered for it), else opened without truncating
        or creating anything."""
        try:
            if self._fd is not None:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                fd = os.dup(self._fd)
            else:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC)
            text = self._text or b""
            with open(fd, "wb") as out:
                out.write(text.encode() if isinstance(text, str) else text)
        except OSError as exc:
            raise write_error(self.path, exc, "the report") from exc

    def discard(self) -> None:
        """Remove the staged file (``path`` as it was)."""
        if not self._stream:
            self._staging.__exit__(None, None, None)


def _check_descriptor(path: Path, fd: int | None) -> None:
    """Refuse a stream that names a descriptor this process does not have open."""
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError as exc:
            raise InputError(f"{path}: names descriptor {fd}, which is not open") from exc


def _link_target(where: Destination) -> Path:
    """The file a report is written to through the link ``where.given``: refused when
    the link leads nowhere (a report would create a file where a link says) or is
    another user's (as the kernel's ``protected_symlinks`` would)."""
    given = where.given
    if where.path is None:
        raise InputError(
            f"{given}: is a link to a file that does not exist; a report is written through "
            "a link only into an existing file (nothing written)"
        )
    if os.lstat(given).st_uid != os.geteuid():
        raise InputError(
            f"{given}: is another user's link; a report is never written through it "
            "(nothing written)"
        )
    return where.path


def write_error(path: Path, exc: OSError, what: str = "the output") -> InputError:
    """A failed write as one plain sentence (a full disk, a quota, permissions)."""
    reason = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EACCES: "permission denied",
        errno.EROFS: "the file system is read-only",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return InputError(f"{path}: cannot write {what}: {reason}; nothing written")
