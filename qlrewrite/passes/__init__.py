"""Model rewrites as onnx_ir passes, one concern per module.

The passes below are public: each is an ``onnx_ir.passes`` pass (call it on a model, or
compose them in an ``onnx_ir.passes.PassManager``) whose result is typed
(:mod:`qlrewrite.passes.results`: ``summary`` counts, ``warnings``). They are imported on
first use, so ``import qlrewrite.passes`` stays cheap. ``fold_passes``, ``convert_passes``,
``upgrade_passes``, ``downgrade_passes`` and ``fix_passes`` give the lists the commands run.
Example: docs/python-api.md.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> module that defines it.
_EXPORTS = {
    "FoldPass": "qlrewrite.passes.fold",
    "ConvertDomainPass": "qlrewrite.passes.convert_domain",
    "UpgradePass": "qlrewrite.passes.upgrade",
    "DowngradePass": "qlrewrite.passes.downgrade",
    "RetargetPass": "qlrewrite.passes.retarget",
    "QdqTidyPass": "qlrewrite.passes.qdq_tidy",
    "NBitsToOnnxPass": "qlrewrite.passes.nbits_to_onnx",
    "NBitsFromOnnxPass": "qlrewrite.passes.nbits_from_onnx",
    "QOperatorToQdqPass": "qlrewrite.passes.qoperator_to_qdq",
    "ImpliedImportsPass": "qlrewrite.passes.imports",
    "fold_passes": "qlrewrite.passes.commands",
    "convert_passes": "qlrewrite.passes.commands",
    "upgrade_passes": "qlrewrite.passes.commands",
    "fix_passes": "qlrewrite.passes.commands",
    "downgrade_passes": "qlrewrite.passes.commands",
    "retarget_passes": "qlrewrite.passes.commands",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'qlrewrite.passes' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The public passes (imported or not) and the module's own dunders."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
