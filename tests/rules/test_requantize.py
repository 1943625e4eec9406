"""QL507 (Q1 -> DQ1 -> Q2 -> DQ2 with different parameters) measured in the installed ONNX
Runtime: its default session replaces the chain with one pair (DoubleQDQPairsRemover) and
computes other values than ORT_DISABLE_ALL; where QL507 is silent, the two agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from example_models import DT, qdq_requantized
from onnx import numpy_helper
from ort_quantized import CONFIGS, INVALID_CONFIGS, quantized, run_session
from qdq_models import load_ir

from qlrewrite.checking.checker import check_model
from qlrewrite.findings import Finding
from qlrewrite.targets.spec import parse_targets

ort = pytest.importorskip("onnxruntime")

X = np.random.default_rng(1).uniform(-3, 3, (1, 4, 6, 6)).astype(np.float32)


def _run(
    proto: onnx.ModelProto, *, optimized: bool = True, disabled: tuple[str, ...] = ()
) -> np.ndarray:
    return run_session(proto, X, optimized=optimized, disabled=disabled)


def _findings(proto: onnx.ModelProto) -> list[Finding]:
    return [f for f in check_model(load_ir(proto)).findings if f.rule == "QL507"]


CHAINS = [
    pytest.param({"scale": 0.5}, 0.25, id="scale-0.05-then-0.5"),
    pytest.param({"scale": 0.05, "zero_point": 100}, 0.03, id="zero-point-128-then-100"),
    pytest.param({"scale": 0.1, "zero_point": 0, "dtype": DT.INT8}, 0.05, id="int8-0.05-then-0.1"),
]


@pytest.mark.parametrize(("kwargs", "off"), CHAINS)
def test_ort_loses_the_requantization_the_rule_names(kwargs: dict[str, Any], off: float) -> None:
    bad = qdq_requantized(**kwargs)
    (finding,) = _findings(bad)
    assert "'f1'" in finding.message
    meant = _run(bad, optimized=False)
    fused = _run(bad)
    if np.array_equal(fused, meant):
        pytest.skip(f"ORT {ort.__version__} keeps the requantization")
    # measured in ORT 1.15.1-1.32.0: off by up to half the coarser step
    assert np.abs(fused - meant).max() >= off
    # the way out the hint names computes the graph as written
    assert np.array_equal(_run(bad, disabled=("DoubleQDQPairsRemover",)), meant)


def test_the_message_names_the_pair_ort_writes(tmp_path: Path) -> None:
    bad = qdq_requantized(0.05, 100)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(bad.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(tmp_path / "optimized.onnx")
    q = next(n for n in optimized.graph.node if n.op_type == "QuantizeLinear")
    inits = {t.name: numpy_helper.to_array(t) for t in optimized.graph.initializer}
    scale, zero = inits[q.input[1]], inits[q.input[2]]
    if zero.item() in (100, 128):
        pytest.skip(f"ORT {ort.__version__} does not collapse the chain")
    (finding,) = _findings(bad)
    assert f"(scale {float(scale):.6g}, zero point {int(zero)}:" in finding.message


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"scale": 0.05}, id="equal-parameters"),
        pytest.param({"scale": 0.5, "consumers": 2}, id="dq1-also-a-graph-output"),
    ],
)
def test_silent_where_ort_computes_the_graph(kwargs: dict[str, Any]) -> None:
    model = qdq_requantized(**kwargs)
    assert _findings(model) == []
    assert np.array_equal(_run(model), _run(model, optimized=False))


@pytest.mark.parametrize("config", sorted(set(CONFIGS) - INVALID_CONFIGS))
def test_ort_quantizer_outputs_are_silent(config: str) -> None:
    assert _findings(quantized(config)) == []


def test_target_ort_makes_it_an_error_in_every_release() -> None:
    report = check_model(load_ir(qdq_requantized(0.5)), targets=parse_targets(["ort>=1.15"]))
    (finding,) = report.findings
    assert finding.rule == "QL731" and finding.severity == "error"
    assert "1.15.1" in finding.message and "1.32.0" in finding.message
