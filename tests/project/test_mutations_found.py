"""Cases a mutation campaign found (every command on ONNX Runtime's quantizer outputs with
one to three random edits each): each ended in an internal error (exit 2, "run with
--debug") or passed `check` while ONNX Runtime refuses the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import quantized

from qlrewrite.cli import main
from qlrewrite.passes.fold.fold_pass import FoldPass

MS = "com.microsoft"


def _cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "run with --debug" not in result.output + result.stderr, result.stderr
    return result.exit_code, result.stdout + result.stderr


def _ms_model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    """com.microsoft ``nodes`` ending in output ``y`` (ONNX inference types none of them:
    it has no com.microsoft schemas)."""
    graph = helper.make_graph(
        nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    imports = [helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=7)


def _ms_dq_of_a_dq() -> onnx.ModelProto:
    """com.microsoft DequantizeLinear whose x is the float output of another one."""
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.int8).reshape(2, 3), "w"),
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "zp"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["w_dq"], "dq_w", domain=MS),
        helper.make_node("DequantizeLinear", ["w_dq", "s", "zp"], ["y"], "dq_again", domain=MS),
    ]
    return _ms_model(nodes, inits)


def test_x_typed_by_a_com_microsoft_producer_is_checked(tmp_path: Path) -> None:
    import onnxruntime as ort

    path = tmp_path / "m.onnx"
    onnx.save(_ms_dq_of_a_dq(), path)
    with pytest.raises(Exception, match=r"(?i)type"):  # ORT refuses a float x
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    code, out = _cli("check", path)
    assert code == 1 and "QL301" in out and "'dq_again'" in out
    assert "QL304" not in out  # "store the zero point as FLOAT" would mislead
    code, out = _cli("fold", path, "-o", tmp_path / "out.onnx")  # was SerdeError, exit 2
    assert code == 1 and "nothing written" in out
    assert not (tmp_path / "out.onnx").exists()


def test_fold_leaves_a_node_whose_constant_types_the_version_refuses() -> None:
    # The pass alone (as a library user composes it, without the input check): the
    # second node's x is float once the first is folded; it stays, and the model saves.
    model = ir.serde.deserialize_model(_ms_dq_of_a_dq())
    FoldPass()(model)
    assert [n.name for n in model.graph] == ["dq_again"]
    ir.serde.serialize_model(model)  # the kernel would have raised here


def _dynamic_with_b_scale(edit) -> onnx.ModelProto:
    """ORT's dynamic MLP with the first MatMulInteger's `A scale * B scale` Mul edited."""
    model = quantized("mlp-dynamic-per-channel")
    integer = next(n for n in model.graph.node if n.op_type == "MatMulInteger")
    cast = next(n for n in model.graph.node if integer.output[0] in n.input)
    mul = next(n for n in model.graph.node if cast.output[0] in n.input)
    scales_name = next(i for i in mul.input if i != cast.output[0])
    scales = next(n for n in model.graph.node if scales_name in n.output)
    edit(model, scales)
    return model


def _b_scale_from_input(model: onnx.ModelProto, scales: onnx.NodeProto) -> None:
    n = next(i for i in model.graph.initializer if i.name == scales.input[1]).dims[0]
    scales.input[1] = "b_scale_fed"
    model.graph.input.append(helper.make_tensor_value_info("b_scale_fed", 1, [1, n]))


def _scales_mul_of_one_input(model: onnx.ModelProto, scales: onnx.NodeProto) -> None:
    del scales.input[1]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_b_scale_from_input, "[1, N] scale or zero point is not a constant"),
        (_scales_mul_of_one_input, "the input model is invalid"),
    ],
)
def test_dynamic_pattern_with_an_unusable_scale_is_refused(tmp_path: Path, edit, says: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_dynamic_with_b_scale(edit), path)
    code, out = _cli("convert", path, "--to", "onnx", "-o", tmp_path / "out.onnx")
    assert code == 1 and says in out  # was AttributeError / IndexError, exit 2
    assert not (tmp_path / "out.onnx").exists()


def test_a_model_onnx_inference_rejects_with_a_value_error_is_refused(tmp_path: Path) -> None:
    # A Constant without a value inside a function: ONNX's strict inference raises a plain
    # ValueError ("Invalid tensor data type 0."), not an InferenceError.
    s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    body = [
        helper.make_node("Constant", [], ["s"], value=s),
        helper.make_node("Constant", [], ["zp"]),
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"]),
    ]
    function = helper.make_function("local", "f", ["x"], ["y"], body, [helper.make_opsetid("", 13)])
    graph = helper.make_graph(
        [helper.make_node("f", ["x"], ["y"], domain="local")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2])],
    )
    imports = [helper.make_opsetid("", 13), helper.make_opsetid("local", 1)]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=imports, functions=[function]), path)
    code, out = _cli("fold", path, "-o", tmp_path / "out.onnx")  # was ValueError, exit 2
    assert code == 1 and "the input model is invalid (onnx.checker: Invalid tensor data" in out
    assert not (tmp_path / "out.onnx").exists()


def _q_dq_in_a_function(dq_axis: int) -> onnx.ModelProto:
    """A local function: Q of a constant [16, 8] weight per column, then DQ with
    ``dq_axis``. Nothing infers shapes inside a function: the DQ's x is known only as the
    Q's output, which has the Q's x's shape."""
    weight = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    scale = numpy_helper.from_array(np.full(8, 0.5, np.float32), "s")
    zero_point = numpy_helper.from_array(np.zeros(8, np.int8), "zp")
    body = [
        helper.make_node("Constant", [], [name], value=tensor)
        for name, tensor in (("w", weight), ("s", scale), ("zp", zero_point))
    ] + [
        helper.make_node("QuantizeLinear", ["w", "s", "zp"], ["w_q"], axis=1),
        helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["w_dq"], axis=dq_axis),
        helper.make_node("MatMul", ["x", "w_dq"], ["y"]),
    ]
    function = helper.make_function("local", "f", ["x"], ["y"], body, [helper.make_opsetid("", 13)])
    graph = helper.make_graph(
        [helper.make_node("f", ["x"], ["y"], "call", domain="local")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    imports = [helper.make_opsetid("", 13), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=imports, functions=[function], ir_version=8)


def test_x_shaped_by_a_q_in_a_function_is_checked(tmp_path: Path) -> None:
    import onnxruntime as ort

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_q_dq_in_a_function(1), good)
    onnx.save(_q_dq_in_a_function(16), bad)
    session = ort.InferenceSession(str(good), providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((1, 16), np.float32)})
    with pytest.raises(Exception, match="axis"):  # ORT refuses axis 16 of a rank-2 x
        session = ort.InferenceSession(str(bad), providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.ones((1, 16), np.float32)})
    assert _cli("check", good)[0] == 0
    code, out = _cli("check", bad)
    assert code == 1 and "QL401" in out and "'w_q' (INT8 [16, 8]) of rank 2" in out
    code, out = _cli("fold", bad, "-o", tmp_path / "out.onnx")  # was SerdeError, exit 2
    assert code == 1 and "1 error finding(s); nothing written" in out


def test_fold_leaves_a_node_whose_shapes_the_kernel_refuses() -> None:
    model = ir.serde.deserialize_model(_q_dq_in_a_function(16))
    FoldPass()(model)
    body = next(iter(model.functions.values()))
    assert "DequantizeLinear" in [n.op_type for n in body]
    ir.serde.serialize_model(model)  # the kernel would have raised here


@pytest.mark.parametrize(("slot", "says"), [(6, "scale of input 2"), (7, "zero point of input 2")])
def test_an_empty_slot_of_a_qlinear_concat_three_is_an_error(
    tmp_path: Path, slot: int, says: str
) -> None:
    # Not run in ONNX Runtime here: 1.31 crashes the process (segmentation fault).
    from qoperator_models import build

    model = build("QLinearConcat")
    model.graph.node[0].input[slot] = ""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    code, out = _cli("check", path)
    assert code == 1 and f"QL107 error: QLinearConcat 'node' in main: required input {says}" in out
    code, out = _cli("convert", path, "--to", "onnx", "-o", tmp_path / "out.onnx")
    assert code == 1 and "nothing written" in out  # was AttributeError, exit 2


def test_a_q_that_feeds_itself_is_checked_not_a_recursion(tmp_path: Path) -> None:
    # x's type comes from the node producing it: here the node itself (a cycle, invalid).
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int16), "zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["q", "s", "zp"], ["q"], "loop", domain=MS),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], "dq", domain=MS),
    ]
    path = tmp_path / "m.onnx"
    onnx.save(_ms_model(nodes, inits), path)
    code, out = _cli("check", path)  # was "internal error while checking (RecursionError"
    assert code == 1 and "QL301 error: QuantizeLinear 'loop'" in out and "QL305" not in out
    for command in (["info"], ["fold", "-o", tmp_path / "o.onnx"]):
        assert _cli(*command, path)[0] in (0, 1)


def test_a_float_g_idx_holding_infinity_is_a_type_finding(tmp_path: Path) -> None:
    from nbits_models import DT, matmul_nbits_model

    model = matmul_nbits_model(k=32, n=8, bits=4, block_size=16, g_idx=True)
    g_idx = next(t for t in model.graph.initializer if t.name == "g_idx")
    values = np.zeros(32, np.float32)
    values[-1] = np.inf
    g_idx.CopyFrom(numpy_helper.from_array(values, "g_idx"))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    code, out = _cli("check", path)  # was "internal error while checking (OverflowError"
    assert code == 1 and f"is FLOAT; com.microsoft MatMulNBits-1 takes {DT.INT32.name}" in out


def test_fold_leaves_a_dq_whose_zero_point_type_differs_from_x() -> None:
    # The pass alone (the input check would refuse it: QL304); the kernel refuses it too.
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.int8).reshape(2, 3), "w"),
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.uint8), "zp"),
    ]
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["y"], "dq", domain=MS)]
    model = ir.serde.deserialize_model(_ms_model(nodes, inits))
    FoldPass()(model)
    assert [n.name for n in model.graph] == ["dq"]
    ir.serde.serialize_model(model)  # the kernel would have raised here
