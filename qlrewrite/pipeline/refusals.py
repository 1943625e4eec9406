"""Refusing a model for its findings: :class:`FindingsRefusal` and the one line it is
refused with (:func:`refuse_errors`), for the input check, the output check and
``qlrewrite.fix``; the input's findings a run's passes repair are not held against it
(:func:`unrepaired`); a rewrite's input, refused for what its check found
(:func:`refuse_input`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.findings import Finding, Report
from qlrewrite.passes.manager import repaired_by
from qlrewrite.passes.results import ConvertsCustomOps
from qlrewrite.qdq.custom_ops import CustomQuantGroup, describe

__all__ = ["FindingsRefusal", "refuse_errors", "refuse_input", "unrepaired"]


class FindingsRefusal(Refusal):
    """Refused because a model (input or rewritten) has error findings: ``.findings``
    are they, ``.report`` the whole check."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report

    @property
    def findings(self) -> list[Finding]:
        """The error findings that refused the model."""
        return list(self.report.errors)


def refuse_errors(report: Report, where: str, what: str = "error finding(s)") -> None:
    """Raise :class:`FindingsRefusal` when ``report`` has error findings: one line with
    ``where``, their count (``what`` they are) and their codes."""
    if report.errors:
        codes = ", ".join(dict.fromkeys(f.rule for f in report.errors))
        raise FindingsRefusal(
            f"{where}: {len(report.errors)} {what}; nothing written ({codes}: run "
            "`qlrewrite check` for details)",
            report,
        )


def unrepaired(report: Report, passes: Sequence[ir.passes.PassBase]) -> Report:
    """``report`` without the error findings that one of ``passes`` repairs.

    A :class:`~qlrewrite.passes.results.RepairsFindings` pass lists the rule codes it
    repairs (for example the upgrade fixes attributes newer than the input's opset); the
    rewritten model is checked again in full, so an input finding that was not actually
    repaired still refuses.
    """
    repaired = repaired_by(passes)
    if not repaired:
        return report
    kept = [f for f in report.findings if f.severity != "error" or f.rule not in repaired]
    return dataclasses.replace(report, findings=kept)


def refuse_input(found: Report, passes: Sequence[ir.passes.PassBase], where: str) -> Report:
    """Refuse a rewrite's input for what its check ``found`` (``where``: the input, in
    messages): first another producer's custom quantization that no pass of the run
    converts, then an error finding no pass repairs. Returns the findings the run keeps
    (:func:`unrepaired`)."""
    _refuse_custom_quant(found.custom_quant, where, passes)  # before any finding
    report = unrepaired(found, passes)
    refuse_errors(report, where)
    return report


def _refuse_custom_quant(
    found: Sequence[CustomQuantGroup], where: str, passes: Sequence[ir.passes.PassBase]
) -> None:
    """Refuse a model with another producer's custom quantization operators (``found``:
    the input check's) that no pass of the run converts."""
    converted = {pair for p in passes if isinstance(p, ConvertsCustomOps) for pair in p.custom_ops}
    groups = [g for g in found if (g.domain, g.op_type) not in converted]
    if groups:
        raise Refusal(
            f"{where}: {describe(groups)}: custom operators that ONNX Runtime "
            "runs only with the producer's custom-op library; qlrewrite rewrites standard "
            "QuantizeLinear / DequantizeLinear only; nothing written"
        )
