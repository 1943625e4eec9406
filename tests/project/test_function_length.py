"""Functions stay short: at most 60 lines from ``def`` to the last line (decorators and
the click options above a command not counted), in the package and in the tests,
benchmarks, tools and examples alike, and no code is packed by hand with ``# fmt: skip``.
Complexity has its own rule: ruff's C901, max-complexity 10, in pyproject.toml."""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "qlrewrite"
#: Every folder of Python code the project holds.
CODE = [PACKAGE, *(ROOT / name for name in ("tests", "benchmarks", "tools", "examples"))]
LIMIT = 60


def _sources() -> list[Path]:
    return sorted(path for folder in CODE for path in folder.rglob("*.py"))


def _lengths() -> dict[str, int]:
    found = {}
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                found[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_functions_are_at_most_60_lines() -> None:
    lengths = _lengths()
    assert len(lengths) > 500  # the walk found the package's functions
    too_long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert not too_long, f"functions over {LIMIT} lines (split them): {too_long}"


def _format_escapes(path: Path) -> list[int]:
    """Lines of ``path`` with a comment that turns ruff's formatter off."""
    with path.open("rb") as file:
        return [
            token.start[0]
            for token in tokenize.tokenize(file.readline)
            if token.type == tokenize.COMMENT and _FMT_OFF.search(token.string)
        ]


_FMT_OFF = re.compile(r"\bfmt:\s*(skip|off)\b")


def test_formatting_is_ruffs() -> None:
    """No ``# fmt: skip`` / ``# fmt: off`` packs code by hand to fit the limit above: a
    function too long is split, not squeezed."""
    found = {
        f"{path.relative_to(ROOT).as_posix()}:{line}"
        for path in _sources()
        for line in _format_escapes(path)
    }
    assert not found, f"ruff's formatter turned off at: {sorted(found)}"


def test_the_format_escape_check_finds_both(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("a = [1,\n  2]  # fmt: skip\n# fmt: off\nb = 1\ns = '# fmt: skip'\n")
    assert _format_escapes(path) == [2, 3]
