"""Layers only point down, enforced by import-linter's layers contract in pyproject.toml
(every import counts, inside functions too); and the contract itself can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LINT_MAIN = "import sys; from importlinter.cli import lint_imports_command; "
LINT = [sys.executable, "-c", _LINT_MAIN + "sys.exit(lint_imports_command())"]


def _lint(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LINT, "--config", str(folder / "pyproject.toml"), "--no-cache"],
        cwd=folder,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_the_layers_contract_is_kept() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Layers only point down KEPT" in done.stdout


def test_an_arrow_up_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "qlrewrite", tmp_path / "qlrewrite")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    toolkit = tmp_path / "qlrewrite" / "toolkit.py"
    # an import inside a function, as the ones that used to dodge cycles
    toolkit.write_text(toolkit.read_text() + "\n\ndef _up():\n    from qlrewrite import pipeline\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and "qlrewrite.toolkit -> qlrewrite.pipeline" in done.stdout
