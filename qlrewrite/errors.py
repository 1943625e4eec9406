"""Exceptions that the CLI maps to exit codes."""

from __future__ import annotations

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_INPUT",
    "EXIT_OK",
    "InputError",
    "QlrewriteError",
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
