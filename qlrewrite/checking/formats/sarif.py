"""``--output-format sarif``: SARIF 2.1.0 for GitHub code scanning (the rules enabled,
each finding with a stable fingerprint)."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from qlrewrite._version import __version__
from qlrewrite.checking.formats.base import OutputFormat, RenderOptions, relative_posix
from qlrewrite.checking.render import node_where
from qlrewrite.findings import Finding, Report, Rule
from qlrewrite.rules import RULES

__all__ = ["FORMAT", "SARIF_SCHEMA", "render_sarif"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _artifact_location(path: str) -> dict[str, str]:
    relative = relative_posix(path)
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
        "properties": {
            "tags": ["onnx", "quantization"],
            "versions": rule.versions,
            "fix": rule.fix or "none",
            "fixSummary": rule.fix_summary,
        },
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
                        "fullyQualifiedName": node_where(f),
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
            "fix": f.fix or "none",
        },
    }
    if f.rule in index:
        result["ruleIndex"] = index[f.rule]
    return result


def render_sarif(reports: Sequence[Report], codes: Iterable[str] | None = None) -> str:
    """SARIF 2.1.0 for GitHub code scanning; ``codes``: the rules listed (default all)."""
    rules = RULES
    listed = [rules[c] for c in (codes if codes is not None else rules) if c in rules]
    listed.sort(key=lambda r: r.code)
    index = {r.code: i for i, r in enumerate(listed)}
    results = [
        _sarif_result(f, report.path or "", index) for report in reports for f in report.findings
    ]
    notifications = [
        {
            "level": "error",
            "message": {"text": report.load_error},
            "locations": [
                {"physicalLocation": {"artifactLocation": _artifact_location(report.path or "")}}
            ],
        }
        for report in reports
        if report.load_error
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


def _render(reports: Sequence[Report], options: RenderOptions) -> str:
    return render_sarif(reports, options.codes)


FORMAT = OutputFormat("sarif", "SARIF 2.1.0 for GitHub code scanning", _render)
