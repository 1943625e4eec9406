"""examples/: the committed models are exactly what make_examples.py writes, they are small,
they mean what their names say, the valid ones run in ONNX Runtime and check finds the
invalid one."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from qlrewrite.checking.checker import check_path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VALID = [
    "msdomain_int16_opset13.onnx",
    "blocked_int4_opset21.onnx",
    "qdq_float_weights_opset13.onnx",
]
INVALID = "invalid_per_axis_scale.onnx"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_are_what_the_script_writes(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_examples.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    built = sorted(p.name for p in tmp_path.glob("*.onnx"))
    assert built == sorted(p.name for p in EXAMPLES.glob("*.onnx"))
    assert built == sorted([*VALID, INVALID])
    for name in built:
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), name


def test_builders_are_deterministic_in_process() -> None:
    script = _script()
    for build in script.EXAMPLES.values():
        assert build().SerializeToString(deterministic=True) == build().SerializeToString(
            deterministic=True
        )


@pytest.mark.parametrize("name", [*VALID, INVALID])
def test_small_with_fixed_producer(name: str) -> None:
    assert (EXAMPLES / name).stat().st_size < 100_000
    proto = onnx.load_model(str(EXAMPLES / name))
    assert proto.producer_name == "qlrewrite-examples"
    assert proto.producer_version == "1"


def _opsets(proto: onnx.ModelProto) -> dict[str, int]:
    return {o.domain: o.version for o in proto.opset_import}


def _inits(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def test_msdomain_model_is_ort_contrib_a16w8() -> None:
    proto = onnx.load_model(str(EXAMPLES / "msdomain_int16_opset13.onnx"))
    assert _opsets(proto) == {"": 13, "com.microsoft": 1}
    qdq = [n for n in proto.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert len(qdq) == 6 and all(n.domain == "com.microsoft" for n in qdq)
    inits = _inits(proto)
    assert inits["input_zero_point"].dtype == np.int16
    assert inits["output_zero_point"].dtype == np.int16
    assert inits["weight_quantized"].dtype == np.int8
    assert inits["bias_quantized"].dtype == np.int32


def test_blocked_model_is_matmulnbits_qdq_form() -> None:
    proto = onnx.load_model(str(EXAMPLES / "blocked_int4_opset21.onnx"))
    assert _opsets(proto) == {"": 21} and proto.ir_version == 10
    dqs = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dqs) == 2
    for node in dqs:
        attrs = {a.name: a.i for a in node.attribute}
        assert attrs == {"axis": 0, "block_size": 32}
    weights = [t for t in proto.graph.initializer if t.name.endswith("_Q4")]
    assert [tuple(t.dims) for t in weights] == [(64, 48), (48, 16)]
    assert all(t.data_type == onnx.TensorProto.UINT4 for t in weights)


def test_float_weights_model_has_q_then_dq_on_a_float_initializer() -> None:
    proto = onnx.load_model(str(EXAMPLES / "qdq_float_weights_opset13.onnx"))
    inits = _inits(proto)
    (q,) = [n for n in proto.graph.node if n.name == "weight_Q"]
    assert inits[q.input[0]].dtype == np.float32
    (dq,) = [n for n in proto.graph.node if n.name == "weight_DQ"]
    assert dq.input[0] == q.output[0]


def _session(name: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(EXAMPLES / name), options, providers=["CPUExecutionProvider"])


def _input(k: int) -> np.ndarray:
    return np.random.RandomState(0).uniform(-1, 1, size=(1, k)).astype(np.float32)


@pytest.mark.parametrize("name", VALID)
def test_valid_examples_run_in_onnxruntime(name: str) -> None:
    session = _session(name)
    k = session.get_inputs()[0].shape[1]
    (y,) = session.run(None, {"input": _input(k)})
    n = onnx.load_model(str(EXAMPLES / name)).graph.output[0].type.tensor_type.shape.dim[1]
    assert y.shape == (1, n.dim_value) and np.isfinite(y).all() and y.any()


def test_blocked_model_computes_what_it_says() -> None:
    """ORT's result equals numpy's: each group of 32 rows of W has its own scale/zp row."""
    proto = onnx.load_model(str(EXAMPLES / "blocked_int4_opset21.onnx"))
    inits = _inits(proto)
    x = _input(64)
    h = x
    for index in range(2):
        prefix = f"MatMul_{index}_weight"
        q = inits[f"{prefix}_Q4"].astype(np.float32)
        zp = inits[f"{prefix}_zero_points"].astype(np.float32)
        scale = inits[f"{prefix}_scales"]
        rows = np.arange(q.shape[0]) // 32
        w = (q - zp[rows]) * scale[rows]
        h = h @ w
        if index == 0:
            h = np.maximum(h, 0)
    assert inits["MatMul_0_weight_Q4"].dtype == ml_dtypes.uint4
    (y,) = _session("blocked_int4_opset21.onnx").run(None, {"input": x})
    np.testing.assert_allclose(y, h, rtol=1e-5, atol=1e-6)


def test_invalid_example_fails_in_onnxruntime_and_check() -> None:
    with pytest.raises(Exception, match="scale must be 1D tensor with size 8"):
        _session(INVALID).run(None, {"input": _input(16)})
    report = check_path(EXAMPLES / INVALID)
    assert [(f.severity, f.rule) for f in report.findings] == [("error", "QL403")]


@pytest.mark.parametrize("name", VALID)
def test_valid_examples_pass_check(name: str) -> None:
    report = check_path(EXAMPLES / name)
    assert report.load_error is None
    assert [f for f in report.findings if f.severity == "error"] == []


def test_readme_quick_start_runs(tmp_path: Path) -> None:
    """The README's first command, minus `pip install .`, in a folder holding examples/."""
    readme = (EXAMPLES.parent / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]
    prefix = "pip install . && "
    assert block.startswith(prefix) and "examples/blocked_int4_opset21.onnx" in block
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("CI", None)
    done = subprocess.run(
        block[len(prefix) :],
        shell=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    folded = tmp_path / "folded.onnx"
    x = _input(64)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(folded), options, providers=["CPUExecutionProvider"])
    (y_folded,) = session.run(None, {"input": x})
    (y,) = _session("blocked_int4_opset21.onnx").run(None, {"input": x})
    np.testing.assert_allclose(y_folded, y, rtol=1e-6, atol=1e-7)
