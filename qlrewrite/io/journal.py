"""The commit journal: what a commit records in its staging folder before its data file
goes in (the data file it moves beside the model, the replaced model's data files it will
remove, each with its identity), so that the next run into the folder finishes or undoes
exactly that, on exactly those files (:mod:`qlrewrite.io.atomic`). A journal is read as
untrusted: a file this tool did not write is :class:`Foreign`."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Collection
from pathlib import Path

from qlrewrite.errors import InputError
from qlrewrite.io import reading

__all__ = [
    "JOURNAL",
    "Foreign",
    "Identity",
    "identity",
    "read_journal",
    "unlink_if_same",
    "write_journal",
]

JOURNAL = "commit.json"
JOURNAL_VERSION = 2
#: A journal holds a few names and numbers: a larger file is not one this tool wrote.
JOURNAL_MAX = reading.JOURNAL_BYTES

#: A file's identity as a journal records it: device, inode, size, modification time.
Identity = tuple[int, int, int, int]


def identity(path: Path) -> Identity:
    info = os.lstat(path)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def write_journal(
    staging: Path, data: tuple[str, Path], model_name: str, replaced: Collection[str]
) -> None:
    """Record in the staging folder, before it goes in, the data file a commit moves
    beside the model (``data``: its name there and its staged path) and the replaced
    model's data files it will remove, each with its identity: if the run is killed,
    the next run into the folder finishes or undoes exactly that, on exactly those files."""
    folder = staging.parent
    olds = []
    for name in replaced:
        with contextlib.suppress(OSError):
            olds.append({"name": name, "id": identity(folder / name)})
    entry = {
        "version": JOURNAL_VERSION,
        "model": model_name,
        "data": {"name": data[0], "id": identity(data[1])},
        "replaced": olds,
    }
    text = json.dumps(entry)
    if len(text) > JOURNAL_MAX:  # a model naming thousands of data files: left behind
        text = json.dumps({**entry, "replaced": []})
    (staging / JOURNAL).write_text(text)


class Foreign(Exception):
    """A journal this tool did not write (the message says why)."""


def read_journal(path: Path) -> tuple[str, tuple[str, Identity], list] | None:
    """The commit a journal records (model name, data file, replaced files), None when
    there is none (a run killed before its commit began). Read only from a regular file
    of this user's (``lstat`` first: a FIFO or a device is never opened), through
    :mod:`qlrewrite.io.reading` (no link, at most ``JOURNAL_BYTES``); raises
    :class:`Foreign` otherwise."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Foreign(exc.strerror or str(exc)) from exc
    if not stat.S_ISREG(info.st_mode):
        raise Foreign("not a regular file")
    if info.st_uid != os.geteuid():
        raise Foreign("another user's file")
    try:
        raw = reading.read_bytes(path, "commit journal", JOURNAL_MAX, follow_links=False)
        entry = json.loads(raw)
    except InputError as exc:
        raise Foreign(str(exc).removeprefix(f"{path}: ")) from exc
    except (ValueError, RecursionError) as exc:
        raise Foreign("not JSON, or nested too deep") from exc
    return _journal_entry(entry)


def _journal_entry(entry: object) -> tuple[str, tuple[str, Identity], list]:
    """The fields of a parsed journal, each checked for its type and shape."""
    if not isinstance(entry, dict) or entry.get("version") != JOURNAL_VERSION:
        raise Foreign("not a journal of this version")
    model, replaced = entry.get("model"), entry.get("replaced")
    if not _plain_name(model) or not isinstance(replaced, list):
        raise Foreign("not a journal of this version")
    return model, _file_entry(entry.get("data")), [_file_entry(r) for r in replaced]


def _file_entry(entry: object) -> tuple[str, Identity]:
    """A file of a journal: a plain name and its identity (four non-negative integers)."""
    ident = entry.get("id") if isinstance(entry, dict) else None
    if not isinstance(ident, list) or len(ident) != 4:
        raise Foreign("a file without its identity")
    if _plain_name(entry.get("name")) and all(type(v) is int and v >= 0 for v in ident):
        return entry["name"], (ident[0], ident[1], ident[2], ident[3])
    raise Foreign("a file without its identity")


def _plain_name(name: object) -> bool:
    """A file name, never a path."""
    return isinstance(name, str) and Path(name).name == name and name not in ("", ".", "..")


def unlink_if_same(path: Path, ident: Identity) -> None:
    """Remove ``path`` if it is a regular file (not a link) with identity ``ident``."""
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(path).st_mode) and identity(path) == ident:
            os.unlink(path)
