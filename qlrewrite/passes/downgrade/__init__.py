"""The downgrade family: lower a model's opset exactly
(:mod:`~qlrewrite.passes.downgrade.downgrade_pass`), each Q/DQ node planned
(:mod:`~qlrewrite.passes.downgrade.plan`), relabelled
(:mod:`~qlrewrite.passes.downgrade.relabel`) or lowered
(:mod:`~qlrewrite.passes.downgrade.lower`)."""

from __future__ import annotations

from qlrewrite.passes.downgrade.downgrade_pass import LOWEST_OPSET, DowngradePass

__all__ = ["LOWEST_OPSET", "DowngradePass"]
