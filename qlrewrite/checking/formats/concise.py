"""The terminal view of ``--output-format text``, as ruff's concise output: one coloured
line per finding, ``path:graph:node: CODE [*] message``, then ``Found N errors (M fixable
with --fix)`` and the summary line.

A line wider than the terminal wraps between words, its continuation indented; only a
single word wider than the terminal is folded. ``[*]`` marks a finding with a safe fix.
Logs, files and CI get the plain lines of :func:`qlrewrite.checking.render.text_lines` instead.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from qlrewrite.checking.formats.base import RenderOptions
from qlrewrite.checking.render import (
    GROUP_ABOVE,
    FindingGroup,
    custom_quant_line,
    group_findings,
    node_label,
    summary_line,
)
from qlrewrite.findings import Finding, Report, fixable

__all__ = [
    "concise_line",
    "concise_message",
    "fixable_phrase",
    "found_line",
    "print_concise",
]

_CODE_STYLE = {"error": "bold red", "warning": "bold yellow"}
#: Continuation lines of a wrapped finding start this far in.
INDENT = 4


def _where(finding: Finding, path: str | None) -> str:
    """``path:graph:node`` (``path:graph`` for a tensor, ``path`` for a configuration)."""
    parts = [path or "-", finding.graph, node_label(finding)]
    return ":".join(p for p in parts if p)


def concise_message(finding: Finding) -> str:
    """The message without the ``DequantizeLinear 'dq' in main: `` it starts with (the line
    already names the graph and the node)."""
    prefix = f"{finding.op_type} '{finding.node}' in {finding.graph}: "
    if finding.op_type and finding.node and finding.message.startswith(prefix):
        return finding.message[len(prefix) :]
    return finding.message


def concise_line(finding: Finding, path: str | None) -> Text:
    """``path:graph:node: CODE [*] message``, styled (``[*]``: a safe fix)."""
    line = Text.assemble(
        (_where(finding, path), "bold"),
        ": ",
        (finding.rule, _CODE_STYLE.get(finding.severity, "bold")),
        " ",
    )
    if finding.fix == "safe":
        line.append("[*] ", style="cyan")
    return line + Text(concise_message(finding))


def _more_line(group: FindingGroup, path: str | None) -> Text:
    first = group.first
    return Text.assemble(
        (_where(first, path), "bold"),
        ": ",
        (first.rule, _CODE_STYLE.get(first.severity, "bold")),
        f" {len(group.findings) - 1} more like the line above, on {group.nodes()} "
        "(--show-all prints each)",
        style="dim",
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fixable_phrase(findings: Sequence[Finding], *, unsafe: bool = False) -> str:
    """``2 fixable with --fix`` (``, 1 more with --fix --unsafe-fixes``), or ""."""
    safe = len(fixable(findings))
    more = len(fixable(findings, unsafe=True)) - safe
    if unsafe:
        safe, more = safe + more, 0
    flag = "--fix --unsafe-fixes" if unsafe else "--fix"
    phrase = f"{safe} fixable with {flag}" if safe else ""
    if more:
        extra = f"{more} more with --fix --unsafe-fixes"
        phrase = f"{phrase} ({extra})" if phrase else f"{more} fixable with --fix --unsafe-fixes"
    return phrase


def found_line(reports: Sequence[Report]) -> str:
    """``Found 2 errors and 1 warning (1 fixable with --fix).``, or ``All checks passed!``
    when there is no finding and every model could be read."""
    findings = [f for r in reports for f in r.findings]
    if not findings and not any(r.load_error for r in reports):
        return "All checks passed!"
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = len(findings) - errors
    line = f"Found {_count(errors, 'error')}"
    if warnings:
        line += f" and {_count(warnings, 'warning')}"
    phrase = fixable_phrase(findings)
    return line + (f" ({phrase})." if phrase else ".")


def _breaks(plain: str, where: int) -> list[tuple[int, int]]:
    """Where a line may break: ``(end of this line, start of the next)`` at each space,
    and after each ``:`` or ``/`` of the first ``where`` characters (the location)."""
    found = [(i, i + 1) for i, c in enumerate(plain) if c == " "]
    found += [(i + 1, i + 1) for i, c in enumerate(plain[:where]) if c in ":/"]
    return sorted(found)


def _line_ends(plain: str, where: int, width: int, indent: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each line: greedy, at the last break that fits; a word wider
    than a whole line is folded there (never cut)."""
    breaks = _breaks(plain, where)
    ends = [end for end, _ in breaks]
    spans, start, avail = [], 0, width
    while len(plain) - start > avail:
        last = bisect.bisect_right(ends, start + avail) - 1  # the last break that fits
        fits = last >= 0 and ends[last] > start
        end, after = breaks[last] if fits else (start + avail, start + avail)
        spans.append((start, end))
        start, avail = after, width - indent
    spans.append((start, len(plain)))
    return spans


def print_wrapped(console: Console, text: Text, where: int = 0, indent: int = INDENT) -> None:
    """``text`` wrapped at the console's width between words (and, in its first
    ``where`` characters, after a ``:`` or ``/`` of the location), continuation lines
    indented by ``indent``; only a word wider than a whole line is folded."""
    width = max(console.width, indent + 20)
    for number, (start, end) in enumerate(_line_ends(text.plain, where, width, indent)):
        console.print(Text(" " * indent if number else "") + text[start:end], soft_wrap=True)


def print_concise(reports: Sequence[Report], console: Console, options: RenderOptions) -> None:
    """The concise terminal view of ``reports`` (see the module's docstring)."""
    above = None if options.show_all else GROUP_ABOVE
    for report in reports:
        if report.load_error:
            if options.load_errors:
                line = Text.assemble((str(report.path), "bold"), ": ", ("cannot check", "red"))
                print_wrapped(console, line + Text(f": {report.load_error}"))
            continue
        for group in group_findings(report.findings, above=above):
            where = len(_where(group.first, report.path)) + 1
            print_wrapped(console, concise_line(group.first, report.path), where)
            if len(group.findings) > 1:
                print_wrapped(console, _more_line(group, report.path), where)
        if (custom := custom_quant_line(report)) is not None:
            print_wrapped(console, Text(custom, style="dim"))
    if options.summary:
        print_wrapped(console, Text(found_line(reports), style="bold"))
        print_wrapped(console, Text(summary_line(reports), style="dim"))
