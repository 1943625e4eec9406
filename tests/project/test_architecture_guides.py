"""docs/architecture.md's "Adding a pass", walked through (issue 31 item 8): a toy pass is
one module (step 1) and one entry in a command's list (step 2); run through the pipeline
it gets the run's context, its output is checked and written, and a pass that breaks the
model is refused with nothing written."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from qdq_models import DQ, DT, qdq_model

from qlrewrite import pipeline
from qlrewrite.errors import Refusal
from qlrewrite.passes.commands import fold_passes

ROOT = Path(__file__).resolve().parents[2]

#: The module a newcomer writes (step 1 of the guide), whole.
TOY_MODULE = '''
"""Name every unnamed QuantizeLinear / DequantizeLinear after its op and x's type."""

from __future__ import annotations

import onnx_ir as ir

from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import iter_sites
from qlrewrite.toolkit import FreshNames


class NameNodesPass(ContextPass, ir.passes.InPlacePass):
    """Give unnamed Q/DQ nodes a name, e.g. ``DequantizeLinear_INT8``."""

    needs = frozenset({"inference"})  # x's type, when nobody declared it

    def call(self, model: ir.Model) -> RewritePassResult:
        inference = self.context(model).inference
        names = FreshNames(model, nodes=True)
        named = 0
        for site in iter_sites(model):
            if site.node.name:
                continue
            x = site.node.inputs[0]
            dtype = x.dtype if x is not None else None
            if dtype is None and x is not None:
                dtype = inference.scope(site.ref).get(x.name, (None, None))[0]
            site.node.name = names.fresh(f"{site.node.op_type}_{dtype.name if dtype else 'x'}")
            named += 1
        return RewritePassResult(model, bool(named), {"nodes_named": named})
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The toy module, importable as ``toy_pass``."""
    (tmp_path / "toy_pass.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_pass

    yield toy_pass
    sys.modules.pop("toy_pass", None)


def _unnamed(path: Path) -> Path:
    model = qdq_model(DQ, 13, x_type=DT.INT8)
    for node in model.graph.node:
        node.name = ""
    onnx.save(model, path)
    return path


def test_the_toy_pass_runs_through_the_pipeline(tmp_path: Path, toy) -> None:
    source, out = _unnamed(tmp_path / "m.onnx"), tmp_path / "named.onnx"
    toy_pass = toy.NameNodesPass()
    seen = []
    real_call = type(toy_pass).call

    def spy(self, model):
        context = self.context(model)
        seen.append((context, list(context.ran), context.inference))
        return real_call(self, model)

    type(toy_pass).call = spy
    try:
        passes = [*fold_passes(keep_dq=True), toy_pass]  # step 2: its place in a list
        result = pipeline.rewrite(source, passes, command="fold", output=out)
    finally:
        type(toy_pass).call = real_call
    assert result.written and result.changes["NameNodesPass"] == {"nodes_named": 1}
    assert [n.name for n in onnx.load(out).graph.node] == ["DequantizeLinear_INT8"]
    # the run's context was handed to it, after fold's pass (which kept the inference)
    ((context, ran, inference),) = seen
    assert ran == [("FoldPass", False)] and context.model is result.model
    assert context.inference is inference  # it declares keeps_types (the default)


def test_a_pass_that_breaks_the_model_is_refused_and_nothing_written(tmp_path: Path) -> None:
    import onnx_ir as ir

    from qlrewrite.passes.context import ContextPass
    from qlrewrite.passes.results import RewritePassResult

    class BreakAxisPass(ContextPass, ir.passes.InPlacePass):
        def call(self, model: ir.Model) -> RewritePassResult:
            for node in model.graph:
                node.attributes["block_size"] = ir.AttrInt64("block_size", 2)  # not in DQ-13
            return RewritePassResult(model, True)

    source, out = _unnamed(tmp_path / "m.onnx"), tmp_path / "broken.onnx"
    with pytest.raises(Refusal, match="rewritten model would"):
        pipeline.rewrite(source, [BreakAxisPass()], command="break", output=out)
    assert not out.exists()


def test_step_two_is_all_the_command_line_needs(tmp_path: Path) -> None:
    """A fresh process: the toy put in fold's list (as editing commands.py would), then
    ``qlrewrite fold``: the command line reads the list."""
    (tmp_path / "toy_pass.py").write_text(textwrap.dedent(TOY_MODULE))
    source, out = _unnamed(tmp_path / "m.onnx"), tmp_path / "f.onnx"
    script = textwrap.dedent(f"""
        import sys
        import toy_pass
        from qlrewrite.passes import commands
        listed = commands.fold_passes
        commands.fold_passes = lambda **kw: [*listed(**kw), toy_pass.NameNodesPass()]
        from qlrewrite.cli import main
        main(["fold", {str(source)!r}, "--keep-dq", "-o", {str(out)!r}])
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "nodes named 1" in done.stderr
    assert [n.name for n in onnx.load(out).graph.node] == ["DequantizeLinear_INT8"]


def test_the_guide_names_at_most_three_files() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    guide = text.split("## Adding a pass", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d\. `([^`]+)`", guide, re.M)
    assert steps == [
        "qlrewrite/passes/<name>.py",
        "qlrewrite/passes/commands.py",
        "docs/architecture.md",
    ]
    for step in steps[1:]:
        assert (ROOT / step).exists()
