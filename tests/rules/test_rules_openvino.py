"""QL750 / QL751 (``--target openvino``): models built here; the opt-in slow test runs
OpenVINO 2026.4.1 (/work/venvs/openvino) and ONNX Runtime on them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import qoperator_models
from openvino_models import constant_operand, sixteen_bit

from qlrewrite.checking.checker import check

OPENVINO = Path("/work/venvs/openvino/bin/python")
ORT = Path("/work/venvs/ort-1.31/bin/python")


BAD = {
    "u16-zero-0": sixteen_bit(),
    "i16-zero-lowest": sixteen_bit("int16", -32768),
    "add-constant-qdq": constant_operand("Add", True),
    "mul-constant-qdq": constant_operand("Mul", True),
}
GOOD = {
    "u16-relu": sixteen_bit(relu=True),
    "i16-two-sided": sixteen_bit("int16", 0),
    "add-constant-dq": constant_operand("Add", False),
    "mul-constant-dq": constant_operand("Mul", False),
}
EXPECTED = {"u16": "QL750", "i16": "QL750", "add": "QL751", "mul": "QL751"}


def _errors(model: onnx.ModelProto, path: Path, target: str = "openvino") -> set[str]:
    onnx.save(model, path)
    return {f.rule for f in check(path, targets=[target]).errors}


@pytest.mark.parametrize("label", sorted(BAD))
def test_flagged_for_openvino_only(label: str, tmp_path: Path) -> None:
    code = EXPECTED[label.split("-", 1)[0]]
    assert code in _errors(BAD[label], tmp_path / "m.onnx")
    assert code not in _errors(BAD[label], tmp_path / "m.onnx", "ort==1.31")


@pytest.mark.parametrize("label", sorted(GOOD))
def test_not_flagged(label: str, tmp_path: Path) -> None:
    assert not {"QL750", "QL751"} & _errors(GOOD[label], tmp_path / "m.onnx")


def test_relu_before_one_sided_q_is_exact() -> None:
    """Q(Relu(x)) == Q(x) bit for bit when the zero point is the type's lowest value
    (the reference evaluator; ORT's outputs: the slow test)."""
    from onnx.reference import ReferenceEvaluator

    x = {"a": np.linspace(-20, 20, 8, dtype=np.float32).reshape(2, 4)}
    for dtype, zero in (("uint16", 0), ("int16", -32768)):
        plain = ReferenceEvaluator(sixteen_bit(dtype, zero)).run(None, x)[0]
        relu = ReferenceEvaluator(sixteen_bit(dtype, zero, relu=True)).run(None, x)[0]
        assert plain.min() == 0.0
        np.testing.assert_array_equal(plain, relu)


_RUN = """
import json, sys, numpy as np
x = np.linspace(-20, 20, 8, dtype=np.float32).reshape(2, 4)
out = {}
for path in sys.argv[2:]:
    try:
        if sys.argv[1] == "ov":
            import openvino as ov
            c = ov.Core().compile_model(path, "CPU")
            out[path] = c({"a": x})[c.outputs[0]].tolist()
        else:
            import onnxruntime as ort
            o = ort.SessionOptions()
            o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
            out[path] = s.run(None, {"a": x})[0].tolist()
    except Exception as exc:
        out[path] = str(exc)[:200]
print(json.dumps(out))
"""


def _run(python: Path, kind: str, paths: list[str]) -> dict:
    done = subprocess.run(
        [str(python), "-c", _RUN, kind, *paths], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.skipif(not (OPENVINO.exists() and ORT.exists()), reason="release venvs absent")
def test_openvino_disagrees_exactly_where_flagged(tmp_path: Path) -> None:
    paths = {}
    for label, model in {**BAD, **GOOD}.items():
        paths[label] = str(tmp_path / f"{label}.onnx")
        onnx.save(model, paths[label])
    ov, ref = _run(OPENVINO, "ov", list(paths.values())), _run(ORT, "ort", list(paths.values()))
    for label, path in paths.items():
        got, want = ov[path], np.asarray(ref[path])
        wrong = (
            isinstance(got, str) or np.abs(np.asarray(got) - want).max() > 0.1 * np.abs(want).max()
        )
        assert wrong == (label in BAD), (label, got)
    for zero in ("u16", "i16"):  # the fix's exactness in ORT, not only the reference
        relu = sixteen_bit(*(("uint16", 0) if zero == "u16" else ("int16", -32768)), relu=True)
        onnx.save(relu, tmp_path / "relu.onnx")
        plain = ref[paths["u16-zero-0" if zero == "u16" else "i16-zero-lowest"]]
        assert _run(ORT, "ort", [str(tmp_path / "relu.onnx")])[str(tmp_path / "relu.onnx")] == plain


def _qlinear(op: str, zero: int) -> onnx.ModelProto:
    return qoperator_models.build(op, C_zero_point=np.array(zero, np.uint8))


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("zero", [0, 255])
def test_qlinear_binary_one_sided_flagged(op: str, zero: int, tmp_path: Path) -> None:
    assert "QL752" in _errors(_qlinear(op, zero), tmp_path / "m.onnx")
    assert "QL752" not in _errors(_qlinear(op, zero), tmp_path / "m.onnx", "ort==1.31")
    assert "QL752" not in _errors(_qlinear(op, 128), tmp_path / "m.onnx")


_RUN_QOPERATOR = """
import json, sys, numpy as np
rng = np.random.default_rng(0)
feeds = {"A": rng.integers(0, 256, (2, 3)).astype(np.uint8),
         "B": rng.integers(0, 256, (2, 3)).astype(np.uint8)}
if sys.argv[1] == "ov":
    import openvino as ov
    c = ov.Core().compile_model(sys.argv[2], "CPU")
    print(json.dumps(c(feeds)[c.outputs[0]].tolist()))
else:
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(sys.argv[2], o, providers=["CPUExecutionProvider"])
    print(json.dumps(s.run(None, feeds)[0].tolist()))
"""


@pytest.mark.slow
@pytest.mark.skipif(not (OPENVINO.exists() and ORT.exists()), reason="release venvs absent")
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_openvino_wraps_qlinear_binary(op: str, tmp_path: Path) -> None:
    """Output zero point 0: OpenVINO wraps results below the range to the top (255 steps
    off ORT's saturated 0)."""
    path = tmp_path / "m.onnx"
    onnx.save(_qlinear(op, 0), path)
    got = [
        np.asarray(json.loads(_output(python, kind, path)))
        for python, kind in ((OPENVINO, "ov"), (ORT, "ort"))
    ]
    assert np.abs(got[0].astype(int) - got[1].astype(int)).max() > 200


def _output(python: Path, kind: str, path: Path) -> str:
    args = [str(python), "-c", _RUN_QOPERATOR, kind, str(path)]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout
