"""The output check re-checks only what the passes touched (issue 31 item 2), as safely as
checking everything: a bad node in an untouched part was checked on input (refused there,
or re-checked when a pass claims to repair it); a bad node in a touched part (the node,
its inputs' values, types or producers) is found by the output check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from qlrewrite import pipeline
from qlrewrite.checking import checker
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.fold_pass import FoldPass
from qlrewrite.passes.results import RepairsFindings, RewritePassResult


def _chain(path: Path, *, bad_scale: bool = False) -> Path:
    """x [1, 4] -> Q -> DQ (activation) and a weight DQ folded by fold; ``bad_scale``: the
    activation's scale is per-axis with 3 values for a dimension of 4 (QL403)."""
    scale = np.full(3, 0.5, np.float32) if bad_scale else np.float32(0.5)
    axis = {"axis": 1} if bad_scale else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q", **axis),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["a"], name="dq", **axis),
        helper.make_node("DequantizeLinear", ["w", "ws", "z"], ["wf"], name="wdq"),
        helper.make_node("Add", ["a", "wf"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [
            numpy_helper.from_array(np.asarray(scale), "s"),
            numpy_helper.from_array(np.uint8(128), "z"),
            numpy_helper.from_array(np.arange(4, dtype=np.uint8).reshape(1, 4), "w"),
            numpy_helper.from_array(np.float32(0.25), "ws"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    onnx.save(model, path)
    return path


@pytest.fixture
def skipped(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[str]]:
    """The ``unchanged`` of every check_model call (the nodes not checked again)."""
    calls: list[frozenset[str]] = []
    real = checker.check_model

    def spy(model, **kwargs):
        calls.append(frozenset(kwargs.get("unchanged", ())))
        return real(model, **kwargs)

    monkeypatch.setattr(checker, "check_model", spy)
    return calls


def test_fold_checks_again_only_what_it_touched(tmp_path: Path, skipped) -> None:
    source = _chain(tmp_path / "m.onnx")
    result = pipeline.rewrite(source, [FoldPass()], command="fold", dry_run=True)
    assert [n.op_type for n in result.model.graph] == ["QuantizeLinear", "DequantizeLinear", "Add"]
    assert skipped == [frozenset(), frozenset({"q", "a"})]  # input: all; output: none of them


class _Scale(ContextPass, ir.passes.InPlacePass):
    """Replaces the activation's scale with 3 values on axis 1 of a dimension of 4: the
    Q and DQ nodes are not edited, only the value they read."""

    def call(self, model: ir.Model) -> RewritePassResult:
        value = model.graph.initializers["s"]
        value.const_value = ir.tensor(np.full(3, 0.5, np.float32), name="s")
        value.shape = ir.Shape([3])
        for node in model.graph:
            if node.name in ("q", "dq"):
                node.attributes["axis"] = ir.AttrInt64("axis", 1)
        return RewritePassResult(model, True)


class _ScaleOnly(ContextPass, ir.passes.InPlacePass):
    """Only the value changes (an untouched node reading a touched value)."""

    def call(self, model: ir.Model) -> RewritePassResult:
        value = model.graph.initializers["s"]
        value.const_value = ir.tensor(np.full((1, 3), 0.5, np.float32), name="s")
        value.shape = ir.Shape([1, 3])
        return RewritePassResult(model, True)


@pytest.mark.parametrize("bad_pass", [_Scale, _ScaleOnly], ids=["node", "its-input"])
def test_a_bad_node_in_a_touched_part_is_found(tmp_path: Path, bad_pass, skipped) -> None:
    source, out = _chain(tmp_path / "m.onnx"), tmp_path / "o.onnx"
    with pytest.raises(pipeline.FindingsRefusal, match="rewritten model would have 4 error"):
        pipeline.rewrite(source, [FoldPass(), bad_pass()], command="t", output=out)
    assert not out.exists()  # onnx.checker let it through: the rules found it
    assert not skipped[1] & {"q", "a"}


def test_a_bad_node_in_an_untouched_part_is_refused_on_input(tmp_path: Path) -> None:
    source = _chain(tmp_path / "m.onnx", bad_scale=True)
    with pytest.raises(pipeline.FindingsRefusal, match=r"m\.onnx: 4 error finding"):
        pipeline.rewrite(source, [FoldPass()], command="fold", dry_run=True)


class _ClaimsToRepair(ContextPass, ir.passes.InPlacePass, RepairsFindings):
    """Says it repairs QL403 and QL404 (so the input is not refused); does nothing."""

    repairs_rules = ("QL403", "QL404")

    def call(self, model: ir.Model) -> RewritePassResult:
        return RewritePassResult(model, False)


def test_a_node_a_pass_claimed_to_repair_is_checked_again(tmp_path: Path, skipped) -> None:
    source = _chain(tmp_path / "m.onnx", bad_scale=True)
    with pytest.raises(pipeline.FindingsRefusal, match="rewritten model would have 4 error"):
        pipeline.rewrite(source, [_ClaimsToRepair()], command="t", dry_run=True)
    assert not skipped[1] & {"q", "a"}  # the nodes with input findings were checked again
