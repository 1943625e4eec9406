"""Model rewrites as onnx_ir passes, one concern per module.

The passes below are public: each is an ``onnx_ir.passes`` pass (call it on a model, or
compose them in an ``onnx_ir.passes.PassManager``) whose result is typed
(:mod:`qlrewrite.passes.results`: ``summary`` counts, ``warnings``). ``fold_passes``,
``convert_passes``, ``upgrade_passes``, ``downgrade_passes`` and ``fix_passes`` give the
lists the commands run.
Example: docs/python-api.md.
"""

from __future__ import annotations

from qlrewrite.passes.commands import (
    convert_passes,
    downgrade_passes,
    fix_passes,
    fold_passes,
    retarget_passes,
    upgrade_passes,
)
from qlrewrite.passes.convert.domain import ConvertDomainPass
from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorToQdqPass
from qlrewrite.passes.convert.tidy import QdqTidyPass
from qlrewrite.passes.downgrade.downgrade_pass import DowngradePass
from qlrewrite.passes.fold.fold_pass import FoldPass
from qlrewrite.passes.imports import ImpliedImportsPass
from qlrewrite.passes.nbits.from_onnx import NBitsFromOnnxPass
from qlrewrite.passes.nbits.to_onnx import NBitsToOnnxPass
from qlrewrite.passes.retarget.retarget_pass import RetargetPass
from qlrewrite.passes.upgrade import UpgradePass

__all__ = [
    "ConvertDomainPass",
    "DowngradePass",
    "FoldPass",
    "ImpliedImportsPass",
    "NBitsFromOnnxPass",
    "NBitsToOnnxPass",
    "QOperatorToQdqPass",
    "QdqTidyPass",
    "RetargetPass",
    "UpgradePass",
    "convert_passes",
    "downgrade_passes",
    "fix_passes",
    "fold_passes",
    "retarget_passes",
    "upgrade_passes",
]
