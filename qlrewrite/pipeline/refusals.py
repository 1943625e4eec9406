"""Refusing a model for its findings: :class:`FindingsRefusal` and the one line it is
refused with (:func:`refuse_errors`), for the input check, the output check and
``qlrewrite.fix``."""

from __future__ import annotations

from qlrewrite.errors import Refusal
from qlrewrite.findings import Finding, Report

__all__ = ["FindingsRefusal", "refuse_errors"]


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
