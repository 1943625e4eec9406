"""QL901: suppressions, judged after the check (:mod:`qlrewrite.checking.suppress` makes them)."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import WARNING, Finding
from qlrewrite.rules.model_spec import DQ, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


@rule(
    "QL901",
    "unused-suppression",
    WARNING,
    summary="A per-node-ignores entry or a node's qlrewrite:ignore suppresses nothing.",
    explanation="""
    Suppressions accept a known finding on one node. Once the model is re-exported or the
    node repaired, a suppression that matches nothing only hides the next real problem on
    that node (or names a node that no longer exists); remove it. Like ruff's RUF100, only
    codes of enabled rules are judged. A node's qlrewrite:ignore is judged on its node; a
    per-node-ignores entry over the whole run (one finding on the configuration file when
    it named no node or accepted nothing in every model checked under it).
    """,
    example="""
    warn: [tool.qlrewrite.per-node-ignores] "b1_DequantizeLinear" = ["QL406"]
          (no model checked has a QL406 finding on b1_DequantizeLinear any more)
    good: the entry removed
    """,
    versions="all",
    scope="report",
    needs_version=False,
    examples=[
        Example(
            "ignore-matches-nothing",
            ModelSpec("edited", ModelSpec("qdq", DQ, 21), ModelSpec("ignore_metadata", "QL401")),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def unused_suppression(ctx: object) -> Iterator[Finding]:
    """Made by :func:`qlrewrite.checking.suppress.apply_suppressions`, not during the check."""
    return iter(())
