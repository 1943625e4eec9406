"""Bidirectional controls in names are escaped like control characters (issue 30): a
node or file name holding U+202E would otherwise show a reader text in another order
than it is stored (``evil\\u202eexe.onnx`` shows as ``evilxnno.exe``)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from qdq_models import DQ, qdq_model

from qlrewrite.cli import main
from qlrewrite.text import escape

BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]


@pytest.mark.parametrize("code", BIDI, ids=hex)
def test_every_bidi_control_is_escaped(code: int) -> None:
    text = escape(f"evil{chr(code)}exe.onnx")
    assert chr(code) not in text
    assert text == f"evil\\u{code:04x}exe.onnx"


def test_ordinary_text_and_other_scripts_are_left_alone() -> None:
    for text in ("conv_1/weight", "вес", "重み", "وزن", "a\u200db"):  # ZWJ is not bidi
        assert escape(text) == text


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_a_bidi_override_in_names_reaches_no_output(tmp_path: Path, fmt: str) -> None:
    proto = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})  # QL403 (error)
    proto.graph.node[0].name = "dq\u202egnp.onnx"
    model = tmp_path / "m\u2067x\u2069.onnx"
    onnx.save(proto, model)
    result = CliRunner().invoke(main, ["check", "--isolated", "--format", fmt, str(model)])
    assert result.exit_code == 1, result.output
    for char in ("\u202e", "\u2067", "\u2069"):
        assert char not in result.stdout + result.stderr
    assert "dq\\u202egnp.onnx" in result.stdout
    assert "m\\u2067x\\u2069.onnx" in result.stdout


INVISIBLE = [0x200B, *range(0x2060, 0x2066), 0xFEFF]


@pytest.mark.parametrize("code", INVISIBLE, ids=hex)
def test_invisible_characters_are_escaped(code: int) -> None:
    """A zero width space or byte order mark made ``m\\u200b.onnx`` look like ``m.onnx``
    in the full, json, sarif and github outputs (only controls and bidi were escaped)."""
    assert escape(f"m{chr(code)}.onnx") == f"m\\u{code:04x}.onnx"


@pytest.mark.parametrize("fmt", ["text", "full", "github"])
def test_an_invisible_character_in_names_reaches_no_text_output(tmp_path: Path, fmt: str) -> None:
    proto = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})  # QL403 (error)
    proto.graph.node[0].name = "dq\u200b\ufeff"
    model = tmp_path / "m\u2060.onnx"
    onnx.save(proto, model)
    result = CliRunner().invoke(main, ["check", "--isolated", "--output-format", fmt, str(model)])
    assert result.exit_code == 1, result.output
    for char in ("\u200b", "\ufeff", "\u2060"):
        assert char not in result.stdout + result.stderr
    assert "m\\u2060.onnx" in result.stdout
