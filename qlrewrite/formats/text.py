"""``--output-format text`` (the default): one line per finding, or per group of similar
findings, for logs and files; rich tables on a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console

from qlrewrite.findings import Report
from qlrewrite.formats.base import OutputFormat, RenderOptions
from qlrewrite.render import print_text_tables, text_lines

__all__ = ["FORMAT", "statistics_text"]

#: How ``--statistics`` marks a rule's fix: ``[*]`` safe, ``[-]`` unsafe (as ruff's).
_FIX_MARK = {"safe": "[*] ", "unsafe": "[-] "}


def _render(reports: Sequence[Report], options: RenderOptions) -> str:
    lines = text_lines(
        reports,
        summary=options.summary,
        show_all=options.show_all,
        load_errors=options.load_errors,
    )
    return "\n".join(lines) + "\n" if lines else ""


def _terminal(reports: Sequence[Report], console: Console, options: RenderOptions) -> None:
    print_text_tables(
        reports,
        console,
        summary=options.summary,
        show_all=options.show_all,
        load_errors=options.load_errors,
    )


def statistics_text(rows: Sequence[dict[str, Any]]) -> str:
    """``--statistics`` as text: ``count  code  severity  [*] name`` per rule."""
    if not rows:
        return ""
    width = max(len(str(row["count"])) for row in rows)
    lines = [
        f"{row['count']:>{width}}  {row['code']}  {row['severity']:<7}  "
        f"{_FIX_MARK.get(row['fixable'], '')}{row['name']}"
        for row in rows
    ]
    return "\n".join(lines) + "\n"


FORMAT = OutputFormat(
    "text",
    "one line per finding (similar findings grouped); tables on a terminal",
    _render,
    terminal=_terminal,
    statistics=statistics_text,
)
