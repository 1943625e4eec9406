"""QL753 (``--target openvino``): a 16-bit Q -> DQ pair ending at a graph output, whose
input OpenVINO cannot hand the output's name to. Models built here; the opt-in slow test
compiles each in OpenVINO 2026.4.1 (/work/venvs/openvino): refused exactly where
flagged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import onnx
import pytest
from family_models import DT, qdq_family
from onnx import helper
from openvino_models import boundary_pair

import qlrewrite

OPENVINO = Path("/work/venvs/openvino/bin/python")

#: Refused by OpenVINO 2026.4.1 (measured): the pair reads a graph input, a tensor that
#: is a graph output too, or a MaxPool / Split / TopK, and ends at a graph output; uint16
#: and int16, per tensor and per axis, ai.onnx and com.microsoft.
REFUSED = {
    f"{source}-{dtype}-{'axis' if axis else 'tensor'}-{domain or 'ai.onnx'}": boundary_pair(
        source, dtype, per_axis=axis, domain=domain
    )
    for source in ("input", "output", "MaxPool", "Split", "TopK")
    for dtype in ("uint16", "int16")
    for axis in (False, True)
    for domain in ("", "com.microsoft")
    if not (axis and source in ("Split", "TopK"))  # axis 1 of 4 channels: kept for all
}


def _group(before: str | None, after: str | None) -> onnx.ModelProto:
    """The family probe's 16-bit MaxPool group (graph input -> Q/DQ -> MaxPool -> Q/DQ ->
    graph output), with float ops ``before`` / ``after`` it."""
    model = qdq_family("MaxPool", DT.UINT16, opset=21)
    graph = model.graph
    first, last = graph.input[0].name, graph.output[0].name
    for node in graph.node:
        node.input[:] = [f"{first}_in" if i == first and before else i for i in node.input]
        node.output[:] = [f"{last}_out" if o == last and after else o for o in node.output]
    if before:
        graph.node.insert(0, helper.make_node(before, [first], [f"{first}_in"]))
    if after:
        graph.node.append(helper.make_node(after, [f"{last}_out"], [last]))
    return model


REFUSED["maxpool-group-from-input"] = _group(None, None)
REFUSED["maxpool-group-after-relu"] = _group("Relu", None)

#: Compiled by OpenVINO 2026.4.1 (measured): a single-output float op before the pair, a
#: float op after it, 8 bits, two DequantizeLinear readers, the group between float ops.
COMPILED = {
    **{
        f"{source}-then-identity": boundary_pair(source, after="Identity")
        for source in ("input", "output", "MaxPool", "Split", "TopK")
    },
    "relu-before": boundary_pair("Relu"),
    "averagepool-before": boundary_pair("AveragePool"),
    "input-uint8": boundary_pair("input", "uint8"),
    "maxpool-uint8": boundary_pair("MaxPool", "uint8"),
    "maxpool-group-between-relus": _group("Relu", "Relu"),
    "maxpool-group-then-relu": _group(None, "Relu"),
}


def _two_readers() -> onnx.ModelProto:
    """x -> Q -> two DequantizeLinear -> two graph outputs (not one FakeQuantize)."""
    model = boundary_pair("input")
    graph = model.graph
    graph.node.append(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y2"]))
    graph.output.append(onnx.helper.make_tensor_value_info("y2", onnx.TensorProto.FLOAT, None))
    return model


COMPILED["input-two-dequantize"] = _two_readers()


def _flagged(model: onnx.ModelProto, target: str = "openvino") -> bool:
    return "QL753" in {f.rule for f in qlrewrite.check(model, target=target).errors}


@pytest.mark.parametrize("label", sorted(REFUSED))
def test_flagged_for_openvino_only(label: str) -> None:
    assert _flagged(REFUSED[label])
    assert not _flagged(REFUSED[label], "ort==1.31")


@pytest.mark.parametrize("label", sorted(COMPILED))
def test_not_flagged(label: str) -> None:
    assert not _flagged(COMPILED[label])


def test_the_finding_names_the_input_and_the_output() -> None:
    (finding,) = [f for f in qlrewrite.check(boundary_pair("MaxPool"), target="openvino").errors]
    assert finding.rule == "QL753" and finding.fix is None
    assert "a MaxPool" in finding.message and "graph output 'y'" in finding.message
    assert "Identity" in finding.hint


_COMPILE = """
import sys, openvino as ov
core = ov.Core()
for path in sys.argv[1:]:
    try:
        core.compile_model(core.read_model(path), "CPU")
        print("compiles")
    except Exception as exc:
        print("refused" if "replace_output_update_name" in str(exc) else "other")
"""


@pytest.mark.slow
@pytest.mark.skipif(not OPENVINO.exists(), reason="no /work/venvs/openvino here")
def test_openvino_refuses_exactly_what_is_flagged(tmp_path: Path) -> None:
    models = {**REFUSED, **COMPILED}
    paths = []
    for label, model in models.items():
        paths.append(tmp_path / f"{label}.onnx")
        onnx.save(model, paths[-1])
    args = [str(OPENVINO), "-c", _COMPILE, *map(str, paths)]
    done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=900)
    verdicts = dict(zip(models, done.stdout.split(), strict=True))
    for label, model in models.items():
        want = "refused" if _flagged(model) else "compiles"
        assert verdicts[label] == want, (label, verdicts[label])
