"""Issue 42: one command from "flagged" to "ships" (`check --target T --fix`).

The models come from ORT's own quantizers (tests/ship_models.py). Expected values are
the original model's outputs in the installed ONNX Runtime (optimizations off), never
computed by qlrewrite. Measured with ORT 1.31.1 installed and ORT 1.16.3 in its venv:
the lowered QDQ block is bit-identical to the original (1.16.3 on the output vs 1.31.1 on
the input, optimizations on and off); the MatMulNBits block differs by 1.8e-7 (largest
output 0.71: MatMulNBits sums in another order across releases), so the bound stated is
1e-5 absolute. The slow tests (``-m slow``) load and run the outputs in
/work/venvs/ort-1.16 and are skipped when it is absent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import ship_models as sm
from click.testing import CliRunner
from onnx import helper

from qlrewrite.checking.checker import check
from qlrewrite.cli import main

ORT_116 = Path("/work/venvs/ort-1.16/bin/python")
#: MatMulNBits computed by ORT 1.16.3 against 1.31.1 (measured 1.8e-7; largest output 0.71).
NBITS_BOUND = 1e-5


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*(str(a) for a in args)])
    assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def _outputs(model: onnx.ModelProto | Path) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, sm.feeds())[0]


def _ship(model: onnx.ModelProto, tmp_path: Path, target: str) -> tuple[Path, Path, str]:
    source, fixed = tmp_path / "model.onnx", tmp_path / "fixed.onnx"
    onnx.save_model(model, source)
    code, _, err = _run("check", source, "--target", target, "--fix", "--fix-output", fixed)
    assert code == 0, err
    assert not check(fixed, targets=(target,)).errors  # re-checked against the target
    return source, fixed, err


def test_qdq_block_ships_to_ort_116_exactly(tmp_path: Path) -> None:
    source, fixed, err = _ship(sm.qdq_block(), tmp_path, "ort==1.16")
    assert "QL701" in err and "QL702" in err
    out = onnx.load(fixed)
    assert {(o.domain, o.version) for o in out.opset_import} >= {("", 19)}
    assert out.ir_version == 9 and "Gelu" not in {n.op_type for n in out.graph.node}
    np.testing.assert_array_equal(_outputs(fixed), _outputs(source))


def test_nbits_block_ships_to_ort_116_exactly(tmp_path: Path) -> None:
    source, fixed, _ = _ship(sm.nbits_block(), tmp_path, "ort==1.16")
    assert onnx.load(fixed).ir_version == 9
    np.testing.assert_array_equal(_outputs(fixed), _outputs(source))


def test_zero_point_3_weight_ships_to_tensorrt_exactly(tmp_path: Path) -> None:
    source, fixed, err = _ship(sm.zero_point_3_weight(), tmp_path, "tensorrt")
    assert "QL711" in err
    out = onnx.load(fixed)
    dq = next(n for n in out.graph.node if n.op_type == "DequantizeLinear")
    given = {t.name: onnx.numpy_helper.to_array(t) for t in out.graph.initializer}
    assert len(dq.input) < 3 or not dq.input[2] or not given[dq.input[2]].any()
    np.testing.assert_array_equal(_outputs(fixed), _outputs(source))


def _affine_grid_model() -> onnx.ModelProto:
    """IR 10, ai.onnx 20, one AffineGrid-20 (no earlier version) and one DequantizeLinear."""
    nodes = [
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid_node"),
        helper.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("theta", onnx.TensorProto.FLOAT, [1, 2, 3]),
            helper.make_tensor_value_info("q", onnx.TensorProto.UINT8, [4]),
        ],
        [
            helper.make_tensor_value_info("grid", onnx.TensorProto.FLOAT, None),
            helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4]),
        ],
        initializer=[
            onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.int64), "size"),
            onnx.numpy_helper.from_array(np.float32(0.5), "s"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def test_a_refused_fix_names_the_node_writes_nothing_and_advertises_no_fix(
    tmp_path: Path,
) -> None:
    source, fixed = tmp_path / "model.onnx", tmp_path / "fixed.onnx"
    onnx.save_model(_affine_grid_model(), source)
    code, out, err = _run("check", source, "--target", "ort==1.16", "--fix", "--fix-output", fixed)
    assert code == 1 and not fixed.exists()
    assert "fix refused" in err and "grid_node" in err and "AffineGrid-20" in err
    assert "No Previous Version" not in err
    assert "fixable" not in err + out


def test_downgrade_names_an_op_with_no_earlier_version(tmp_path: Path) -> None:
    source = tmp_path / "model.onnx"
    onnx.save_model(_affine_grid_model(), source)
    code, _, err = _run("downgrade", source, "--opset", "19")
    assert code == 1 and "AffineGrid-20 has no earlier version" in err
    assert "lowest opset that holds it" in err and "No Previous Version" not in err


@pytest.mark.parametrize(("approximate", "bound"), [("none", 0.0), ("tanh", 1e-6)])
def test_gelu_20_is_lowered_to_ort_s_formula(
    tmp_path: Path, approximate: str, bound: float
) -> None:
    """Erf form: bit-identical to Gelu-20 in the installed ORT (8192 values on [-10, 10] and
    near 0, optimizations on and off); tanh form: within 1e-6 absolute (measured 9.5e-7
    on [-10, 10], ORT 1.31.1)."""
    x = np.concatenate([np.linspace(-10, 10, 4096), np.linspace(-1e-3, 1e-3, 4096)])
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)],
        "g",
        [value("x", onnx.TensorProto.FLOAT, [x.size])],
        [value("y", onnx.TensorProto.FLOAT, [x.size])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    source, lowered = tmp_path / "gelu.onnx", tmp_path / "gelu19.onnx"
    onnx.save_model(model, source)
    code, _, err = _run("downgrade", source, "--opset", "19", "-o", lowered)
    assert code == 0, err
    feeds = {"x": x.astype(np.float32)}
    for level in (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        runs = [
            ort.InferenceSession(str(p), options).run(None, feeds)[0] for p in (source, lowered)
        ]
        assert np.abs(runs[0] - runs[1]).max() <= bound, level


def _in_ort_116(path: Path, tmp_path: Path, level: str) -> np.ndarray:
    feeds = tmp_path / "feeds.npy"
    np.save(feeds, sm.feeds()["x"])
    script = (
        "import sys, numpy as np, onnxruntime as ort\n"
        "o = ort.SessionOptions()\n"
        "o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[4])\n"
        "s = ort.InferenceSession(sys.argv[1], o, providers=['CPUExecutionProvider'])\n"
        "np.save(sys.argv[3], s.run(None, {'x': np.load(sys.argv[2])})[0])\n"
        "print(ort.__version__)\n"
    )
    result_path = tmp_path / "out116.npy"
    command = [str(ORT_116), "-c", script, str(path), str(feeds), str(result_path), level]
    done = subprocess.run(command, check=True, timeout=300, capture_output=True, text=True)
    assert done.stdout.strip() == "1.16.3", json.dumps(done.stdout)
    return np.load(result_path)


@pytest.mark.slow
@pytest.mark.skipif(not ORT_116.exists(), reason="no /work/venvs/ort-1.16 here")
@pytest.mark.parametrize(("build", "bound"), [(sm.qdq_block, 0.0), (sm.nbits_block, NBITS_BOUND)])
def test_shipped_block_runs_in_real_ort_1_16_3(build, bound: float, tmp_path: Path) -> None:
    """The fixed block in 1.16.3, optimizations on and off, against the original in the
    installed release, optimizations off."""
    source, fixed, _ = _ship(build(), tmp_path, "ort==1.16")
    for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
        got = _in_ort_116(fixed, tmp_path, level)
        assert np.abs(got - _outputs(source)).max() <= bound, level


def test_the_library_call_ships_to_the_target_too() -> None:
    import qlrewrite

    source = sm.qdq_block()
    fixed = qlrewrite.fix(source, target="ort==1.16")
    assert not qlrewrite.check(fixed).errors
    proto = ir_serialize(fixed)
    assert proto.ir_version == 9 and "Gelu" not in {n.op_type for n in proto.graph.node}
    np.testing.assert_array_equal(_outputs(proto), _outputs(source))


def test_the_library_call_refuses_what_cannot_be_made_exact() -> None:
    import qlrewrite
    from qlrewrite.errors import Refusal

    with pytest.raises(Refusal, match="AffineGrid-20"):
        qlrewrite.fix(_affine_grid_model(), target="ort==1.16")


def ir_serialize(model: object) -> onnx.ModelProto:
    import onnx_ir as ir

    assert isinstance(model, ir.Model)
    return ir.serde.serialize_model(model)


def test_a_lowered_blocked_int4_model_is_recognised_as_quantized() -> None:
    """The downgrade's Cast / Sub / Mul of a blocked int4 weight: no Q/DQ left, no QL607."""
    import onnx_ir as ir
    from test_downgrade import _blocked_model

    from qlrewrite.passes.downgrade import DowngradePass

    model, _ = _blocked_model(
        axis=0, block=16, k=64, n=8, dtype=onnx.TensorProto.INT4, zero_point=True
    )
    lowered = DowngradePass(19)(ir.serde.deserialize_model(model)).model
    assert not {"DequantizeLinear", "QuantizeLinear"} & {n.op_type for n in lowered.graph}
    assert "QL607" not in {f.rule for f in check(lowered).findings}
    float_only = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        )
    )
    assert "QL607" in {f.rule for f in check(float_only).findings}


def _uint16_pair() -> onnx.ModelProto:
    """QuantizeLinear -> DequantizeLinear of uint16 (zero point 300) at opset 21."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [value("x", onnx.TensorProto.FLOAT, [4])],
        [value("y", onnx.TensorProto.FLOAT, [4])],
        initializer=[
            onnx.numpy_helper.from_array(np.float32(0.1), "s"),
            onnx.numpy_helper.from_array(np.uint16(300), "z"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _ort_quint16_mlp() -> onnx.ModelProto:
    """ORT's quantize_static of the attention-like MLP at opset 21, uint16 activations."""
    import ort_quantized as oq

    kwargs = {"activation_type": "QUInt16", "weight_type": "QUInt8"}
    return onnx.load_model_from_string(oq._quantize("mlp", 21, "static", kwargs))


@pytest.mark.parametrize("opset", [20, 19, 17, 13])
@pytest.mark.parametrize("build", [_uint16_pair, _ort_quint16_mlp])
def test_16_bit_qdq_is_lowered_to_com_microsoft_bit_exact(build, opset: int) -> None:
    """As docs/commands/downgrade.md says: measured bit-identical in ORT 1.31.1
    (optimizations off), QuantizeLinear included (refused before)."""
    import onnx_ir as ir
    import ort_quantized as oq

    import qlrewrite

    model = build()
    feeds = (
        {"x": np.array([0, 1.5, -3, 7000], np.float32)}
        if build is _uint16_pair
        else oq.inputs_for("mlp")
    )
    lowered = qlrewrite.downgrade(ir.serde.deserialize_model(model), opset)
    proto = ir.serde.serialize_model(lowered)
    quantize = {n.domain for n in proto.graph.node if n.op_type == "QuantizeLinear"}
    assert quantize == {"com.microsoft"}  # every QuantizeLinear is of uint16 activations
    assert not check(lowered).errors
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = [
        ort.InferenceSession(m.SerializeToString(), options).run(None, feeds)[0]
        for m in (model, proto)
    ]
    np.testing.assert_array_equal(runs[0], runs[1])


def _layer_norm_model(axis: int = -1) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=axis, epsilon=1e-5)],
        "ln",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [512, 768])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [512, 768])],
        initializer=[
            onnx.numpy_helper.from_array(rng.standard_normal(768).astype(np.float32), "g"),
            onnx.numpy_helper.from_array(rng.standard_normal(768).astype(np.float32), "b"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_layer_normalization_17_is_lowered_within_its_bound() -> None:
    """ReduceMean's two-pass variance, not ORT's E[x^2] - E[x]^2: measured 1.9e-4 on
    outputs up to 14.3 (1.35e-5 of the largest; 4096 x 768 rows of mean up to 50 and
    spread up to 100, ORT 1.31.1, optimizations off); the bound stated: 5e-5 of the
    largest output. The QDQ block lowered to 16 and 13 measured identical on 16 inputs
    (its LayerNormalization output is quantized)."""
    import onnx_ir as ir

    import qlrewrite

    model = _layer_norm_model()
    lowered = ir.serde.serialize_model(qlrewrite.downgrade(ir.serde.deserialize_model(model), 13))
    assert "LayerNormalization" not in {n.op_type for n in lowered.graph.node}
    rng = np.random.default_rng(3)
    x = rng.standard_normal((512, 768)) * rng.uniform(0.01, 100, (512, 1))
    feeds = {"x": (x + rng.uniform(-50, 50, (512, 1))).astype(np.float32)}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = [
        ort.InferenceSession(m.SerializeToString(), options).run(None, feeds)[0]
        for m in (model, lowered)
    ]
    assert np.abs(runs[0] - runs[1]).max() <= 5e-5 * np.abs(runs[0]).max()


def test_a_layer_normalization_the_formula_does_not_cover_is_refused_naming_why() -> None:
    import onnx_ir as ir

    import qlrewrite
    from qlrewrite.errors import Refusal

    with pytest.raises(Refusal, match=r"axis is not negative.*LayerNormalization-17"):
        qlrewrite.downgrade(ir.serde.deserialize_model(_layer_norm_model(axis=1)), 13)
