"""Every file a run writes, decided once before anything is written, and whether it may:
the output plan, the names it gives, the checks it makes.

- :func:`plan_outputs` takes what a rewrite was asked (the input, ``-o`` /
  ``--in-place``, ``--report``) and the files the input reads, and returns an
  :class:`OutputPlan`: the output model's path (``<stem>.<command>.onnx`` beside the
  input by default), the report's, and the input's files the replaced output's cleanup
  must leave. It refuses, before any weight is read or file written: an output that is
  the input without ``--in-place``, or that would overwrite a file the input reads; a
  report that would replace the input, a file it reads, the output or the output's data
  file; a name the file system cannot hold.
- Names: an output stem fitted to the file system's longest name (:func:`fitted_stem`),
  the data file's name beside its model (``<model>.data``, else ``<model>.<8 hex>.data``:
  :func:`free_data_name`), and whether a name is one of them (:func:`is_data_name`).
- :func:`refuse_if_read`: an output (``-o``, ``--report``, ``--fix-output``, a fixed
  model) may not be a file the run reads (a model, its external data, a configuration
  file), compared by path and by file identity (links, hard links, case-insensitive
  names); :func:`same_file`, :func:`same_folder`.
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
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from qlrewrite.errors import InputError, Refusal

__all__ = [
    "Destination",
    "Output",
    "OutputPlan",
    "Snapshot",
    "data_names",
    "data_stem",
    "default_output",
    "destination",
    "fitted_stem",
    "free_data_name",
    "is_data_name",
    "is_special",
    "model_output",
    "output_key",
    "plan_outputs",
    "refuse_colliding",
    "refuse_if_read",
    "refuse_long_name",
    "refuse_shared_outputs",
    "resolve_output",
    "same_file",
    "same_folder",
    "usable_data_name",
]

# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class OutputPlan:
    """The files one rewrite writes, and what it must leave."""

    input: Path
    target: Path  # the output model (the input itself with --in-place)
    report: Path | None  # --report
    keep: tuple[Path, ...]  # files the input reads that the output's cleanup leaves
    in_place: bool


def plan_outputs(
    input_path: Path,
    reads: Sequence[Path],
    *,
    command: str,
    output: Path | None = None,
    in_place: bool = False,
    report: Path | None = None,
) -> OutputPlan:
    """The run's :class:`OutputPlan`, each path checked (see the module); ``reads``: the
    files the input reads, the model file first (:func:`~qlrewrite.io.model_io.files_read`)."""
    target = resolve_output(input_path, output, in_place, command)
    _refuse_overwriting_input(reads, target, in_place)
    if report is not None:
        _refuse_report_path(report, reads, target)
    keep = () if in_place else tuple(reads)
    return OutputPlan(input_path, target, report, keep, in_place)


def default_output(input_path: Path, command: str) -> Path:
    """``<stem>.<command>.onnx`` beside the input; a stem too long for the file system's
    names is shortened as data file names are (:func:`fitted_stem`)."""
    suffix = f".{command}.onnx"
    folder = input_path.absolute().parent
    stem = fitted_stem(input_path.stem, folder, len(os.fsencode(suffix)))
    return input_path.with_name(stem + suffix)


def resolve_output(input_path: Path, output: Path | None, in_place: bool, command: str) -> Path:
    """Where to write: refuses to touch the input unless ``in_place``, and a name the
    file system cannot hold."""
    if in_place:
        if output is not None and not same_file(output, input_path):
            raise InputError("--in-place and -o name different files; give one of them")
        return input_path
    target = output if output is not None else default_output(input_path, command)
    refuse_long_name(target, "the output")
    if target.exists() and same_file(target, input_path):
        raise InputError(
            f"{target}: the output is the input; use --in-place to overwrite the input"
        )
    return target


def _refuse_overwriting_input(reads: Sequence[Path], target: Path, in_place: bool) -> None:
    """The output may not be a file the input reads (its external data, Constant-node
    data, attribute data, anywhere); in place, the input model itself is the output."""
    for read in reads[0 if not in_place else 1 :]:
        if same_file(target, read):
            raise InputError(
                f"{target}: the output would overwrite the input's external data "
                "(a file the input reads)"
            )


def _refuse_report_path(report: Path, reads: Sequence[Path], target: Path) -> None:
    """The report may not replace the input, a file it reads, the output or its data."""
    refuse_long_name(report, "the report")
    if same_file(report, reads[0]):
        raise InputError(f"{report}: the report would overwrite the input model")
    if any(same_file(report, read) for read in reads[1:]):
        raise InputError(
            f"{report}: the report would overwrite the input's external data "
            "(a file the input reads)"
        )
    refuse_colliding([model_output("the output", target), Output("the report", report)])


def model_output(label: str, path: Path) -> Output:
    """A model a run writes, as :func:`refuse_colliding` compares
    it: its file and the names its external data file may take."""
    folder = path.absolute().parent
    return Output(label, path, data=lambda name: is_data_name(name, path.name, folder))


# --------------------------------------------------------------------------- names


#: Bytes a data file name adds to its stem at most: ``.<8 hex>.data``, and onnx_ir's
#: save writes it through a temporary folder named ``.<data name>.<8 random>``.
_SUFFIX_BYTES = len(".12345678.data") + len("..12345678")


def _name_max(folder: Path) -> int:
    """The longest file name ``folder``'s file system takes, in bytes (255 if unknown)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def fitted_stem(stem: str, folder: Path, room: int) -> str:
    """``stem``, or when ``room`` more bytes would make a name longer than ``folder``'s
    file system takes (its ``NAME_MAX``), ``stem`` cut to fit followed by ``~`` and 8 hex
    digits of its hash: the same name every run, still recognisable. The one home of
    names qlrewrite derives (data files, ``<stem>.fold.onnx``)."""
    raw = os.fsencode(stem)  # a name that is not UTF-8 counts its bytes too
    limit = _name_max(folder) - room
    if len(raw) <= limit:
        return stem
    digest = hashlib.sha256(raw).hexdigest()[:8]
    cut = raw[: max(limit - 9, 1)]
    try:
        raw.decode("utf-8")
        head = cut.decode("utf-8", "ignore")  # no character cut in half
    except UnicodeDecodeError:
        head = os.fsdecode(cut)
    return f"{head}~{digest}"


def data_stem(model_name: str, folder: Path) -> str:
    """What data file names of ``model_name`` start with: the model's name, or when
    ``<name>.<8 hex>.data`` would be longer than the file system allows, the name
    shortened by :func:`fitted_stem`."""
    return fitted_stem(model_name, folder, _SUFFIX_BYTES)


def refuse_long_name(path: Path, what: str) -> None:
    """Raise InputError if ``path``'s name is longer than its folder's file system takes
    (``what``: "the output", "the report"), before anything is written."""
    size = len(os.fsencode(path.name))
    limit = _name_max(path.absolute().parent)
    if size > limit:
        raise InputError(
            f"{path}: the name of {what} is {size} bytes, longer than the file system takes "
            f"({limit}); choose a shorter name (nothing written)"
        )


def data_names(model_name: str, folder: Path) -> re.Pattern[str]:
    """The names the data file of a model named ``model_name`` in ``folder`` may take."""
    stem = data_stem(model_name, folder)
    return re.compile(re.escape(stem) + r"(\.[0-9a-f]{8})?\.data")


def is_data_name(name: str, model_name: str, folder: Path) -> bool:
    """True if ``name`` is a data file name :func:`commit_model` gives ``model_name`` in
    ``folder``."""
    return data_names(model_name, folder).fullmatch(name) is not None


def usable_data_name(folder: Path, name: str, model_name: str) -> bool:
    """No file has ``name``, and the plain ``<model>.data`` only for a new model: a
    reader that read an older model never opens a newer data file under the name it
    remembers."""
    plain = name == f"{data_stem(model_name, folder)}.data"
    return not os.path.lexists(folder / name) and not (
        plain and os.path.lexists(folder / model_name)
    )


def free_data_name(folder: Path, model_name: str) -> str:
    """``<model_name>.data`` for a new model, else ``<model_name>.<8 hex>.data`` (random:
    a name never used before)."""
    stem = data_stem(model_name, folder)
    name = f"{stem}.data"
    while not usable_data_name(folder, name, model_name):
        name = f"{stem}.{secrets.token_hex(4)}.data"
    return name


# --------------------------------------------------------------------------- checks


def same_folder(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True if both paths are in the same folder (resolving links of the folders)."""
    return os.path.realpath(Path(a).absolute().parent) == os.path.realpath(
        Path(b).absolute().parent
    )


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True if both paths name the same file (resolving links)."""
    a, b = Path(a), Path(b)
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


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
