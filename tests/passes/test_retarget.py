"""`qlrewrite retarget`: zero-point signedness, symmetric zero points, 4-bit weights,
redundant Q/DQ pairs and shared inputs: each exact in ONNX Runtime (installed release,
graph optimizations off) or refused naming the tensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import inputs_for, model_name_of, quantized, run_ort

import qlrewrite
from qlrewrite.api import _run, load
from qlrewrite.cli import main
from qlrewrite.errors import Refusal
from qlrewrite.passes.commands import retarget_passes
from qlrewrite.passes.convert.tidy import QdqTidyPass

F32 = TensorProto.FLOAT
UNSIGNED = {TensorProto.UINT8, TensorProto.UINT4, TensorProto.UINT16}
SIGNED = {TensorProto.INT8, TensorProto.INT4, TensorProto.INT16}
CONFIGS = (
    "cnn-u8s8",
    "cnn-s8s8",
    "cnn-int16-contrib",
    "cnn-int4-per-channel-21",
    "mlp-u8s8",
    "mlp-per-channel-21",
    "mlp-int16-contrib",
    "mlp-nbits-asym",
)


def _retarget(model: onnx.ModelProto, **options: object) -> tuple[onnx.ModelProto, dict]:
    passes = retarget_passes(**options)  # type: ignore[arg-type]
    loaded = load(model)
    result = _run(loaded, passes)
    return ir.serde.serialize_model(result), {}


def _quantized_types(proto: onnx.ModelProto) -> set[int]:
    """Element types of Q outputs and DQ inputs (x and zero point), from inference."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    types |= {t.name: t.data_type for t in proto.graph.initializer}
    found = set()
    for node in proto.graph.node:
        if node.op_type == "DequantizeLinear":
            found |= {types.get(name) for name in node.input[::2] if name}
        elif node.op_type == "QuantizeLinear" and len(node.input) > 2:
            found.add(types.get(node.input[2]))
    return found - {None, TensorProto.INT32}


@pytest.mark.parametrize("signedness", ["signed", "unsigned"])
@pytest.mark.parametrize("config", CONFIGS)
def test_signedness_is_exact_on_ort_quantizer_outputs(config: str, signedness: str) -> None:
    source = quantized(config)
    feeds = inputs_for(model_name_of(config))
    out, _ = _retarget(source, zero_point=signedness)
    assert not _quantized_types(out) & (UNSIGNED if signedness == "signed" else SIGNED)
    for got, want in zip(run_ort(out, feeds), run_ort(source, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def _qdq_model(
    *, act_zp: int, act_type: type, weight: np.ndarray, weight_zp: np.ndarray, opset: int = 13
) -> onnx.ModelProto:
    """x -> Q/DQ (per-tensor activation) -> MatMul with DQ(weight) (per-column)."""
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
        numpy_helper.from_array(np.array(act_zp, act_type), "xzp"),
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.full(weight.shape[1], 0.02, np.float32), "ws"),
        numpy_helper.from_array(weight_zp, "wzp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xd"], name="x_dq"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], name="w_dq", axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm"),
    ]
    k, n = weight.shape
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [2, k])],
        [helper.make_tensor_value_info("y", F32, [2, n])],
        inits,
    )
    ir_version = 10 if opset >= 21 else 8
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )


def _feeds(k: int) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(2).standard_normal((2, k)) * 4).astype(np.float32)}


def test_signed_symmetric_for_tensorrt() -> None:
    """uint8 activations with zero point 128 and int8 weights with small zero points: all
    zero points become 0 (int8), the weights take x - z, outputs unchanged."""
    rng = np.random.default_rng(0)
    weight = rng.integers(-100, 100, (8, 4)).astype(np.int8)
    model = _qdq_model(
        act_zp=128, act_type=np.uint8, weight=weight, weight_zp=np.array([3, -2, 0, 5], np.int8)
    )
    out, _ = _retarget(model, zero_point="signed", symmetric=True)
    zero_points = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    assert "wzp" not in zero_points and "xzp" not in zero_points  # replaced, then dropped
    for node in out.graph.node:
        if "DequantizeLinear" in node.op_type or "QuantizeLinear" in node.op_type:
            assert not np.any(zero_points[node.input[2]]), node.name
            assert zero_points[node.input[2]].dtype == np.int8
    shifted = zero_points[next(n for n in out.graph.node if n.name == "w_dq").input[0]]
    np.testing.assert_array_equal(shifted, weight.astype(np.int16) - [3, -2, 0, 5])
    np.testing.assert_array_equal(run_ort(out, _feeds(8))[0], run_ort(model, _feeds(8))[0])


def test_symmetric_refuses_activations_and_overflowing_weights() -> None:
    weight = np.full((8, 4), 127, np.int8)
    model = _qdq_model(
        act_zp=3, act_type=np.uint8, weight=weight, weight_zp=np.array([-1, 0, 0, 0], np.int8)
    )
    with pytest.raises(Refusal) as refused:
        _retarget(model, symmetric=True)
    message = str(refused.value)
    assert "'x_q'" in message and "activation cannot become 0 exactly" in message
    assert "'w_dq'" in message and "spans [127, 128], beyond INT8's [-128, 127]" in message


def test_narrow_weights_that_fit_four_bits() -> None:
    weight = np.random.default_rng(1).integers(-8, 8, (8, 4)).astype(np.int8)
    zp = np.array([1, 0, -1, 2], np.int8)
    for opset, narrowed in ((21, True), (19, False)):
        model = _qdq_model(act_zp=0, act_type=np.int8, weight=weight, weight_zp=zp, opset=opset)
        out, _ = _retarget(model, narrow=True)
        types = {t.name: t.data_type for t in out.graph.initializer}
        assert (types["w"] == TensorProto.INT4) is narrowed
        np.testing.assert_array_equal(run_ort(out, _feeds(8))[0], run_ort(model, _feeds(8))[0])


def _pair_model(second_scale: float) -> onnx.ModelProto:
    """x -> Q -> DQ -> Q -> DQ -> y: the second pair's parameters equal the first's when
    ``second_scale`` is 0.05."""
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s1"),
        numpy_helper.from_array(np.array(second_scale, np.float32), "s2"),
        numpy_helper.from_array(np.array(-3, np.int8), "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"], name="q1"),
        helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"], name="d1"),
        helper.make_node("QuantizeLinear", ["d1", "s2", "z"], ["q2"], name="q2"),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"], name="d2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [64])],
        [helper.make_tensor_value_info("y", F32, [64])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_redundant_pair_is_removed_only_when_identical() -> None:
    feeds = {"x": np.linspace(-10, 10, 64, dtype=np.float32)}
    model = _pair_model(0.05)
    out, _ = _retarget(model, drop_redundant=True)
    assert [n.name for n in out.graph.node] == ["q1", "d2"]
    np.testing.assert_array_equal(run_ort(out, feeds)[0], run_ort(model, feeds)[0])
    different, _ = _retarget(_pair_model(0.07), drop_redundant=True)
    assert len(different.graph.node) == 4


def test_a_quantize_without_its_scale_is_left_by_the_pass() -> None:
    """The pass on its own (no input check before it): a QuantizeLinear missing its scale
    input is not a redundant pair's (an IndexError before)."""
    model = _pair_model(0.05)
    del model.graph.node[2].input[1:]
    ir_model = ir.from_proto(model)
    result = QdqTidyPass(drop_redundant=True)(ir_model)
    assert result.summary == {"redundant_pairs_removed": 0}
    assert [n.name for n in ir_model.graph] == ["q1", "d1", "q2", "d2"]


def test_shared_dequantize_and_initializers_are_split() -> None:
    w = numpy_helper.from_array(np.arange(16, dtype=np.int8).reshape(4, 4), "w")
    s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s"], ["wd"], name="dq"),
        helper.make_node("DequantizeLinear", ["w", "s"], ["wd2"], name="dq2"),
        helper.make_node("MatMul", ["x", "wd"], ["a"]),
        helper.make_node("MatMul", ["x", "wd"], ["b"]),
        helper.make_node("MatMul", ["x", "wd2"], ["c"]),
    ]
    outputs = [helper.make_tensor_value_info(n, F32, [2, 4]) for n in "abc"]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 4])], outputs, [w, s]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    before = model.SerializeToString()
    out, _ = _retarget(model, split_shared=True)
    assert model.SerializeToString() == before  # the input's tensors are not renamed
    readers: dict[str, int] = {}
    for node in out.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    assert [n.op_type for n in out.graph.node].count("DequantizeLinear") == 3
    assert all(readers[t.name] == 1 for t in out.graph.initializer)
    feeds = {"x": np.ones((2, 4), np.float32)}
    for got, want in zip(run_ort(out, feeds), run_ort(model, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def test_cli_needs_a_retarget_and_verifies(tmp_path: Path) -> None:
    source, target, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    weight = np.random.default_rng(1).integers(-8, 8, (8, 4)).astype(np.int8)
    model = _qdq_model(
        act_zp=128, act_type=np.uint8, weight=weight, weight_zp=np.zeros(4, np.int8), opset=21
    )
    onnx.save(model, source)
    assert CliRunner().invoke(main, ["retarget", str(source)]).exit_code == 2
    args = ["retarget", str(source), "--zero-point", "signed", "--narrow-weights", "--verify"]
    result = CliRunner().invoke(main, [*args, "-o", str(target), "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert "bit-identical" in result.output
    changes = json.loads(report.read_text())["changes"]["RetargetPass"]
    assert (changes["sign_flipped"], changes["narrowed"]) == (1, 1)
    weights = {t.name: t for t in onnx.load(target).graph.initializer}
    assert weights["w"].data_type == TensorProto.INT4


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("int8", "UINT8"),
        ("uint8", "INT8"),
        ("int16", "UINT16"),
        ("uint16", "INT16"),
        ("int4", "UINT4"),
        ("uint4", "INT4"),
    ],
)
def test_signedness_flip_of_every_value(source: str, target: str) -> None:
    """The weights' fast path (the top bit flipped in place of an add) gives v + 2**(b-1)
    (signed to unsigned) or v - 2**(b-1) for every value of the type."""
    import ml_dtypes

    from qlrewrite.passes.retarget.retarget_pass import _flipped_bits

    kind = getattr(ml_dtypes, source) if "4" in source else np.dtype(source).type
    info = ml_dtypes.iinfo(kind)
    values = np.arange(int(info.min), int(info.max) + 1)
    dtype = ir.DataType[target]
    offset = 2 ** (dtype.bitwidth - 1)
    got = _flipped_bits(values.astype(kind), dtype).astype(np.int64)
    np.testing.assert_array_equal(got, values + (offset if target.startswith("U") else -offset))


@pytest.mark.parametrize("count", [16, 15])
@pytest.mark.parametrize("source", ["int4", "uint4"])
def test_packed_flip_of_every_value(source: str, count: int) -> None:
    """4-bit weights are flipped as stored, two values a byte: every value moves by
    2**3 into the other signedness, and an odd count's padding nibble stays 0."""
    import ml_dtypes

    from qlrewrite.kernels.nbits import flip_sign_packed

    info = ml_dtypes.iinfo(getattr(ml_dtypes, source))
    values = np.arange(int(info.min), int(info.max) + 1)[:count]
    moved = values + (8 if source == "int4" else -8)

    def packed(array: np.ndarray) -> np.ndarray:  # ONNX's layout: low nibble first
        nibbles = np.append(array & 0xF, [0] * (array.size % 2)).astype(np.uint8)
        return nibbles[0::2] | (nibbles[1::2] << 4)

    got = flip_sign_packed(packed(values), 4, count)
    np.testing.assert_array_equal(got, packed(moved))


def test_an_external_odd_sized_int4_weight_flips_exactly(tmp_path: Path) -> None:
    """The packed path on a weight read from a data file (15 int4 values: a padding
    nibble), through the command: ORT computes (x - zero_point) * scale as before, and
    the stored bytes are the flipped values packed with a zero padding nibble."""
    import ml_dtypes

    values = np.arange(-8, 7)
    w = numpy_helper.from_array(values.reshape(3, 5).astype(ml_dtypes.int4), "w")
    zp = numpy_helper.from_array(np.array(-3, ml_dtypes.int4), "zp")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    node = helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["y"], name="w_dq")
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("y", F32, [3, 5])], [w, scale, zp]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    source = tmp_path / "m.onnx"
    onnx.save_model(model, source, save_as_external_data=True, size_threshold=0)
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(
        main, ["retarget", str(source), "--zero-point", "unsigned", "-o", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    written = onnx.load_model(str(out))
    stored = next(t for t in written.graph.initializer if t.name == "w")
    assert stored.data_type == TensorProto.UINT4
    nibbles = np.append(values + 8, 0).astype(np.uint8)
    assert stored.raw_data == (nibbles[0::2] | (nibbles[1::2] << 4)).tobytes()
    expected = ((values + 3) * np.float32(0.5)).astype(np.float32).reshape(3, 5)
    np.testing.assert_array_equal(run_ort(written, {})[0], expected)


def test_a_pass_tripping_on_an_invalid_input_names_the_input(tmp_path: Path) -> None:
    """A cycle (QuantizeLinear reads y, its DequantizeLinear writes y) is invalid ONNX:
    ``retarget --drop-redundant-qdq`` ended in onnx_ir's internal ValueError ('is still
    being used by other nodes'). The input check refuses it before any pass runs: QL611
    names the cycle, exit 1, nothing written."""
    s = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    z = numpy_helper.from_array(np.array(3, np.uint8), "z")
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["y", "s", "z"], ["q"], name="q"),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [s, z],
    )
    source = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), source)
    result = CliRunner().invoke(
        main, ["retarget", str(source), "--drop-redundant-qdq", "-o", str(tmp_path / "o.onnx")]
    )
    assert result.exit_code == 1, result.stderr
    # the input check names the cycle (QL611) before any pass runs
    assert "QL611 error: the nodes form a cycle: 'dq' (DequantizeLinear) -> 'q'" in result.stderr
    assert "nothing written" in result.stderr and not (tmp_path / "o.onnx").exists()
    assert "ValueError" not in result.stderr and len(result.stderr.splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cycle.onnx"]


def _in_function(calls: int) -> onnx.ModelProto:
    """DequantizeLinear(uint8 weight, Constant nodes) -> MatMul as the body of a function
    called ``calls`` times (the results added)."""
    weight = np.arange(12, dtype=np.uint8).reshape(4, 3)
    constants = [
        ("w", weight),
        ("ws", np.array(0.02, np.float32)),
        ("wzp", np.array(128, np.uint8)),
    ]
    body = [
        *[
            helper.make_node("Constant", [], [n], value=numpy_helper.from_array(a, n))
            for n, a in constants
        ],
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], name="w_dq"),
        helper.make_node("MatMul", ["x", "wd"], ["y"], name="mm"),
    ]
    onnx13 = helper.make_opsetid("", 13)
    function = helper.make_function("local", "F", ["x"], ["y"], body, [onnx13])
    outputs = [f"y{i}" for i in range(calls)]
    nodes = [helper.make_node("F", ["x"], [o], domain="local", name=f"call{o}") for o in outputs]
    if calls > 1:
        nodes.append(helper.make_node("Sum", outputs, ["y"], name="sum"))
    else:
        nodes[0].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info("y", F32, [2, 3])],
    )
    opsets = [onnx13, helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=[function], ir_version=8)


@pytest.mark.parametrize("calls", [1, 2])
def test_a_weight_inside_a_function_is_refused_with_the_reason(calls: int) -> None:
    """Q/DQ inside a model-local function are not retargeted (their constants are Constant
    nodes): the refusal says so. Before, a function called once had its new zero point
    written as an initializer of the function (the output check refused the invalid
    result), and a DequantizeLinear of a function called twice ended in an IndexError."""
    with pytest.raises(Refusal, match=r"w_dq' in function:local\.F .*\(UINT8: inside a function\)"):
        _retarget(_in_function(calls), zero_point="signed")


def _constant_nodes(model: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """``model`` with the initializers ``names`` moved into Constant nodes (first)."""
    moved = [t for t in model.graph.initializer if t.name in names]
    for tensor in moved:
        model.graph.initializer.remove(tensor)
    constants = [
        helper.make_node("Constant", [], [t.name], name=f"c_{t.name}", value=t) for t in moved
    ]
    nodes = [*constants, *model.graph.node]
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    return model


@pytest.mark.parametrize(("zero_point", "symmetric"), [("signed", False), ("signed", True)])
def test_a_weight_held_by_a_constant_node_is_rewritten_in_it(
    zero_point: str, symmetric: bool
) -> None:
    """A uint8 weight and its zero points as Constant nodes (not initializers): the new
    weight went on the Constant's output value only, the node kept the uint8 tensor, and
    the output check refused the model ('Inferred elem type differs from existing elem
    type: (2) vs (3)'). The Constant now holds the rewritten weight; outputs unchanged."""
    rng = np.random.default_rng(3)
    weight = rng.integers(0, 256, (8, 4)).astype(np.uint8)
    model = _qdq_model(
        act_zp=128, act_type=np.uint8, weight=weight, weight_zp=np.full(4, 128, np.uint8)
    )
    model = _constant_nodes(model, {"w", "wzp", "xzp"})
    if symmetric:  # the activation's zero point cannot become 0: keep it signed only
        model = _constant_nodes(
            _qdq_model(
                act_zp=0, act_type=np.int8, weight=weight, weight_zp=np.full(4, 128, np.uint8)
            ),
            {"w", "wzp"},
        )
    out = ir.to_proto(qlrewrite.retarget(model, zero_point=zero_point, symmetric=symmetric))
    onnx.checker.check_model(out, full_check=True)
    # the Constant nodes of the replaced zero points are gone, not left unread
    assert [n.output[0] for n in out.graph.node if n.op_type == "Constant"] == ["w"]
    (constant,) = [n for n in out.graph.node if n.op_type == "Constant" and n.output[0] == "w"]
    stored = numpy_helper.to_array(constant.attribute[0].t)
    expected = weight.astype(np.int16) - 128
    np.testing.assert_array_equal(stored, expected.astype(np.int8))
    np.testing.assert_array_equal(run_ort(out, _feeds(8))[0], run_ort(model, _feeds(8))[0])
