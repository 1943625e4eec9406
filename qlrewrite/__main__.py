"""``python -m qlrewrite`` and the ``qlrewrite`` console script.

Ctrl-C or SIGTERM while the modules load (a second or two: onnx, onnx_ir, numpy) end
the program with one line and the signal's exit code, not a traceback: nothing has been
written yet. Once a command runs, they become exceptions that clean up what it staged
(see :func:`qlrewrite.cli._common.run_command`).
"""

from __future__ import annotations

import os
import signal
import sys


def _exit_at_once(signum: int, frame: object) -> None:
    name = "interrupted" if signum == signal.SIGINT else "terminated"
    os.write(2, f"qlrewrite: error: {name}\n".encode())
    os._exit(128 + signum)


def run() -> None:
    """Run the command line. Until a command starts (loading modules, parsing options)
    a signal ends the program at once: nothing has been written."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_at_once)
    from qlrewrite.cli import main

    main()


if __name__ == "__main__":
    sys.exit(run())
