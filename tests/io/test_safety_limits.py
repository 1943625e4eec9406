"""Issue 12, finding 7: tiny hostile files that would cost minutes or gigabytes are
refused early, with documented limits that an option raises."""

from __future__ import annotations

import time
from pathlib import Path

from model_io_fixtures import cli
from onnx import TensorProto, helper

OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]


def _io(name: str) -> helper.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])


def _save(path: Path, graph: object, functions: list | None = None) -> Path:
    model = helper.make_model(graph, opset_imports=OPSETS, ir_version=10, functions=functions)
    path.write_bytes(model.SerializeToString())
    return path


def _chain(tmp_path: Path, n: int) -> Path:
    nodes = [helper.make_node("Identity", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    return _save(
        tmp_path / "chain.onnx", helper.make_graph(nodes, "g", [_io("v0")], [_io(f"v{n}")])
    )


def test_too_many_nodes_is_refused_early(tmp_path: Path) -> None:
    path = _chain(tmp_path, 50_000)
    started = time.perf_counter()
    result = cli("--max-nodes", "1000", "check", str(path))
    assert time.perf_counter() - started < 3  # checking them all takes several seconds
    assert result.exit_code == 2
    assert (
        "more than 1,000 nodes; raise the limit with `qlrewrite --max-nodes N" in result.stderr
    )  # issue 23: errors on stderr
    assert cli("--max-nodes", "50000", "check", str(path)).exit_code == 0


def test_limits_last_one_invocation(tmp_path: Path) -> None:
    path = _chain(tmp_path, 10)
    assert cli("--max-nodes", "5", "check", str(path)).exit_code == 2
    assert cli("check", str(path)).exit_code == 0


def test_defaults_are_documented() -> None:
    text = " ".join(cli("--help").output.split())
    assert "--max-nodes N" in text and "[default: 500000;" in text
    assert "--max-depth N" in text and "[default: 64;" in text


def _function_chain(tmp_path: Path, n: int, cycle: bool = False) -> Path:
    functions = []
    for i in range(n):
        callee = f"f{i + 1}" if i + 1 < n else ("f0" if cycle else None)
        body = (
            [helper.make_node(callee, ["a"], ["b"], domain="local")]
            if callee
            else [helper.make_node("Identity", ["a"], ["b"])]
        )
        functions.append(helper.make_function("local", f"f{i}", ["a"], ["b"], body, OPSETS))
    graph = helper.make_graph(
        [helper.make_node("f0", ["x"], ["y"], domain="local")], "g", [_io("x")], [_io("y")]
    )
    return _save(tmp_path / "functions.onnx", graph, functions)


def test_deep_function_chain_is_refused_early(tmp_path: Path) -> None:
    path = _function_chain(tmp_path, 20_000)
    started = time.perf_counter()
    result = cli("upgrade", str(path), "--opset", "23", "-o", str(tmp_path / "o.onnx"))
    assert time.perf_counter() - started < 10  # was 30-233 s
    assert result.exit_code == 2
    assert "functions call functions more than 64 deep" in result.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_function_calling_itself_is_refused(tmp_path: Path) -> None:
    path = _function_chain(tmp_path, 3, cycle=True)
    result = cli("upgrade", str(path), "--opset", "23", "-o", str(tmp_path / "o.onnx"))
    assert result.exit_code == 2
    assert "function local.f0 calls itself" in result.stderr


def test_function_chain_within_the_limit_is_read(tmp_path: Path) -> None:
    path = _function_chain(tmp_path, 10)
    assert cli("check", str(path)).exit_code == 0
    assert cli("--max-depth", "9", "check", str(path)).exit_code == 2


def _nested_ifs(tmp_path: Path, depth: int) -> Path:
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [_io("y")])
    for level in range(depth):
        node = helper.make_node("If", ["c"], ["y"], then_branch=graph, else_branch=graph)
        graph = helper.make_graph([node], f"level{level}", [], [_io("y")])
    main = helper.make_graph(
        graph.node,
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), _io("x")],
        [_io("y")],
    )
    return _save(tmp_path / "nested.onnx", main)


def test_deep_subgraphs_are_refused(tmp_path: Path) -> None:
    path = _nested_ifs(tmp_path, 8)
    result = cli("--max-depth", "5", "check", str(path))
    assert result.exit_code == 2
    assert "subgraphs nested more than 5 deep" in result.stderr  # issue 23: errors on stderr
    assert cli("--max-depth", "8", "check", str(path)).exit_code == 0


def test_depth_counts_subgraph_levels_not_slashes_in_node_names(tmp_path: Path) -> None:
    """PyTorch names nodes '/model/layers.0/If': the depth is two levels here, whatever
    the names hold (a label string split on '/' counted eight)."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [_io("y")])
    for level in range(2):
        node = helper.make_node(
            "If", ["c"], ["y"], then_branch=graph, else_branch=graph, name=f"/model/a/b/If_{level}"
        )
        graph = helper.make_graph([node], f"level{level}", [], [_io("y")])
    main = helper.make_graph(
        graph.node,
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), _io("x")],
        [_io("y")],
    )
    path = _save(tmp_path / "named.onnx", main)
    assert cli("--max-depth", "2", "check", str(path)).exit_code == 0
    assert cli("--max-depth", "1", "check", str(path)).exit_code == 2
