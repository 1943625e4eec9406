"""The names of the files a model is written to: an output stem fitted to the file
system's longest name, the data file's name beside its model (``<model>.data``, else
``<model>.<8 hex>.data``), and whether a name is one of them."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from qlrewrite.errors import InputError

__all__ = [
    "data_names",
    "data_stem",
    "fitted_stem",
    "free_data_name",
    "is_data_name",
    "refuse_long_name",
    "usable_data_name",
]


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
