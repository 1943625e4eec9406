"""Add the opset imports ONNX Runtime implies to a model that leaves them out.

ONNX Runtime's weight-only quantizer (GPTQ, k-quant, INC RTN) writes com.microsoft
``MatMulNBits`` without a com.microsoft import; ONNX Runtime runs such a model, reading
the nodes as com.microsoft 1 (check reports QL103, a warning). ONNX's checker refuses it,
so every rewrite runs this pass first: its output imports the version ONNX Runtime read,
and ONNX Runtime computes the same outputs.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.results import RepairsFindings, RewritePassResult
from qlrewrite.toolkit import ensure_import, implied_imports

__all__ = ["ImpliedImportsPass", "ImportsResult"]


@dataclasses.dataclass
class ImportsResult(RewritePassResult):
    """:class:`~qlrewrite.passes.imports.ImpliedImportsPass`: ``opset_imports_added``, and
    a warning naming them."""


class ImpliedImportsPass(ContextPass, ir.passes.InPlacePass, RepairsFindings):
    """Import the domains ONNX Runtime implies (com.microsoft 1) where the model's graph
    uses them without importing them: what QL103 reports (a pass that repairs QL103
    itself, ``check --fix``, makes this one unnecessary)."""

    repairs_rules = ("QL103",)

    def call(self, model: ir.Model) -> ImportsResult:
        missing = implied_imports(model)
        for domain, version in missing.items():
            ensure_import(model, domain, version)
        result = ImportsResult(model, bool(missing))
        if missing:
            names = ", ".join(f"{d} {v}" for d, v in missing.items())
            result.summary["opset_imports_added"] = len(missing)
            result.warnings.append(
                f"the input uses {', '.join(missing)} without importing it (as ONNX Runtime's "
                f"weight-only quantizer writes it; QL103); the output imports {names}, the "
                "version ONNX Runtime reads it as"
            )
        return result
