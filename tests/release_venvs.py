"""The release venvs of the slow tests (``/work/venvs/ort-1.X``, made by the probe): run a
script in each present one and collect what it prints (JSON). CI has none: the tests that
use them skip."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qlrewrite.targets.tables import ort_releases

__all__ = ["release_outputs"]


def release_outputs(script: str, payload: Any, timeout: int = 900) -> Iterator[tuple[str, Any]]:
    """``(release, output)`` per ONNX Runtime release venv present: ``script`` run by its
    python with ``payload`` (JSON) as its one argument, its stdout read as JSON; skips the
    test when no venv is present."""
    venvs = [Path(f"/work/venvs/ort-{a}.{b}/bin/python") for a, b in ort_releases()]
    if not any(v.exists() for v in venvs):
        pytest.skip("no release venvs under /work/venvs")
    for python in (v for v in venvs if v.exists()):
        done = subprocess.run(
            [str(python), "-c", script, json.dumps(payload)],
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout,
        )
        yield python.parent.parent.name.removeprefix("ort-"), json.loads(done.stdout)
