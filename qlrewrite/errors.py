"""Exceptions that the CLI maps to exit codes, and the warning categories the Python API
issues (a caller filters them, or turns them into errors, with the ``warnings`` module)."""

from __future__ import annotations

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_INPUT",
    "EXIT_OK",
    "CheckWarning",
    "DeploymentWarning",
    "FusionLostWarning",
    "ImportAddedWarning",
    "InputError",
    "LeftAsIsWarning",
    "Note",
    "PrecisionWarning",
    "QlrewriteError",
    "QlrewriteWarning",
    "Refusal",
    "Terminated",
]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT = 2


class QlrewriteError(Exception):
    """Base class: the message is one line meant for the user.

    ``parameter``: the Python parameter the message starts with (``opset``, ``select``);
    the command line names its option instead (``--opset``, ``--select``).
    """

    exit_code = EXIT_INPUT

    def __init__(self, message: str = "", *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter

    def cli_message(self) -> str:
        """The message with its leading parameter named as the command line's option."""
        text = str(self)
        name = self.parameter
        if name and text.startswith(name):
            return "--" + name.replace("_", "-") + text[len(name) :]
        return text


class InputError(QlrewriteError):
    """Unreadable input or bad usage: exit code 2."""

    exit_code = EXIT_INPUT


class Refusal(QlrewriteError):
    """A rewrite that would be wrong or invalid was refused: exit code 1."""

    exit_code = EXIT_FINDINGS


class Terminated(KeyboardInterrupt):
    """SIGTERM while a command runs: unwinds like Ctrl-C (staged files are removed)."""


class QlrewriteWarning(UserWarning):
    """Base class of what a rewrite warns of (the command line prints ``warning: ...``;
    the Python API issues it through the ``warnings`` module)::

        warnings.simplefilter("error", qlrewrite.errors.FusionLostWarning)
    """


class FusionLostWarning(QlrewriteWarning):
    """A runtime no longer fuses what it fused: folded DequantizeLinear that ONNX Runtime
    ran in integer kernels (QLinearConv, MatMulNBits, ...), or that this was not checked."""


class PrecisionWarning(QlrewriteWarning):
    """A runtime's outputs may change: float16 values folded rounded, a stated bound."""


class LeftAsIsWarning(QlrewriteWarning):
    """Nodes the rewrite left as they were (not folded, not converted, not checked)."""


class ImportAddedWarning(QlrewriteWarning):
    """An opset import the rewrite added (the one ONNX Runtime implies)."""


class CheckWarning(QlrewriteWarning):
    """A warning finding of the check of the rewritten model."""


class DeploymentWarning(QlrewriteWarning):
    """``verify``: the models differ as deployed (ONNX Runtime's default session): outputs,
    latency, integer kernels."""


class Note(str):
    """A warning's text with its category: passes may return these among their warnings
    (a plain string is a :class:`QlrewriteWarning`)."""

    category: type[QlrewriteWarning] = QlrewriteWarning

    def __new__(cls, text: str, category: type[QlrewriteWarning] = QlrewriteWarning) -> Note:
        note = super().__new__(cls, text)
        note.category = category
        return note
