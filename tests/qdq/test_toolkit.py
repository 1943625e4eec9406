"""The toolkit passes and rules share (qlrewrite.toolkit): one graph iterator that
reaches subgraphs inside functions, fresh names, opset imports, the model's folder; and
the rewrites that failed when a pass listed graphs by hand (third audit, item 14)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.cli import main
from qlrewrite.toolkit import (
    FreshNames,
    add_constant,
    all_graphs,
    ensure_import,
    ensure_import_at,
    iter_graphs,
    model_folder,
    proto_graphs,
)

W = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)


def _dq_branch(name: str) -> onnx.GraphProto:
    scale = numpy_helper.from_array(np.array(0.5, np.float32))
    data = numpy_helper.from_array(np.arange(6, dtype=np.uint8).reshape(2, 3))
    nodes = [
        helper.make_node("Constant", [], [f"{name}_s"], value=scale),
        helper.make_node("Constant", [], [f"{name}_x"], value=data),
        helper.make_node("DequantizeLinear", [f"{name}_x", f"{name}_s"], [f"{name}_y"]),
    ]
    out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [2, 3])
    return helper.make_graph(nodes, name, [], [out])


def _external(name: str) -> onnx.TensorProto:
    tensor = numpy_helper.from_array(W, name)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", "offset": "0", "length": str(W.nbytes)}.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _weight_branch(name: str) -> onnx.GraphProto:
    out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [64, 64])
    node = helper.make_node("Identity", [f"{name}_w"], [f"{name}_y"])
    return helper.make_graph([node], name, [], [out], initializer=[_external(f"{name}_w")])


def _function_if_model(branch, out_shape: list[int]) -> onnx.ModelProto:
    """main calls local.f(c); f holds an If whose branches ``branch`` builds."""
    if_node = helper.make_node(
        "If", ["c"], ["y"], then_branch=branch("t"), else_branch=branch("e"), name="if"
    )
    function = helper.make_function(
        "local", "f", ["c"], ["y"], [if_node], [helper.make_opsetid("", 21)]
    )
    graph = helper.make_graph(
        [helper.make_node("f", ["c"], ["out"], domain="local")],
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
    )
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=imports, functions=[function], ir_version=10)


def _run(model: Path, c: bool) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"c": np.array(c)})[0]


def test_the_iterator_reaches_subgraphs_inside_functions() -> None:
    model = ir.from_proto(_function_if_model(_dq_branch, [2, 3]))
    labels = [str(scope.ref) for scope in iter_graphs(model)]
    assert labels[:2] == ["main", "function:local.f"]
    assert sorted(labels[2:]) == [
        "function:local.f/if.else_branch",
        "function:local.f/if.then_branch",
    ]
    # the proto walk names them alike
    proto = _function_if_model(_dq_branch, [2, 3])
    assert [str(ref) for ref, _ in proto_graphs(proto)] == labels
    assert len(all_graphs(model)) == 4


def test_fold_of_an_if_inside_a_function(tmp_path: Path) -> None:
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_function_if_model(_dq_branch, [2, 3]), src)
    result = CliRunner().invoke(main, ["fold", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    folded = onnx.load(out)
    ops = [n.op_type for n in folded.functions[0].node[0].attribute[0].g.node]
    assert "DequantizeLinear" not in ops
    expected = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5
    for c in (True, False):
        np.testing.assert_array_equal(_run(out, c), expected)


def test_rewrites_of_function_subgraph_external_data_from_another_folder(
    tmp_path: Path,
) -> None:
    src_dir, out_dir, cwd = tmp_path / "src", tmp_path / "out", tmp_path / "cwd"
    for folder in (src_dir, out_dir, cwd):
        folder.mkdir()
    (src_dir / "w.bin").write_bytes(W.tobytes())
    onnx.save(_function_if_model(_weight_branch, [64, 64]), src_dir / "m.onnx")
    for command in (["fold"], ["convert", "--to", "com.microsoft"], ["upgrade", "--opset", "23"]):
        out = out_dir / "o.onnx"
        before = os.getcwd()
        os.chdir(cwd)
        try:
            args = [*command, os.path.relpath(src_dir / "m.onnx"), "-o", os.path.relpath(out)]
            result = CliRunner().invoke(main, args)
        finally:
            os.chdir(before)
        assert result.exit_code == 0, (command, result.output)
        assert not (out_dir / "w.bin").exists()
        np.testing.assert_array_equal(_run(out, True), W)  # its data is where it reads it
        out.unlink()


def test_fresh_names_avoid_every_graph_and_never_repeat() -> None:
    model = ir.from_proto(_function_if_model(_dq_branch, [2, 3]))
    names = FreshNames(model)
    assert "t_y" in names and "e_s" in names  # values of subgraphs inside the function
    assert names.fresh("t_y") == "t_y_1"
    assert names.fresh("t_y") == "t_y_2"
    assert names.fresh("new") == "new"
    assert names.fresh("new") == "new_1"
    names.take("k_1")
    assert names.fresh("k") == "k"
    assert names.fresh("k") == "k_2"


def test_ensure_import_keeps_an_existing_version_and_reaches_every_overload() -> None:
    model = ir.from_proto(_function_if_model(_dq_branch, [2, 3]))
    assert not ensure_import(model, "ai.onnx", 13)  # ai.onnx imported as "": unchanged
    assert model.opset_imports[""] == 21
    assert ensure_import(model, "com.microsoft", 1)
    assert not ensure_import(model, "com.microsoft", 2)
    assert model.opset_imports["com.microsoft"] == 1
    branch = next(s for s in iter_graphs(model) if s.ref.depth == 1)
    function = next(iter(model.functions.values()))
    assert "com.microsoft" not in function.opset_imports
    assert ensure_import_at(model, branch.ref, "com.microsoft", 1)
    assert function.opset_imports["com.microsoft"] == 1


def test_model_folder_is_the_folder_as_named(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "m.onnx").write_bytes(b"")
    (tmp_path / "link.onnx").symlink_to(real / "m.onnx")
    assert model_folder(tmp_path / "link.onnx") == tmp_path
    assert model_folder("m.onnx") == Path.cwd()


def test_a_stray_block_size_is_not_in_force_for_any_reader() -> None:
    """DequantizeLinear-13 has no block_size: a stray one changes nothing, for info /
    convert (granularity) as for fold (block_size)."""
    from example_models import DQ, qdq_model

    from qlrewrite.qdq import node_views

    proto = qdq_model(DQ, 13, x_shape=(4, 6), scale_shape=(6,), attrs={"axis": 1, "block_size": 2})
    (_, [view]), *_ = node_views(ir.from_proto(proto))
    assert view.block_size == 0
    assert view.granularity.text == "per-axis(axis=1)"
    blocked = qdq_model(DQ, 21, x_shape=(4, 6), scale_shape=(4, 3), attrs={"block_size": 2})
    (_, [view]), *_ = node_views(ir.from_proto(blocked))
    assert (view.block_size, view.axis) == (2, 1)
    assert view.granularity.text == "blocked(axis=1, block=2)"


def test_a_constant_is_an_initializer_or_a_constant_node_before_its_reader() -> None:
    """In a graph: an initializer of the tensor's shape and type. In a function (which has
    no initializers): a Constant node before the node named, else first, so the
    function's nodes stay in order."""
    graph = ir.Graph([], [], nodes=[])
    value = add_constant(graph, ir.tensor(np.arange(3, dtype=np.int64)), "c")
    assert graph.initializers["c"] is value
    assert value.dtype == ir.DataType.INT64 and list(value.shape) == [3]
    reader = ir.node("Identity", [None], name="reader")
    first = ir.node("Identity", [None], name="first")
    function = ir.Function(
        "local", "F", graph=ir.Graph([], [], nodes=[first, reader]), attributes=[]
    )
    before = add_constant(function, ir.tensor(np.float32(1)), "s", before=reader, node_name="k")
    at_start = add_constant(function, ir.tensor(np.float32(2)), "t")
    assert [n.op_type for n in function][::2] == ["Constant", "Constant"]
    assert [n.name for n in function][1:] == ["first", "k", "reader"]
    assert before.name == "s" and before.producer() is function[2]
    assert at_start.producer() is function[0] and not function.graph.initializers
