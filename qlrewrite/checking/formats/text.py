"""``--output-format text`` (the default): one line per finding, or per group of similar
findings, for logs, files and CI; on a terminal, ruff's concise lines in colour
(:mod:`qlrewrite.checking.formats.concise`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qlrewrite.checking.formats.base import OutputFormat, RenderOptions
from qlrewrite.checking.formats.concise import print_concise
from qlrewrite.checking.render import text_lines
from qlrewrite.findings import Report

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
    "one line per finding (similar findings grouped); on a terminal, in colour as ruff's "
    "concise lines (path:graph:node: CODE [*] message)",
    _render,
    terminal=print_concise,
    statistics=statistics_text,
)
