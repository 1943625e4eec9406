"""Findings of `check`: the Rule catalogue entry, one Finding, and a file's Report.

Rules live in :mod:`qlrewrite.rules`; each one is described by a :class:`Rule` and
produces :class:`Finding` objects. A :class:`Report` holds the findings of one model
file (or the one-line reason it could not be read). Renderers (text, json, sarif,
github) turn a list of reports into output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

__all__ = [
    "ERROR",
    "SAFE",
    "UNSAFE",
    "WARNING",
    "Finding",
    "FixKind",
    "Report",
    "Rule",
    "Severity",
    "fixable",
]

Severity = Literal["error", "warning"]
ERROR: Severity = "error"
WARNING: Severity = "warning"

#: How a rule's fix may be applied: "safe" (ONNX Runtime computes bit-identical outputs;
#: ``check --fix``) or "unsafe" (only with ``--unsafe-fixes``).
FixKind = Literal["safe", "unsafe"]
SAFE: FixKind = "safe"
UNSAFE: FixKind = "unsafe"


@dataclasses.dataclass(frozen=True)
class Rule:
    """A catalogue entry: what `qlrewrite rules CODE` prints."""

    code: str  # "QL101": stable, never reused
    name: str  # "axis-out-of-range": kebab-case summary
    severity: Severity
    summary: str  # one line
    explanation: str  # why this matters (a paragraph)
    example: str  # a short example of a node that breaks the rule and its fix
    versions: str = ""  # where it applies, e.g. "ai.onnx 13+, com.microsoft"
    fix: FixKind | None = None  # what `check --fix` can do about it (None: nothing)
    fix_summary: str = ""  # what the fix changes, and when it applies
    opt_in: bool = False  # off unless selected by code or prefix (``--select QL504``)
    source: str = ""  # the file that declares the rule, its fix and its examples

    @property
    def level(self) -> str:
        """The severity as the catalogue shows it: ``warning (opt-in)`` for opt-in rules."""
        return f"{self.severity} (opt-in)" if self.opt_in else self.severity


@dataclasses.dataclass(frozen=True)
class Finding:
    """One rule violation at one node (or at a tensor, for model hygiene rules)."""

    rule: str
    severity: Severity
    message: str
    hint: str = ""
    node: str = ""  # node name, or "" when unnamed / not about a node
    op_type: str = ""
    domain: str = ""  # "" for ai.onnx
    opset: int | None = None  # the imported opset version of the node's domain
    graph: str = "main"  # "main", "main/<node>.<attr>" or "function:<domain>.<name>"
    output: str = ""  # the node's first output name ("" when not about a node)
    #: The attribute the finding is about ("" when none): fixes read it, never the text.
    attribute: str = ""
    #: What ``check --fix`` can do for this finding ("safe", "unsafe" or None): set by the
    #: rule's registry entry from its :class:`~qlrewrite.rules.registry.Fix`.
    fix: FixKind | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``check --format json``; ``fix`` is what ``check --fix`` can do
        ("safe", "unsafe" or None)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "node": self.node,
            "op_type": self.op_type,
            "domain": self.domain,
            "opset": self.opset,
            "graph": self.graph,
            "output": self.output,
            "message": self.message,
            "hint": self.hint,
            "fix": self.fix,
        }


def fixable(findings: Iterable[Finding], *, unsafe: bool = False) -> list[Finding]:
    """The findings ``check --fix`` (with ``unsafe``: ``--fix --unsafe-fixes``) repairs:
    those whose ``fix`` their rule set to "safe" (or "unsafe")."""
    allowed = (SAFE, UNSAFE) if unsafe else (SAFE,)
    return [f for f in findings if f.fix in allowed]


@dataclasses.dataclass
class Report:
    """The result of checking one model file."""

    path: str | None = None
    load_error: str | None = None  # why the model could not be read; then no findings
    findings: list[Finding] = dataclasses.field(default_factory=list)
    nodes_checked: int = 0
    suppressed: list[Finding] = dataclasses.field(default_factory=list)  # accepted findings
    #: per-node-ignores keys that named a node of this model; (key, prefix) pairs of them
    #: judged here (QL901 and a rule of the prefix enabled), and those that accepted a
    #: finding: the run judges its entries from these (:mod:`qlrewrite.checking.suppress`).
    matched_suppressions: frozenset[str] = frozenset()
    judged_suppressions: frozenset[tuple[str, str]] = frozenset()
    used_suppressions: frozenset[tuple[str, str]] = frozenset()
    #: Other producers' custom quantization operators seen, not checked (see
    #: :mod:`qlrewrite.qdq.custom_ops`): CustomQuantGroup objects.
    custom_quant: list[Any] = dataclasses.field(default_factory=list)
    #: Quantized nodes of kinds qlrewrite does not check (see :mod:`qlrewrite.qdq.left_alone`):
    #: UncheckedGroup objects.
    unchecked: list[Any] = dataclasses.field(default_factory=list)
    #: A folder given to ``check`` in which nothing was checked (``load_error`` says why):
    #: not counted as a file in the summary.
    folder: bool = False
    #: The report of a configuration file (QL901 on its ``per-node-ignores`` entries):
    #: its findings are counted, it is not a model checked.
    config: bool = False

    @property
    def is_model(self) -> bool:
        """A model file checked or that could not be (not a folder, not a configuration)."""
        return not self.folder and not self.config

    @property
    def errors(self) -> list[Finding]:
        """Findings of severity error."""
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        """Findings of severity warning."""
        return [f for f in self.findings if f.severity == WARNING]

    def to_json(self) -> dict[str, Any]:
        """The per-file JSON object of ``check --format json`` (``unchecked`` only when the
        model has quantized nodes of kinds not checked)."""
        entry = {
            "path": self.path,
            "error": self.load_error,
            "findings": [f.to_json() for f in self.findings],
            "custom_quant": [g.to_json() for g in self.custom_quant],
            "summary": {
                "nodes_checked": self.nodes_checked,
                "custom_quant_nodes": sum(g.nodes for g in self.custom_quant),
                "errors": len(self.errors),
                "warnings": len(self.warnings),
                "suppressed": len(self.suppressed),
            },
        }
        if self.unchecked:
            entry["unchecked"] = [g.to_json() for g in self.unchecked]
        return entry
