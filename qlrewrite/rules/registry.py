"""The rule registry: a decorator that records each rule's catalogue entry and function."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Iterable
from typing import Any, Literal

from qlrewrite.findings import Finding, FixKind, Rule, Severity
from qlrewrite.opsets import WEIGHT_ONLY_OPS

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
#: Every quantized op a node rule may apply to.
ALL_OPS = (*QDQ_OPS, *WEIGHT_ONLY_OPS)

__all__ = ["ALL_OPS", "CHECKS", "QDQ_OPS", "RULES", "RuleCheck", "Scope", "rule"]

Scope = Literal["node", "model", "report"]


@dataclasses.dataclass(frozen=True)
class RuleCheck:
    """A rule with the function that applies it."""

    rule: Rule
    func: Callable[[Any], Iterable[Finding]]
    scope: Scope  # "node": called per Q/DQ node with a NodeContext; "model": once per model;
    # "report": findings made after the check, from the report (suppressions)
    needs_version: bool  # node rules: skipped when the imported opset has no version of the op
    ops: tuple[str, ...]  # node rules: the op types they apply to


#: The catalogue, ordered by code once every rule module is imported.
RULES: dict[str, Rule] = {}
#: The functions behind the catalogue, same keys.
CHECKS: dict[str, RuleCheck] = {}


def rule(
    code: str,
    name: str,
    severity: Severity,
    *,
    summary: str,
    explanation: str,
    example: str,
    versions: str = "",
    scope: Scope = "node",
    needs_version: bool = True,
    fix: FixKind | None = None,
    fix_summary: str = "",
    opt_in: bool = False,
    ops: tuple[str, ...] = QDQ_OPS,
) -> Callable[[Callable[[Any], Iterable[Finding]]], Callable[[Any], Iterable[Finding]]]:
    """Register the decorated function ``(ctx) -> Iterable[Finding]`` as rule ``code``.

    An ``opt_in`` rule runs only when ``--select`` names it (by code or prefix, not ALL).
    ``fix`` says whether ``check --fix`` repairs the findings ("safe": ONNX Runtime's
    outputs stay bit-identical) or only ``--unsafe-fixes`` does; the repair itself is in
    :mod:`qlrewrite.passes.fix`, and ``fix_summary`` says what it changes.
    """

    def register(func: Callable[[Any], Iterable[Finding]]) -> Callable[[Any], Iterable[Finding]]:
        if code in RULES:
            raise ValueError(f"rule code {code} registered twice")
        entry = Rule(
            code=code,
            name=name,
            severity=severity,
            summary=summary,
            explanation=" ".join(textwrap.dedent(explanation).split()),
            example=textwrap.dedent(example).strip("\n"),
            versions=versions,
            fix=fix,
            fix_summary=" ".join(textwrap.dedent(fix_summary).split()),
            opt_in=opt_in,
        )
        RULES[code] = entry
        CHECKS[code] = RuleCheck(entry, func, scope, needs_version, ops)
        return func

    return register
