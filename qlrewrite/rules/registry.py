"""The rule registry: each rule is one unit, declared with :func:`rule` in its module.

A unit is, as a ruff rule is: its code, severity, catalogue text (summary, why, an
example), its check (the decorated function), its :class:`Fix` (if any) and its
:class:`Example` models, as data, that run as its tests (a bad one that must give
exactly the code, a good one that must not). ``qlrewrite rules``, ``docs/rules.md``, the
check pass (:mod:`qlrewrite.checking.checker`) and the fix pass (:mod:`qlrewrite.passes.fix`) all
read :data:`CHECKS` / :data:`RULES`; nothing else lists rules.

A rule module sits in the folder of the node kind it reads (``qdq/``, ``weight_only/``,
``qoperator/``, ``model/``, ``targets/``) and its docstring opens with the codes it holds
(``QL420-QL426:``); no two modules claim one code.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol

import onnx_ir as ir
from typing_extensions import TypeVar

from qlrewrite.findings import Finding, FixKind, Rule, Severity
from qlrewrite.io.data_problems import DataProblem, data_problems
from qlrewrite.qdq.kinds import QDQ, QOPERATOR, WEIGHT_ONLY
from qlrewrite.qdq.sites import QuantizedSite, SiteKind
from qlrewrite.qdq.view import NodeView, QDQView
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.toolkit import FreshNames

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

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
    "Check",
    "Example",
    "Fix",
    "FixContext",
    "ModelContext",
    "Rewrite",
    "RuleCheck",
    "Scope",
    "TargetModel",
    "TargetNode",
    "rule",
]

#: "node" and "model" rules run on every check; "target-node" / "target-model" rules only
#: for each ``--target`` (:mod:`qlrewrite.rules.targets`); "report" rules after.
Scope = Literal["node", "model", "report", "target-node", "target-model"]

#: The view a node rule is given: the view class of its ``kinds`` (``SiteKind``'s type
#: parameter): ``QDQView`` for ``(QDQ,)`` (the default), ``WeightOnlyView`` for
#: ``WEIGHT_ONLY``, ``QOperatorView`` for ``QOPERATOR_KINDS``, ``NodeView`` for a mix.
V = TypeVar("V", bound=NodeView, default=QDQView)
#: The same for a "target-node" rule's :class:`TargetNode` (read-only: covariant).
V_co = TypeVar("V_co", bound=NodeView, covariant=True, default=NodeView)


@dataclasses.dataclass
class FixContext:
    """What a node fix gets: the model, the node (site and view) and the finding to repair.

    ``memo`` is shared by every call of one rule's fix within one model (for instance the
    scalar copies of a shared tensor, made once); ``names`` is the model's one source of
    new value names for the whole fix pass.
    """

    model: ir.Model
    site: QuantizedSite
    view: NodeView
    finding: Finding
    memo: dict[Any, Any]
    names: FreshNames


def _always(_finding: Finding) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Fix:
    """A rule's repair, with ``kind`` its applicability (ruff's Fix): "safe" (ONNX Runtime's
    outputs stay bit-identical; ``check --fix``) or "unsafe" (``--unsafe-fixes``).

    ``applies`` decides from the finding's structured fields (never its text) whether the
    fix can repair it; the registry then sets ``Finding.fix``. The repair is one of:
    ``node`` (called once per node and rule with a :class:`FixContext`; returns the line
    ``--diff`` shows, or None when it changed nothing; a "target-node" rule's runs on the
    findings its check gives for the targets the fix is for, none without ``--target``),
    ``model`` (called once per model,
    same return), ``upgrade_opset`` (the fix pass upgrades ai.onnx to that opset first)
    or ``rewrite`` (a target rule's: the command-level rewrite the finding points to on the
    runtimes deployed to, as :class:`Rewrite` data; the fix pass runs it once per model for
    every finding that asked for it).
    """

    kind: FixKind
    summary: str  # what the fix changes and when it applies (the catalogue's text)
    applies: Callable[[Finding], bool] = _always
    node: Callable[[FixContext], str | None] | None = None
    model: Callable[[ir.Model], str | None] | None = None
    upgrade_opset: int | None = None
    rewrite: Callable[[Finding, Sequence[Target]], Rewrite | None] | None = None


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """A command-level rewrite a target finding points to, as data (rules sit below the
    passes): ``command`` one of "downgrade" (``value``: the ai.onnx opset), "drop-import"
    (``value``: the domain, dropped when no node uses it), "retarget" (zero points made
    0 where exact, unsigned to signed) or "fold-bias" (int32 bias DequantizeLinear
    folded); ``what``: the line ``--diff`` shows."""

    command: Literal["downgrade", "drop-import", "retarget", "fold-bias"]
    what: str
    value: int | str | None = None


@dataclasses.dataclass(frozen=True)
class Example:
    """A rule's test models, as data (:class:`~qlrewrite.rules.model_spec.ModelSpec`: a
    builder of the tests named with its arguments; ``tests/model_specs.py`` builds it):
    ``bad`` gives exactly the rule's code, ``good`` does not (and no error). ``label``
    names the case; ``ort``: the good model (and the fixed bad one) must load and run in
    ONNX Runtime; ``checker``: they must pass ``onnx.checker`` (full check); ``files``:
    written beside the model (external data); ``targets``: the ``--target`` specs both
    are checked with (a target rule's examples)."""

    label: str
    bad: ModelSpec
    good: ModelSpec
    ort: bool = True
    checker: bool = True
    files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    targets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for which in (self.bad, self.good):
            if not isinstance(which, ModelSpec):
                raise TypeError(
                    f"example {self.label!r}: bad and good are ModelSpec data, not {which!r}"
                )


@dataclasses.dataclass(frozen=True)
class RuleCheck:
    """A rule unit: its catalogue entry, the function that applies it, its fix and
    examples. ``func`` takes the context of ``scope`` (the view of ``kinds`` for a node
    rule, as :func:`rule` checked): the callers dispatch on ``scope`` and ``kinds``."""

    rule: Rule
    func: Callable[[Any], Iterable[Finding]]
    scope: Scope  # "node": called per node of ``kinds`` with its view; "model": a ModelContext;
    # "report": findings made after the check, from the report (suppressions);
    # "target-node" / "target-model": per --target, with a TargetNode / TargetModel
    #: node and target-node rules: skipped when the imported opset has no version of the op
    #: (so they read ``ctx.version``, never None)
    needs_version: bool
    kinds: tuple[SiteKind, ...]  # node rules: the kinds of quantized node they apply to
    fix: Fix | None = None
    examples: tuple[Example, ...] = ()
    module: str = ""  # the Python module that declares the unit
    #: An opset upgrade repairs its findings (an op, attribute, type or granularity newer
    #: than the input's opset): declared by the rule, or implied by its ``Fix.upgrade_opset``.
    upgrade_repairs: bool = False
    #: A target rule's: the node rules whose findings on the same node it replaces (it says
    #: the same for the target, with the releases and its severity).
    supersedes: tuple[str, ...] = ()

    def runs_on(self, kind: SiteKind, versioned: bool) -> bool:
        """Whether this node or target-node rule runs on a node of ``kind``;
        ``versioned``: an operator version is in force for the node (its view's row)."""
        return any(k is kind for k in self.kinds) and (versioned or not self.needs_version)


#: The catalogue, ordered by code once every rule module is imported.
RULES: dict[str, Rule] = {}
#: The units behind the catalogue, same keys.
CHECKS: dict[str, RuleCheck] = {}


def source_path(module: str) -> str:
    """``qlrewrite.rules.qdq.shapes`` -> ``qlrewrite/rules/qdq/shapes.py``."""
    return module.replace(".", "/") + ".py"


#: What :func:`rule` registers, by scope: a node rule takes the view of its kinds, a
#: "target-node" rule a :class:`TargetNode` of it, a "model" rule a :class:`ModelContext`,
#: a "target-model" rule a :class:`TargetModel` (a "report" rule, made elsewhere, ``object``).
Check = (
    Callable[[V], Iterable[Finding]]
    | Callable[["TargetNode[V]"], Iterable[Finding]]
    | Callable[["ModelContext"], Iterable[Finding]]
    | Callable[["TargetModel"], Iterable[Finding]]
)


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
    fix: Fix | None = None,
    opt_in: bool = False,
    kinds: tuple[SiteKind[V], ...] | None = None,
    examples: Iterable[Example] = (),
    upgrade_repairs: bool = False,
    cites: tuple[tuple[str, str], ...] = (),
    supersedes: tuple[str, ...] = (),
) -> Callable[[Check[V]], Check[V]]:
    """Register the decorated function ``(ctx) -> Iterable[Finding]`` as rule ``code``.

    ``kinds`` (default ``(QDQ,)``): the nodes a "node" / "target-node" rule runs on; ``ctx``
    is their view (:data:`V`: mypy checks the annotation), in a :class:`TargetNode` for a
    target rule. An ``opt_in`` rule runs only when ``--select`` names it (by code or
    prefix, not ALL). ``fix`` is the rule's repair; ``examples`` its test models.
    ``upgrade_repairs``: the finding goes away at a newer opset (``qlrewrite upgrade``
    does not refuse it; implied by ``fix.upgrade_opset``). ``cites``: (target, row).
    ``supersedes``: the node rules a target rule replaces (:attr:`RuleCheck.supersedes`)."""

    def register(func: Check[V]) -> Check[V]:
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
            fix=fix.kind if fix is not None else None,
            fix_summary=" ".join(textwrap.dedent(fix.summary).split()) if fix else "",
            opt_in=opt_in,
            source=source_path(func.__module__),
            cites=cites,
        )
        RULES[code] = entry
        by_upgrade = upgrade_repairs or (fix is not None and fix.upgrade_opset is not None)
        bound, node_kinds = _bound(func, entry, fix), (QDQ,) if kinds is None else kinds
        CHECKS[code] = RuleCheck(
            *(entry, bound, scope, needs_version, node_kinds, fix, tuple(examples)),
            *(func.__module__, by_upgrade, tuple(supersedes)),
        )
        return func

    return register


class _Reports(Protocol):
    """What a rule's check is given: a context that files findings under ``rule``."""

    rule: Rule | None


def _bound(
    func: Callable[[Any], Iterable[Finding]], entry: Rule, fix: Fix | None
) -> Callable[[Any], list[Finding]]:
    """``func`` run with ``ctx.rule`` set to ``entry`` (so ``ctx.report`` gives the rule's
    code and severity), its findings saying ``fix.kind`` when ``fix.applies`` to them."""

    @functools.wraps(func)
    def checked(ctx: _Reports) -> list[Finding]:
        outer, ctx.rule = ctx.rule, entry
        try:
            found = list(func(ctx))
        finally:
            ctx.rule = outer
        if fix is None or not found:
            return found
        return [dataclasses.replace(f, fix=fix.kind) if fix.applies(f) else f for f in found]

    return checked


@dataclasses.dataclass
class ModelContext:
    """The whole model, for rules about the file rather than one node."""

    model: ir.Model
    path: str | None = None
    #: The rule being run: what :meth:`report` files findings under.
    rule: Rule | None = None

    def report(self, message: str, hint: str = "", *, graph: str = "main") -> Finding:
        """A finding of the rule being run (its declared code and severity) about the
        model's ``graph``."""
        if self.rule is None:
            raise RuntimeError("report() outside a rule's check")
        return Finding(
            rule=self.rule.code,
            severity=self.rule.severity,
            message=message,
            hint=hint,
            graph=graph,
        )

    @functools.cached_property
    def data_problems(self) -> list[DataProblem]:
        """Tensors whose data is missing, escapes the folder or has the wrong size."""
        return data_problems(self.model)


@dataclasses.dataclass
class TargetNode(Generic[V_co]):
    """What a "target-node" rule gets: one node's view (the view class of the rule's
    ``kinds``, as for a node rule) and one ``--target``."""

    view: V_co
    target: Target
    #: The rule being run: what :meth:`report` files findings under.
    rule: Rule | None = None

    def report(self, message: str, hint: str = "", *, attribute: str = "") -> Finding:
        """A finding of the rule being run about the node (``attribute``: what its fix
        reads)."""
        if self.rule is None:
            raise RuntimeError("report() outside a rule's check")
        finding = self.view.finding_of(self.rule, message, hint)
        return dataclasses.replace(finding, attribute=attribute) if attribute else finding


@dataclasses.dataclass
class TargetModel:
    """What a "target-model" rule gets: the whole model and one ``--target``."""

    context: ModelContext
    target: Target
    #: The rule being run: what :meth:`report` files findings under.
    rule: Rule | None = None

    def report(
        self,
        message: str,
        hint: str = "",
        *,
        domain: str = "",
        opset: int | None = None,
        attribute: str = "",
    ) -> Finding:
        """A finding of the rule being run about the model (``domain`` / ``opset``: the
        import it is about; ``attribute``: the model field a fix reads)."""
        if self.rule is None:
            raise RuntimeError("report() outside a rule's check")
        return Finding(
            rule=self.rule.code,
            severity=self.rule.severity,
            message=message,
            hint=hint,
            domain=domain,
            opset=opset,
            attribute=attribute,
        )
