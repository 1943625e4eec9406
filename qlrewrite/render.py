"""Renderers of check reports (text, json, sarif, github) and of the rule catalogue.

Pure functions from :class:`~qlrewrite.findings.Report` lists and
:class:`~qlrewrite.findings.Rule` entries to text; the CLI only picks one and writes it.
``python -m qlrewrite.render [FILE]`` regenerates the catalogue (``docs/rules.md``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from qlrewrite import __version__
from qlrewrite.findings import Finding, Report, Rule

__all__ = [
    "FORMATS",
    "finding_line",
    "print_rule",
    "print_rules_table",
    "print_text_tables",
    "render",
    "render_github",
    "render_json",
    "render_sarif",
    "rule_text",
    "rules_json",
    "rules_lines",
    "rules_markdown",
    "summary_line",
    "text_lines",
]

FORMATS = ("text", "json", "sarif", "github")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}
_CATEGORIES = {
    "QL1": "Structure",
    "QL2": "Attributes",
    "QL3": "Element types",
    "QL4": "Granularity and shapes",
    "QL5": "Constant values",
    "QL6": "Model hygiene",
}


def _rules() -> Mapping[str, Rule]:
    from qlrewrite.rules import RULES

    return RULES


# --------------------------------------------------------------------------- text


def _node_label(finding: Finding) -> str:
    """The node's name, ``<op_type>`` for an unnamed node, "" for a tensor finding."""
    if finding.node:
        return finding.node
    return f"<{finding.op_type}>" if finding.op_type else ""


def _where(finding: Finding) -> str:
    """``graph/node`` (just the graph for a finding about a tensor)."""
    label = _node_label(finding)
    return f"{finding.graph}/{label}" if label else finding.graph


def finding_line(finding: Finding, path: str | None = None) -> str:
    """One line: ``[path: ]QL401 error: message (hint: ...)`` (messages name node and graph)."""
    prefix = f"{path}: " if path else ""
    hint = f" (hint: {finding.hint})" if finding.hint else ""
    return f"{prefix}{finding.rule} {finding.severity}: {finding.message}{hint}"


def summary_line(reports: Sequence[Report]) -> str:
    """``checked 3 file(s), 12 quantized node(s): 2 error(s), 1 warning(s)[; ...]``."""
    nodes = sum(r.nodes_checked for r in reports)
    errors = sum(len(r.errors) for r in reports)
    warnings = sum(len(r.warnings) for r in reports)
    unreadable = sum(1 for r in reports if r.error)
    line = (
        f"checked {len(reports)} file(s), {nodes} quantized node(s): "
        f"{errors} error(s), {warnings} warning(s)"
    )
    return line + (f"; {unreadable} could not be checked" if unreadable else "")


def text_lines(reports: Sequence[Report], *, summary: bool = True) -> list[str]:
    """The text report for logs and files: one line per finding or unreadable file."""
    lines = []
    for report in reports:
        if report.error:
            lines.append(f"{report.path}: cannot check: {report.error}")
        lines.extend(finding_line(f, report.path) for f in report.findings)
    if summary:
        lines.append(summary_line(reports))
    return lines


def print_text_tables(reports: Sequence[Report], console: Console, *, summary: bool = True) -> None:
    """The text report for a terminal: one rich table per file with findings."""
    for report in reports:
        if report.error:
            console.print(
                Text.assemble((str(report.path), "bold"), ": ", ("cannot check", "bold red"), ": ")
                + Text(report.error)
            )
            continue
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
        for f in report.findings:
            table.add_row(
                f.rule,
                Text(f.severity, style=_SEVERITY_STYLE[f.severity]),
                Text(f.graph),
                Text(_node_label(f)),
                Text(f.message),
                Text(f.hint),
            )
        console.print(table)
    if summary:
        console.print(Text(summary_line(reports), style="bold"))


# --------------------------------------------------------------------------- json


def render_json(reports: Sequence[Report]) -> str:
    """``{"version": 1, "files": [Report.to_json(), ...], "summary": {...}}``."""
    document = {
        "version": 1,
        "files": [r.to_json() for r in reports],
        "summary": {
            "files": len(reports),
            "unreadable": sum(1 for r in reports if r.error),
            "nodes_checked": sum(r.nodes_checked for r in reports),
            "errors": sum(len(r.errors) for r in reports),
            "warnings": sum(len(r.warnings) for r in reports),
        },
    }
    return json.dumps(document, indent=2) + "\n"


# --------------------------------------------------------------------------- github


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(reports: Sequence[Report]) -> str:
    """GitHub Actions workflow commands: ``::error file=...,title=...::message`` lines."""
    rules = _rules()
    lines = []
    for report in reports:
        path = _escape_property(_relative_posix(report.path or ""))
        if report.error:
            lines.append(
                f"::error file={path},title=unreadable model::{_escape_data(report.error)}"
            )
        for f in report.findings:
            rule = rules.get(f.rule)
            title = _escape_property(f"{f.rule} {rule.name}" if rule else f.rule)
            message = f.message + (f"\nhint: {f.hint}" if f.hint else "")
            lines.append(f"::{f.severity} file={path},title={title}::{_escape_data(message)}")
    lines.append(summary_line(reports))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- sarif


def _relative_posix(path: str) -> str:
    """``path`` relative to the current folder when inside it, with forward slashes."""
    pure = Path(path)
    if pure.is_absolute():
        try:
            pure = pure.relative_to(Path.cwd())
        except ValueError:
            return pure.as_posix()
    return PurePath(os.path.normpath(pure)).as_posix()


def _artifact_location(path: str) -> dict[str, str]:
    relative = _relative_posix(path)
    if Path(relative).is_absolute():
        return {"uri": Path(relative).as_uri()}
    return {"uri": urllib.parse.quote(relative, safe="/"), "uriBaseId": "%SRCROOT%"}


def _sarif_rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.explanation},
        "help": {
            "text": f"{rule.explanation}\n\nExample:\n{rule.example}",
            "markdown": f"{rule.explanation}\n\nExample:\n\n```\n{rule.example}\n```",
        },
        "defaultConfiguration": {"level": rule.severity, "enabled": not rule.opt_in},
        "properties": {"tags": ["onnx", "quantization"], "versions": rule.versions},
    }


def _sarif_result(f: Finding, path: str, index: dict[str, int]) -> dict[str, Any]:
    text = f.message + (f" (hint: {f.hint})" if f.hint else "")
    fingerprint = hashlib.sha256(
        "\0".join((path, f.rule, f.graph, f.node, f.op_type, f.message)).encode()
    ).hexdigest()
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "level": f.severity,
        "message": {"text": text},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact_location(path),
                    "region": {"startLine": 1},
                },
                "logicalLocations": [
                    {
                        "name": f.node or f.op_type or f.graph,
                        "fullyQualifiedName": _where(f),
                        "kind": "function" if f.op_type else "module",
                    }
                ],
            }
        ],
        "partialFingerprints": {"qlrewriteFinding/v1": fingerprint},
        "properties": {
            "graph": f.graph,
            "node": f.node,
            "op_type": f.op_type,
            "domain": f.domain,
            "opset": f.opset,
            "hint": f.hint,
        },
    }
    if f.rule in index:
        result["ruleIndex"] = index[f.rule]
    return result


def render_sarif(reports: Sequence[Report], codes: Iterable[str] | None = None) -> str:
    """SARIF 2.1.0 for GitHub code scanning; ``codes``: the rules listed (default all)."""
    rules = _rules()
    listed = [rules[c] for c in (codes if codes is not None else rules) if c in rules]
    listed.sort(key=lambda r: r.code)
    index = {r.code: i for i, r in enumerate(listed)}
    results = [
        _sarif_result(f, report.path or "", index) for report in reports for f in report.findings
    ]
    notifications = [
        {
            "level": "error",
            "message": {"text": report.error},
            "locations": [
                {"physicalLocation": {"artifactLocation": _artifact_location(report.path or "")}}
            ],
        }
        for report in reports
        if report.error
    ]
    document = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "qlrewrite",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": [_sarif_rule(r) for r in listed],
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": not notifications,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
                "columnKind": "unicodeCodePoints",
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def render(reports: Sequence[Report], fmt: str, *, codes: Iterable[str] | None = None) -> str:
    """``reports`` in ``fmt`` (text as log lines) as one string ending with a newline."""
    if fmt == "json":
        return render_json(reports)
    if fmt == "sarif":
        return render_sarif(reports, codes)
    if fmt == "github":
        return render_github(reports)
    if fmt == "text":
        return "\n".join(text_lines(reports)) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


# --------------------------------------------------------------------------- rules


def rule_text(rule: Rule) -> str:
    """What ``qlrewrite rules CODE`` prints: name, severity, summary, why, example."""
    return (
        f"{rule.code} {rule.name} ({rule.level}; {rule.versions})\n\n"
        f"{rule.summary}\n\n{rule.explanation}\n\nExample:\n"
        + "\n".join(f"  {line}" for line in rule.example.splitlines())
        + "\n"
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


def rules_lines(rules: Iterable[Rule]) -> list[str]:
    """The catalogue for logs: one aligned line per rule."""
    rules = list(rules)
    name_width = max((len(r.name) for r in rules), default=0)
    versions_width = max((len(r.versions) for r in rules), default=0)
    level_width = max((len(r.level) for r in rules), default=0)
    return [
        f"{r.code}  {r.level:<{level_width}}  {r.name:<{name_width}}  "
        f"{r.versions:<{versions_width}}  {r.summary}".rstrip()
        for r in rules
    ]


def print_rules_table(rules: Iterable[Rule], console: Console) -> None:
    """The catalogue for a terminal: code, name, severity, versions, summary."""
    table = Table(title="qlrewrite check rules", title_justify="left")
    for column in ("code", "name", "severity", "versions", "summary"):
        table.add_column(column, overflow="fold")
    for r in rules:
        table.add_row(
            r.code,
            r.name,
            Text(r.level, style=_SEVERITY_STYLE[r.severity]),
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
        "<!-- Generated by `python -m qlrewrite.render docs/rules.md`; do not edit. -->",
        "",
        "Every rule `qlrewrite check` applies to QuantizeLinear / DequantizeLinear nodes.",
        "Errors make `qlrewrite check` exit 1 (warnings only with `--strict`); select or",
        "ignore rules by code or prefix with `--select` / `--ignore` (for example",
        "`--ignore QL5`). Opt-in rules run only when `--select` names them (their code or",
        "category, as `--select QL504` or `--select QL5`; not `ALL`). `qlrewrite rules CODE`",
        "prints one entry.",
        "",
        "| code | name | severity | versions | summary |",
        "|---|---|---|---|---|",
    ]
    for r in rules.values():
        out.append(
            f"| [{r.code}](#{_anchor(r)}) | {r.name} | {r.level} | {_cell(r.versions)} "
            f"| {_cell(r.summary)} |"
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
        ]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qlrewrite.render [FILE] [--check]``: write (or verify) the catalogue."""
    args = list(sys.argv[1:] if argv is None else argv)
    check_only = "--check" in args
    paths = [a for a in args if a != "--check"]
    target = Path(paths[0] if paths else "docs/rules.md")
    text = rules_markdown()
    if check_only:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print(f"{target} is out of date; run python -m qlrewrite.render {target}")
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({len(_rules())} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
