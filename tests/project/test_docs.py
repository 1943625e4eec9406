"""The documentation cannot drift from the code: README and docs/ are checked here.

- docs/architecture.md's module table is generated from the modules' docstrings
  (`python tools/module_table.py`);
- the Python examples of README.md and docs/python-api.md run;
- every relative link of README.md and docs/ leads to a file (and heading) that exists;
- `.ci/run` runs the README's second Quick start command;
- the README stays short: reference lives in docs/.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]


def _module_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_table", ROOT / "tools/module_table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_architecture_module_table_is_generated_from_the_docstrings() -> None:
    """Every module of the package, a row each with its docstring's first paragraph, as
    ``python tools/module_table.py`` writes it."""
    generator = _module_table()
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert generator.page(text) == text, "run `python tools/module_table.py`"
    rows = re.findall(r"^\| `(qlrewrite/[\w/]+\.py)` \| (.*) \|$", text, re.M)
    assert len(rows) == len(list((ROOT / "qlrewrite").rglob("*.py")))
    assert all(summary for _, summary in rows), "a module without a docstring"


def test_a_module_without_docstring_is_caught(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""First line\nwraps here.\n\nSecond paragraph."""\n')
    assert _module_table().summary(module) == "First line wraps here."
    module.write_text("x = 1\n")
    assert _module_table().summary(module) == ""  # an empty row: the test above fails


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


@pytest.mark.parametrize("page", [README, DOCS / "python-api.md"], ids=lambda p: p.name)
def test_python_examples_run(page: Path, tmp_path: Path) -> None:
    blocks = _python_blocks(page)
    assert blocks, f"{page.name} has no Python example"
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{page.name}:\n{block}\n{done.stderr}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.*)$", text, re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _resolves(page: Path, link: str) -> bool:
    path, _, anchor = link.partition("#")
    target = (page.parent / path).resolve() if path else page
    if not target.exists():
        return False
    return not anchor or target.suffix != ".md" or anchor in _anchors(target)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    local = [link for link in _links(page) if not re.match(r"[a-z]+:", link)]  # not https:
    broken = [link for link in local if not _resolves(page, link)]
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_a_broken_link_is_caught() -> None:
    assert _resolves(README, "docs/ci.md") and _resolves(README, "#quick-start")
    assert not _resolves(README, "docs/nowhere.md")
    assert not _resolves(README, "docs/ci.md#no-such-heading")


def test_slug_matches_github() -> None:
    assert _slug("--verify (fold, convert, upgrade)") == "--verify-fold-convert-upgrade"
    assert _slug("When --verify is exact (MatMulNBits)") == "when---verify-is-exact-matmulnbits"


def _quick_start() -> list[str]:
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_ci_runs_the_readme_test_command() -> None:
    run, test = _quick_start()
    assert run.startswith("pip install . && qlrewrite ") and "examples/" in run
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line]
    assert commands[-1] == test


def test_readme_points_to_docs() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250
    for page in ["check", "info", "fold", "convert", "upgrade", "rules"]:
        assert (DOCS / "commands" / f"{page}.md").exists()
        assert f"(docs/commands/{page}.md)" in README.read_text()


def _defined(name: str, source: str) -> bool:
    return re.search(rf"^\s*(?:def|class) {name}\b|^\s*{name}\s*[:=]", source, re.M) is not None


def test_architecture_questions_name_code_that_exists() -> None:
    """Each answer of the "question | where" table names a file and names defined in it."""
    text = ARCHITECTURE.read_text()
    rows = re.findall(r"^\| [^|`]+\? \| (.*) \|$", text, re.M)
    assert len(rows) >= 10
    package = ROOT / "qlrewrite"
    for row in rows:
        files = re.findall(r"`([\w/]+\.py)`", row)
        modules = [name.split(".")[0] for name in re.findall(r"`(opsets\.\w+)`", row)]
        sources = [(package / f).read_text() for f in files]
        sources += [(package / f"{m}.py").read_text() for m in modules]
        source = "\n".join(sources)
        for ref in re.findall(r"`([A-Za-z_][\w.]*)`", row):
            if ref.endswith(".py") or ref == "str()":
                continue
            for part in ref.split(".")[1:] if ref.startswith("opsets.") else ref.split("."):
                assert _defined(part, source), f"docs/architecture.md names {ref}: {row}"
