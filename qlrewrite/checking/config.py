"""Project configuration of `qlrewrite check`: ``[tool.qlrewrite]`` or ``qlrewrite.toml``.

Found as ruff finds its own: from a model's folder upwards, the first folder holding a
``qlrewrite.toml`` / ``.qlrewrite.toml`` (top-level keys) or a ``pyproject.toml`` with a
``[tool.qlrewrite]`` table (a pyproject.toml without one is passed over). ``--config FILE``
names the file instead; ``--isolated`` ignores every file. Globs (``exclude``,
``per-file-ignores``) are relative to the folder of the file that declares them.

Every key and every rule code is checked when the file is read: a mistake is one line
naming the file and the key (:class:`~qlrewrite.errors.InputError`, exit 2), never a
setting silently ignored.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from qlrewrite.errors import InputError
from qlrewrite.io import reading

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (Python 3.10)
    import tomli as tomllib

__all__ = [
    "CONFIG_NAMES",
    "KEYS",
    "Settings",
    "find_config",
    "forget",
    "load_config",
    "settings_for",
]

#: File names searched in each folder, in this order (pyproject.toml last).
CONFIG_NAMES = ("qlrewrite.toml", ".qlrewrite.toml", "pyproject.toml")

#: Every key a configuration may hold, with what it takes.
KEYS = {
    "select": "rule codes or prefixes to check (default: all)",
    "extend-select": "rule codes or prefixes added to select",
    "ignore": "rule codes or prefixes to skip",
    "strict": "true: warnings fail the check too",
    "exclude": "globs of model files or folders skipped when a folder is searched",
    "per-file-ignores": "glob -> codes ignored in the model files it matches",
    "per-node-ignores": "node name or output name (or glob) -> codes accepted on it",
    "output-format": "a format of qlrewrite check --output-format",
    "target": "runtimes deployed to (ort, ort==1.20, ort>=1.17, openvino, tensorrt, qnn): "
    "the QL7xx rules check what they refuse",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """One configuration, as read (every code already checked against the catalogue)."""

    path: Path | None = None  # the file it came from (None: defaults)
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    strict: bool | None = None
    exclude: tuple[str, ...] = ()
    per_file_ignores: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    per_node_ignores: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    output_format: str | None = None
    target: tuple[str, ...] = ()

    @property
    def root(self) -> Path:
        """The folder globs are relative to (the current folder without a file)."""
        return self.path.parent if self.path is not None else Path.cwd()

    def relative(self, path: Path) -> PurePosixPath | None:
        """``path`` relative to :attr:`root` (None when outside it)."""
        try:
            return PurePosixPath(Path(os.path.abspath(path)).relative_to(self.root.absolute()))
        except ValueError:
            return None

    def excluded(self, path: Path) -> bool:
        """Whether ``path`` (a model or a folder) matches an ``exclude`` glob."""
        relative = self.relative(path)
        return relative is not None and any(_glob_match(relative, g) for g in self.exclude)

    def ignored_for(self, path: Path) -> tuple[str, ...]:
        """The codes ``per-file-ignores`` drops for the model at ``path``."""
        relative = self.relative(path)
        if relative is None:
            return ()
        return tuple(
            code
            for glob, codes in self.per_file_ignores.items()
            if _glob_match(relative, glob)
            for code in codes
        )


def _glob_match(relative: PurePosixPath, glob: str) -> bool:
    """A glob matches the relative path or one of its parent folders; a glob without a
    slash also matches any single file or folder name on the way (as .gitignore).

    ``*`` matches across folders (``models/*.onnx`` also matches ``models/a/b.onnx``), so
    ``legacy`` or ``legacy/`` excludes everything under any folder named ``legacy``.
    """
    glob = glob.strip().rstrip("/").removeprefix("./")
    candidates = [str(relative), *(str(p) for p in relative.parents if str(p) != ".")]
    if "/" not in glob:
        candidates += relative.parts
    return any(fnmatch.fnmatchcase(c, glob) for c in candidates)


def forget() -> None:
    """Drop the files found and read so far (each run sees the files as they are now)."""
    _find_config.cache_clear()
    load_config.cache_clear()


def find_config(start: Path) -> Path | None:
    """The configuration that applies to models in folder ``start``, searching upwards."""
    return _find_config(Path(os.path.abspath(start)))


@functools.cache
def _find_config(folder: Path) -> Path | None:
    # A loop, not recursion: a model may sit any number of folders deep.
    for parent in (folder, *folder.parents):
        for name in CONFIG_NAMES:
            candidate = parent / name
            if candidate.is_file() and (name != "pyproject.toml" or _has_tool_table(candidate)):
                return candidate
    return None


def _has_tool_table(pyproject: Path) -> bool:
    tool = _read_toml(pyproject).get("tool", {})
    if not isinstance(tool, dict):
        raise InputError(f"{pyproject}: 'tool' must be a table")
    return "qlrewrite" in tool


def _read_toml(path: Path) -> dict[str, Any]:
    data = reading.read_bytes(path, "configuration file", reading.CONFIG_BYTES)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from exc
    except RecursionError as exc:  # an array or table nested thousands deep
        raise InputError(f"{path}: not valid TOML (nested too deeply)") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid TOML (not UTF-8)") from exc


@functools.cache
def load_config(path: Path) -> Settings:
    """Read and check one configuration file (``[tool.qlrewrite]`` of a pyproject.toml).

    Raises InputError naming the file and the key for an unknown key, a value of the
    wrong type or an unknown rule code.
    """
    document = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = document.get("tool", {})
        if not isinstance(tool, dict):
            raise InputError(f"{path}: 'tool' must be a table")
        table = tool.get("qlrewrite")
        where = f"{path}: [tool.qlrewrite]"
        if table is None:
            raise InputError(f"{where} table not found")
    else:
        table, where = document, str(path)
    if not isinstance(table, dict):
        raise InputError(f"{where} is not a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(KEYS)})")
    values = _Reader(where, table)
    settings = Settings(
        path=path,
        select=values.codes("select"),
        extend_select=values.codes("extend-select"),
        ignore=values.codes("ignore"),
        strict=values.boolean("strict"),
        exclude=values.strings("exclude"),
        per_file_ignores=values.code_table("per-file-ignores"),
        per_node_ignores=values.code_table("per-node-ignores"),
        output_format=values.output_format(),
        target=values.targets("target"),
    )
    return settings


class _Reader:
    """Typed access to one configuration table, with errors naming the key."""

    def __init__(self, where: str, table: dict[str, Any]) -> None:
        self.where = where
        self.table = table

    def _fail(self, key: str, wanted: str) -> InputError:
        return InputError(f"{self.where}: '{key}' must be {wanted}")

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.table.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, "a list of strings")
        return tuple(value)

    def codes(self, key: str) -> tuple[str, ...]:
        codes = self.strings(key)
        check_codes(codes, f"{self.where}: '{key}'")
        return codes

    def boolean(self, key: str) -> bool | None:
        value = self.table.get(key)
        if value is not None and not isinstance(value, bool):
            raise self._fail(key, "true or false")
        return value

    def code_table(self, key: str) -> dict[str, tuple[str, ...]]:
        value = self.table.get(key, {})
        if not isinstance(value, dict):
            raise self._fail(key, "a table of name = [codes]")
        table = {}
        for name, entry in value.items():
            if not isinstance(name, str) or not name:
                raise self._fail(key, "a table of name = [codes]")
            codes = [entry] if isinstance(entry, str) else entry
            if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
                raise self._fail(f"{key}.{name}", "a list of rule codes")
            check_codes(codes, f"{self.where}: '{key}' entry '{name}'")
            table[name] = tuple(codes)
        return table

    def targets(self, key: str) -> tuple[str, ...]:
        from qlrewrite.targets.spec import parse_target

        specs = self.strings(key)
        for spec in specs:
            try:
                parse_target(spec)
            except InputError as exc:
                raise InputError(f"{self.where}: '{key}': {exc}") from None
        return specs

    def output_format(self) -> str | None:
        from qlrewrite.checking.formats import FORMATS

        value = self.table.get("output-format")
        if value is not None and (not isinstance(value, str) or value not in FORMATS):
            raise self._fail("output-format", " or ".join(FORMATS))
        return value


def check_codes(entries: Iterable[str], where: str) -> None:
    """Raise InputError naming ``where`` for an entry that matches no rule code."""
    from qlrewrite.rules.selection import parse_codes

    parse_codes(entries, where)


def settings_for(model: Path, *, config: Path | None = None, isolated: bool = False) -> Settings:
    """The settings that apply to ``model`` (a file or a folder).

    ``config`` (``--config FILE``) wins over the search; ``isolated`` (``--isolated``)
    gives the defaults whatever files exist.
    """
    if isolated:
        return Settings()
    if config is not None:
        return load_config(Path(os.path.abspath(config)))
    folder = model if model.is_dir() else model.parent
    found = find_config(folder)
    return load_config(found) if found is not None else Settings()
