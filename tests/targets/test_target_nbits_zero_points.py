"""QL732: ONNX Runtime 1.16 reads a MatMulNBits' packed zero points as one stream over all
columns, ignoring the half byte of padding the schema puts at the end of each column's row
when the count of 4-bit blocks is odd.

- ``check --target ort==1.16`` errors on such a node, and not on an even count of blocks,
  one column, no zero points, or another release;
- the installed ONNX Runtime computes the node as the numpy reference below (the padded
  layout is the schema's);
- a slow test runs the model in /work/venvs/ort-1.16 and ort-1.17 (when present): 1.16 is
  far off the reference, 1.17 within 1e-5.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.checking.checker import check

BLOCK = 16


def _weights(k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """4-bit codes [n, blocks, BLOCK], scales [n, blocks] and zero points [n, blocks]."""
    rng = np.random.default_rng(seed)
    blocks = -(-k // BLOCK)
    codes = rng.integers(0, 16, size=(n, blocks, BLOCK), dtype=np.uint8)
    scales = (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    zero_points = rng.integers(0, 16, size=(n, blocks), dtype=np.uint8)
    return codes, scales, zero_points


def _pack_rows(values: np.ndarray) -> np.ndarray:
    """Two 4-bit values per byte, low nibble first, each row padded to whole bytes."""
    rows, width = values.shape[0], values.shape[-1]
    padded = np.zeros((*values.shape[:-1], width + width % 2), np.uint8)
    padded[..., :width] = values
    return (padded[..., 0::2] | (padded[..., 1::2] << 4)).reshape(rows, -1)


def _model(k: int, n: int, zero_points: bool = True) -> onnx.ModelProto:
    codes, scales, zps = _weights(k, n)
    blocks = codes.shape[1]
    packed_b = _pack_rows(codes.reshape(n * blocks, BLOCK)).reshape(n, blocks, BLOCK // 2)
    inits = [numpy_helper.from_array(packed_b, "b"), numpy_helper.from_array(scales.ravel(), "s")]
    inputs = ["a", "b", "s"]
    if zero_points:
        inits.append(numpy_helper.from_array(_pack_rows(zps).ravel(), "z"))
        inputs.append("z")
    node = helper.make_node(
        "MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=BLOCK
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _reference(k: int, n: int, a: np.ndarray) -> np.ndarray:
    """A @ W.T with W dequantized in float64 from the codes the model was built from."""
    codes, scales, zps = _weights(k, n)
    blocks = codes.shape[1]
    steps = codes.astype(np.float64) - zps[..., None]
    weights = (steps * scales[..., None].astype(np.float64)).reshape(n, blocks * BLOCK)[:, :k]
    return a.astype(np.float64) @ weights.T


def _save(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "m.onnx"
    onnx.save(model, path)
    return path


def _errors(path: Path, target: str) -> list[str]:
    report = check(path, targets=[target], select=["QL7"])
    assert report.load_error is None, report.load_error
    return sorted(f.rule for f in report.errors)


@pytest.mark.parametrize(
    ("shape", "zero_points", "target", "expected"),
    [
        ((48, 4), True, "ort==1.16", ["QL732"]),  # 3 blocks per column
        ((16, 8), True, "ort==1.16", ["QL732"]),  # 1 block per column
        ((80, 5), True, "ort==1.16", ["QL732"]),  # 5 blocks
        ((40, 4), True, "ort==1.16", ["QL732"]),  # 3 blocks, the last partial
        ((64, 4), True, "ort==1.16", []),  # 4 blocks: no padding
        ((48, 1), True, "ort==1.16", []),  # one column: both layouts are the same bytes
        ((48, 4), False, "ort==1.16", []),  # no zero points
        ((48, 4), True, "ort==1.17", []),
        ((48, 4), True, "ort==1.31", []),
    ],
)
def test_check_target_says_what_1_16_reads_wrong(
    tmp_path: Path, shape: tuple[int, int], zero_points: bool, target: str, expected: list[str]
) -> None:
    assert _errors(_save(_model(*shape, zero_points), tmp_path), target) == expected


def test_the_message_names_the_blocks_and_release(tmp_path: Path) -> None:
    report = check(_save(_model(48, 4), tmp_path), targets=["ort==1.16"], select=["QL732"])
    (finding,) = report.errors
    assert "3 blocks of 4 bits per column" in finding.message
    assert "ORT 1.16.3" in finding.message
    assert "1.17" in finding.hint


def _run_script(model: Path, inputs: Path) -> str:
    return (
        "import numpy as np, onnxruntime as ort\n"
        "so = ort.SessionOptions()\n"
        "so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL\n"
        f"s = ort.InferenceSession({str(model)!r}, so, providers=['CPUExecutionProvider'])\n"
        f"y = s.run(None, {{'a': np.load({str(inputs)!r})}})[0]\n"
        "print(' '.join(repr(float(v)) for v in y.ravel()))\n"
    )


def _inputs(tmp_path: Path, k: int) -> tuple[np.ndarray, Path]:
    a = np.random.default_rng(1).standard_normal((2, k)).astype(np.float32)
    path = tmp_path / "a.npy"
    np.save(path, a)
    return a, path


def test_the_installed_runtime_reads_the_padded_rows(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    a, _ = _inputs(tmp_path, 48)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        str(_save(_model(48, 4), tmp_path)), options, providers=["CPUExecutionProvider"]
    )
    (y,) = session.run(None, {"a": a})
    np.testing.assert_allclose(y, _reference(48, 4, a), atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(("minor", "off"), [(16, True), (17, False)])
def test_real_release_computes_as_the_rule_says(tmp_path: Path, minor: int, off: bool) -> None:
    python = Path(f"/work/venvs/ort-1.{minor}/bin/python")
    if not python.exists():
        pytest.skip(f"no /work/venvs/ort-1.{minor} here")
    a, inputs = _inputs(tmp_path, 48)
    script = _run_script(_save(_model(48, 4), tmp_path), inputs)
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    y = np.array([float(v) for v in done.stdout.split()]).reshape(2, 4)
    worst = float(np.abs(y - _reference(48, 4, a)).max())
    assert (worst > 0.1) is off, worst
