"""``check --target openvino`` on an AveragePool that pads and counts its padding
(count_include_pad=1, PyTorch's AvgPool2d default) after a DequantizeLinear whose zero point
is not 0 (issue 41: found on NNCF 3.4.0's "mixed" preset outputs, then probed).

Measured (2026-11-28, OpenVINO 2026.4.1, f32 and the default precision): OpenVINO moves the
dequantization past the pool and pads the integers with 0 instead of the zero point: 13-18%
of the largest output off, whether the pool's output is quantized again or not; with a zero
point of 0, or the padding excluded (count_include_pad=0), it is right. ORT 1.15-1.32 compute
every form right. The way out is exact by the ONNX spec: pad the integers before the
DequantizeLinear with the zero point as the value, and leave the pool unpadded;
``check --fix --target openvino`` does it (bit-identical in ORT 1.31.1, default session and
ORT_DISABLE_ALL).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from example_models import DT
from family_models import qdq_family
from onnx import helper
from onnx.reference import ReferenceEvaluator

import qlrewrite
from qlrewrite.checking.checker import check

OPENVINO = Path("/work/venvs/openvino/bin/python")


def _findings(model: onnx.ModelProto, folder: Path, target: str) -> list:
    path = folder / "m.onnx"
    onnx.save(model, path)
    report = check(path, targets=[target], select=["QL7"])
    assert report.load_error is None, report.load_error
    return report.errors


@pytest.mark.parametrize(("qtype", "low"), [(DT.UINT8, -1.0), (DT.INT8, 0.0)], ids=str)
@pytest.mark.parametrize("output", ["quantized", "float"])
def test_a_counted_padding_with_a_zero_point_is_flagged_for_openvino(
    qtype: DT, low: float, output: str, tmp_path: Path
) -> None:
    model = qdq_family("AveragePool", qtype, pool_pads="counted", low=low, output=output)
    (finding,) = _findings(model, tmp_path, "openvino")
    assert finding.rule == "QL706" and "AveragePool" in finding.message
    assert "move the padding before the DequantizeLinear" in finding.hint
    assert _findings(model, tmp_path, "ort==1.31") == []


@pytest.mark.parametrize(("pads", "low"), [("counted", 0.0), ("excluded", -1.0), ("none", -1.0)])
def test_the_other_pools_are_not_flagged(pads: str, low: float, tmp_path: Path) -> None:
    model = qdq_family("AveragePool", DT.UINT8, pool_pads=pads, low=low)
    assert _findings(model, tmp_path, "openvino") == []


def _feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"a": rng.uniform(-1.0, 6.0, (1, 4, 4, 4)).astype(np.float32)}


_RUN = """
import sys, numpy as np, openvino as ov
core = ov.Core()
feed = {"a": np.load(sys.argv[1])}
for path in sys.argv[2:]:
    compiled = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.save(path + ".npy", np.asarray(compiled(feed)[compiled.outputs[0]]))
"""


@pytest.mark.slow
def test_openvino_computes_the_counted_padding_wrong_and_the_way_out_right(
    tmp_path: Path,
) -> None:
    """The measurement behind the rows, in /work/venvs/openvino (when present); the pool's
    output float, so the values compare without an output step."""
    if not OPENVINO.exists():
        pytest.skip("no /work/venvs/openvino here")
    model = qdq_family(
        "AveragePool", DT.UINT8, pool_pads="counted", low=-1.0, opset=21, output="float"
    )
    paths = [tmp_path / "padded.onnx", tmp_path / "moved.onnx"]
    onnx.save(model, paths[0])
    onnx.save(_fixed(model), paths[1])
    np.save(tmp_path / "a.npy", _feed()["a"])
    subprocess.run(
        [str(OPENVINO), "-c", _RUN, str(tmp_path / "a.npy"), *map(str, paths)],
        check=True,
        timeout=300,
    )
    expected = ReferenceEvaluator(model).run(None, _feed())[0]
    largest = float(np.abs(expected).max())
    padded, moved = (np.load(f"{p}.npy") for p in paths)
    assert float(np.abs(padded - expected).max()) > 0.05 * largest
    assert float(np.abs(moved - expected).max()) <= 1e-5 * largest


def _fixed(model: onnx.ModelProto) -> onnx.ModelProto:
    return ir.serde.serialize_model(qlrewrite.fix(model, target="openvino"))


def _ort(model: onnx.ModelProto, level: ort.GraphOptimizationLevel) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options)
    return session.run(None, _feed())[0]


def _shared(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` whose DequantizeLinear also feeds a Relu, a second graph output."""
    model.graph.node.append(helper.make_node("Relu", ["a_f"], ["r"], name="relu"))
    model.graph.output.append(helper.make_value_info("r", onnx.TypeProto()))
    model.graph.output[1].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


@pytest.mark.parametrize("shared", [False, True], ids=["alone", "shared"])
@pytest.mark.parametrize("output", ["quantized", "float"])
def test_fix_moves_the_padding_exactly(shared: bool, output: str) -> None:
    """Fixable, repaired: no finding left, the same values by the reference, ORT 1.31.1's
    outputs bit-identical; a DequantizeLinear with other readers is copied, not padded."""
    model = qdq_family(
        "AveragePool", DT.UINT8, pool_pads="counted", low=-1.0, output=output, opset=21
    )
    model = _shared(model) if shared else model
    (finding,) = [f for f in qlrewrite.check(model, target="openvino").errors]
    assert finding.fix == "safe" and "check --fix" in finding.hint
    fixed = _fixed(model)
    assert qlrewrite.check(fixed, target="openvino").errors == []
    ops, before = ([n.op_type for n in m.graph.node] for m in (fixed, model))
    assert ops.count("Pad") == 1
    assert ops.count("DequantizeLinear") == before.count("DequantizeLinear") + shared
    for level in (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ):
        np.testing.assert_array_equal(_ort(fixed, level), _ort(model, level))
    expected = ReferenceEvaluator(model).run(None, _feed())
    for got, want in zip(ReferenceEvaluator(fixed).run(None, _feed()), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert _fixed(fixed).graph.node == fixed.graph.node  # nothing left to fix


def test_no_fix_for_ort_or_without_a_target() -> None:
    model = qdq_family("AveragePool", DT.UINT8, pool_pads="counted", low=-1.0)
    for fixed in (qlrewrite.fix(model, target="ort==1.31"), qlrewrite.fix(model)):
        assert "Pad" not in [n.op_type for n in ir.serde.serialize_model(fixed).graph.node]


def _second_pool(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` whose DequantizeLinear also feeds a second padded pool (3x3, pads 2)."""
    pool = helper.make_node(
        "AveragePool", ["a_f"], ["p2"], kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=1
    )
    model.graph.node.append(pool)
    model.graph.output.append(helper.make_value_info("p2", onnx.TypeProto()))
    model.graph.output[-1].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def test_fix_pads_for_every_padded_pool_of_the_dequantize_linear() -> None:
    """Two padded pools read one DequantizeLinear: each gets its own Pad (their pads
    differ), no finding is left, and the values stay the reference's."""
    model = qdq_family(
        "AveragePool", DT.UINT8, pool_pads="counted", low=-1.0, output="float", opset=21
    )
    model = _second_pool(model)
    (finding,) = qlrewrite.check(model, target="openvino").errors  # one line for both pools
    assert finding.fix == "safe"
    fixed = _fixed(model)
    assert qlrewrite.check(fixed, target="openvino").errors == []
    assert [n.op_type for n in fixed.graph.node].count("Pad") == 2
    expected = ReferenceEvaluator(model).run(None, _feed())
    for got, want in zip(ReferenceEvaluator(fixed).run(None, _feed()), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_pool_padded_by_auto_pad_is_flagged_not_fixable() -> None:
    """auto_pad's pads depend on the input's shape: the finding offers no fix."""
    model = qdq_family("AveragePool", DT.UINT8, pool_pads="counted", low=-1.0)
    pool = next(n for n in model.graph.node if n.op_type == "AveragePool")
    kept = [a for a in pool.attribute if a.name != "pads"]
    del pool.attribute[:]
    pool.attribute.extend([*kept, helper.make_attribute("auto_pad", "SAME_UPPER")])
    (finding,) = qlrewrite.check(model, target="openvino").errors
    assert finding.rule == "QL706" and finding.fix is None
