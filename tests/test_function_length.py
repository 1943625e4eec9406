"""Functions stay short: at most 60 lines from ``def`` to the last line (decorators and
the click options above a command not counted). Complexity has its own rule: ruff's
C901, max-complexity 10, in pyproject.toml."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "qlrewrite"
LIMIT = 60


def _lengths() -> dict[str, int]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
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
