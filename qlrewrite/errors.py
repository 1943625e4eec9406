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
    """Base class: the message is one line meant for the user."""

    exit_code = EXIT_INPUT


class InputError(QlrewriteError):
    """Unreadable input or bad usage: exit code 2."""

    exit_code = EXIT_INPUT


class Refusal(QlrewriteError):
    """A rewrite that would be wrong or invalid was refused: exit code 1."""

    exit_code = EXIT_FINDINGS


class Terminated(KeyboardInterrupt):
    """SIGTERM while a command runs: unwinds like Ctrl-C (staged files are removed)."""
