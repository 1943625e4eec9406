"""``--verify`` in a child process: ONNX Runtime aborts the process on some models (an
assertion in its graph code), which must end the verification with its reason, not the
command.

One child serves every verification of a process (started on first use, again after a
crash). It is isolated and bounded: started with ``python -I`` and the parent's import
path without the working directory (a ``numpy.py`` or ``qlrewrite/`` there is never
imported), qlrewrite loaded from the parent's own copy; each task has a time limit
(``VerifyOptions.timeout``) and its memory a limit (``VerifyOptions.memory``); it runs in
its own process group, ended with it (:mod:`qlrewrite.verify.child_process`: nothing
it starts outlives the command); it dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and
its stdin reaching EOF ends it even mid-task). Tasks are pickled over its stdin; answers
come back on a private copy of its stdout as length-prefixed JSON, read with a deadline,
bounded in size and checked field by field: anything else kills the child and is
*unverifiable*, never believed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import json
import os
import pickle
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import types
import typing
from collections.abc import Callable, Sequence
from typing import IO, Any

from qlrewrite.verify.child_process import default_memory_limit, end_group, start_bounded
from qlrewrite.verify.verify import (
    EXACT,
    MISMATCH,
    UNVERIFIABLE,
    VERIFY_TIMEOUT,
    WITHIN_TOLERANCE,
    InputSpec,
    Verification,
    VerifyOptions,
    verify_models,
)

__all__ = ["ChildFailed", "call_in_child", "checked", "end_child", "verify_in_child"]

_CALL = "call"  # a task that calls a function: (_CALL, function, args, keywords)
_VERIFY_PHASES = ("original", "rewritten")

#: The largest answer the parent reads (a verification of 100,000 outputs is ~30 MB).
_ANSWER_MAX = 64 << 20
_HEADER = 8  # bytes of an answer's length, big-endian
#: How long a child that closed its answers gets to exit before it is killed.
_EXIT_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1

#: The child's first code: the import path the parent gives it, then qlrewrite from the
#: parent's own folder (argv: parent pid, die-with-parent flag, package folder, path).
_BOOT = """\
import importlib.util, json, sys
sys.path[:] = json.loads(sys.argv[4])
spec = importlib.util.spec_from_file_location(
    "qlrewrite", sys.argv[3] + "/__init__.py", submodule_search_locations=[sys.argv[3]])
package = importlib.util.module_from_spec(spec)
sys.modules["qlrewrite"] = package
spec.loader.exec_module(package)
from qlrewrite.verify.verify_child import main
main(int(sys.argv[1]), sys.argv[2] == "1")
"""


def verify_in_child(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    options: VerifyOptions | None = None,
) -> Verification:
    """:func:`~qlrewrite.verify.verify.verify_models` in the child process; a crash of ONNX
    Runtime there is a verification that did not pass (unverifiable on the original model,
    a mismatch on the rewritten one); a task over ``options.timeout`` seconds, or an
    answer that cannot be read, is unverifiable."""
    options = options or VerifyOptions()
    task = (os.fspath(original), os.fspath(rewritten), list(specs), options)
    return _CHILD.run(task, options)


def end_child() -> None:
    """End the child and its process group (a command that is done with its runtimes;
    the next task starts another)."""
    _CHILD.close()


class ChildFailed(Exception):
    """A function called in the child raised, gave no answer in time or none that can be
    read, or the child ended: ``str()`` says how and in which phase (``crashed (SIGABRT)
    on the second model``)."""

    def __init__(self, how: str, phase: str) -> None:
        super().__init__(f"{how} on the {phase} model")
        self.how = how
        self.phase = phase


def call_in_child(
    function: Callable[..., Any],
    result: Any,
    *args: Any,
    phases: tuple[str, ...] = _VERIFY_PHASES,
    timeout: float = VERIFY_TIMEOUT,
    memory: int | None = None,
    **keywords: Any,
) -> Any:
    """``function(*args, on_phase=..., **keywords)`` in the child: a module-level function
    (pickled by name) that reports each of ``phases`` it enters and returns a ``result``
    (a type: a dataclass, a list of them, ...), sent back as JSON and checked field by
    field like a verification; the child's data memory is capped at ``memory`` bytes
    (None: :func:`~qlrewrite.verify.child_process.default_memory_limit`). Raises
    :class:`ChildFailed` naming the phase."""
    phase = [phases[0]]
    task = (_CALL, function, args, keywords)
    decode = lambda v: _typed(result, v)  # noqa: E731
    try:
        return _CHILD.exchange(task, (timeout, memory), phase, decode, phases)
    except _TimedOut:
        raise ChildFailed(f"gave no answer within {timeout:g} s", phase[0]) from None
    except _Unreadable as exc:
        raise ChildFailed(f"sent an answer that cannot be read ({exc})", phase[0]) from None
    except _Raised as exc:
        raise ChildFailed(f"failed ({exc})", phase[0]) from None
    except _Ended as ended:
        raise ChildFailed(_how(ended.code), phase[0]) from None


def checked(hint: Any, value: object) -> Any:
    """``value`` (parsed JSON from a child) checked against the annotation ``hint`` as
    an answer of the verify child is (ValueError naming what is wrong)."""
    try:
        return _typed(hint, value)
    except _Unreadable as exc:
        raise ValueError(str(exc)) from None


class _Unreadable(Exception):
    """The child's answer is not one this module sends (the message says how)."""


class _TimedOut(Exception):
    """The task's time limit passed."""


class _Raised(Exception):
    """A function called in the child raised (its type and first line)."""


class _Ended(Exception):
    """The child ended without an answer, with exit ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _child_command() -> list[str]:
    """The child's command line: isolated (``-I``: no working directory, no user site,
    no PYTHON* variables), with the parent's import path less the working directory."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.path.realpath(os.getcwd())
    path = [
        os.path.abspath(p)
        for p in sys.path
        if p not in ("", ".") and os.path.realpath(os.path.abspath(p)) != cwd
    ]
    # PR_SET_PDEATHSIG fires when the thread that started the child ends: only the main
    # thread's children use it (the others end with their stdin).
    main_thread = threading.current_thread() is threading.main_thread()
    flag = "1" if main_thread else "0"
    return [sys.executable, "-I", "-c", _BOOT, str(os.getpid()), flag, package, json.dumps(path)]


class _Child:
    """The child process and the lock that gives it one task at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._memory: int | None = None  # the running child's limit
        self._lock = threading.Lock()

    def run(self, task: tuple, options: VerifyOptions) -> Verification:
        phase = ["original"]
        try:
            limits = (options.timeout, options.memory)
            return self.exchange(task, limits, phase, _verification, _VERIFY_PHASES)
        except _TimedOut:
            reason = f"no answer within {options.timeout:g} s on the {phase[0]} model"
            return _not_passed(UNVERIFIABLE, f"{reason} (--verify-timeout)", options)
        except (_Unreadable, _Raised) as exc:
            reason = f"the verification process sent an answer that cannot be read ({exc})"
            return _not_passed(UNVERIFIABLE, reason, options)
        except _Ended as ended:
            return _crashed(phase[0], ended.code, options)

    def exchange(
        self,
        task: tuple,
        limits: tuple[float, int | None],
        phase: list[str],
        decode: Callable[[object], Any],
        phases: tuple[str, ...],
    ) -> Any:
        """The child's answer to ``task`` within ``limits`` (seconds, memory bytes or
        None: the default), decoded; ``phase[0]`` follows the phases it reports. Raises
        _TimedOut or _Unreadable (the child killed), _Raised, or _Ended when the child
        ended without an answer."""
        timeout, memory = limits
        with self._lock:
            process = self._started(memory)
            try:
                _send(process.stdin, task)
                return _answer(process, time.monotonic() + timeout, phase, decode, phases)
            except (_TimedOut, _Unreadable):
                self._end(process)
                raise
            except _Raised:
                raise
            except (EOFError, OSError):
                self._process = None
                code = end_group(process, wait=_EXIT_SECONDS)
                if code == -signal.SIGINT:  # Ctrl-C reached the whole process group
                    raise KeyboardInterrupt from None
                raise _Ended(code) from None
            except BaseException:  # interrupted mid-task: its answer must not reach the next
                self.close()
                raise

    def _started(self, memory: int | None = None) -> subprocess.Popen[bytes]:
        """The running child, or a new one (none yet, it ended, or another memory limit
        in bytes; None: the default)."""
        memory = default_memory_limit() if memory is None else memory
        if self._process is not None and self._memory != memory:
            self.close()
        if self._process is None or self._process.poll() is not None:
            if self._process is not None:
                self._end(self._process)
            self._process = start_bounded(_child_command(), memory)
            self._memory = memory
        return self._process

    def _end(self, process: subprocess.Popen[bytes]) -> None:
        """Kill ``process`` (busy or lying) and its group and forget it: the next task
        starts another."""
        self._process = None
        end_group(process)
        _close_pipes(process)

    def close(self) -> None:
        """End the child: it exits when its stdin closes, or is killed if it does not."""
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
            end_group(process, wait=2)
            _close_pipes(process)


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _answer(
    process: subprocess.Popen[bytes],
    deadline: float,
    phase: list[str],
    decode: Callable[[object], Any],
    phases: tuple[str, ...],
) -> Any:
    """Read the child's messages until its result, decoded; ``phase[0]`` follows the
    phases it reports (one of ``phases``). Raises _TimedOut, _Unreadable, _Raised, or
    EOFError when the child ended."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    while True:
        message = _read_message(fd, deadline)
        if set(message) == {"phase"} and message["phase"] in phases:
            phase[0] = message["phase"]
        elif set(message) == {"result"}:
            return decode(message["result"])
        elif set(message) == {"raised"} and isinstance(message["raised"], str):
            raise _Raised(message["raised"][:400])
        else:
            raise _Unreadable("not a phase nor a result")


def _read_message(fd: int, deadline: float) -> dict[str, Any]:
    """One length-prefixed JSON object from ``fd``, read before ``deadline``."""
    size = int.from_bytes(_read_exactly(fd, _HEADER, deadline), "big")
    if size > _ANSWER_MAX:
        raise _Unreadable(f"{size} bytes announced, more than {_ANSWER_MAX}")
    try:
        message = json.loads(_read_exactly(fd, size, deadline))
    except (ValueError, RecursionError) as exc:
        raise _Unreadable("not JSON") from exc
    if not isinstance(message, dict):
        raise _Unreadable("not a JSON object")
    return message


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    """``size`` bytes from ``fd``; _TimedOut at ``deadline``, EOFError if it closes
    first (a child that ended)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _TimedOut
        if not poller.poll(min(left, 3600.0) * 1000):
            continue
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            if data:
                raise _Unreadable("the answer ends early")
            raise EOFError
        data += chunk
    return bytes(data)


def _verification(value: object) -> Verification:
    """The child's result as a :class:`Verification`, every field checked for its type."""
    result = _decoded(Verification, value)
    if result.status not in (EXACT, WITHIN_TOLERANCE, MISMATCH, UNVERIFIABLE):
        raise _Unreadable(f"unknown status {result.status!r}")
    return result


def _decoded(cls: type, value: object) -> Any:
    """``value`` (parsed JSON) as an instance of the dataclass ``cls``: exactly its fields
    (but those only the parent sets, ``metadata={"parent_only": True}``), each of its
    annotated type."""
    names = set(_child_fields(cls))
    if not isinstance(value, dict) or set(value) != names:
        raise _Unreadable(f"not the fields of {cls.__name__}")
    hints = typing.get_type_hints(cls)
    try:
        return cls(**{name: _typed(hints[name], item) for name, item in value.items()})
    except (TypeError, ValueError) as exc:  # a dataclass refusing its values
        raise _Unreadable(f"{cls.__name__}: {exc}") from exc


def _typed(hint: Any, value: object) -> Any:
    """``value`` checked against the annotation ``hint`` (unions, lists, tuples, dicts,
    dataclasses, bool, int, float, str, None), converted where JSON has no such type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        for arg in args:
            with contextlib.suppress(_Unreadable):
                return _typed(arg, value)
        raise _Unreadable(f"{type(value).__name__} is not {hint}")
    if dataclasses.is_dataclass(hint):
        return _decoded(typing.cast(type, hint), value)
    if origin in (list, tuple):
        return _typed_sequence(origin, args, value)
    if origin is dict:
        if not isinstance(value, dict):
            raise _Unreadable(f"{type(value).__name__} is not an object")
        return {_typed(args[0], k): _typed(args[1], v) for k, v in value.items()}
    return _typed_scalar(hint, value)


def _typed_sequence(origin: type, args: tuple, value: object) -> Any:
    if not isinstance(value, list):
        raise _Unreadable(f"{type(value).__name__} is not a list")
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != len(value):
            raise _Unreadable(f"{len(value)} items, not {len(args)}")
        return tuple(_typed(arg, item) for arg, item in zip(args, value, strict=True))
    items = [_typed(args[0], item) for item in value]
    return tuple(items) if origin is tuple else items


def _typed_scalar(hint: Any, value: object) -> Any:
    if hint is type(None) and value is None:
        return None
    if hint in (bool, int, str) and type(value) is hint:
        return value
    if hint is float and type(value) in (int, float):
        return float(typing.cast(float, value))
    raise _Unreadable(f"{type(value).__name__} is not {getattr(hint, '__name__', hint)}")


def _child_fields(cls: type) -> list[str]:
    """The fields of dataclass ``cls`` the child sends."""
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("parent_only")]


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


def _send(stream: IO[bytes] | None, task: tuple) -> None:
    assert stream is not None
    pickle.dump(task, stream)
    stream.flush()


_CHILD = _Child()
atexit.register(_CHILD.close)


# --------------------------------------------------------------------------- the child


def main(parent: int | None = None, die_with_parent: bool = False) -> None:
    """The child: verify each task read on stdin, until it closes (then exit at once,
    even mid-task). The answers go to a copy of stdout taken first; fd 1 then points at
    stderr, so nothing a library prints can reach the answers."""
    if die_with_parent:
        _die_with_parent()
    if parent is not None and os.getppid() != parent:
        os._exit(0)  # the parent died before the line above took effect
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    tasks: queue.Queue[tuple] = queue.Queue()
    threading.Thread(target=_read_tasks, args=(tasks,), daemon=True).start()
    while True:
        task = tasks.get()
        on_phase = lambda p: _answer_with(answers, {"phase": p})  # noqa: E731
        if task[0] == _CALL:
            _answer_with(answers, _called(task, on_phase))
        else:
            _answer_with(answers, {"result": _jsonable(_verified(task, on_phase))})


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent's thread that started it ends."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _read_tasks(tasks: queue.Queue[tuple]) -> None:
    """Stdin, in its own thread: each task for the main thread; EOF (the parent closed
    it, or died) ends the process at once, even while a task runs."""
    while True:
        try:
            tasks.put(pickle.load(sys.stdin.buffer))  # (original, rewritten, specs, options)
        except BaseException:  # EOF, or a broken pipe: no parent to answer
            os._exit(0)


def _answer_with(answers: IO[bytes], message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    answers.write(len(data).to_bytes(_HEADER, "big") + data)
    answers.flush()


def _called(task: tuple, on_phase: Any) -> dict[str, Any]:
    """A called function's value as JSON, or what it raised (type and first line)."""
    _, function, args, keywords = task
    try:
        return {"result": _jsonable(function(*args, on_phase=on_phase, **keywords))}
    except MemoryError:
        return {"raised": _out_of_memory()}
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()] or [""]
        return {"raised": f"{type(exc).__name__}: {lines[0][:300]}"}


def _out_of_memory() -> str:
    """What a MemoryError in the child means: its limit was reached."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
        if limit == resource.RLIM_INFINITY:
            return "ran out of memory"
    except (ImportError, OSError, AttributeError):
        return "ran out of memory"
    return f"ran out of memory (limit {limit / 2**30:.2g} GiB, --verify-memory)"


def _jsonable(value: Any) -> Any:
    """Dataclasses (the fields the child sends) and lists of them as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _jsonable(getattr(value, name)) for name in _child_fields(type(value))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def _verified(task: tuple, on_phase: Any) -> Verification:
    """One task's verification; a Python error is its reason (a bug, said as such)."""
    try:
        return verify_models(*task, on_phase=on_phase)
    except MemoryError:
        return _not_passed(UNVERIFIABLE, f"ONNX Runtime {_out_of_memory()}", task[-1])
    except Exception as exc:  # the parent must get an answer
        reason = f"the verification failed ({type(exc).__name__}: {exc})"
        return _not_passed(UNVERIFIABLE, reason, task[-1])
