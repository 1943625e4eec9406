"""The text of check reports (lines, groups, tables, the summary) and the rule catalogue.

Pure functions from :class:`~qlrewrite.findings.Report` lists and
:class:`~qlrewrite.findings.Rule` entries to text; the CLI only picks one and writes it.
``python -m qlrewrite.checking.render [FILE]`` regenerates the catalogue (``docs/rules.md``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from qlrewrite.findings import Finding, Report, Rule
from qlrewrite.io import reading
from qlrewrite.text import escape

__all__ = [
    "FindingGroup",
    "finding_line",
    "finding_lines",
    "group_findings",
    "node_label",
    "node_where",
    "print_rule",
    "print_rules_table",
    "print_text_tables",
    "rule_counts",
    "rule_text",
    "rules_json",
    "rules_lines",
    "rules_markdown",
    "summary_line",
    "text_lines",
]

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}
_CATEGORIES = {
    "QL1": "Structure",
    "QL2": "Attributes",
    "QL3": "Element types",
    "QL4": "Granularity and shapes",
    "QL5": "Constant values",
    "QL6": "Model hygiene",
    "QL9": "Suppressions",
}


def escaped_report(report: Report) -> Report:
    """``report`` with every name and message escaped (:func:`~qlrewrite.text.escape`):
    one finding one line, in every format, whatever bytes a model or a file name holds."""

    def finding(f: Finding) -> Finding:
        return dataclasses.replace(
            f,
            message=escape(f.message),
            hint=escape(f.hint),
            node=escape(f.node),
            op_type=escape(f.op_type),
            domain=escape(f.domain),
            graph=escape(f.graph),
            output=escape(f.output),
        )

    return dataclasses.replace(
        report,
        path=None if report.path is None else escape(report.path),
        load_error=None if report.load_error is None else escape(report.load_error),
        findings=[finding(f) for f in report.findings],
        suppressed=[finding(f) for f in report.suppressed],
    )


def _rules() -> Mapping[str, Rule]:
    from qlrewrite.rules import RULES

    return RULES


# --------------------------------------------------------------------------- text


def node_label(finding: Finding) -> str:
    """The node's name, ``<op_type>`` for an unnamed node, "" for a tensor finding."""
    if finding.node:
        return finding.node
    return f"<{finding.op_type}>" if finding.op_type else ""


def node_where(finding: Finding) -> str:
    """``graph/node`` (just the graph for a finding about a tensor)."""
    label = node_label(finding)
    return f"{finding.graph}/{label}" if label else finding.graph


def finding_line(finding: Finding, path: str | None = None) -> str:
    """One line: ``[path: ]QL401 error: message (hint: ...)`` (messages name node and graph)."""
    prefix = f"{path}: " if path else ""
    hint = f" (hint: {finding.hint})" if finding.hint else ""
    return f"{prefix}{finding.rule} {finding.severity}: {finding.message}{hint}"


#: More findings than this with one code and one message pattern print as a group.
GROUP_ABOVE = 5
#: Nodes named on a group's line.
GROUP_NODES = 3
#: What differs between repeats of one finding: quoted names, "(TYPE [dims])", numbers.
_NAMES = re.compile(r"'[^']*'|\([A-Z][A-Z0-9_]* \[[^\]]*\]\)|\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b")


@dataclasses.dataclass(frozen=True)
class FindingGroup:
    """Findings of one code whose messages differ only in names and numbers."""

    findings: tuple[Finding, ...]

    @property
    def first(self) -> Finding:
        """The finding printed in full."""
        return self.findings[0]

    def nodes(self, limit: int = GROUP_NODES) -> str:
        """``a, b, c, ...``: the first ``limit`` nodes after the first finding's."""
        labels = [node_label(f) or f.graph for f in self.findings[1:]]
        shown = ", ".join(labels[:limit])
        return shown + (", ..." if len(labels) > limit else "")


def _pattern(finding: Finding) -> tuple[str, str, str, str]:
    return (
        finding.rule,
        finding.severity,
        _NAMES.sub("#", finding.message),
        _NAMES.sub("#", finding.hint),
    )


def group_findings(
    findings: Sequence[Finding], *, above: int | None = GROUP_ABOVE
) -> list[FindingGroup]:
    """Findings in their order, those sharing code and message pattern (names and numbers
    aside) gathered in one group at the first one's place when there are more than
    ``above`` of them (``None``: never group, as ``--show-all``)."""
    if above is None:
        return [FindingGroup((f,)) for f in findings]
    by_pattern: dict[tuple[str, str, str, str], list[Finding]] = {}
    for finding in findings:
        by_pattern.setdefault(_pattern(finding), []).append(finding)
    groups: list[FindingGroup] = []
    for members in by_pattern.values():
        if len(members) > above:
            groups.append(FindingGroup(tuple(members)))
        else:
            groups.extend(FindingGroup((f,)) for f in members)
    order = {id(f): i for i, f in enumerate(findings)}
    return sorted(groups, key=lambda g: order[id(g.first)])


def rule_counts(reports: Sequence[Report]) -> dict[str, int]:
    """Findings per rule code over ``reports``, by code."""
    counts: dict[str, int] = {}
    for report in reports:
        for finding in report.findings:
            counts[finding.rule] = counts.get(finding.rule, 0) + 1
    return dict(sorted(counts.items()))


def summary_line(reports: Sequence[Report]) -> str:
    """``checked 3 file(s), 12 quantized node(s): 2 error(s), 1 warning(s) [QL403 x2, ...]``,
    then ``; 4 suppressed``, ``; 1 could not be checked`` (files) and ``; 1 folder error(s)``
    (a folder without models or unreadable: :attr:`Report.folder`) when there are some."""
    files = [r for r in reports if r.is_model]
    nodes = sum(r.nodes_checked for r in files)
    errors = sum(len(r.errors) for r in reports)
    warnings = sum(len(r.warnings) for r in reports)
    suppressed = sum(len(r.suppressed) for r in files)
    unreadable = sum(1 for r in files if r.load_error)
    custom = sum(g.nodes for r in files for g in r.custom_quant)
    line = (
        f"checked {len(files)} file(s), {nodes} quantized node(s): "
        f"{errors} error(s), {warnings} warning(s)"
    )
    counts = rule_counts(reports)
    if counts:
        line += " [" + ", ".join(f"{code} x{n}" for code, n in counts.items()) + "]"
    if suppressed:
        line += f"; {suppressed} suppressed"
    if custom:
        line += f"; {custom} custom quantization node(s) not checked"
    if unchecked := sum(g.nodes for r in files for g in r.unchecked):
        line += f"; {unchecked} quantized node(s) of kinds not checked"
    if unreadable:
        line += f"; {unreadable} could not be checked"
    folders = sum(1 for r in reports if r.folder)
    return line + (f"; {folders} folder error(s)" if folders else "")


def custom_quant_line(report: Report) -> str | None:
    """``path: not checked: 12 custom quantization node(s) (AMD Quark: ...)`` and ``path:
    3 quantized node(s) of kinds not checked: com.microsoft QOrderedMatMul x3``, or None."""
    from qlrewrite.qdq.custom_ops import describe
    from qlrewrite.qdq.left_alone import describe_unchecked

    lines = []
    if report.custom_quant:
        lines.append(f"{report.path}: not checked: {describe(report.custom_quant)}")
    if report.unchecked:
        lines.append(f"{report.path}: {describe_unchecked(report.unchecked)}")
    return "\n".join(lines) or None


def _more_line(group: FindingGroup, path: str | None, every: str) -> str:
    prefix = f"{path}: " if path else ""
    first = group.first
    return (
        f"{prefix}{first.rule} {first.severity}: {len(group.findings) - 1} more like the line "
        f"above, on {group.nodes()} ({every} prints each)"
    )


def finding_lines(
    findings: Sequence[Finding],
    path: str | None = None,
    *,
    show_all: bool = False,
    every: str = "--show-all",
) -> list[str]:
    """One line per finding, or per group of findings that differ only in names and
    numbers (its first finding, then ``N more like the line above, on a, b, c, ...
    (<every> prints each)``)."""
    lines = []
    for group in group_findings(findings, above=None if show_all else GROUP_ABOVE):
        lines.append(finding_line(group.first, path))
        if len(group.findings) > 1:
            lines.append(_more_line(group, path, every))
    return lines


def text_lines(
    reports: Sequence[Report],
    *,
    summary: bool = True,
    show_all: bool = False,
    load_errors: bool = True,
) -> list[str]:
    """The text report for logs and files: one line per finding or unreadable file, or per
    group of findings that differ only in names (see :func:`group_findings`). Without
    ``load_errors`` the unreadable files are left out (the caller said so on stderr)."""
    lines = []
    for report in reports:
        if report.load_error and load_errors:
            lines.append(f"{report.path}: cannot check: {report.load_error}")
        lines += finding_lines(report.findings, report.path, show_all=show_all)
        if (custom := custom_quant_line(report)) is not None:
            lines.append(custom)
    if summary:
        lines.append(summary_line(reports))
    return lines


def print_text_tables(
    reports: Sequence[Report],
    console: Console,
    *,
    summary: bool = True,
    show_all: bool = False,
    load_errors: bool = True,
) -> None:
    """The text report for a terminal: one rich table per file with findings (groups of
    findings that differ only in names as one row and a row naming the other nodes).
    Without ``load_errors`` the unreadable files are left out (said on stderr)."""
    for report in reports:
        if report.load_error and not load_errors:
            continue
        if report.load_error:
            console.print(
                Text.assemble((str(report.path), "bold"), ": ", ("cannot check", "bold red"), ": ")
                + Text(report.load_error)
            )
            continue
        if (custom := custom_quant_line(report)) is not None:
            console.print(Text(custom))
        if not report.findings:
            continue
        table = Table(
            title=f"{report.path}: {len(report.errors)} error(s), {len(report.warnings)} "
            f"warning(s) in {report.nodes_checked} quantized node(s)",
            title_justify="left",
            show_lines=True,
        )
        for column in ("rule", "severity", "graph", "node", "message", "hint"):
            table.add_column(column, overflow="fold")
        for group in group_findings(report.findings, above=None if show_all else GROUP_ABOVE):
            f = group.first
            table.add_row(
                f.rule,
                Text(f.severity, style=_SEVERITY_STYLE[f.severity]),
                Text(f.graph),
                Text(node_label(f)),
                Text(f.message),
                Text(f.hint),
            )
            if len(group.findings) > 1:
                table.add_row(
                    f.rule,
                    Text(f.severity, style=_SEVERITY_STYLE[f.severity]),
                    "",
                    Text(f"+{len(group.findings) - 1} more"),
                    Text(f"like the row above, on {group.nodes()} (--show-all prints each)"),
                    "",
                )
        console.print(table)
    if summary:
        console.print(Text(summary_line(reports), style="bold"))


# --------------------------------------------------------------------------- rules


def _fix_text(rule: Rule) -> str:
    """``Fix (safe, check --fix): ...``, ``Fix (unsafe, ...)`` or ``Fix: none``."""
    if rule.fix is None:
        return "Fix: none (repair it by hand)"
    how = "check --fix" if rule.fix == "safe" else "check --fix --unsafe-fixes"
    return f"Fix ({rule.fix}, {how}): {rule.fix_summary}"


def _source_text(rule: Rule) -> str:
    """Where the rule unit lives (check, fix, examples) and the test that runs it."""
    return f"Source: {rule.source} (check, fix, examples; tests: pytest -k {rule.code})"


def rule_text(rule: Rule) -> str:
    """What ``qlrewrite rules CODE`` prints: name, severity, summary, why, example, fix,
    and where the rule is declared."""
    return (
        f"{rule.code} {rule.name} ({rule.level}; {rule.versions})\n\n"
        f"{rule.summary}\n\n{rule.explanation}\n\nExample:\n"
        + "\n".join(f"  {line}" for line in rule.example.splitlines())
        + f"\n\n{_fix_text(rule)}\n\n{_source_text(rule)}\n"
    )


def print_rule(rule: Rule, console: Console) -> None:
    """One rule for a terminal (same content as :func:`rule_text`)."""
    console.print(
        Text.assemble(
            (rule.code, "bold"),
            " ",
            (rule.name, "bold"),
            " (",
            (rule.level, _SEVERITY_STYLE[rule.severity]),
            f"; {rule.versions})",
        )
    )
    console.print()
    console.print(Text(rule.summary, style="italic"))
    console.print()
    console.print(Text(rule.explanation))
    console.print()
    console.print("Example:")
    console.print(Text("\n".join(f"  {line}" for line in rule.example.splitlines())))
    console.print()
    console.print(Text(_fix_text(rule)))
    console.print()
    console.print(Text(_source_text(rule)))


def rules_lines(rules: Iterable[Rule]) -> list[str]:
    """The catalogue for logs and pipes: one aligned line per rule (code, severity, fix,
    name, versions, summary), whole for grep; a terminal gets :func:`print_rules_table`."""
    rules = list(rules)
    name_width = max((len(r.name) for r in rules), default=0)
    versions_width = max((len(r.versions) for r in rules), default=0)
    level_width = max((len(r.level) for r in rules), default=0)
    return [
        f"{r.code}  {r.level:<{level_width}}  {r.fix or '-':<6}  {r.name:<{name_width}}  "
        f"{r.versions:<{versions_width}}  {r.summary}".rstrip()
        for r in rules
    ]


#: Below this terminal width the catalogue prints as blocks, not as a table.
RULES_TABLE_WIDTH = 120


def _print_rule_blocks(rules: Sequence[Rule], console: Console) -> None:
    """The catalogue on a narrow terminal: per rule, ``CODE  name  severity[, fix]`` and
    its summary wrapped below it."""
    console.print(
        Text.assemble(
            ("qlrewrite check rules", "italic"),
            f" ({len(rules)}; `qlrewrite rules CODE` explains one)",
        ),
        soft_wrap=False,
    )
    for r in rules:
        fix = f", {r.fix} fix" if r.fix else ""
        head = Text.assemble((r.code, "bold"), "  ", r.name, "  ")
        head.append(r.level, style=_SEVERITY_STYLE[r.severity])
        console.print(head + Text(fix), soft_wrap=False)
        console.print(Padding(Text(r.summary), (0, 0, 0, 7), expand=False), soft_wrap=False)


def print_rules_table(rules: Iterable[Rule], console: Console) -> None:
    """The catalogue for a terminal: code, name, severity, fix, versions, summary (blocks
    on a terminal narrower than :data:`RULES_TABLE_WIDTH`)."""
    rules = list(rules)
    if console.width < RULES_TABLE_WIDTH:
        _print_rule_blocks(rules, console)
        return
    table = Table(title="qlrewrite check rules", title_justify="left")
    for column in ("code", "name", "severity", "fix", "versions", "summary"):
        table.add_column(column, overflow="fold")
    for r in rules:
        table.add_row(
            r.code,
            r.name,
            Text(r.level, style=_SEVERITY_STYLE[r.severity]),
            r.fix or "",
            r.versions,
            Text(r.summary),
        )
    console.print(table)


def rules_json(rules: Iterable[Rule] | Rule) -> str:
    """The catalogue as a JSON list of rule objects (one rule: the object)."""
    if isinstance(rules, Rule):
        return json.dumps(dataclasses.asdict(rules), indent=2) + "\n"
    return json.dumps([dataclasses.asdict(r) for r in rules], indent=2) + "\n"


def _anchor(rule: Rule) -> str:
    return f"{rule.code}-{rule.name}".lower()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rules_markdown(rules: Mapping[str, Rule] | None = None) -> str:
    """The catalogue as Markdown (``docs/rules.md``), generated from the rule registry."""
    rules = dict(rules if rules is not None else _rules())
    out = [
        "# qlrewrite check rules",
        "",
        "<!-- Generated by `python -m qlrewrite.checking.render docs/rules.md`; do not edit. -->",
        "",
        "Every rule `qlrewrite check` applies to QuantizeLinear / DequantizeLinear nodes.",
        "Errors make `qlrewrite check` exit 1 (warnings only with `--strict`); select or",
        "ignore rules by code or prefix with `--select` / `--ignore` (for example",
        "`--ignore QL5`). Opt-in rules run only when `--select` names them (their code or",
        "category, as `--select QL504` or `--select QL5`; not `ALL`). `qlrewrite rules CODE`",
        "prints one entry. The fix column says what `qlrewrite check --fix` repairs: *safe*",
        "fixes keep ONNX Runtime's outputs bit-identical; *unsafe* ones need `--unsafe-fixes`.",
        "",
        "Each rule is one unit, declared in the module its entry links (in the folder of",
        "the node kind it reads, its docstring opening with its codes): the catalogue text,",
        "the check, the fix (decided from the finding's fields) and a bad and a good example",
        "model. `tests/rules/test_rule_units.py` runs every unit's examples (`pytest -k QL406`:",
        "one rule); `qlrewrite/passes/fix.py` applies the fixes; `qlrewrite/rules/registry.py`",
        "says how to declare a rule.",
        "",
        "| code | name | severity | fix | versions | summary |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules.values():
        out.append(
            f"| [{r.code}](#{_anchor(r)}) | {r.name} | {r.level} | {r.fix or ''} "
            f"| {_cell(r.versions)} | {_cell(r.summary)} |"
        )
    category = None
    for r in rules.values():
        if r.code[:3] != category:
            category = r.code[:3]
            out += ["", f"## {category}xx: {_CATEGORIES.get(category, 'Other')}"]
        out += [
            "",
            f"### {r.code} {r.name}",
            "",
            f"Severity: **{r.level}**. Applies to: {r.versions}.",
            "",
            r.summary,
            "",
            r.explanation,
            "",
            "```text",
            r.example,
            "```",
            "",
            _fix_text(r),
            "",
            f"Declared in [`{r.source}`](../{r.source}) (check, fix, examples); tested by "
            f"`tests/rules/test_rule_units.py` (`pytest -k {r.code}`).",
        ]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qlrewrite.checking.render [FILE] [--check]``: write (or verify) the catalogue."""
    args = list(sys.argv[1:] if argv is None else argv)
    check_only = "--check" in args
    paths = [a for a in args if a != "--check"]
    target = Path(paths[0] if paths else "docs/rules.md")
    text = rules_markdown()
    if check_only:
        exists = target.exists()
        current = reading.read_text(target, "document", reading.DOCUMENT_BYTES) if exists else ""
        if current != text:
            print(f"{target} is out of date; run python -m qlrewrite.checking.render {target}")
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({len(_rules())} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
