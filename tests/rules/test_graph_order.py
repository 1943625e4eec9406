"""QL610 (a node reads a value before it is written; --fix sorts) and QL611 (a cycle):
in the main graph, in subgraphs reading outer values, and in functions. The expected
verdicts are ONNX's checker's and ONNX Runtime's, measured in the tests below."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from qlrewrite.cli import main
from qlrewrite.rules.model.graph_order import order_problems

ort = pytest.importorskip("onnxruntime")

SCALE = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
ZERO = helper.make_tensor("z", TensorProto.INT8, [], [0])
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])


def _model(
    nodes: list[onnx.NodeProto], output: str = "d", functions: tuple = ()
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [X],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [4])],
        [SCALE, ZERO],
    )
    imports = [helper.make_opsetid("", 21)]
    if functions:
        imports.append(helper.make_opsetid("local", 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=10, functions=list(functions))


def _q(source: str = "x") -> onnx.NodeProto:
    return helper.make_node("QuantizeLinear", [source, "s", "z"], ["q"], name="q")


def _dq() -> onnx.NodeProto:
    return helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="d")


def _if(then_reads: str, name: str = "if") -> tuple[onnx.NodeProto, onnx.NodeProto]:
    """An If whose branches both return Identity(``then_reads``), read from outside, and
    the Constant node of its condition."""
    branch_out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])

    def branch(label: str) -> onnx.GraphProto:
        node = helper.make_node("Identity", [then_reads], ["b"], name=f"{label}_id")
        return helper.make_graph([node], label, [], [branch_out])

    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    return helper.make_node(
        "If",
        ["c"],
        ["y"],
        name=name,
        then_branch=branch("then"),
        else_branch=branch("else"),
    ), helper.make_node("Constant", [], ["c"], name="c", value=cond)


def _check(tmp_path: Path, model: onnx.ModelProto, *args: str) -> tuple[int, list[dict]]:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(main, ["check", str(path), "--output-format", "json", *args])
    findings = json.loads(result.stdout)["files"][0]["findings"] if result.stdout else []
    return result.exit_code, findings


def _codes(findings: list[dict]) -> list[str]:
    return [f["rule"] for f in findings if f["rule"].startswith("QL61")]


def _runs_in_ort(model: onnx.ModelProto) -> bool:
    try:
        session = ort.InferenceSession(model.SerializeToString())
    except Exception:
        return False
    session.run(None, {"x": np.ones(4, np.float32)})
    return True


def _checker_accepts(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError:
        return False
    return True


def test_reversed_nodes_are_ql610_and_ort_sorts_them_itself(tmp_path: Path) -> None:
    model = _model([_dq(), _q()])
    assert not _checker_accepts(model) and _runs_in_ort(model)
    code, findings = _check(tmp_path, model)
    assert code == 1 and _codes(findings) == ["QL610"]
    assert "node 'd' (DequantizeLinear) reads 'q' before node 'q'" in findings[0]["message"]
    assert findings[0]["fix"] == "safe"


def test_fix_sorts_stably_and_the_result_passes_onnx_checker(tmp_path: Path) -> None:
    relu = helper.make_node("Relu", ["x"], ["r"], name="relu")  # already in place
    model = _model([relu, _dq(), _q()])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(main, ["check", "--fix", str(path)])
    assert result.exit_code == 0, result.output
    fixed = onnx.load(tmp_path / "m.fix.onnx")
    assert [n.name for n in fixed.graph.node] == ["relu", "q", "d"]
    assert _checker_accepts(fixed)
    assert onnx.load(path) == model  # the input is left as it was


def test_a_cycle_is_ql611_only_not_fixed_and_ort_refuses_it(tmp_path: Path) -> None:
    add = helper.make_node("Add", ["x", "d"], ["a"], name="add")
    model = _model([_q("a"), _dq(), add])
    assert not _runs_in_ort(model)
    code, findings = _check(tmp_path, model)
    assert code == 1 and _codes(findings) == ["QL611"]
    message = findings[0]["message"]
    assert message.startswith("the nodes form a cycle: ")
    # each node of the cycle reads the one before: d -> add -> q -> d
    assert "'d' (DequantizeLinear) -> 'add' (Add) -> 'q' (QuantizeLinear) -> 'd'" in message
    assert findings[0]["fix"] is None


def test_only_the_cycle_is_named_not_what_depends_on_it(tmp_path: Path) -> None:
    add = helper.make_node("Add", ["x", "d"], ["a"], name="add")
    tail = helper.make_node("Relu", ["a"], ["t"], name="tail")
    model = _model([tail, _q("a"), _dq(), add])
    _, findings = _check(tmp_path, model)
    assert _codes(findings) == ["QL611"] and "tail" not in findings[0]["message"]


def test_a_node_reading_its_own_output_is_a_cycle(tmp_path: Path) -> None:
    loop = helper.make_node("Add", ["x", "d"], ["d"], name="self")
    _, findings = _check(tmp_path, _model([loop]))
    assert _codes(findings) == ["QL611"]
    assert "'self' (Add) -> 'self' (Add)" in findings[0]["message"]


def test_a_long_cycle_is_named_in_a_bounded_message(tmp_path: Path) -> None:
    """A cycle through 2,000 nodes: the message named every one (a line of ~40 KB per
    2,000 nodes; 0.9 MB at 50,000); it names the first and last 4 and counts the rest."""
    ring = [helper.make_node("Add", ["x", "r1999"], ["r0"], name="n0")]
    ring += [
        helper.make_node("Relu", [f"r{i - 1}"], [f"r{i}"], name=f"n{i}") for i in range(1, 2000)
    ]
    _, findings = _check(tmp_path, _model([*ring, _q("r0"), _dq()]))
    (finding,) = [f for f in findings if f["rule"] == "QL611"]
    message = finding["message"]
    assert len(message) < 400, len(message)
    prefix, suffix = "the nodes form a cycle of 2000 nodes: ", " (each reads the one before)"
    assert message.startswith(prefix) and message.endswith(suffix)
    path = message[len(prefix) : -len(suffix)].split(" -> ")
    assert len(path) == 10 and path[4] == "(1992 more)" and path[0] == path[-1]
    # consecutive names are consecutive nodes of the ring (each reads the one before)
    for half in (path[:4], path[5:]):
        numbers = [int(name.split("'")[1][1:]) for name in half]
        assert all((b - a) % 2000 == 1 for a, b in itertools.pairwise(numbers))


def test_a_subgraph_reading_an_outer_value_written_after_its_owner(tmp_path: Path) -> None:
    if_node, cond = _if("d")
    model = _model([cond, if_node, _q(), _dq()], output="y")
    assert not _checker_accepts(model)
    code, findings = _check(tmp_path, model)
    assert code == 1 and _codes(findings) == ["QL610"]
    message = findings[0]["message"]
    assert "_id' (Identity) reads 'd' before node 'd' (DequantizeLinear)" in message
    assert message.endswith("(1 more such read(s))")  # both branches read it
    path = tmp_path / "m.onnx"
    assert CliRunner().invoke(main, ["check", "--fix", str(path)]).exit_code == 0
    fixed = onnx.load(tmp_path / "m.fix.onnx")
    assert _checker_accepts(fixed) and _runs_in_ort(fixed)


def test_a_subgraph_reading_values_written_before_its_owner_is_fine(tmp_path: Path) -> None:
    if_node, cond = _if("d")
    model = _model([cond, _q(), _dq(), if_node], output="y")
    assert _checker_accepts(model)
    code, findings = _check(tmp_path, model)
    assert code == 0 and _codes(findings) == []


def test_a_subgraph_reading_its_owners_output_is_a_cycle(tmp_path: Path) -> None:
    if_node, cond = _if("y")  # the branches read the If's own output
    _, findings = _check(tmp_path, _model([cond, _q(), _dq(), if_node], output="y"))
    assert _codes(findings) == ["QL611"]


def test_a_function_out_of_order_is_found_and_sorted(tmp_path: Path) -> None:
    body = [
        helper.make_node("Neg", ["t"], ["o"], name="neg"),
        helper.make_node("Relu", ["i"], ["t"], name="relu"),
    ]
    function = helper.make_function("local", "f", ["i"], ["o"], body, [helper.make_opsetid("", 21)])
    call = helper.make_node("f", ["d"], ["y"], domain="local", name="call")
    model = _model([_q(), _dq(), call], output="y", functions=(function,))
    assert not _runs_in_ort(model)  # ORT 1.31.1 sorts a main graph, not a function
    code, findings = _check(tmp_path, model)
    assert code == 1 and _codes(findings) == ["QL610"]
    assert findings[0]["graph"] == "function:local.f"
    path = tmp_path / "m.onnx"
    assert CliRunner().invoke(main, ["check", "--fix", str(path)]).exit_code == 0
    fixed = onnx.load(tmp_path / "m.fix.onnx")
    assert [n.name for n in fixed.functions[0].node] == ["relu", "neg"]
    assert _checker_accepts(fixed) and _runs_in_ort(fixed)


def test_a_subgraphs_own_nodes_out_of_order_are_sorted(tmp_path: Path) -> None:
    """A branch whose Neg reads what its Relu writes after it: ONNX Runtime 1.31.1
    refuses the model (it sorts a main graph only); --fix sorts the branch."""
    if_node, cond = _if("d")
    (then,) = (a.g for a in if_node.attribute if a.name == "then_branch")
    relu = helper.make_node("Relu", ["d"], ["t"], name="relu")
    then.node[0].input[0] = "t"
    then.node.append(relu)  # written after its reader
    model = _model([cond, _q(), _dq(), if_node], output="y")
    assert not _runs_in_ort(model)
    code, findings = _check(tmp_path, model)
    assert code == 1 and _codes(findings) == ["QL610"]
    assert "'then_id' (Identity) reads 't' before node 'relu' (Relu)" in findings[0]["message"]
    path = tmp_path / "m.onnx"
    assert CliRunner().invoke(main, ["check", "--fix", str(path)]).exit_code == 0
    fixed = onnx.load(tmp_path / "m.fix.onnx")
    (branch,) = (a.g for a in fixed.graph.node[3].attribute if a.name == "then_branch")
    assert [n.name for n in branch.node] == ["relu", "then_id"]
    assert _checker_accepts(fixed) and _runs_in_ort(fixed)


def test_rewrites_refuse_an_input_out_of_order_with_the_finding(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model([_dq(), _q()]), path)
    result = CliRunner().invoke(main, ["fold", str(path), "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 1 and "QL610" in result.output
    assert not (tmp_path / "o.onnx").exists()


def test_deep_nesting_does_not_recurse() -> None:
    """2,000 nested Ifs built in memory (protobuf refuses files this deep, onnx_ir objects
    do not): the walk keeps its own stack, not one Python frame per level, and finds the
    innermost node reading a value its outermost owner writes after itself."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4]))
    late = ir.node("Relu", [x], name="late")  # written after the If that reads it
    inner = ir.node("Identity", [late.outputs[0]], name="innermost")
    body = ir.Graph([], inner.outputs, nodes=[inner], name="g0")
    cond = ir.node("Constant", [], attributes={"value": ir.tensor(True)}, name="c")
    owner = ir.node("If", [cond.outputs[0]], attributes={"then_branch": body})
    for level in range(2000):
        body = ir.Graph([], owner.outputs, nodes=[owner], name=f"g{level + 1}")
        owner = ir.node("If", [cond.outputs[0]], attributes={"then_branch": body})
    main_graph = ir.Graph([x], [late.outputs[0]], nodes=[cond, owner, late], name="main")
    (problem,) = order_problems(ir.Model(main_graph, ir_version=10))
    assert problem.reader.name == "innermost" and problem.writer.name == "late"
    assert problem.cycle == ()
