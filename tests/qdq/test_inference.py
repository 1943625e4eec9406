"""Inference answers from what it has: ``known`` never runs ONNX shape inference (the
input check asks it for the types it found, if it ran), ``table`` runs it on first need."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from qdq_models import DQ, DT, qdq_model

from qlrewrite.qdq.inference import Inference, declared
from qlrewrite.toolkit import MAIN


def test_known_never_runs_inference_and_then_agrees_with_table() -> None:
    model = ir.serde.deserialize_model(qdq_model(DQ, 13, x_type=DT.INT8))
    inference = Inference(model)
    assert inference.known(MAIN) == {} and not inference.ran  # asking did not run it
    table = inference.table(MAIN)
    assert inference.ran and table  # the DequantizeLinear's output, at least
    assert inference.known(MAIN) == table
    inference.known(MAIN).clear()  # a copy: the inference keeps its own
    assert inference.known(MAIN) == table


def test_declared_reads_the_main_graph_as_the_proto_types_it() -> None:
    """What the input check compares a node's types with when inference did not run: the
    main graph's declared types, the same table an inference given that proto knows."""
    proto = onnx.shape_inference.infer_shapes(qdq_model(DQ, 13, x_type=DT.INT8))
    model = ir.serde.deserialize_model(proto)
    table = declared(proto.graph)
    assert table and table == Inference(model, inferred=proto).known(MAIN)
