"""``--output-format full``: on a terminal, a table per file (rule, severity, graph, node,
message, hint), the view ``text`` had before it became ruff's concise lines; elsewhere
the lines of ``text``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from qlrewrite.checking.formats import text
from qlrewrite.checking.formats.base import OutputFormat, RenderOptions
from qlrewrite.checking.render import print_text_tables
from qlrewrite.findings import Report

__all__ = ["FORMAT"]


def _tables(reports: Sequence[Report], console: Console, options: RenderOptions) -> None:
    print_text_tables(
        reports,
        console,
        summary=options.summary,
        show_all=options.show_all,
        load_errors=options.load_errors,
    )


FORMAT = OutputFormat(
    "full",
    "a table per file with each finding's hint on a terminal; the lines of text otherwise",
    text.FORMAT.render,
    terminal=_tables,
    statistics=text.FORMAT.statistics,
)
