"""``--output-format github``: GitHub Actions workflow commands (``::error file=...::``),
annotations in a workflow's log and its pull request."""

from __future__ import annotations

from collections.abc import Sequence

from qlrewrite.checking.formats.base import OutputFormat, RenderOptions, relative_posix
from qlrewrite.checking.render import summary_line
from qlrewrite.findings import Report
from qlrewrite.rules import RULES

__all__ = ["FORMAT", "render_github"]


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(reports: Sequence[Report], options: RenderOptions | None = None) -> str:
    """GitHub Actions workflow commands: ``::error file=...,title=...::message`` lines."""
    rules = RULES
    lines = []
    for report in reports:
        path = _escape_property(relative_posix(report.path or ""))
        if report.load_error:
            lines.append(
                f"::error file={path},title=unreadable model::{_escape_data(report.load_error)}"
            )
        for f in report.findings:
            rule = rules.get(f.rule)
            title = _escape_property(f"{f.rule} {rule.name}" if rule else f.rule)
            message = f.message + (f"\nhint: {f.hint}" if f.hint else "")
            lines.append(f"::{f.severity} file={path},title={title}::{_escape_data(message)}")
    lines.append(summary_line(reports))
    return "\n".join(lines) + "\n"


FORMAT = OutputFormat(
    "github", "GitHub Actions annotations (::error / ::warning lines)", render_github
)
