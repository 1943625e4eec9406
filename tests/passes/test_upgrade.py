"""`qlrewrite upgrade` and UpgradePass: ONNX's converter on a weight-free copy, then Q/DQ.

Models are built here with onnx.helper at opset 13 and hold ops whose definition changed
between 13 and 25 (ReduceMean/ReduceMax/ReduceSum axes, Split, Squeeze, Unsqueeze, Pad,
Resize) together with Q/DQ; ONNX Runtime's outputs must stay bit-identical at every step.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import inputs_for, quantized, run_ort
from qdq_models import DQ, MS, Q, qdq_model

from qlrewrite.cli import main
from qlrewrite.errors import InputError, Refusal
from qlrewrite.io import model_io
from qlrewrite.io.weightless import weightless_proto
from qlrewrite.passes.commands import upgrade
from qlrewrite.pipeline import validate_output

F32 = TensorProto.FLOAT


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _ops_model(opset: int = 13) -> onnx.ModelProto:
    """Q/DQ around ops whose versions change between 13 and 25; weights above 1 KiB."""
    rng = np.random.default_rng(5)
    inits = [
        _init("s", np.array(0.05, np.float32)),
        _init("zp", np.array(128, np.uint8)),
        _init("w_q", rng.integers(-127, 128, (8, 64), dtype=np.int8)),  # 512 B
        _init("w_s", (rng.random(64) * 0.01 + 0.001).astype(np.float32)),
        _init("w_zp", np.zeros(64, np.int8)),
        _init("w_big", rng.standard_normal((8, 64)).astype(np.float32)),  # 2 KiB
        _init("split", np.array([2, 2], np.int64)),
        _init("ax3", np.array([3], np.int64)),
        _init("ax0", np.array([0], np.int64)),
        _init("ax1", np.array([1], np.int64)),
        _init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        _init("pad_value", np.array(0.5, np.float32)),
        _init("scales", np.array([1, 1, 2, 2], np.float32)),
    ]
    node = helper.make_node
    nodes = [
        node(Q, ["x", "s", "zp"], ["q"], name="q_x"),
        node(DQ, ["q", "s", "zp"], ["dq"], name="dq_x"),
        node("ReduceMean", ["dq"], ["rm"], name="mean", axes=[3], keepdims=1),
        node("Split", ["dq", "split"], ["sp1", "sp2"], name="split", axis=1),
        node("Squeeze", ["rm", "ax3"], ["sq"], name="squeeze"),
        node("Unsqueeze", ["sq", "ax0"], ["us"], name="unsqueeze"),
        node("Pad", ["sp1", "pads", "pad_value"], ["pd"], name="pad"),
        node("Resize", ["sp2", "", "scales"], ["rs"], name="resize", mode="linear"),
        node("ReduceMax", ["rs"], ["rmax"], name="max", axes=[1], keepdims=0),
        node("ReduceSum", ["pd", "ax1"], ["rsum"], name="sum", keepdims=1),
        node(DQ, ["w_q", "w_s", "w_zp"], ["w"], name="dq_w", axis=1),
        node("Add", ["w", "w_big"], ["w2"], name="add_w"),
        node("MatMul", ["sq", "w2"], ["mm"], name="matmul"),
        node(Q, ["mm", "s", "zp"], ["q_mm"], name="q_mm"),
        node(DQ, ["q_mm", "s", "zp"], ["out"], name="dq_mm"),
    ]
    outputs = [
        helper.make_tensor_value_info("us", F32, [1, 1, 4, 8]),
        helper.make_tensor_value_info("rmax", F32, [1, 16, 16]),
        helper.make_tensor_value_info("rsum", F32, [1, 1, 10, 10]),
        helper.make_tensor_value_info("out", F32, [1, 4, 64]),
    ]
    graph = helper.make_graph(
        nodes, "ops", [helper.make_tensor_value_info("x", F32, [1, 4, 8, 8])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(9).standard_normal((1, 4, 8, 8)).astype(np.float32)}


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stderr


def _attrs(proto: onnx.ModelProto, name: str) -> dict[str, object]:
    (found,) = [n for n in proto.graph.node if n.name == name]
    return {a.name: helper.get_attribute_value(a) for a in found.attribute}


# --------------------------------------------------------------------------- chain


def test_upgrade_13_21_23_25_keeps_ort_outputs_bit_identical() -> None:
    source = _ops_model(13)
    onnx.checker.check_model(source, full_check=True)
    expected = run_ort(source, _feeds())
    model = ir.serde.deserialize_model(source)
    for opset, ir_version in ((21, 10), (23, 11), (25, 13)):
        before = ir.serde.serialize_model(model)
        model = upgrade(model, opset)
        # onnx.checker full check + our check
        validate_output(model, weightless=weightless_proto(model))
        assert ir.serde.serialize_model(model) is not before
        proto = ir.serde.serialize_model(model)
        assert {o.domain: o.version for o in proto.opset_import} == {"": opset}
        assert proto.ir_version == ir_version
        assert "axes" not in _attrs(proto, "mean") and "axes" not in _attrs(proto, "max")
        assert [i.name for i in proto.graph.input] == ["x"]
        assert {i.name for i in proto.graph.initializer} >= {"w_q", "w_big", "split"}
        _assert_same(run_ort(proto, _feeds()), expected)


def test_upgrade_does_not_modify_its_input() -> None:
    source = _ops_model(13)
    model = ir.serde.deserialize_model(source)
    before = ir.serde.serialize_model(model)
    upgrade(model, 21)
    assert ir.serde.serialize_model(model) == before
    assert model.opset_imports == {"": 13} and model.ir_version == 7


# --------------------------------------------------------------------------- ORT quantizer


def test_opset12_per_channel_from_ort_quantizer_is_repaired(tmp_path: Path) -> None:
    broken = quantized("cnn-opset12-per-channel")
    source = tmp_path / "m.onnx"
    onnx.save(broken, source)
    code, err = _run("upgrade", source, "--opset", "13", "-o", tmp_path / "fixed.onnx")
    assert code == 0, err
    fixed = onnx.load(tmp_path / "fixed.onnx")
    onnx.checker.check_model(fixed, full_check=True)
    # What it means: the same nodes read at opset 13, where DQ has `axis`.
    by_hand = onnx.ModelProto()
    by_hand.CopyFrom(broken)
    by_hand.opset_import[0].version = 13
    feeds = inputs_for("cnn")
    _assert_same(run_ort(fixed, feeds), run_ort(by_hand, feeds))
    # Upgrading to 12 repairs nothing: refused, nothing written.
    code, err = _run("upgrade", source, "--opset", "12", "-o", tmp_path / "no.onnx")
    assert code == 1 and "axis" in err
    assert not (tmp_path / "no.onnx").exists()


def test_input_errors_an_upgrade_does_not_repair_are_still_refused(tmp_path: Path) -> None:
    source = tmp_path / "bad.onnx"
    onnx.save(qdq_model(DQ, 13, drop_inputs=2), source)  # DQ without scale: QL101
    code, err = _run("upgrade", source, "--opset", "21")
    assert code == 1 and "QL101" in err and "error finding" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


@pytest.mark.parametrize("config", ["cnn-int4-per-channel-contrib", "mlp-int16-contrib"])
def test_microsoft_qdq_become_onnx_where_the_opset_expresses_them(config: str) -> None:
    source = quantized(config)
    model = upgrade(ir.serde.deserialize_model(source), 21)
    validate_output(model, weightless=weightless_proto(model))
    proto = ir.serde.serialize_model(model)
    assert {n.domain for n in proto.graph.node} == {""}
    assert {o.domain: o.version for o in proto.opset_import} == {"": 21}
    assert proto.ir_version == 10  # int4/int16 at opset 21
    feeds = inputs_for(config.split("-", maxsplit=1)[0])
    _assert_same(run_ort(proto, feeds), run_ort(source, feeds))


def test_microsoft_qdq_the_opset_cannot_express_stay() -> None:
    # com.microsoft DQ of int16 at ai.onnx 13 -> 19: int16 needs 21, so the node stays.
    source = qdq_model(DQ, domain=MS, x_type=ir.DataType.INT16, imports={"": 13, MS: 1})
    model = upgrade(ir.serde.deserialize_model(source), 19)
    validate_output(model, weightless=weightless_proto(model))
    (node,) = model.graph
    assert node.domain == MS and model.opset_imports == {"": 19, MS: 1}


def test_other_domains_are_untouched_by_an_upgrade() -> None:
    source = quantized("cnn-int16-contrib")
    source.graph.node.append(helper.make_node("Gelu", ["y"], ["g"], name="gelu", domain=MS))
    source.graph.node.append(
        helper.make_node("Normalizer", ["y"], ["nz"], name="norm", domain="ai.onnx.ml", norm="L1")
    )
    source.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    source.graph.output.append(helper.make_tensor_value_info("g", F32, [1, 32]))
    source.graph.output.append(helper.make_tensor_value_info("nz", F32, [1, 32]))
    model = upgrade(ir.serde.deserialize_model(source), 23)
    validate_output(model, weightless=weightless_proto(model))
    proto = ir.serde.serialize_model(model)
    tail = [(n.op_type, n.domain, list(n.input), list(n.attribute)) for n in proto.graph.node]
    want = [(n.op_type, n.domain, list(n.input), list(n.attribute)) for n in source.graph.node]
    assert tail[-2:] == want[-2:]
    assert {o.domain: o.version for o in proto.opset_import} == {"": 23, MS: 1, "ai.onnx.ml": 3}
    assert {n.domain for n in proto.graph.node if n.op_type in (Q, DQ)} == {""}
    feeds = inputs_for("cnn")
    _assert_same(run_ort(proto, feeds), run_ort(source, feeds))


# --------------------------------------------------------------------------- refusals


def test_downgrade_and_unknown_opset_are_usage_errors(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    onnx.save(_ops_model(21), source)
    code, err = _run("upgrade", source, "--opset", "13")
    assert code == 2 and "downgrade" in err and "qlrewrite convert" in err
    code, err = _run("upgrade", source, "--opset", "99")
    assert code == 2 and "99" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    with pytest.raises(InputError, match="downgrade"):
        upgrade(ir.serde.deserialize_model(_ops_model(21)), 13)


def test_converter_failure_is_a_clear_refusal(tmp_path: Path) -> None:
    # DequantizeLinear at opset 9 (before it existed): ONNX's converter has no adapter.
    source = tmp_path / "m.onnx"
    onnx.save(qdq_model(DQ, 13, imports={"": 9}), source)
    before = source.read_bytes()
    code, err = _run("upgrade", source, "--opset", "13")
    assert code == 1
    assert "version converter cannot convert" in err and "DequantizeLinear" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert source.read_bytes() == before


# --------------------------------------------------------------------------- graphs


def _function_model(axes_from_attribute: bool) -> onnx.ModelProto:
    """main: y = local.Mean(DQ(x)); the function holds a ReduceMean with axes=[1]."""
    mean = helper.make_node("ReduceMean", ["a"], ["b"], keepdims=1)
    attributes = []
    if axes_from_attribute:
        ref = mean.attribute.add()
        ref.name, ref.ref_attr_name, ref.type = "axes", "ax", onnx.AttributeProto.INTS
        attributes = ["ax"]
    else:
        mean.attribute.append(helper.make_attribute("axes", [1]))
    function = helper.make_function(
        "local", "Mean", ["a"], ["b"], [mean], [helper.make_opsetid("", 13)], attributes
    )
    call = helper.make_node("Mean", ["d"], ["y"], name="call", domain="local")
    if axes_from_attribute:
        call.attribute.append(helper.make_attribute("ax", [1]))
    graph = helper.make_graph(
        [helper.make_node(DQ, ["x", "s"], ["d"], name="dq"), call],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 3])],
        [helper.make_tensor_value_info("y", F32, [2, 1])],
        [_init("s", np.array(0.5, np.float32))],
    )
    imports = [helper.make_opsetid("", 13), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=imports, functions=[function], ir_version=8)


def test_functions_are_converted_on_their_own() -> None:
    # onnx.version_converter fails (IndexError) on any model with local functions.
    source = _function_model(axes_from_attribute=False)
    model = upgrade(ir.serde.deserialize_model(source), 21)
    validate_output(model, weightless=weightless_proto(model))
    function = next(iter(model.functions.values()))
    assert function.opset_imports[""] == 21
    (mean,) = [n for n in function if n.op_type == "ReduceMean"]
    assert "axes" not in mean.attributes and len(mean.inputs) == 2
    feeds = {"x": np.array([[0, 2, 4], [6, 8, 10]], np.uint8)}
    out = run_ort(ir.serde.serialize_model(model), feeds)[0]
    np.testing.assert_array_equal(out, np.array([[1.0], [4.0]], np.float32))


def test_function_attribute_reference_on_a_changed_op_is_refused() -> None:
    # The converter would write an empty `axes` tensor (reduce over all axes) silently.
    source = _function_model(axes_from_attribute=True)
    with pytest.raises(Refusal, match=r"ReduceMean.*attribute from the function"):
        upgrade(ir.serde.deserialize_model(source), 21)


def _subgraph_model() -> onnx.ModelProto:
    """An If whose then-branch has its own 2 KiB initializer; a big main input+initializer."""
    rng = np.random.default_rng(3)
    then_w = _init("then_w", rng.standard_normal((2, 256)).astype(np.float32))
    then_branch = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["then_w"], ["t0"], axes=[1], keepdims=0),
            helper.make_node("Add", ["t0", "bias_sum"], ["t"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", F32, [2])],
        [then_w],
    )
    else_branch = helper.make_graph(
        [helper.make_node("ReduceMax", ["bias"], ["e"], axes=[1], keepdims=0)],
        "else",
        [],
        [helper.make_tensor_value_info("e", F32, [2])],
    )
    bias = rng.standard_normal((2, 300)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["bias", "ax1"], ["bias_sum"], keepdims=0),
            helper.make_node(
                "If", ["c"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch
            ),
        ],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("bias", F32, [2, 300]),
        ],
        [helper.make_tensor_value_info("y", F32, [2])],
        [_init("bias", bias), _init("ax1", np.array([1], np.int64))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_subgraph_weights_go_back_where_they_were() -> None:
    source = _subgraph_model()
    onnx.checker.check_model(source, full_check=True)
    model = upgrade(ir.serde.deserialize_model(source), 21)
    validate_output(model, weightless=weightless_proto(model))
    proto = ir.serde.serialize_model(model)
    assert [i.name for i in proto.graph.input] == ["c", "bias"]  # no placeholder inputs
    assert [i.name for i in proto.graph.initializer] == ["bias", "ax1"]  # bias: overridable
    then_branch = next(a.g for a in proto.graph.node[-1].attribute if a.name == "then_branch")
    assert [i.name for i in then_branch.initializer] == ["then_w"]
    for cond in (True, False):
        feeds = {"c": np.array(cond)}
        _assert_same(run_ort(proto, feeds), run_ort(source, feeds))


# --------------------------------------------------------------------------- large models


def test_weights_are_never_read_and_the_same_tensors_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ext.onnx"
    model_io.save(ir.serde.deserialize_model(_ops_model(13)), path, external_data=True)
    model = model_io.load(path)
    weights = {
        name: value.const_value
        for name, value in model.graph.initializers.items()
        if isinstance(value.const_value, ir.ExternalTensor)
    }
    assert {"w_big"} <= set(weights)

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("a weight was read")

    monkeypatch.setattr(ir.ExternalTensor, "numpy", no_reading)
    monkeypatch.setattr(ir.ExternalTensor, "tobytes", no_reading)
    monkeypatch.setattr(ir.ExternalTensor, "__array__", no_reading)
    new = upgrade(model, 21)
    monkeypatch.undo()
    for name, tensor in weights.items():
        assert new.graph.initializers[name].const_value is tensor


def test_cli_upgrade_of_an_external_data_model(tmp_path: Path) -> None:
    source_dir, out_dir = tmp_path / "in", tmp_path / "out"
    source_dir.mkdir()
    out_dir.mkdir()
    source = source_dir / "m.onnx"
    model_io.save(ir.serde.deserialize_model(_ops_model(13)), source, external_data=True)
    assert (source_dir / "m.onnx.data").exists()
    report = tmp_path / "r.json"
    target = out_dir / "up.onnx"
    code, err = _run("upgrade", source, "--opset", "23", "-o", target, "--report", report)
    assert code == 0, err
    assert (out_dir / "up.onnx.data").stat().st_size >= 2048  # weights went to external data
    changes = json.loads(report.read_text())["changes"]["UpgradePass"]
    assert (changes["opset_before"], changes["opset_after"]) == (13, 23)
    _assert_same(run_ort(target, _feeds()), run_ort(_ops_model(13), _feeds()))


def test_small_threshold_gives_external_data_and_upgrade_reads_it_back(tmp_path: Path) -> None:
    # The > 2 GB path at a small size: save with a tiny threshold (external data chosen by
    # size, not forced), upgrade the loaded model, save again, run.
    path = tmp_path / "small.onnx"
    model_io.save(ir.serde.deserialize_model(_ops_model(13)), path, threshold=1000)
    assert (tmp_path / "small.onnx.data").exists()
    new = upgrade(model_io.load(path), 25)
    validate_output(new, weightless=weightless_proto(new))
    out = tmp_path / "up.onnx"
    model_io.save(new, out, threshold=1000)
    _assert_same(run_ort(out, _feeds()), run_ort(_ops_model(13), _feeds()))


@pytest.mark.slow
def test_upgrade_above_2_gb(tmp_path: Path) -> None:
    """A 2.03 GiB external-data model (int8 weights -> DQ -> ReduceMean) upgraded 13 -> 21.

    The data file is written in 16 MiB pieces and the proto only points at it, so the test
    itself never holds the weights in memory.
    """
    rows, cols, count = 4096, 4096, 130  # 130 x 16 MiB int8
    data = tmp_path / "big.onnx.data"
    inits, nodes = [_init("s", np.array(0.01, np.float32))], []
    previous = "x"
    with data.open("wb") as file:
        for i in range(count):
            offset = file.tell()
            file.write(np.full((rows, cols), (i % 7) - 3, np.int8).tobytes())
            tensor = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.INT8, dims=[rows, cols])
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", data.name),
                ("offset", str(offset)),
                ("length", str(rows * cols)),
            ):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            inits.append(tensor)
            nodes.append(helper.make_node(DQ, [f"w{i}", "s"], [f"d{i}"], name=f"dq{i}"))
            nodes.append(helper.make_node("ReduceMean", [f"d{i}"], [f"m{i}"], axes=[0], keepdims=1))
            nodes.append(helper.make_node("Add", [previous, f"m{i}"], [f"a{i}"]))
            previous = f"a{i}"
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", F32, [1, cols])],
        [helper.make_tensor_value_info(previous, F32, [1, cols])],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    source = tmp_path / "big.onnx"
    source.write_bytes(proto.SerializeToString())
    assert data.stat().st_size > 2**31
    target = tmp_path / "up.onnx"
    code, err = _run("upgrade", source, "--opset", "21", "-o", target)
    assert code == 0, err
    assert (tmp_path / "up.onnx.data").stat().st_size == data.stat().st_size
    upgraded = onnx.load(target, load_external_data=False)
    assert upgraded.opset_import[0].version == 21 and upgraded.ir_version == 10
    assert not any(a.name == "axes" for n in upgraded.graph.node for a in n.attribute)
    feeds = {"x": np.zeros((1, cols), np.float32)}
    (out,) = run_ort(target, feeds)
    np.testing.assert_allclose(out, np.full((1, cols), -0.06, np.float32), atol=1e-5)
    _assert_same([out], run_ort(source, feeds))  # the source at opset 13: bit-identical


def _float16_quantize(opset: int, precision: int | None = None) -> onnx.ModelProto:
    """x (float16) -> QuantizeLinear(scale 0.1 as float16, zero point 128) -> uint8."""
    attrs = {} if precision is None else {"precision": precision}
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    inits = [_init("s", np.array(0.1, np.float16)), _init("z", np.array(128, np.uint8))]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [None])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [None])],
        inits,
    )
    ir_version = 10 if opset < 23 else 11
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )


_RUN_FLOAT16 = """import sys, numpy as np, onnxruntime as ort
x = np.arange(-12.0, 12.0, 2.0**-8).astype(np.float16)
for path in sys.argv[1:]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    print(" ".join(map(str, session.run(None, {"x": x})[0])))
"""


@pytest.mark.slow
def test_precision_keeps_the_float32_division_in_ort_1_31_and_1_32(tmp_path: Path) -> None:
    """docs/commands/upgrade.md: ORT 1.32 divides a float16 QuantizeLinear-23 in float16
    (1.31 in float32, as before opset 23); `upgrade` sets precision=FLOAT, so the model
    computes in both what the opset-21 original computed (measured: 128 of 6144 values
    near a tie differ without it)."""
    pythons = [Path(f"/work/venvs/ort-1.{minor}/bin/python") for minor in (31, 32)]
    if not all(python.exists() for python in pythons):
        pytest.skip("no /work/venvs/ort-1.31 and ort-1.32 here")
    source, upgraded, bare = (tmp_path / f"{name}.onnx" for name in ("in", "up", "bare"))
    onnx.save(_float16_quantize(21), source)
    done = CliRunner().invoke(main, ["upgrade", str(source), "--opset", "23", "-o", str(upgraded)])
    assert done.exit_code == 0 and "precision set 1" in done.stderr, done.output
    onnx.save(_float16_quantize(23), bare)  # no precision: the float16 division from 1.32
    runs = {}
    for python in pythons:
        command = [str(python), "-c", _RUN_FLOAT16, str(source), str(upgraded), str(bare)]
        out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        runs[python.parts[-3]] = out.stdout.splitlines()
    original = runs["ort-1.31"][0]
    assert runs["ort-1.31"] == [original] * 3
    assert runs["ort-1.32"][:2] == [original] * 2
    assert runs["ort-1.32"][2] != original  # the premise: 1.32 divides in float16
