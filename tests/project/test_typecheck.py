"""The type checker is part of the suite: mypy, configured in pyproject.toml
([tool.mypy]: strict on the modules listed in ``files``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_clean() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_configuration_has_no_blanket_ignores() -> None:
    """Missing imports are ignored only for named third-party modules, and no error code
    is switched off for the package."""
    text = (ROOT / "pyproject.toml").read_text()
    config = text.split("[tool.mypy]", 1)[1].split("[tool.importlinter]", 1)[0]
    head = config.split("[[tool.mypy.overrides]]", 1)[0]
    assert "ignore_missing_imports" not in head and "disable_error_code" not in config
    assert "ignore_errors" not in config
    assert "strict = true" in head
