"""No two modules of the package import each other, directly or round a loop: every import
counts, those under ``if TYPE_CHECKING:`` and inside functions too (import-linter's
layers contract sees neither a loop within one layer nor a type-only import)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in modules else base


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's ``__init__`` handing on
    its own submodules' names is not an arrow back to them)."""
    modules = _modules(package)
    graph = {}
    for name, path in modules.items():
        targets = {t for t in _imported(name, path, modules) if t in modules and t != name}
        if path.name == "__init__.py":
            targets = {t for t in targets if not t.startswith(name + ".")}
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start, targets in graph.items():
        if start in index:
            continue
        work = [(start, iter(sorted(targets)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_package_has_no_import_circle() -> None:
    assert circles(import_graph(ROOT / "qlrewrite")) == []


def test_a_type_only_circle_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nB = 1\n"
    )
    (package / "c.py").write_text("def f():\n    from . import a\n")
    assert circles(import_graph(package)) == [["pkg.a", "pkg.b"]]
