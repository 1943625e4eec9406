"""``--verify`` in a child process: ONNX Runtime aborts the process on some models (an
assertion in its graph code), which must end the verification with its reason, not the
command.

One child serves every verification of a process (started on first use, again after a
crash); tasks and answers are pickled over its stdin and a private copy of its stdout.
``python -m qlrewrite.verify_child`` is the child.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from qlrewrite.verify import (
    MISMATCH,
    UNVERIFIABLE,
    InputSpec,
    Verification,
    VerifyOptions,
    verify_models,
)

__all__ = ["verify_in_child"]


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
    return _CHILD.run(task, options)


class _Child:
    """The child process and the lock that gives it one task at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def run(self, task: tuple, options: VerifyOptions) -> Verification:
        with self._lock:
            process = self._started()
            phase = "original"
            try:
                _send(process.stdin, task)
                while True:
                    kind, value = pickle.load(process.stdout)  # type: ignore[arg-type]
                    if kind != "phase":
                        return value
                    phase = value
            except (EOFError, OSError, pickle.UnpicklingError):
                self._process = None
                code = process.wait()
                if code == -signal.SIGINT:  # Ctrl-C reached the whole process group
                    raise KeyboardInterrupt from None
                return _crashed(phase, code, options)
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
    how = f"failed (exit {code})"
    if code < 0 and -code in signal.valid_signals():
        how = f"crashed ({signal.Signals(-code).name})"
    status = MISMATCH if phase == "rewritten" else UNVERIFIABLE
    return _not_passed(status, f"ONNX Runtime {how} on the {phase} model", options)


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
        _send(answers, ("result", _verified(answers, task)))


def _verified(answers: IO[bytes], task: tuple) -> Verification:
    """One task's verification; a Python error is its reason (a bug, said as such)."""
    try:
        return verify_models(*task, on_phase=lambda p: _send(answers, ("phase", p)))
    except Exception as exc:  # the parent must get an answer
        reason = f"the verification failed ({type(exc).__name__}: {exc})"
        return _not_passed(UNVERIFIABLE, reason, task[-1])


if __name__ == "__main__":
    main()
