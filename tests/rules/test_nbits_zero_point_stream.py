"""QL427: MatMulNBits zero points written as one stream over all columns, as ONNX Runtime
1.16's MatMul4BitsQuantizer wrote them (no padding at the end of each column's row).

- check reports QL427 (and not QL423's generic shape error) on that size only;
- the unsafe fix writes the schema's layout: the rows below, packed here by hand;
- the fixed model computes, in the installed ONNX Runtime, what the producer meant (a numpy
  reference from the values the stream was built from);
- a slow test: ORT 1.16.3 on the original and the installed ORT on the fixed model agree.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.api import fix
from qlrewrite.checking.checker import check

K, N, BLOCK = 48, 4, 16  # 3 blocks of 4 bits per column: 12 nibbles, 6 bytes as a stream


def _values() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 16, size=(N, 3, BLOCK), dtype=np.uint8)
    scales = (rng.random((N, 3)) * 0.1 + 0.01).astype(np.float32)
    zero_points = rng.integers(0, 16, size=(N, 3), dtype=np.uint8)
    return codes, scales, zero_points


def _nibbles(values: np.ndarray) -> np.ndarray:
    """Pairs of 4-bit values along the last axis into bytes, low nibble first."""
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def _stream_model() -> onnx.ModelProto:
    codes, scales, zps = _values()
    stream = _nibbles(zps.reshape(-1))  # 12 values -> 6 bytes, no padding per column
    inits = [
        numpy_helper.from_array(_nibbles(codes), "b"),
        numpy_helper.from_array(scales.reshape(-1), "s"),
        numpy_helper.from_array(stream, "z"),
    ]
    attributes = {"K": K, "N": N, "bits": 4, "block_size": BLOCK}
    node = helper.make_node(
        "MatMulNBits", ["a", "b", "s", "z"], ["y"], domain="com.microsoft", **attributes
    )
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, K])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, N])
    graph = helper.make_graph([node], "g", [a], [y], initializer=inits)
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _reference(a: np.ndarray) -> np.ndarray:
    codes, scales, zps = _values()
    weights = (codes.astype(np.float64) - zps[..., None]) * scales[..., None]
    return a.astype(np.float64) @ weights.reshape(N, K).T


def _fixed() -> onnx.ModelProto:
    return ir.serde.serialize_model(fix(_stream_model(), select=["QL427"], unsafe=True))


def _saved(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(_stream_model(), path)
    return path


def test_the_stream_layout_is_ql427_not_ql423(tmp_path: Path) -> None:
    report = check(_saved(tmp_path))
    assert sorted(f.rule for f in report.findings) == ["QL427"]
    (finding,) = report.findings
    assert "one stream over the 4 columns" in finding.message
    assert "[4, 2]" in finding.message
    assert finding.fix == "unsafe"


def test_another_wrong_size_stays_ql423(tmp_path: Path) -> None:
    model = _stream_model()
    model.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.zeros(5, np.uint8), "z"))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert sorted(f.rule for f in check(path).findings) == ["QL423"]


def test_the_fix_writes_one_padded_row_per_column() -> None:
    _, _, zps = _values()
    padded = np.concatenate([zps, np.full((N, 1), 8, np.uint8)], axis=1)  # pad: the default
    expected = _nibbles(padded)
    fixed = _fixed()
    z = next(i for i in fixed.graph.initializer if i.name == "z")
    np.testing.assert_array_equal(numpy_helper.to_array(z), expected)


def test_the_fixed_model_computes_what_the_producer_meant() -> None:
    ort = pytest.importorskip("onnxruntime")
    fixed = _fixed()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        fixed.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    a = np.random.default_rng(1).standard_normal((2, K)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"a": a})[0], _reference(a), atol=1e-4)


@pytest.mark.slow
def test_ort_1_16_read_the_stream_as_the_fix_reads_it(tmp_path: Path) -> None:
    python = Path("/work/venvs/ort-1.16/bin/python")
    if not python.exists():
        pytest.skip("no /work/venvs/ort-1.16 here")
    a = np.random.default_rng(1).standard_normal((2, K)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    model, feeds = str(_saved(tmp_path)), str(tmp_path / "a.npy")
    script = (
        "import numpy as np, onnxruntime as ort\n"
        f"s = ort.InferenceSession({model!r}, providers=['CPUExecutionProvider'])\n"
        f"y = s.run(None, {{'a': np.load({feeds!r})}})[0]\n"
        "print(' '.join(repr(float(v)) for v in y.ravel()))\n"
    )
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    y = np.array([float(v) for v in done.stdout.split()]).reshape(2, N)
    np.testing.assert_allclose(y, _reference(a), atol=1e-4)
