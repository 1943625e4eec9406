"""Runtime child processes, bounded: each in its own process group, under a memory limit,
and ended with every process it started.

A runtime may fork (OpenVINO's CPU plugin leaves a helper process behind, deadlocked,
re-parented to init when its parent exits). Each child is started in a new session
(``start_new_session``: its own process group, out of reach of the terminal's Ctrl-C,
which the parent handles) and, when it ends or is ended, the whole group is killed before
the child itself is reaped (its pid, the group's id, is never reused meanwhile). Its
memory is capped (``RLIMIT_DATA``: heap and private writable mappings, not the read-only
mappings of external data) right after it starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = [
    "MEMORY_FRACTION",
    "default_memory_limit",
    "end_group",
    "start_bounded",
]

#: The share of the machine's physical memory a runtime child may use by default.
MEMORY_FRACTION = 0.75
_POLL = 0.01


def default_memory_limit() -> int | None:
    """Bytes a runtime child may allocate by default (:data:`MEMORY_FRACTION` of the
    physical memory), or None where the machine does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return int(total * MEMORY_FRACTION) if total > 0 else None


def start_bounded(
    command: Sequence[str], memory: int | None, *, pipes: bool = True
) -> subprocess.Popen[bytes]:
    """``command`` started in its own process group, stdin and stdout pipes (or, without
    ``pipes``, neither), stderr discarded (a runtime's own logging), its data memory
    capped at ``memory`` bytes."""
    stream = subprocess.PIPE if pipes else subprocess.DEVNULL
    process = subprocess.Popen(
        list(command),
        stdin=stream,
        stdout=stream,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if memory is not None:
        _cap_memory(process, memory)
    return process


def _cap_memory(process: subprocess.Popen[bytes], memory: int) -> None:
    """``RLIMIT_DATA`` of ``process`` set to ``memory`` (Linux; elsewhere not capped)."""
    try:
        import resource

        resource.prlimit(process.pid, resource.RLIMIT_DATA, (memory, memory))
    except (ImportError, AttributeError, OSError, ValueError):
        pass  # no prlimit here, or the child already ended


def end_group(process: subprocess.Popen[bytes], wait: float = 0.0) -> int:
    """End ``process`` and its process group: give it ``wait`` seconds to exit, then kill
    the group (the child if alive, and whatever it started), then reap the child.
    Returns its exit code."""
    deadline = time.monotonic() + wait
    while not _exited_unreaped(process) and time.monotonic() < deadline:
        time.sleep(_POLL)
    _kill_group(process.pid)
    with contextlib.suppress(OSError):
        process.kill()
    return process.wait()


def _exited_unreaped(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` has exited, leaving it a zombie (unreaped: its pid, which is
    its group's id, stays taken until :func:`end_group` kills the group)."""
    if process.returncode is not None:
        return True
    if not hasattr(os, "waitid"):
        return process.poll() is not None
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(group: int) -> None:
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)
