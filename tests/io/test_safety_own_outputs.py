"""One run's own outputs never collide (issue 30, item 4): every pair among ``-o``,
``--report``, ``--fix-output``, the output model and its external data file is compared
by path and by file identity before anything is written; a collision is one line on
stderr, exit 2, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from example_models import DQ, MS, qdq_model
from model_io_fixtures import cli, write_external_model


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _fixable(path: Path) -> Path:
    onnx.save(qdq_model(DQ, 13, domain=MS, imports={"": 13}), path)  # QL103: safe fix
    return path


def _refused(result, folder: Path, before: dict[str, bytes]) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "would overwrite" in lines[0], result.stderr
    assert " -> " not in result.stderr  # no "fixed a -> b"
    assert _listing(folder) == before  # nothing written


@pytest.mark.parametrize(
    "extra",
    [
        ["--fix-output", "x.onnx", "-o", "x.onnx"],  # the audit's case: "fixed", then 0
        ["-o", "fx.fix.onnx"],  # the default fix output
        ["-o", "fx.fix.onnx.data"],  # its external data file
        ["--fix-output", "x.onnx", "-o", "x.onnx.0123abcd.data"],
        ["--in-place", "-o", "fx.onnx.0123abcd.data"],  # an in-place model's new data
    ],
)
def test_check_report_never_collides_with_a_fixed_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    _fixable(tmp_path / "fx.onnx")
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    _refused(cli("check", "fx.onnx", "--fix", *extra), tmp_path, before)


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_check_report_through_a_link_to_the_fixed_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link
) -> None:
    """The fixed model exists (an earlier fix): ``-o`` is a link to it."""
    _fixable(tmp_path / "fx.onnx")
    _fixable(tmp_path / "x.onnx")
    link("x.onnx" if link is os.symlink else tmp_path / "x.onnx", tmp_path / "r.txt")
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    result = cli("check", "fx.onnx", "--fix", "--fix-output", "x.onnx", "-o", "r.txt")
    _refused(result, tmp_path, before)


def test_check_distinct_outputs_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fixable(tmp_path / "fx.onnx")
    monkeypatch.chdir(tmp_path)
    result = cli("check", "fx.onnx", "--fix", "--fix-output", "x.onnx", "-o", "r.txt")
    assert result.exit_code == 0, result.stderr
    assert onnx.load("x.onnx").opset_import  # a model, not the report
    assert "checked 1 file(s)" in Path("r.txt").read_text()


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_rewrite_report_through_a_link_to_the_output(tmp_path: Path, link) -> None:
    model, _ = write_external_model(tmp_path, "m.onnx")
    out = tmp_path / "o.onnx"
    assert cli("fold", str(model), "-o", str(out)).exit_code == 0
    link("o.onnx" if link is os.symlink else out, tmp_path / "r.json")
    before = _listing(tmp_path)
    result = cli("fold", str(model), "-o", str(out), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _listing(tmp_path) == before
