"""What a run may write: the checks made before anything is written.

- :func:`refuse_if_read`: an output (``-o``, ``--report``, ``--fix-output``, a fixed
  model) may not be a file the run reads (a model, its external data, a configuration
  file), compared by path and by file identity (links, hard links, case-insensitive
  names).
- :func:`refuse_shared_outputs`: two inputs may not map to one output (``m.onnx`` and
  ``m.ONNX`` both to ``m.fix.onnx``), nor an output be another input.
- :func:`refuse_colliding`: two outputs of one run (``-o``, ``--report``,
  ``--fix-output``, a fixed or rewritten model and its external data file) may not be
  one file, compared the same way.
- :func:`is_special`: a FIFO, a device or a socket, which a report is streamed into and
  never replaced (``-o /dev/null``, ``-o /dev/stdout``).
- :func:`destination`: where an output really goes: a stream (a special file, or a path
  whose links lead through ``/proc/*/fd``, ``/dev/fd`` or ``/dev/std*``), a link to a
  file, or a file; never a link renamed over.
- :class:`Snapshot`: the identity of the files a model was read from, to tell before an
  in-place commit that another run replaced them meanwhile.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from qlrewrite.errors import InputError, Refusal

__all__ = [
    "Destination",
    "Output",
    "Snapshot",
    "destination",
    "is_special",
    "output_key",
    "refuse_colliding",
    "refuse_if_read",
    "refuse_shared_outputs",
]


def is_special(path: str | os.PathLike) -> bool:
    """True for an existing FIFO, character or block device or socket (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


#: A path that names an open descriptor: ``/proc/<pid>/fd/N`` (also ``self``,
#: ``thread-self``, ``task/<tid>``), ``/dev/fd/N``, ``/dev/stdin|stdout|stderr``.
_FD_ALIAS = re.compile(
    r"/(?:dev/fd|proc/(?P<pid>self|thread-self|\d+)(?:/task/\d+)?/fd)/(?P<fd>\d+)"
    r"|/dev/std(?P<std>in|out|err)"
)
#: Links followed at most in a chain (the kernel's limit).
_MAX_LINKS = 40


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where an output given as ``given`` goes.

    ``stream``: written into, never replaced (a FIFO, device or socket, or a path that
    names a descriptor); ``fd``: this process's descriptor it names, written directly
    (``/dev/stdout`` is fd 1), else None. ``link``: ``given`` is a link to a file (not a
    stream), ``path`` the file it leads to (None: it leads nowhere). Otherwise ``path``
    is ``given``."""

    given: Path
    path: Path | None
    stream: bool = False
    fd: int | None = None
    link: bool = False


def _chain(path: Path) -> list[str]:
    """``path`` and every path its links lead to, absolute, each also with its folder's
    links resolved (``x/1`` where ``x`` links to ``/proc/self/fd``)."""
    current, seen = os.path.abspath(path), []
    for _ in range(_MAX_LINKS):
        folder = os.path.realpath(os.path.dirname(current))
        seen += [current, os.path.join(folder, os.path.basename(current))]
        try:
            current = os.path.join(os.path.dirname(current), os.readlink(current))
        except OSError:
            break
    return seen


def _fd_of(match: re.Match[str]) -> int | None:
    """The descriptor of this process a matched alias names (None: another process's)."""
    if match["std"]:
        return ("in", "out", "err").index(match["std"])
    pid = match["pid"]
    if pid in (None, "self", "thread-self") or int(pid) == os.getpid():
        return int(match["fd"])
    return None


def destination(path: str | os.PathLike) -> Destination:
    """How an output at ``path`` is written (see :class:`Destination`)."""
    given = Path(path)
    for hop in _chain(given):
        match = _FD_ALIAS.fullmatch(hop)
        if match is not None:
            return Destination(given, given, stream=True, fd=_fd_of(match))
    if is_special(given):
        return Destination(given, given, stream=True)
    if given.is_symlink():
        target = Path(os.path.realpath(given))
        return Destination(given, target if target.exists() else None, link=True)
    return Destination(given, given)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _case_insensitive(folder: Path) -> bool:
    """True if ``folder``'s file system ignores case (probed on an entry of it)."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                other = entry.name.swapcase()
                if other != entry.name:
                    twin = folder / other
                    return twin.exists() and os.path.samefile(entry.path, twin)
    except OSError:
        pass
    return False


def output_key(path: Path) -> tuple[str, str]:
    """Where ``path`` would be written: its real folder and its name (case-folded on a
    case-insensitive file system), so that two spellings of one file compare equal."""
    folder = Path(os.path.realpath(path.absolute().parent))
    name = path.name.casefold() if _case_insensitive(folder) else path.name
    return str(folder), name


def _same(a: Path, b: Path) -> bool:
    ida, idb = _identity(a), _identity(b)
    if ida is not None and ida == idb:
        return True
    return output_key(a) == output_key(b)


def refuse_if_read(output: Path, reads: Iterable[Path], flag: str) -> None:
    """Raise InputError if ``output`` names a file of ``reads`` (models, their data,
    configuration files): ``flag`` names the option in the message."""
    for read in reads:
        if _same(output, Path(read)):
            raise InputError(
                f"{flag} {output} names a model being checked or a file it reads "
                f"({read}); choose another file"
            )


def refuse_shared_outputs(pairs: Sequence[tuple[Path, Path]]) -> None:
    """``pairs``: (input, output) per model. Raise Refusal if two inputs map to one
    output or an output is another input; nothing has been written yet."""
    seen: dict[tuple[str, str], Path] = {}
    inputs = {output_key(src): src for src, _ in pairs}
    for src, out in pairs:
        key = output_key(out)
        if key in seen:
            raise Refusal(
                f"{seen[key]} and {src} would both be fixed into {out}; fix them one at a "
                "time with --fix-output, or rename one (nothing written)"
            )
        other = inputs.get(key)
        if other is not None and not _same(other, src):
            raise Refusal(
                f"the fix of {src} would overwrite {other}, another input (nothing written)"
            )
        seen[key] = src


@dataclasses.dataclass(frozen=True)
class Output:
    """One file a run writes: what it is (``the report``, ``the output``) and where.
    ``data`` (models only): whether a name in the model's folder is one its external
    data file may be given (:func:`qlrewrite.io.atomic.is_data_name`)."""

    label: str
    path: Path
    data: Callable[[str], bool] | None = None


def refuse_colliding(outputs: Sequence[Output]) -> None:
    """Raise InputError if two of ``outputs`` are one file (by path, spelling and file
    identity, as :func:`refuse_if_read`) or one is a data file name of a model among
    them: the later one would overwrite the earlier. Nothing has been written yet."""
    seen: dict[object, Output] = {}
    for later in outputs:
        keys = [output_key(later.path), _identity(later.path)]
        for key in keys:
            earlier = seen.get(key) if key is not None else None
            if earlier is not None:
                raise InputError(
                    f"{later.label} would overwrite {earlier.label}: both are {later.path}; "
                    "give each its own file (nothing written)"
                )
        seen.update((key, later) for key in keys if key is not None)
    _refuse_data_names(outputs)


def _refuse_data_names(outputs: Sequence[Output]) -> None:
    """An output named like the external data file of a model output in its folder."""
    data_like = [o for o in outputs if o.path.name.endswith(".data")]
    for model in outputs if data_like else ():
        if model.data is None:
            continue
        folder = output_key(model.path)[0]
        for other in data_like:
            if (
                other is not model
                and output_key(other.path)[0] == folder
                and model.data(other.path.name)
            ):
                raise InputError(
                    f"{other.label} would overwrite the external data of {model.label} "
                    f"({other.path}); give each its own file (nothing written)"
                )


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The identity and version (device, inode, size, modification time) of the files a
    model was read from, taken at load."""

    files: tuple[tuple[str, tuple[int, int, int, int] | None], ...]

    @classmethod
    def of(cls, paths: Iterable[Path], earlier: Snapshot | None = None) -> Snapshot:
        """The files as they are now; a file already in ``earlier`` keeps the version
        recorded there (the model file, taken before it was read)."""
        known = dict(earlier.files) if earlier is not None else {}
        return cls(tuple((str(p), known.get(str(p), _version(p))) for p in paths))

    def changed(self) -> str | None:
        """The first file that is no longer as it was at :meth:`of` (None: none)."""
        for path, version in self.files:
            if _version(Path(path)) != version:
                return path
        return None

    def refuse_if_changed(self, model: Path) -> None:
        """Raise Refusal if another run replaced the model or its data since it was read."""
        if self.changed() is not None:
            raise Refusal(
                f"{model}: the model changed under us (another run wrote it since it was "
                "read); nothing written"
            )


def _version(path: Path) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns
