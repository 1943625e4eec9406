"""``--verify`` in a child process: ONNX Runtime aborts the process on some models (an
assertion in its graph code), which must end the verification with its reason, not the
command.

One child serves every verification of a process (started on first use, again after a
crash); tasks and answers are pickled over its stdin and a private copy of its stdout.
``python -m qlrewrite.verify_child`` is the child.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from qlrewrite.verify import (
    MISMATCH,
    UNVERIFIABLE,
    InputSpec,
    Verification,
    VerifyOptions,
    verify_models,
)

__all__ = ["ChildFailed", "call_in_child", "verify_in_child"]

_CALL = "call"  # a task that calls a function: (_CALL, function, args, keywords)


class ChildFailed(Exception):
    """A function called in the child raised, or the child ended without an answer:
    ``str()`` says how and in which phase (``crashed (SIGABRT) on the second model``)."""

    def __init__(self, how: str, phase: str) -> None:
        super().__init__(f"{how} on the {phase} model")
        self.how = how
        self.phase = phase


def verify_in_child(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    options: VerifyOptions | None = None,
) -> Verification:
    """:func:`~qlrewrite.verify.verify_models` in the child process; a crash of ONNX
    Runtime there is a verification that did not pass (unverifiable on the original model,
    a mismatch on the rewritten one)."""
    options = options or VerifyOptions()
    task = (os.fspath(original), os.fspath(rewritten), list(specs), options)
    answer = _CHILD.exchange(task)
    if isinstance(answer, _Ended):
        return _crashed(answer.phase, answer.code, options)
    return answer


def call_in_child(function: Callable[..., Any], *args: Any, **keywords: Any) -> Any:
    """``function(*args, on_phase=..., **keywords)`` in the child (a module-level function:
    it is pickled by name; ``on_phase`` names the phase a crash is reported in); raises
    :class:`ChildFailed` when it raises or ONNX Runtime ends the child."""
    answer = _CHILD.exchange((_CALL, function, args, keywords))
    if isinstance(answer, _Ended):
        raise ChildFailed(_how(answer.code), answer.phase)
    if isinstance(answer, _Raised):
        raise ChildFailed(f"failed ({answer.message})", answer.phase)
    return answer


@dataclasses.dataclass(frozen=True)
class _Ended:
    """The child ended without an answer, in ``phase``, with exit ``code``."""

    phase: str
    code: int


@dataclasses.dataclass(frozen=True)
class _Raised:
    """A called function raised in ``phase``: its message."""

    phase: str
    message: str


class _Child:
    """The child process and the lock that gives it one task at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def exchange(self, task: tuple) -> Any:
        """The child's answer to ``task``, or :class:`_Ended` when it ended first."""
        with self._lock:
            process = self._started()
            phase = "original"
            try:
                _send(process.stdin, task)
                while True:
                    kind, value = pickle.load(process.stdout)  # type: ignore[arg-type]
                    if kind == "raised":
                        return _Raised(*value)
                    if kind != "phase":
                        return value
                    phase = value
            except (EOFError, OSError, pickle.UnpicklingError):
                self._process = None
                code = process.wait()
                if code == -signal.SIGINT:  # Ctrl-C reached the whole process group
                    raise KeyboardInterrupt from None
                return _Ended(phase, code)
            except BaseException:  # interrupted mid-task: its answer must not reach the next
                self.close()
                raise

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "qlrewrite.verify_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # ONNX Runtime's own logging; nothing reads it
            )
        return self._process

    def close(self) -> None:
        """End the child: it exits when its stdin closes, or is killed if busy."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _crashed(phase: str, code: int, options: VerifyOptions) -> Verification:
    """The verification of a child that ended without an answer."""
    status = MISMATCH if phase == "rewritten" else UNVERIFIABLE
    return _not_passed(status, f"ONNX Runtime {_how(code)} on the {phase} model", options)


def _how(code: int) -> str:
    """``crashed (SIGABRT)`` or ``failed (exit 3)``."""
    if code < 0 and -code in signal.valid_signals():
        return f"crashed ({signal.Signals(-code).name})"
    return f"failed (exit {code})"


def _not_passed(status: str, reason: str, options: VerifyOptions) -> Verification:
    """A verification that ended on ``reason``, with no outputs compared."""
    return Verification(
        status, options.runs, options.seed, options.tolerance, reason=reason, bound=options.bound
    )


def _send(stream: IO[bytes] | None, message: Any) -> None:
    assert stream is not None
    pickle.dump(message, stream)
    stream.flush()


_CHILD = _Child()
atexit.register(_CHILD.close)


def main() -> None:
    """The child: verify each task read on stdin until it closes. The answers go to a
    copy of stdout taken first; fd 1 then points at stderr, so nothing a library prints
    can reach the answers."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    while True:
        try:
            task = pickle.load(sys.stdin.buffer)  # (original, rewritten, specs, options)
        except EOFError:
            return
        _send(answers, _verified(answers, task))


def _verified(answers: IO[bytes], task: tuple) -> tuple[str, Any]:
    """One task's answer: ``("result", value)`` (a verification, a called function's
    value) or ``("raised", message)``; a Python error of a verification is its reason (a
    bug, said as such). Only the parent's types are sent (this module is ``__main__``)."""
    phases = ["original"]

    def on_phase(phase: str) -> None:
        phases.append(phase)
        _send(answers, ("phase", phase))

    if task[0] == _CALL:
        _, function, args, keywords = task
        try:
            return "result", function(*args, on_phase=on_phase, **keywords)
        except Exception as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()] or [""]
            return "raised", (phases[-1], f"{type(exc).__name__}: {lines[0][:300]}")
    try:
        return "result", verify_models(*task, on_phase=on_phase)
    except Exception as exc:  # the parent must get an answer
        reason = f"the verification failed ({type(exc).__name__}: {exc})"
        return "result", _not_passed(UNVERIFIABLE, reason, task[-1])


if __name__ == "__main__":
    main()
