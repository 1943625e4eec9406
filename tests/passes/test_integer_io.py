"""`qlrewrite integer-io`: integer model inputs and outputs, exact in ONNX Runtime
(installed release, graph optimizations off and on: fed Q(x), the integer model returns
Q(y) bit for bit), refused by name where not exact, and back to float."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import inputs_for, model_name_of, quantized

import qlrewrite
from qlrewrite.cli import main
from qlrewrite.errors import Refusal

F32 = TensorProto.FLOAT
CONFIGS = ("cnn-u8s8", "cnn-s8s8", "mlp-u8s8", "cnn-int16-contrib", "mlp-per-channel-21")


def _ort(model: onnx.ModelProto, feeds: dict, optimize: bool) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _node_model(op: str, x, scale: np.ndarray, zero: np.ndarray, *, domain: str, opset: int):
    """One Q or DQ node (the reference: the runtime's own kernel, not the code under test)."""
    x_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    y_type = F32 if op == "DequantizeLinear" else helper.np_dtype_to_tensor_dtype(zero.dtype)
    node = helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", x_type, None)],
        [helper.make_tensor_value_info("y", y_type, None)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")],
    )
    imports = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid(domain, 1)] if domain else []
    )
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def _entry(proto: onnx.ModelProto, key: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Scale, zero point (as initializers of the original) and domain of a recorded node,
    read from the original model by the recorded names."""
    document = json.loads({p.key: p.value for p in proto.metadata_props}[key])
    node = document["node"]
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    return inits[node["scale"]], inits[node["zero_point_name"]], node["domain"]


@pytest.mark.parametrize("optimize", [False, True], ids=["opt-off", "opt-on"])
@pytest.mark.parametrize("config", CONFIGS)
def test_integer_io_is_exact_in_ort(config: str, optimize: bool) -> None:
    original = quantized(config)
    integer = ir.serde.serialize_model(qlrewrite.integer_io(original))
    onnx.checker.check_model(integer, full_check=True)
    opset = next(o.version for o in original.opset_import if o.domain in ("", "ai.onnx"))
    x = inputs_for(model_name_of(config))["x"]
    s, z, domain = _entry(integer, "qlrewrite.integer_io.input.x")
    xq = _ort(_node_model("QuantizeLinear", x, s, z, domain=domain, opset=opset), {"x": x}, False)[
        0
    ]
    (yq,) = _ort(integer, {"x": xq}, optimize)
    assert yq.dtype == z.dtype
    s, z, domain = _entry(integer, "qlrewrite.integer_io.output.y")
    y = _ort(
        _node_model("DequantizeLinear", yq, s, z, domain=domain, opset=opset), {"x": yq}, False
    )[0]
    (expected,) = _ort(original, {"x": x}, optimize)
    np.testing.assert_array_equal(y, expected)  # DQ(integer(Q(x))) == original(x), bit for bit


@pytest.mark.parametrize("config", CONFIGS)
def test_round_trip_through_files_gives_back_the_graph(config: str, tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    onnx.save(quantized(config), source)
    runner = CliRunner()
    first = runner.invoke(main, ["integer-io", str(source), "-o", str(tmp_path / "i.onnx")])
    assert first.exit_code == 0, first.output
    back = runner.invoke(
        main,
        ["integer-io", str(tmp_path / "i.onnx"), "--to", "float", "-o", str(tmp_path / "f.onnx")],
    )
    assert back.exit_code == 0, back.output
    restored = onnx.load(tmp_path / "f.onnx")
    assert not [p for p in restored.metadata_props if p.key.startswith("qlrewrite.integer_io")]
    original = onnx.load(source)
    assert restored.graph.node == original.graph.node
    assert list(restored.graph.input) == list(original.graph.input)
    assert list(restored.graph.output) == list(original.graph.output)
    assert list(restored.graph.initializer) == list(original.graph.initializer)
    assert list(restored.metadata_props) == list(original.metadata_props)
    # value_info: what every qlrewrite rewrite writes (initializers' types), not compared


def _qdq_model(
    *,
    readers: int = 1,
    float_reader: bool = False,
    scales=(0.5,),
    output_too=False,
    q_type: int = TensorProto.UINT8,
    opset: int = 21,
    per_axis: bool = False,
):
    """x -> Q (readers of them, scales[i]) -> DQ -> Add -> Q -> DQ -> y."""
    nodes, inits = [], []
    sums = []
    for i in range(readers):
        s = (
            np.array([0.5, 0.25], np.float32)
            if per_axis
            else np.array(scales[i % len(scales)], np.float32)
        )
        inits += [
            numpy_helper.from_array(s, f"s{i}"),
            helper.make_tensor(f"z{i}", q_type, s.shape, [0] * s.size),
        ]
        nodes += [
            helper.make_node(
                "QuantizeLinear", ["x", f"s{i}", f"z{i}"], [f"q{i}"], name=f"Q{i}", axis=1
            ),
            helper.make_node(
                "DequantizeLinear", [f"q{i}", f"s{i}", f"z{i}"], [f"d{i}"], name=f"D{i}", axis=1
            ),
        ]
        sums.append(f"d{i}")
    if float_reader:
        sums.append("x")
    nodes.append(helper.make_node("Sum", sums, ["t"]))
    inits += [
        numpy_helper.from_array(np.array(1.0, np.float32), "so"),
        helper.make_tensor("zo", q_type, [], [0]),
    ]
    nodes += [
        helper.make_node("QuantizeLinear", ["t", "so", "zo"], ["tq"], name="Qo"),
        helper.make_node("DequantizeLinear", ["tq", "so", "zo"], ["y"], name="Do"),
    ]
    outputs = [helper.make_tensor_value_info("y", F32, [1, 2])]
    if output_too:
        outputs.append(helper.make_tensor_value_info("x", F32, [1, 2]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 2])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"float_reader": True}, "'x' is also read as float"),
        ({"output_too": True}, "'x' is also read as float"),
        ({"readers": 2, "scales": (0.5, 0.25)}, "'x' is quantized with different parameters"),
        ({"per_axis": True}, "'x' QuantizeLinear 'Q0' is per-axis"),
    ],
)
def test_refusals_name_the_tensor(options: dict, words: str) -> None:
    with pytest.raises(Refusal, match=words):
        qlrewrite.integer_io(_qdq_model(**options))


@pytest.mark.parametrize(
    "q_type", [TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT16, TensorProto.FLOAT8E4M3FN]
)
def test_one_input_for_several_equal_quantizers(q_type: int) -> None:
    model = _qdq_model(readers=2, q_type=q_type)
    integer = ir.serde.serialize_model(qlrewrite.integer_io(model))
    assert [n.name for n in integer.graph.node if n.op_type == "QuantizeLinear"] == ["Qo"]
    assert integer.graph.input[0].type.tensor_type.elem_type == q_type
    assert integer.graph.output[0].type.tensor_type.elem_type == q_type
    summary = qlrewrite.summary_of(qlrewrite.integer_io(model))
    assert summary is not None
    assert [c["quantize_nodes_merged"] for c in summary.changes.values()] == [1]
    if q_type in (TensorProto.UINT8, TensorProto.UINT16):
        dtype = helper.tensor_dtype_to_np_dtype(q_type)
        xq = np.array([[3, 7]], dtype)
        (yq,) = _ort(integer, {"x": xq}, False)
        # Sum of the two dequantized copies, (3*0.5)*2, (7*0.5)*2, quantized with scale 1
        np.testing.assert_array_equal(yq, np.array([[3, 7]], dtype))
    back = ir.serde.serialize_model(qlrewrite.integer_io(integer, to="float"))
    onnx.checker.check_model(back, full_check=True)
    # one QuantizeLinear given back for the two merged (equivalent, not byte-identical)
    assert [n.name for n in back.graph.node] == ["Q0", "D0", "D1", "", "Qo", "Do"]
    assert [n.input[0] for n in back.graph.node[1:3]] == ["q0", "q0"]
    assert back.graph.input[0].type.tensor_type.elem_type == F32


def test_reverse_refuses_foreign_and_mismatched_metadata() -> None:
    integer = ir.serde.serialize_model(qlrewrite.integer_io(_qdq_model()))
    foreign = onnx.ModelProto.FromString(integer.SerializeToString())
    helper.set_model_props(foreign, {"qlrewrite.integer_io.input.x": '{"writer": "someone"}'})
    with pytest.raises(Refusal, match="not written by qlrewrite"):
        qlrewrite.integer_io(foreign, to="float")
    mismatched = onnx.ModelProto.FromString(integer.SerializeToString())
    for prop in mismatched.metadata_props:
        if prop.key == "qlrewrite.integer_io.input.x":
            prop.value = prop.value.replace('"UINT8"', '"INT8"')
    with pytest.raises(Refusal, match="'x' is UINT8, not INT8"):
        qlrewrite.integer_io(mismatched, to="float")


def test_cli_refusal_is_one_line_exit_1(tmp_path: Path) -> None:
    onnx.save(_qdq_model(float_reader=True), tmp_path / "m.onnx")
    result = CliRunner().invoke(
        main, ["integer-io", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx")]
    )
    assert result.exit_code == 1
    assert "'x' is also read as float" in result.output
    assert not (tmp_path / "o.onnx").exists()
