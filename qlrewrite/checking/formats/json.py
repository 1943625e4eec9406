"""``--output-format json``: the whole run as one JSON document (files, findings, summary)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from qlrewrite.checking.formats.base import OutputFormat, RenderOptions
from qlrewrite.checking.render import rule_counts
from qlrewrite.findings import Report

__all__ = ["FORMAT", "render_json"]


def render_json(reports: Sequence[Report], options: RenderOptions | None = None) -> str:
    """``{"version": 1, "files": [Report.to_json(), ...], "summary": {...}}``."""
    document = {
        "version": 1,
        "files": [r.to_json() for r in reports],
        "summary": {
            "files": sum(1 for r in reports if r.is_model),
            "unreadable": sum(1 for r in reports if r.load_error),
            "nodes_checked": sum(r.nodes_checked for r in reports),
            "custom_quant_nodes": sum(g.nodes for r in reports for g in r.custom_quant),
            "errors": sum(len(r.errors) for r in reports),
            "warnings": sum(len(r.warnings) for r in reports),
            "suppressed": sum(len(r.suppressed) for r in reports),
            "by_rule": rule_counts(reports),
        },
    }
    return json.dumps(document, indent=2) + "\n"


def _statistics(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), indent=2) + "\n"


FORMAT = OutputFormat(
    "json",
    "one JSON document: every file, finding and the summary",
    render_json,
    statistics=_statistics,
)
