"""What `qlrewrite check` shows instead of a report, as ruff does: ``--show-files``,
``--show-settings`` (each model's configuration, resolved) and ``--statistics``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from qlrewrite.checking import project
from qlrewrite.errors import EXIT_INPUT, EXIT_OK
from qlrewrite.findings import Report
from qlrewrite.rules import RULES
from qlrewrite.text import escape

__all__ = ["show_files", "show_settings", "statistics"]


def _errors(found: Sequence[project.Target | Report]) -> int:
    """Say on stderr why each path gave nothing to check; the exit code."""
    failed = [r for r in found if isinstance(r, Report)]
    for report in failed:
        click.echo(
            f"qlrewrite: error: {escape(report.path or '')}: {escape(report.load_error or '')}",
            err=True,
        )
    return EXIT_INPUT if failed else EXIT_OK


def show_files(found: Sequence[project.Target | Report]) -> int:
    """``--show-files``: the models that would be checked, one per line; the exit code."""
    for target in found:
        if isinstance(target, project.Target):
            click.echo(escape(str(target.path)))
    return _errors(found)


def _overrides(selection: project.Selection) -> dict[str, list[str]]:
    """The rule options given on the command line (layered over each configuration)."""
    given = (
        ("select", selection.select),
        ("extend-select", selection.extend_select),
        ("ignore", selection.ignore),
    )
    return {key: list(value) for key, value in given if value}


def _resolved(target: project.Target, selection: project.Selection) -> dict[str, Any]:
    settings = target.settings
    strict = selection.strict if selection.strict is not None else bool(settings.strict)
    return {
        "path": str(target.path),
        "configuration": None if settings.path is None else str(settings.path),
        "select": list(settings.select),
        "extend-select": list(settings.extend_select),
        "ignore": list(settings.ignore),
        "per-file-ignores": list(settings.ignored_for(target.path)),
        "per-node-ignores": {k: list(v) for k, v in settings.per_node_ignores.items()},
        "exclude": list(settings.exclude),
        "output-format": settings.output_format,
        "command-line": _overrides(selection),
        "strict": strict,
        "rules": sorted(project.enabled_codes(settings, selection, target.path)),
    }


def _value_text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(value) if value else "-"
    if isinstance(value, dict):
        return "; ".join(f"{k} = {', '.join(v)}" for k, v in value.items()) or "-"
    if isinstance(value, bool):
        return str(value).lower()
    return "-" if value is None else str(value)


def _settings_lines(entry: dict[str, Any]) -> list[str]:
    lines = [escape(entry["path"])]
    where = entry["configuration"]
    lines.append(f"  configuration: {escape(where) if where else 'none (defaults)'}")
    for key, value in entry.items():
        if key not in {"path", "configuration"}:
            label = f"{key} ({len(value)})" if key == "rules" else key
            lines.append(f"  {label}: {escape(_value_text(value))}")
    return lines


def show_settings(
    found: Sequence[project.Target | Report], selection: project.Selection, fmt: str
) -> int:
    """``--show-settings``: per model, the configuration file that applies and the
    settings resolved with the command line (json with ``--output-format json``)."""
    entries = [_resolved(t, selection) for t in found if isinstance(t, project.Target)]
    if fmt == "json":
        click.echo(json.dumps(entries, indent=2))
    else:
        click.echo("\n".join(line for entry in entries for line in _settings_lines(entry)))
    return _errors(found)


def statistics(reports: Sequence[Report]) -> list[dict[str, Any]]:
    """Findings per rule over ``reports``: code, name, severity, count and the fix the
    rule has (``safe``, ``unsafe`` or None); the most frequent first, as ruff."""
    counts: dict[str, int] = {}
    for report in reports:
        for finding in report.findings:
            counts[finding.rule] = counts.get(finding.rule, 0) + 1
    rows = []
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = RULES.get(code)
        fix = None if rule is None or rule.fix is None else str(rule.fix)
        name, severity = (rule.name, str(rule.severity)) if rule else ("", "")
        rows.append(
            {"code": code, "name": name, "severity": severity, "count": count, "fixable": fix}
        )
    return rows
