"""Inference answers from what it has: ``known`` never runs ONNX shape inference (the
input check asks it for the types it found, if it ran), ``table`` runs it on first need."""

from __future__ import annotations

import onnx_ir as ir
from qdq_models import DQ, DT, qdq_model

from qlrewrite.qdq.inference import Inference
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
