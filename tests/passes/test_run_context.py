"""The run context (issue 31 item 2): one typed object handed to every pass, in place of
the ``model.meta`` channels; what it keeps from pass to pass follows what each pass
declares (``needs``, ``keeps_types``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
import onnx_ir as ir
import pytest
from qdq_models import DQ, DT, qdq_model

from qlrewrite import pipeline
from qlrewrite.io.weightless import weightless_proto
from qlrewrite.passes.commands import downgrade_passes, retarget_passes
from qlrewrite.passes.context import ContextPass, RunContext
from qlrewrite.passes.convert.domain import ConvertDomainPass
from qlrewrite.passes.fix import FixPass
from qlrewrite.passes.fold.fold_pass import FoldPass
from qlrewrite.passes.upgrade import UpgradePass
from qlrewrite.qdq.inference import Inference
from qlrewrite.toolkit import MAIN


def _model() -> ir.Model:
    return ir.serde.deserialize_model(qdq_model(DQ, 13, domain="com.microsoft", x_type=DT.INT8))


class _Seen(ContextPass, ir.passes.InPlacePass):
    """Records the context it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[RunContext] = []

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.seen.append(self.context(model))
        return ir.passes.PassResult(model, False)


class _Plain(ir.passes.InPlacePass):
    """An onnx_ir pass that says nothing about types (it may rename values)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, False)


def test_every_pass_of_a_run_gets_the_same_context_and_inference() -> None:
    model = _model()
    context = RunContext.fresh(model)
    first, second = _Seen(), _Seen()
    pipeline.run_passes(model, [first, second], context)
    assert first.seen == [context] and second.seen == [context]
    assert first.seen[0].inference is second.seen[0].inference
    assert context.ran == [("_Seen", False), ("_Seen", False)]


def test_a_pass_that_does_not_keep_types_makes_the_context_infer_again() -> None:
    model = _model()
    context = RunContext.fresh(model)
    before = context.inference
    pipeline.run_passes(model, [_Plain()], context)
    assert context.inference is not before and isinstance(context.inference, Inference)
    kept = context.inference
    pipeline.run_passes(model, [FoldPass()], context)  # declares keeps_types
    assert context.inference is kept


def test_a_new_model_gets_a_new_context_state() -> None:
    model = _model()
    context = RunContext.fresh(model, weightless_proto(model))
    assert context.unchanged is not None
    new, _ = pipeline.run_passes(model, [UpgradePass(21)], context)
    assert new is not model and context.model is new
    assert context.unchanged is None  # the proto as read no longer describes the model
    assert context.weightless().opset_import[0].version == 21  # serialized from the new one


def test_a_pass_called_alone_gets_a_context_of_its_own() -> None:
    model = _model()
    seen = _Seen()
    seen(model)
    assert seen.seen[0].model is model and seen.seen[0].unchanged is None
    seen(model)
    assert seen.seen[1] is not seen.seen[0]  # nothing left behind on the model or the pass


def test_passes_say_what_they_read_and_keep() -> None:
    assert ConvertDomainPass("onnx").needs == {"inference"}
    assert FixPass(["QL103"]).needs == {"inference"}
    assert UpgradePass(21).needs == {"weightless"} and not UpgradePass(21).keeps_types
    assert FoldPass().needs == frozenset() and FoldPass().keeps_types


def test_a_rewrite_leaves_no_channel_on_the_model(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(qdq_model(DQ, 13, domain="com.microsoft", x_type=DT.INT8), path)
    result = pipeline.rewrite(path, [ConvertDomainPass("onnx")], command="convert", dry_run=True)
    assert not result.model.meta  # the source is kept by io/source.py, not on the model


def test_the_context_of_another_model_is_refused() -> None:
    with pytest.raises(ValueError, match="another model"):
        pipeline.run_passes(_model(), [FoldPass()], RunContext.fresh(_model()))


def _activation_model() -> onnx.ModelProto:
    """x + x -> Q -> DQ -> Reshape at opset 21 with no intermediate type declared: every
    pass reading the Q/DQ nodes' types, and a downgrade relabelling Add-14 / Reshape-14,
    needs shape inference."""
    shape = onnx.numpy_helper.from_array(np.array([4, 2], np.int64), "shape")
    scale = onnx.numpy_helper.from_array(np.array(0.5, np.float32), "s")
    zero = onnx.numpy_helper.from_array(np.array(3, np.uint8), "zp")
    nodes = [
        onnx.helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        onnx.helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["q"], name="q"),
        onnx.helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["d"], name="dq"),
        onnx.helper.make_node("Reshape", ["d", "shape"], ["y"], name="reshape"),
    ]
    graph = onnx.helper.make_graph(
        nodes,
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 2])],
        [shape, scale, zero],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])


@pytest.mark.parametrize(
    "passes",
    [
        lambda: downgrade_passes(19),
        lambda: retarget_passes(zero_point="signed"),
        lambda: retarget_passes(split_shared=True, drop_redundant=True, zero_point="signed"),
    ],
    ids=["downgrade", "retarget", "tidy-then-retarget"],
)
def test_downgrade_retarget_and_tidy_read_the_runs_inference(
    passes: Callable[[], list[ir.passes.PassBase]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX shape inference runs once for the whole run (issue 35's review: the downgrade
    inferred again to relabel, and the retarget passes made their own)."""
    runs: list[int] = []
    infer = onnx.shape_inference.infer_shapes

    def counted(*args: Any, **kwargs: Any) -> onnx.ModelProto:
        runs.append(1)
        return infer(*args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted)
    model = ir.serde.deserialize_model(_activation_model())
    context = RunContext.fresh(model)
    context.inference.table(MAIN)  # as the input check does
    assert len(runs) == 1
    _, results = pipeline.run_passes(model, passes(), context)
    assert len(runs) == 1
    assert all(result.modified for result in results)
    assert all(isinstance(p, ContextPass) for p in passes())
