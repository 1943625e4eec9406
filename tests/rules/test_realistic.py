"""Models shaped the way real tools write them, through check / fold / convert / upgrade.

Each model is built in code in the form an exporter or quantizer writes (PyTorch export,
ONNX Runtime's QOperator format, ...). Every rewrite must give outputs bit-identical to the
input's in ONNX Runtime (run_ort: no graph optimizations), which is the expected value:
nothing here is computed with qlrewrite.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import run_ort

from qlrewrite.cli import main

F32 = np.float32


def _model(
    nodes: list, inputs: list, outputs: list, inits: list, *, opset: int = 13, ms: bool = False
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    imports = [helper.make_opsetid("", opset)]
    if ms:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=8 if opset < 21 else 10)


def _rewrite_same_in_ort(
    tmp_path: Path, model: onnx.ModelProto, feeds: dict, *args: str
) -> onnx.ModelProto:
    """Run ``qlrewrite *args``; assert exit 0 and ORT outputs bit-identical to the input's."""
    source, target = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    result = CliRunner().invoke(main, [args[0], str(source), "-o", str(target), *args[1:]])
    assert result.exit_code == 0, result.output
    expected, got = run_ort(source, feeds), run_ort(target, feeds)
    for want, have in zip(expected, got, strict=True):
        assert want.dtype == have.dtype
        np.testing.assert_array_equal(have, want)
    return onnx.load(target)


def _qoperator_tail() -> onnx.ModelProto:
    """ORT's QOperator format: a com.microsoft QLinearAdd (no type ONNX can infer) -> DQ."""
    inits = [
        numpy_helper.from_array(np.array(0.05, F32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
        numpy_helper.from_array(np.array(0.1, F32), "s_out"),
        numpy_helper.from_array(np.array(120, np.uint8), "z_out"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node(
            "QLinearAdd",
            ["xq", "s", "z", "xq", "s", "z", "s_out", "z_out"],
            ["aq"],
            domain="com.microsoft",
            name="add",
        ),
        helper.make_node("DequantizeLinear", ["aq", "s_out", "z_out"], ["y"], name="dq"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        inits,
        ms=True,
    )


def test_dq_after_a_qoperator_node_converts_to_microsoft(tmp_path: Path) -> None:
    # DQ's x has no inferred type (a com.microsoft QLinear* produces it); x and zero point
    # share one type, so the zero point gives it.
    feeds = {"x": np.linspace(-3, 3, 6, dtype=F32).reshape(2, 3)}
    model = _qoperator_tail()
    out = _rewrite_same_in_ort(tmp_path, model, feeds, "convert", "--to", "com.microsoft")
    assert [n.domain for n in out.graph.node] == ["com.microsoft"] * 3


def _shapeless_outputs() -> onnx.ModelProto:
    """PyTorch-export style: graph outputs declared without a shape, one of them a Q's."""
    inits = [
        numpy_helper.from_array(np.array(0.05, F32), "s"),
        numpy_helper.from_array(np.array(3, np.uint8), "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
        helper.make_node("Relu", ["xd"], ["y"], name="relu"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("xq", TensorProto.UINT8, None),
        ],
        inits,
    )


def test_shapeless_outputs_after_microsoft_qdq_convert_both_ways(tmp_path: Path) -> None:
    # ONNX shape inference knows no com.microsoft op; the outputs' shapes for the checker
    # must still be found through the com.microsoft Q/DQ nodes (ai.onnx's shapes).
    feeds = {"x": np.linspace(-3, 3, 6, dtype=F32).reshape(2, 3)}
    to_ms = _rewrite_same_in_ort(
        tmp_path, _shapeless_outputs(), feeds, "convert", "--to", "com.microsoft"
    )
    assert {n.domain for n in to_ms.graph.node if n.op_type != "Relu"} == {"com.microsoft"}
    assert not to_ms.graph.output[0].type.tensor_type.HasField("shape")  # left as it was
    back = _rewrite_same_in_ort(tmp_path, to_ms, feeds, "convert", "--to", "onnx")
    assert {n.domain for n in back.graph.node} == {""}


def _float16_bias(domain: str = "") -> onnx.ModelProto:
    """A float16 model's int32 bias DQ (float16 scale) feeding an Add."""
    inits = [
        numpy_helper.from_array(np.array([-903, -832, -246, 665], np.int32), "b"),
        numpy_helper.from_array(np.array(0.001, np.float16), "s"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["b", "s"], ["bd"], name="dq", domain=domain),
        helper.make_node("Add", ["x", "bd"], ["y"], name="add"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4])],
        inits,
        opset=19,
        ms=bool(domain),
    )


def test_float16_convert_is_refused_unless_allowed_as_onnx_runtime_computes_them_differently(
    tmp_path: Path,
) -> None:
    # ONNX Runtime (CPU) has float16 kernels for ai.onnx DQ-19 but not for com.microsoft DQ:
    # it inserts Casts around the contrib node and, the Add being float32-only too, removes
    # the float32 -> float16 -> float32 pair, so the Add sees the unrounded float32 value.
    # Pinned here: the outputs differ (ORT's doing, not a conversion error), hence a refusal,
    # or with --allow-float16 a warning.
    feeds = {"x": np.array([[0.1257, -0.1321, 0.6406, 0.1049]] * 2, np.float16)}
    onnx_form, ms_form = _float16_bias(), _float16_bias("com.microsoft")
    assert not np.array_equal(run_ort(onnx_form, feeds)[0], run_ort(ms_form, feeds)[0])
    for model, target in ((onnx_form, "com.microsoft"), (ms_form, "onnx")):
        source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
        onnx.save(model, source)
        args = ["convert", str(source), "--to", target, "-o", str(out)]
        out.unlink(missing_ok=True)
        result = CliRunner().invoke(main, args)  # refused: the outputs would change
        assert result.exit_code == 1, result.output
        assert "cannot convert 1 node(s) exactly" in result.output
        assert "--allow-float16" in result.output and not out.exists()
        result = CliRunner().invoke(main, [*args, "--allow-float16"])
        assert result.exit_code == 0, result.output
        assert "no float16 kernel for com.microsoft" in result.output
    source.write_bytes(_qoperator_tail().SerializeToString())  # float32 scales: no warning
    result = CliRunner().invoke(main, ["convert", str(source), "--to", "com.microsoft"])
    assert result.exit_code == 0, result.output
    assert "no float16 kernel" not in result.output


def test_sparse_initializers_are_refused_not_dropped(tmp_path: Path) -> None:
    # onnx_ir drops sparse initializers: an unused one vanished from the output, a used one
    # was called "not a valid ONNX model" (ONNX Runtime runs it). Now: exit 2, a clear line.
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5, -7], np.int8), "W"),
        numpy_helper.from_array(np.array([1, 8], np.int64), "W_indices"),
        [4, 3],
    )
    model = _qoperator_tail()
    model.graph.sparse_initializer.append(sparse)
    source = tmp_path / "in.onnx"
    onnx.save(model, source)
    for args in (["fold"], ["convert", "--to", "onnx"], ["upgrade", "--opset", "21"]):
        result = CliRunner().invoke(main, [args[0], str(source), *args[1:]])
        assert result.exit_code == 2, result.output
        assert "initializer 'W' is a sparse tensor" in result.output
        assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_float16_weight_qdq_pair_folds_to_onnx_runtimes_values(tmp_path: Path) -> None:
    # A float16 model quantized with QDQ pairs on weights (Q of a float16 constant, DQ with a
    # float16 per-channel scale). ORT's CPU provider gives the MatMul (no float16 kernel)
    # its own copy of the DQ, computed in float32 (unrounded), and the graph output the
    # float16 one: the fold writes the float32 weight and a Cast to float16, and both
    # outputs stay bit for bit what ORT computed.
    rng = np.random.default_rng(5)
    weight = (rng.standard_normal((6, 5)) * 3).astype(np.float16)
    inits = [
        numpy_helper.from_array(weight, "Wf"),
        numpy_helper.from_array((rng.random(5) * 0.05 + 0.001).astype(np.float16), "s"),
        numpy_helper.from_array(rng.integers(-100, 100, 5).astype(np.int8), "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["Wf", "s", "z"], ["wq"], axis=1),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], axis=1),
        helper.make_node("MatMul", ["x", "wd"], ["y"]),
    ]
    half = TensorProto.FLOAT16
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", half, [2, 6])],
        [
            helper.make_tensor_value_info("y", half, [2, 5]),
            helper.make_tensor_value_info("wd", half, [6, 5]),
        ],
        inits,
        opset=21,
    )
    source, target = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    result = CliRunner().invoke(main, ["fold", str(source), "-o", str(target)])
    assert result.exit_code == 0, result.output
    folded = onnx.load(target)
    assert [n.op_type for n in folded.graph.node] == ["Cast", "MatMul"]
    feeds = {"x": (rng.standard_normal((2, 6)) * 2).astype(np.float16)}
    expected = run_ort(source, feeds)
    got = run_ort(target, feeds)
    for want, have in zip(expected, got, strict=True):
        assert want.dtype == have.dtype and want.tobytes() == have.tobytes()
    weight32 = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}["wd_float32"]
    assert weight32.dtype == np.float32
    np.testing.assert_array_equal(weight32.astype(np.float16), expected[1])


def test_two_unnamed_ifs_with_same_inner_names_are_told_apart(tmp_path: Path) -> None:
    # Exporters leave nodes unnamed and reuse inner names in sibling subgraphs. The two Ifs'
    # branches were both labelled "main/If.then_branch", so the check read the uint8 'c' of
    # one for the int8 'c' of the other: false QL304 errors and every rewrite refused.
    def branch(to: int, zero_point: str, out: str) -> onnx.GraphProto:
        nodes = [
            helper.make_node("Cast", ["x"], ["c"], to=to),
            helper.make_node("DequantizeLinear", ["c", "s", zero_point], [out]),
        ]
        return helper.make_graph(
            nodes, "b", [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
        )

    u8, i8 = TensorProto.UINT8, TensorProto.INT8
    nodes = [
        helper.make_node(
            "If",
            ["cond"],
            ["y1"],
            then_branch=branch(u8, "zu", "o1"),
            else_branch=branch(u8, "zu", "o2"),
        ),
        helper.make_node(
            "If",
            ["cond"],
            ["y2"],
            then_branch=branch(i8, "zi", "o3"),
            else_branch=branch(i8, "zi", "o4"),
        ),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.5, F32), "s"),
        numpy_helper.from_array(np.array(3, np.uint8), "zu"),
        numpy_helper.from_array(np.array(-3, np.int8), "zi"),
    ]
    model = _model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("y1", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4]),
        ],
        inits,
    )
    feeds = {"x": np.array([1, 2, 3, 4], F32), "cond": np.array(True)}
    out = _rewrite_same_in_ort(tmp_path, model, feeds, "convert", "--to", "com.microsoft")
    assert sum(n.domain == "com.microsoft" for n in out.graph.node[1].attribute[0].g.node) == 1
    source = tmp_path / "in.onnx"
    result = CliRunner().invoke(main, ["check", str(source), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "QL304" not in result.output


def test_graph_input_of_unknown_rank_rewrites_with_a_warning(tmp_path: Path) -> None:
    # PyTorch-export / hand-edited style: the input is declared with a type but no shape, so
    # none can be inferred. onnx.checker's full check demands the field; ONNX Runtime runs
    # the model. Every rewrite was refused; now it is checked without it, with a warning.
    model = _shapeless_outputs()
    del model.graph.input[:]
    model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    feeds = {"x": np.linspace(-3, 3, 6, dtype=F32).reshape(2, 3)}
    for args in (["fold"], ["convert", "--to", "com.microsoft"], ["upgrade", "--opset", "21"]):
        out = _rewrite_same_in_ort(tmp_path, model, feeds, *args)
        assert not out.graph.input[0].type.tensor_type.HasField("shape")
    source, target = tmp_path / "in.onnx", tmp_path / "warned.onnx"
    result = CliRunner().invoke(main, ["fold", str(source), "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert "x" in result.output and "declared without a shape" in result.output


def test_function_q_of_a_function_input_converts_and_overloads_survive(tmp_path: Path) -> None:
    # A model-local function (two overloads, IR 10) quantizes its input: x's type is unknown
    # inside the function, but Q-21 (like com.microsoft Q) gives x the scale's type.
    def function(overload: str, scale: float) -> onnx.FunctionProto:
        nodes = [
            helper.make_node(
                "Constant", [], ["s"], value=numpy_helper.from_array(np.array(scale, F32))
            ),
            helper.make_node(
                "Constant", [], ["z"], value=numpy_helper.from_array(np.array(0, np.uint8))
            ),
            helper.make_node("QuantizeLinear", ["a", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["b"]),
        ]
        proto = helper.make_function(
            "local", "f", ["a"], ["b"], nodes, [helper.make_opsetid("", 21)]
        )
        proto.overload = overload
        return proto

    calls = [helper.make_node("f", ["x"], [y], domain="local") for y in ("y1", "y2")]
    calls[1].overload = "v2"
    graph = helper.make_graph(
        calls,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [4]) for y in ("y1", "y2")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        functions=[function("", 0.1), function("v2", 0.5)],
        ir_version=10,
    )
    feeds = {"x": np.array([0.33, 1.27, -0.5, 2.0], F32)}
    out = _rewrite_same_in_ort(tmp_path, model, feeds, "convert", "--to", "com.microsoft")
    assert [(f.name, f.overload) for f in out.functions] == [("f", ""), ("f", "v2")]
    assert {n.domain for f in out.functions for n in f.node if "Linear" in n.op_type} == {
        "com.microsoft"
    }


def test_fold_keeps_an_onnx_import_spelled_ai_onnx(tmp_path: Path) -> None:
    # The default domain imported as "ai.onnx" (ONNX Runtime and onnx.checker accept it):
    # onnx_ir's RemoveUnusedOpsetsPass saw no node of domain "ai.onnx" and dropped the
    # import, so fold refused its own output.
    model = _shapeless_outputs()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    model.graph.node.insert(
        0, helper.make_node("DequantizeLinear", ["zw", "s", "z"], ["w"], name="dq_w")
    )
    model.graph.initializer.append(numpy_helper.from_array(np.array([7, 9], np.uint8), "zw"))
    model.graph.output.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]))
    feeds = {"x": np.linspace(-3, 3, 6, dtype=F32).reshape(2, 3)}
    out = _rewrite_same_in_ort(tmp_path, model, feeds, "fold")
    assert [(o.domain, o.version) for o in out.opset_import] == [("ai.onnx", 13)]
    assert "dq_w" not in [n.name for n in out.graph.node]
