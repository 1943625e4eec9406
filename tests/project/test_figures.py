"""Every figure of README.md and docs/ names what measures it (issue 43 item 5).

A figure is a number with a unit: a time (ms, s), a size (KiB, MiB, MB, GiB, GB), a ratio
(``5x``, ``1.28x``), a share (``4%``), a difference (``5.4e-7``) or ulps. Each must sit in a
paragraph, list item or table that names the script or test measuring it, as a path that
exists: ``benchmarks/<script>.py``, ``tests/...py`` or, for the runtime tables,
``tools/probe/<script>.py``. A table's caption and a list's lead-in (the prose paragraph
right before it, or before its first item) count as part of it. Code blocks and inline code
are not claims (command lines, shown output, option defaults such as ``--verify-timeout
5``). Figures that are no measurement (a limit the code sets, a spec's number) are listed in
``NOT_MEASURED`` with the reason; an entry whose figure left its page fails too, so the list
stays short. benchmarks/README.md, a log of runs, is checked by section: each section with
figures names its script.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FIGURE = re.compile(
    r"(?<![\w./])(?:"
    r"\d[\d,]*(?:\.\d+)?\s?(?:ms|s|µs|KiB|KB|kB|MiB|MB|GiB|GB)(?![\w])"  # time, size
    r"|\d+(?:\.\d+)?x(?![\w])"  # a ratio: 5x, 1.28x (not 4096 x 4096, not 0x80)
    r"|\d+(?:\.\d+)?\s?%"  # a share
    r"|\d(?:\.\d+)?e-\d+"  # a difference: 5.4e-7
    r"|\d[\d,.]*\s?ulps?(?![\w])"
    r")"
)
SOURCE = re.compile(r"\b((?:benchmarks|tests|tools/probe)/[\w/]+\.py)\b")

# (page, figure as written) -> why it is not a measurement. Keep it short.
NOT_MEASURED: dict[tuple[str, str], str] = {
    ("README.md", "2 GB"): "protobuf's limit on one message",
    ("docs/commands/upgrade.md", "2 GB"): "protobuf's limit on one message",
    ("docs/commands/check.md", "2 GiB"): "the most `check -` reads from stdin (protobuf's limit)",
    ("docs/commands/compare.md", "1e-4"): "--rtol's default",
    ("docs/commands/half.md", "1e-8"): "an example of a scale float16 rounds to zero",
    ("docs/safety.md", "120 s"): "how long a writer waits for the folder's lock (io/atomic.py)",
    ("docs/safety.md", "64 KiB"): "the most of a staging journal read (io/atomic.py)",
    ("docs/safety.md", "1.8 GB"): "the size above which output goes to external data",
    ("docs/safety.md", "600 s"): "--verify-timeout's default",
    ("docs/safety.md", "64 MiB"): "the bound on the verify child's answers",
    ("docs/verify.md", "64 MiB"): "the bound on the verify child's answers",
    ("docs/verify.md", "1 MiB"): "the bound on a release child's JSON answer",
    ("docs/verify.md", "256 MiB"): "the largest model measured inside (verify/difference)",
}


@dataclass(frozen=True)
class Unit:
    """One paragraph, list item or table of a page: its first line, its text and the
    text around it that may name its source (a caption, a list's lead-in)."""

    line: int
    text: str
    context: str


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """Runs of non-blank lines (fenced code blanked out, a heading alone), with their
    first line number."""
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.startswith("#"):
            if current:
                blocks.append((number - len(current), current))
            current = [line] if line.startswith("#") else []
            continue
        current.append(line)
    if current:
        blocks.append((len(text.split("\n")) + 1 - len(current), current))
    return blocks


_ITEM = re.compile(r"^(?:[-*] |\d+\. )")


def _items(first: int, lines: list[str]) -> tuple[str, list[tuple[int, str]]]:
    """A block's lead-in (the lines before its first list item) and its items."""
    starts = [i for i, line in enumerate(lines) if _ITEM.match(line)]
    if not starts:
        return "", [(first, "\n".join(lines))]
    ends = [*starts[1:], len(lines)]
    items = [(first + s, "\n".join(lines[s:e])) for s, e in zip(starts, ends, strict=True)]
    return "\n".join(lines[: starts[0]]), items


def units(text: str) -> list[Unit]:
    """The page's paragraphs, list items and tables, each with the text that may name its
    source: itself, plus a table's caption or a list item's lead-in."""
    found: list[Unit] = []
    previous = ""
    for first, lines in _blocks(text):
        block = "\n".join(lines)
        if lines[0].startswith("|"):
            found.append(Unit(first, block, previous + "\n" + block))
        else:
            lead, items = _items(first, lines)
            caption = lead or (previous if _ITEM.match(lines[0]) else "")
            for line, item in items:
                found.append(Unit(line, item, caption + "\n" + item if caption else item))
        prose = not any(line.startswith(("|", "#")) or _ITEM.match(line) for line in lines)
        previous = block if prose else ""
    return found


def figures(text: str) -> list[str]:
    """The figures of a unit's text, inline code left out."""
    return [m.group(0) for m in FIGURE.finditer(re.sub(r"`[^`]*`", "", text))]


def unsourced(page: str, text: str, root: Path = ROOT) -> list[str]:
    """``page:line: figures`` for each unit whose figures have no existing source."""
    problems = []
    for unit in units(text):
        claimed = [f for f in figures(unit.text) if (page, f) not in NOT_MEASURED]
        sources = [s for s in SOURCE.findall(unit.context) if (root / s).is_file()]
        if claimed and not sources:
            problems.append(f"{page}:{unit.line}: {', '.join(claimed)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_figure_names_its_source(page: Path) -> None:
    name = page.relative_to(ROOT).as_posix()
    problems = unsourced(name, page.read_text(encoding="utf-8"))
    assert not problems, (
        "a figure without the benchmarks/ script or tests/ file that measures it "
        "(name it in the paragraph, or list it in NOT_MEASURED with why):\n" + "\n".join(problems)
    )


def unsourced_sections(text: str, root: Path = ROOT) -> list[str]:
    """benchmarks/README.md is a log of runs, one section per script: the headings of the
    sections with figures that name no existing script or test."""
    parts = re.split(r"(?m)^(#{2,3} .*)$", text)
    return [
        heading
        for heading, body in zip(parts[1::2], parts[2::2], strict=True)
        if figures(body) and not any((root / s).is_file() for s in SOURCE.findall(body))
    ]


def test_every_benchmark_section_names_its_script() -> None:
    missing = unsourced_sections((ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8"))
    assert not missing, f"benchmarks/README.md sections without their script: {missing}"


def test_a_benchmark_section_without_its_script_is_caught(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "fold.py").write_text("")
    text = "# B\n\n## fold\n\n`python benchmarks/fold.py`: 0.84 s\n\n## check\n\n0.32 s\n"
    assert unsourced_sections(text, root=tmp_path) == ["## check"]


def test_every_script_or_test_a_page_names_exists() -> None:
    """A page that names a test or script moved away names nothing: each path exists."""
    pages = [*PAGES, ROOT / "benchmarks" / "README.md"]
    named = {
        (page.relative_to(ROOT).as_posix(), path)
        for page in pages
        for path in re.findall(r"\b(?:tests|benchmarks|tools)/[\w/]+\.py\b", page.read_text())
    }
    missing = sorted(pair for pair in named if not (ROOT / pair[1]).is_file())
    assert not missing, f"paths named on a page that do not exist: {missing}"


def test_not_measured_entries_are_still_on_their_page() -> None:
    stale = [
        key
        for key in NOT_MEASURED
        if key[1] not in figures((ROOT / key[0]).read_text(encoding="utf-8"))
    ]
    assert not stale, f"NOT_MEASURED entries no page holds any more: {stale}"


SYNTHETIC = """\
# A page

qlrewrite folds the model in 0.84 s, 9.9x faster than ORT.

It reads 338 MiB in 0.32 s (`benchmarks/check.py`, 2 cores, load 1).

Measured by `benchmarks/no_such_script.py`: 71 MiB.

The speed of each tool (`benchmarks/fold.py`):

| tool | wall |
|---|---:|
| qlrewrite | 0.84 s |

| tool | wall |
|---|---:|
| ORT | 8.34 s |

What it shows (tests/passes/test_fold.py):
- 2.5% apart as deployed;
- 20x slower.

- a lone item: 1.2e-7 apart.

```console
$ qlrewrite fold m.onnx -o f.onnx
fold: wrote f.onnx in 0.05 s
```

`--verify-timeout 5`, `--max-size 2GB` and a 4096 x 4096 weight, 0x80, opset 21.
"""


def test_a_figure_without_a_source_is_caught(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "check.py").write_text("")
    (tmp_path / "benchmarks" / "fold.py").write_text("")
    (tmp_path / "tests" / "passes").mkdir(parents=True)
    (tmp_path / "tests" / "passes" / "test_fold.py").write_text("")
    problems = unsourced("page.md", SYNTHETIC, root=tmp_path)
    assert problems == [
        "page.md:3: 0.84 s, 9.9x",  # no source at all
        "page.md:7: 71 MiB",  # a source that does not exist
        "page.md:15: 8.34 s",  # a table whose caption is another table
        "page.md:23: 1.2e-7",  # a list with no lead-in
    ]


def test_figures_are_numbers_with_units() -> None:
    text = "0.32 s, 34 ms, 71 MiB, 2.4 GiB, 5x, 1.28x, 4.3%, 5.4e-7, 3 ulp, 1,984 MB"
    assert figures(text) == text.split(", ")
    assert figures("4096 x 4096, 0x80, 2 steps, opset 21, v1.16.3, `0.05 s`") == []
