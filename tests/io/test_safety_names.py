"""Derived names fit the file system (issue 30, item 6): ``fold`` / ``convert`` /
``upgrade`` / ``check --fix`` of an input whose stem is close to 255 bytes ended in an
internal ENAMETOOLONG for ``<stem>.fold.onnx``; a name given that is too long was an
internal error too. Derived names are shortened as data file names are (one function,
``atomic.fitted_stem``); a name given is refused in one line."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from example_models import DQ, MS, qdq_model
from model_io_fixtures import cli, write_external_model

from qlrewrite.io import atomic

STEM = "s" * 250
COMMANDS = {
    "fold": ["fold"],
    "convert": ["convert", "--to", "onnx"],
    "upgrade": ["upgrade", "--opset", "22"],
    "fix": ["check", "--fix"],
}


def _fixable(path: Path) -> Path:
    onnx.save(qdq_model(DQ, 13, domain=MS, imports={"": 13}), path)  # QL103: safe fix
    return path


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_long_stem_gets_a_shortened_default_output(tmp_path: Path, command: str) -> None:
    src = _fixable(tmp_path / f"{STEM}.onnx")
    result = cli(*COMMANDS[command], str(src))
    assert result.exit_code == 0, result.stderr
    (made,) = _names(tmp_path) - {src.name}
    assert len(made.encode()) <= 255
    assert made.startswith("s" * 200) and made.endswith(f".{command}.onnx") and "~" in made
    onnx.checker.check_model(onnx.load(tmp_path / made))
    again = cli(*COMMANDS[command], str(src))  # the same name every run: replaced
    assert again.exit_code == 0, again.stderr
    assert _names(tmp_path) == {src.name, made}


def test_a_long_stem_with_external_data_writes_names_that_fit(tmp_path: Path) -> None:
    model, _ = write_external_model(tmp_path, "m.onnx")
    proto = onnx.load(model, load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "w.bin"
    (tmp_path / "m.onnx.data").rename(tmp_path / "w.bin")
    model.unlink()
    src = tmp_path / ("\u00e9" * 124 + "x.onnx")  # 254 bytes of UTF-8, 131 characters
    onnx.save(proto, src)
    for _ in range(2):
        result = cli("fold", str(src), "--external-data")
        assert result.exit_code == 0, result.stderr
    made = _names(tmp_path) - {src.name, "w.bin"}
    assert len(made) == 2 and all(len(n.encode()) <= 255 for n in made), made
    (out,) = [n for n in made if n.endswith(".fold.onnx")]
    session = ort.InferenceSession(str(tmp_path / out), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.ones([d or 1 for d in i.shape], np.float32) for i in session.get_inputs()}
    assert session.run(None, feeds)[0].size > 0


@pytest.mark.parametrize(
    "args",
    [
        ["fold", "{src}", "-o", "{long}.onnx"],
        ["fold", "{src}", "--report", "{long}.json"],
        ["check", "{src}", "-o", "{long}.txt"],
        ["check", "{src}", "--fix", "--fix-output", "{long}.onnx"],
    ],
)
def test_a_name_given_too_long_is_one_line(tmp_path: Path, args: list[str]) -> None:
    src = _fixable(tmp_path / "m.onnx")
    long = str(tmp_path / ("l" * 260))
    result = cli(*(a.format(src=src, long=long) for a in args))
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "longer than the file system takes" in lines[0], lines
    assert _names(tmp_path) == {"m.onnx"}


def test_fitted_names_count_bytes_of_any_name(tmp_path: Path) -> None:
    not_utf8 = os.fsdecode(b"\xff" * 250)
    fitted = atomic.fitted_stem(not_utf8, tmp_path, len(".fold.onnx"))
    assert len(os.fsencode(fitted + ".fold.onnx")) <= 255
    assert fitted == atomic.fitted_stem(not_utf8, tmp_path, len(".fold.onnx"))
    assert atomic.fitted_stem("short", tmp_path, 10) == "short"
    cut = atomic.fitted_stem("\u00e9" * 200, tmp_path, 10)  # never half a character
    assert cut.encode("utf-8") and len(cut.encode()) <= 245
