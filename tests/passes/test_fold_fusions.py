"""fold knows what it costs in the runtime a model ships to, from the measured tables: the
DQs of constants the release fuses into integer / weight-only kernels (read from
qlrewrite/targets/data/, never from a session of the user's model); --keep-fused leaves
them and folds the rest; --target names the runtime as check --target does."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import quantized

from qlrewrite.cli import main
from qlrewrite.targets import spec
from qlrewrite.targets.fusions import FusionTable, fusions_for

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _fold_file(tmp_path: Path, source: Path, *flags: str) -> tuple[int, str, dict | None]:
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    out = tmp_path / "out.onnx"
    out.unlink(missing_ok=True)
    args = ["fold", str(source), "-o", str(out), "--report", str(report)]
    _ARMED[0] = True
    try:
        result = CliRunner().invoke(main, [*args, *flags])
    finally:
        _ARMED[0] = False
    document = json.loads(report.read_text()) if report.exists() else None
    return result.exit_code, result.stderr, document


def _fold(tmp_path: Path, config: str, *flags: str) -> tuple[int, str, dict | None]:
    source = tmp_path / "in.onnx"
    onnx.save(quantized(config), source)
    return _fold_file(tmp_path, source, *flags)


#: Whether a fold runs now (the test's own models are quantized by ORT before it).
_ARMED = [False]


@pytest.fixture
def no_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any ONNX Runtime session built in this process while fold runs fails the test."""
    ort = pytest.importorskip("onnxruntime")
    original = ort.InferenceSession

    def refuse(*args: object, **kwargs: object) -> object:
        if _ARMED[0]:
            raise AssertionError("fold built an ONNX Runtime session")
        return original(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", refuse)


def _installed_minor() -> str:
    major, minor = importlib.metadata.version("onnxruntime").split(".")[:2]
    return f"{major}.{minor}"


def test_fold_warns_from_the_installed_release_table_without_a_session(
    tmp_path: Path, no_session: None
) -> None:
    """The transformer-like block (u8 activations, s8 weights): the 1.31 table fuses a QDQ
    MatMul into QLinearMatMul, but ORT's selectors take a DQ only when it feeds that one
    node: q/k/v_proj and up_proj share their activation's DQ, so two remain (o_proj,
    down_proj; measured with a real session in the slow test below)."""
    code, err, _ = _fold(tmp_path, "mlp-u8s8")
    assert code == 0, err
    assert "kernels ORT " in err and "forms from the original only: QLinearMatMul x2" in err
    assert f"qlrewrite/targets/data/ort-{_installed_minor()}.json" in err
    assert "--keep-fused leaves those DequantizeLinear" in err


def test_keep_fused_from_the_table_keeps_the_matmulnbits_fusion(
    tmp_path: Path, no_session: None
) -> None:
    code, err, _ = _fold(tmp_path, "mlp-nbits-sym")
    assert code == 0 and "MatMulNBits x6" in err and "accuracy_level=4" in err
    code, err, report = _fold(tmp_path, "mlp-nbits-sym", "--keep-fused")
    assert code == 0, err
    assert report["changes"]["FoldPass"]["dq_kept_fused"] == 6
    assert "forms from the original only" not in err


def test_fold_target_choices(tmp_path: Path, no_session: None) -> None:
    """ORT 1.18 forms no MatMulNBits from a blocked 4-bit DQ -> MatMul (measured: from 1.19 on);
    OpenVINO keeps the 4-bit blocked weights compressed (FullyConnected on u4)."""
    code, err, _ = _fold(tmp_path, "mlp-nbits-sym", "--target", "ort==1.20")
    assert code == 0 and "kernels ORT 1.20.1 forms from the original only: MatMulNBits x6" in err
    code, err, _ = _fold(tmp_path, "mlp-nbits-sym", "--target", "ort==1.18")
    assert code == 0 and "forms from the original only" not in err
    code, err, report = _fold(tmp_path, "mlp-nbits-sym", "--target", "openvino", "--keep-fused")
    assert code == 0, err
    assert report["changes"]["FoldPass"]["dq_kept_fused"] == 6
    for bad in ("ort>=1.17", "tensorrt", "ort==1.14", "nonsense"):
        code, err, _ = _fold(tmp_path, "mlp-nbits-sym", "--target", bad)
        assert code == 2, (bad, err)
        assert err.count("\n") == 1 and "Traceback" not in err


def test_without_onnxruntime_or_target_fold_says_it_did_not_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    spec.parse_target.cache_clear()
    try:
        code, err, _ = _fold(tmp_path, "mlp-nbits-sym")
        assert code == 0
        assert "not checked which DequantizeLinear ONNX Runtime fuses" in err
        assert "onnxruntime is not installed" in err
        code, err, _ = _fold(tmp_path, "mlp-nbits-sym", "--keep-fused")
        assert code == 1 and "--keep-fused needs the measured fusion table" in err
        assert not (tmp_path / "out.onnx").exists()
        code, err, _ = _fold(tmp_path, "mlp-nbits-sym", "--target", "ort==1.31")
        assert code == 0 and "MatMulNBits x6" in err
    finally:
        spec.parse_target.cache_clear()


def _bomb(path: Path, matmuls: int) -> Path:
    """DQ(W) -> MatMul beside ConstantOfShape([4096, 4096]) -> matmuls x MatMul ->
    ReduceSum -> Add: a 13 KB model whose constant subgraph ORT folds for minutes when it
    builds a session."""
    w = numpy_helper.from_array(np.ones((64, 8), np.int8), "w")
    s = numpy_helper.from_array(np.array(0.01, np.float32), "s")
    shape = numpy_helper.from_array(np.array([4096, 4096], np.int64), "shape")
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
        helper.make_node("MatMul", ["a", "wf"], ["y0"]),
        helper.make_node(
            "ConstantOfShape",
            ["shape"],
            ["c0"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.001]),
        ),
    ]
    for i in range(matmuls):
        nodes.append(helper.make_node("MatMul", [f"c{i}", f"c{i}"], [f"c{i + 1}"]))
    nodes.append(helper.make_node("ReduceSum", [f"c{matmuls}"], ["r"], keepdims=0))
    nodes.append(helper.make_node("Add", ["y0", "r"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        initializer=[w, s, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_constant_subgraph_bomb_folds_in_the_time_of_a_fold(
    tmp_path: Path, no_session: None
) -> None:
    """Round 4 built ORT's default session of the input, which constant-folds the 60
    MatMuls of 4096 x 4096 for minutes; the table answers in milliseconds."""
    source = _bomb(tmp_path / "bomb.onnx", 60)
    start = time.perf_counter()
    code, err, report = _fold_file(tmp_path, source)
    elapsed = time.perf_counter() - start
    assert code == 0, err
    assert report["changes"]["FoldPass"]["dq_folded"] == 1
    assert elapsed < 10, elapsed
    assert "forms from the original only: MatMulNBits x1" in err


# -- the tables against ONNX Runtime's default session of the installed release -------------


def _predicted(model: onnx.ModelProto, table: FusionTable) -> tuple[set[str], set[str]]:
    """The weight DQ outputs the table says the release fuses, and those it measured."""
    import onnx_ir as ir

    from qlrewrite.qdq import QDQView, is_constant, node_views

    fused, measured = set(), set()
    ir_model = ir.serde.deserialize_model(model)
    for site, views in node_views(ir_model):
        view = views[0]
        if not isinstance(view, QDQView) or view.is_quantize or site.graph is not ir_model.graph:
            continue
        if not all(is_constant(v) for v in site.node.inputs):
            continue
        fusion = table.of(view)
        name = site.node.outputs[0].name
        if fusion is not None:
            measured.add(name)
            if fusion.kernel is not None:
                fused.add(name)
    return fused, measured


def _bench_model(tmp_path: Path) -> onnx.ModelProto:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_models
    finally:
        sys.path.remove(str(BENCHMARKS))
    return onnx.load(bench_models.matmul_chain(tmp_path, size=256))


MODELS = (
    "mlp-u8s8",
    "mlp-per-channel-21",
    "mlp-int16-contrib",
    "mlp-qdq-pair-weights",
    "mlp-nbits-sym",
    "mlp-nbits-asym",
    "cnn-u8s8",
    "cnn-per-channel",
    "cnn-int4-per-channel-21",
    "benchmark",
)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_tables_reproduce_the_default_session(tmp_path: Path, name: str) -> None:
    """Every weight DQ of a pattern the installed release's table holds: the table says it
    is fused exactly when ORT's own default session (ORT_ENABLE_ALL, this process) drops
    it from its optimized graph. DQs of patterns not probed yet (Conv, Gemm) are left out
    (fold warns that it does not know them)."""
    pytest.importorskip("onnxruntime")
    from qlrewrite.verify.deployed import optimized_graph

    model = _bench_model(tmp_path) if name == "benchmark" else quantized(name)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    table = fusions_for(None)
    assert isinstance(table, FusionTable)
    fused, measured = _predicted(model, table)
    graph = optimized_graph(path)
    actual = {dq for dq in measured if dq not in graph.produced_set}
    assert fused == actual


def test_python_api_keep_fused_reads_the_table(no_session: None) -> None:
    import qlrewrite

    _ARMED[0] = True
    try:
        folded = qlrewrite.fold(quantized("mlp-nbits-sym"), keep_fused=True, target="openvino")
    finally:
        _ARMED[0] = False
    kept = [n for n in folded.graph if n.op_type == "DequantizeLinear"]
    assert len(kept) == 6


def test_the_warning_and_the_deployment_check_name_the_kernels_alike(tmp_path: Path) -> None:
    """Both say "kernels ORT ... forms from the original only: MatMulNBits x6": the fold
    warning from the table, --verify's deployment check from ORT's default session."""
    pytest.importorskip("onnxruntime")
    code, err, report = _fold(tmp_path, "mlp-nbits-sym", "--verify")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "forms from the original only" in line]
    assert len(lines) == 2, err
    phrases = [line.split("forms from the original only: ")[1].split(" (")[0] for line in lines]
    assert phrases == ["MatMulNBits x6", "MatMulNBits x6"]
    assert report["verify"]["deployment"]["lost_kernels"] == {"MatMulNBits": 6}
