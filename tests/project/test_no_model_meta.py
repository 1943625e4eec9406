"""Nothing rides on ``model.meta`` (issue 40): what qlrewrite keeps for a model has a
typed owner instead (its :class:`~qlrewrite.io.source.Source` in ``io/source.py``'s
registry, a rewrite's summary in ``api.py``'s), so no module reads a key another wrote.
click's ``ctx.meta`` (the ``--debug`` flag shared by the group and its command) is
click's own channel, not a model's."""

from __future__ import annotations

import ast
from pathlib import Path

import onnx
from qdq_models import DQ, DT, qdq_model

from qlrewrite import api
from qlrewrite.io import model_io
from qlrewrite.io.source import source_of

PACKAGE = Path(__file__).resolve().parents[2] / "qlrewrite"


def _meta_uses(text: str) -> list[int]:
    """Lines of ``text`` that read or write ``.meta`` (``._metadata``) of anything but
    click's ``ctx``."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in ("meta", "_metadata"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id == "ctx"):  # click.Context
                lines.append(node.lineno)
    return lines


def test_no_module_uses_model_meta() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 100
    found = {p.relative_to(PACKAGE).as_posix(): _meta_uses(p.read_text()) for p in paths}
    assert {p: lines for p, lines in found.items() if lines} == {}


def test_the_grep_finds_a_meta_use() -> None:
    text = "def f(model, ctx):\n    ctx.meta['d'] = 1\n    return model.meta.get('k')\n"
    assert _meta_uses(text) == [3]
    assert _meta_uses("def f(m):\n    m.graph.meta['k'] = 1\n") == [2]


def test_source_and_summary_are_kept_off_the_model(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(qdq_model(DQ, 13, x_type=DT.INT8), path)
    model = model_io.load(path)
    source = source_of(model)
    assert source is not None and source.path == path and not model.meta
    folded = api.fold(model)
    summary = api.summary_of(folded)
    assert summary is not None and summary.command == "fold" and not folded.meta
    assert all(r.model is folded for r in summary.pass_results)
    assert api.summary_of(model_io.load(path)) is None  # a model no rewrite returned
