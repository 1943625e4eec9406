"""The rule registry: a decorator that records each rule's catalogue entry and function."""

from __future__ import annotations

import dataclasses
import functools
import textwrap
from collections.abc import Callable, Iterable
from typing import Any, Literal

import onnx_ir as ir

from qlrewrite import tensors
from qlrewrite.findings import Finding, FixKind, Rule, Severity
from qlrewrite.qdq.sites import QDQ, QOPERATOR, WEIGHT_ONLY, SiteKind

#: The kinds of quantized node the rules shared by Q/DQ and the weight-only ops apply to.
ALL_KINDS = (QDQ, *WEIGHT_ONLY)
#: Every kind of quantized node `check` visits (the QOperator / dynamic ops have their
#: own rules, and share QL103 / QL104).
CHECKED_KINDS = (*ALL_KINDS, QOPERATOR)

__all__ = [
    "ALL_KINDS",
    "CHECKED_KINDS",
    "CHECKS",
    "RULES",
    "ModelContext",
    "RuleCheck",
    "Scope",
    "rule",
]

Scope = Literal["node", "model", "report"]


@dataclasses.dataclass(frozen=True)
class RuleCheck:
    """A rule with the function that applies it."""

    rule: Rule
    func: Callable[[Any], Iterable[Finding]]
    scope: Scope  # "node": called per Q/DQ node with a NodeView; "model": with a ModelContext;
    # "report": findings made after the check, from the report (suppressions)
    needs_version: bool  # node rules: skipped when the imported opset has no version of the op
    kinds: tuple[SiteKind, ...]  # node rules: the kinds of quantized node they apply to


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
    kinds: tuple[SiteKind, ...] = (QDQ,),
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
        CHECKS[code] = RuleCheck(entry, func, scope, needs_version, kinds)
        return func

    return register


@dataclasses.dataclass
class ModelContext:
    """The whole model, for rules about the file rather than one node."""

    model: ir.Model
    path: str | None = None

    @functools.cached_property
    def data_problems(self) -> list[tensors.DataProblem]:
        """Tensors whose data is missing, escapes the folder or has the wrong size."""
        return tensors.data_problems(self.model)
