"""Every file qlrewrite reads goes through one guard (issue 30, item 5): a regular file
(opened without blocking, judged on the open descriptor), within the size its kind may
have, else one line on stderr and exit 2. A FIFO ``--config`` hung forever and a link to
``/dev/zero`` read until MemoryError."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from example_models import DQ, qdq_model
from model_io_fixtures import cli

from qlrewrite.errors import InputError
from qlrewrite.io import reading

PACKAGE = Path(__file__).resolve().parents[2] / "qlrewrite"


def _model(folder: Path) -> Path:
    path = folder / "m.onnx"
    onnx.save(qdq_model(DQ, 21), path)
    return path


def _qlrewrite(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command in its own process, bounded: a read that blocks fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "qlrewrite", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _one_line(result, *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_a_fifo_configuration_is_refused_without_blocking(tmp_path: Path) -> None:
    model = _model(tmp_path)
    os.mkfifo(tmp_path / "q.toml")
    result = _qlrewrite("check", model, "--config", "q.toml", cwd=tmp_path)
    _one_line(result, "q.toml", "FIFO")


def test_a_configuration_linked_to_a_device_is_refused_unread(tmp_path: Path) -> None:
    model = _model(tmp_path)
    (tmp_path / "q.toml").symlink_to("/dev/zero")
    result = _qlrewrite("check", model, "--config", "q.toml", cwd=tmp_path)
    _one_line(result, "q.toml", "not a regular file")


def test_a_configuration_beyond_its_size_is_refused_unread(tmp_path: Path) -> None:
    model = _model(tmp_path)
    (tmp_path / "q.toml").write_text("# padding\n" * 200_000)  # 2 MB of comments
    result = cli("check", str(model), "--config", str(tmp_path / "q.toml"))
    assert result.exit_code == 2, result.output
    assert "more than a configuration file may hold" in result.stderr


def test_a_model_file_beyond_2_gib_is_refused_unread(tmp_path: Path) -> None:
    """Protobuf cannot parse it anyway: refused before a byte is read (a sparse file)."""
    big = tmp_path / "big.onnx"
    with open(big, "wb") as file:
        file.truncate(3 * 1024**3)
    started = time.perf_counter()
    result = cli("check", str(big))
    assert result.exit_code == 2, result.output
    assert "more than a model file may hold" in result.stderr
    assert time.perf_counter() - started < 5


def test_the_reader_judges_the_open_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="FIFO"):  # no writer: an open that blocks hangs here
        reading.read_bytes(tmp_path / "fifo", "configuration file", 100)
    with pytest.raises(InputError, match="is a directory"):
        reading.read_bytes(tmp_path, "model file", 100)
    with pytest.raises(InputError, match="no such file"):
        reading.read_bytes(tmp_path / "missing", "model file", 100)
    (tmp_path / "f").write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="more than"):
        reading.read_bytes(tmp_path / "f", "configuration file", 100)
    assert reading.read_bytes(tmp_path / "f", "configuration file", 101) == b"x" * 101
    (tmp_path / "link").symlink_to("f")
    with pytest.raises(InputError, match="is a link"):
        reading.read_bytes(tmp_path / "link", "journal", 1000, follow_links=False)
    with pytest.raises(InputError, match="not UTF-8"):
        (tmp_path / "b").write_bytes(b"\xff")
        reading.read_text(tmp_path / "b", "configuration file", 100)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc")
def test_a_file_whose_size_says_zero_is_read_to_its_end_within_the_cap() -> None:
    """Files of /proc are regular files of size 0 that hold text: read in steps, bounded."""
    assert "Name:" in reading.read_text("/proc/self/status", "file", 1 << 20)
    with pytest.raises(InputError, match="more than"):
        reading.read_bytes("/proc/self/status", "file", 10)


# Opens that read nothing a user gave: (module, function) -> why.
NOT_READS = {
    ("io/atomic.py", "fsync_file"): "opens a file it staged, to fsync it",
    ("io/atomic.py", "_write_synced"): "writes",
    ("io/atomic.py", "_write_stream"): "writes",
    ("io/inline_save.py", "save_inline"): "writes",
    ("verify/verify_child.py", "_read_tasks"): "the --verify child's tasks, on its stdin pipe",
    ("reports.py", "_read_npz"): "np.load of the bytes reading.read_bytes read",
    ("reports.py", "_check_headers"): "a member of the archive reading.read_bytes read",
    ("verify/release_child.py", "main"): "the task the parent wrote in its private folder "
    "(run in a release's environment, which holds no qlrewrite); writes the answer",
    ("verify/release_child.py", "_profiled_kernels"): "the runtime's profile, in that folder",
    ("verify/release_run.py", "_outputs"): "np.load of the bytes reading.read_bytes read",
}
_READS = {"open", "read_bytes", "read_text", "load_model", "fromfile", "memmap"}
#: ``X.load(...)`` reads a file for these X (``model_io.load`` goes through the reader).
_LOADERS = {"onnx", "tomllib", "np", "numpy", "pickle", "json"}


def _opens(tree: ast.AST) -> list[tuple[str, int]]:
    """(enclosing function, line) of every call that opens or reads a file by name."""
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", "")
            owner = callee.value if isinstance(callee, ast.Attribute) else None
            owned = owner.id if isinstance(owner, ast.Name) else ""
            if owned in ("os", "reading"):
                continue  # os.open of folders (locks, fsync); the reader itself
            if name in _READS or (name == "load" and owned in _LOADERS):
                found.append((func.name, node.lineno))
    return found


def test_every_file_read_goes_through_the_reader() -> None:
    """No module opens a file to read it but :mod:`qlrewrite.io.reading`."""
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module == "io/reading.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function, line in _opens(tree):
            if (module, function) not in NOT_READS:
                stray.append(f"{module}:{line} in {function}")
    assert not stray, stray
