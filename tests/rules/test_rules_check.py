"""The check pass: where nodes are found (subgraphs, functions), where facts come from
(initializers, Constant nodes, graph inputs, value_info, shape inference), file hygiene,
and that nothing is modified or read that need not be."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from qdq_models import DQ, DT, load_ir, qdq_model

from qlrewrite.checking.checker import check_model, check_path

FLOAT = TensorProto.FLOAT


def _rules(model: ir.Model) -> list[str]:
    return [f.rule for f in check_model(model).findings]


def _bad_dq_node(name: str, x: str = "x", out: str = "y") -> list[onnx.NodeProto]:
    """A DQ whose per-axis scale has 5 entries for a dimension of 4 (QL403)."""
    scale = helper.make_tensor("s_" + name, FLOAT, [5], [0.5] * 5)
    return [
        helper.make_node("Constant", [], ["s_" + name], value=scale),
        helper.make_node(DQ, [x, "s_" + name], [out], name=name, axis=0),
    ]


def test_nested_subgraphs_are_checked_with_their_label() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [4, 3])
    then_out = helper.make_tensor_value_info("t", FLOAT, [4, 3])
    else_out = helper.make_tensor_value_info("e", FLOAT, [4, 3])
    t2 = helper.make_tensor_value_info("t2", FLOAT, [4, 3])
    inner_if_then = helper.make_graph(_bad_dq_node("deep", out="t2"), "deep_then", [], [t2])
    inner = helper.make_node(
        "If", ["c"], ["t"], name="inner_if", then_branch=inner_if_then, else_branch=inner_if_then
    )
    then_g = helper.make_graph([inner], "then", [], [then_out])
    else_g = helper.make_graph(_bad_dq_node("shallow", out="e"), "else", [], [else_out])
    outer = helper.make_node(
        "If", ["c"], ["y"], name="outer_if", then_branch=then_g, else_branch=else_g
    )
    graph = helper.make_graph(
        [outer],
        "g",
        [x, helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FLOAT, [4, 3])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    report = check_model(load_ir(proto))
    graphs = sorted({(f.node, f.graph) for f in report.findings if f.rule == "QL403"})
    assert graphs == [
        ("deep", "main/outer_if.then_branch/inner_if.else_branch"),
        ("deep", "main/outer_if.then_branch/inner_if.then_branch"),
        ("shallow", "main/outer_if.else_branch"),
    ]
    assert report.nodes_checked == 3


def _function_model(call_scales: list[int], axis_ref: bool = False) -> onnx.ModelProto:
    """A local function f(x, s) = DQ(x, s, axis=0 or @ax) called once per scale length."""
    attrs = {"axis": 0}
    dq = helper.make_node(DQ, ["fx", "fs"], ["fy"], name="fdq", **({} if axis_ref else attrs))
    if axis_ref:
        ref = helper.make_attribute_ref("axis", onnx.AttributeProto.INT)
        dq.attribute.append(ref)
    function = helper.make_function(
        "local",
        "f",
        ["fx", "fs"],
        ["fy"],
        [dq],
        [helper.make_opsetid("", 13)],
        attributes=["ax"] if axis_ref else [],
    )
    if axis_ref:
        function.node[0].attribute[0].ref_attr_name = "ax"
    nodes, inits, outputs = [], [], []
    for i, length in enumerate(call_scales):
        inits.append(helper.make_tensor(f"s{i}", FLOAT, [length], [0.5] * length))
        kwargs = {"ax": 0} if axis_ref else {}
        nodes.append(
            helper.make_node(
                "f", ["x", f"s{i}"], [f"y{i}"], domain="local", name=f"call{i}", **kwargs
            )
        )
        outputs.append(helper.make_tensor_value_info(f"y{i}", FLOAT, [4, 3]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [4, 3])],
        outputs,
        initializer=inits,
    )
    return helper.make_model(
        graph,
        functions=[function],
        ir_version=8,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)],
    )


def test_function_checked_with_each_call_site() -> None:
    report = check_model(load_ir(_function_model([4, 5])))
    hits = [f for f in report.findings if f.rule == "QL403"]
    assert len(hits) == 1 and hits[0].graph == "function:local.f" and "[5]" in hits[0].message
    assert "called from 'call1' in main" in hits[0].message
    assert report.nodes_checked == 1
    assert check_model(load_ir(_function_model([4, 4]))).findings == []


def test_function_attribute_reference_resolved_from_call_site() -> None:
    proto = _function_model([5], axis_ref=True)
    assert "QL403" in _rules(load_ir(proto))
    onnx.checker.check_model(_function_model([4], axis_ref=True))
    assert _rules(load_ir(_function_model([4], axis_ref=True))) == []


def test_function_without_call_site_is_checked_alone() -> None:
    proto = _function_model([4])
    del proto.graph.node[:]
    del proto.graph.output[:]
    proto.functions[0].node[0].attribute[0].i = 7  # unused axis without shapes: nothing to say
    proto.functions[0].node[0].attribute.append(helper.make_attribute("saturate", 1))
    report = check_model(load_ir(proto))
    assert [f.rule for f in report.findings] == ["QL201"]
    assert report.findings[0].graph == "function:local.f"
    assert "called from" not in report.findings[0].message


def test_same_problem_at_two_call_sites_reported_once() -> None:
    proto = _function_model([4, 4])
    proto.functions[0].node[0].attribute.append(helper.make_attribute("saturate", 1))
    report = check_model(load_ir(proto))
    assert [f.rule for f in report.findings] == ["QL201"]


def test_shapes_from_shape_inference() -> None:
    """x comes out of a Transpose: its shape is known only through shape inference."""
    scale = helper.make_tensor("s", FLOAT, [4], [0.5] * 4)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
        helper.make_node(DQ, ["xt", "s"], ["y"], name="dq", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [4, 3])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        initializer=[scale],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    assert _rules(load_ir(proto)) == []  # xt is [3, 4]: 4 scales on axis 1 is right
    proto.graph.node[1].attribute[0].i = 0
    assert "QL403" in _rules(load_ir(proto))  # 4 scales on a dim of 3


def test_shapes_from_value_info_and_graph_inputs() -> None:
    proto = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0}, scale_as="input")
    assert "QL403" in _rules(load_ir(proto))  # scale is a graph input: shape only
    proto = qdq_model(DQ, 13, scale=0.0, scale_as="input")
    assert _rules(load_ir(proto)) == []  # values of graph inputs are unknown


def test_initializer_overridden_by_graph_input_is_not_a_constant() -> None:
    proto = qdq_model(DQ, 13, scale=0.0)
    proto.graph.input.append(helper.make_tensor_value_info("scale", FLOAT, []))
    assert "QL501" not in _rules(load_ir(proto))


def test_symbolic_dims_never_alarm() -> None:
    proto = qdq_model(
        DQ, 13, x_shape=("N", "C"), scale_shape=(5,), zp_shape=(5,), attrs={"axis": 1}
    )
    assert _rules(load_ir(proto)) == []


def test_check_changes_nothing() -> None:
    model = load_ir(qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0}))
    before = ir.serde.serialize_model(model).SerializeToString()
    report = check_model(model)
    assert [f.rule for f in report.findings] == ["QL403"]
    assert ir.serde.serialize_model(model).SerializeToString() == before


def test_non_qdq_models_have_nothing_to_check_and_say_so() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [2])],
        [helper.make_tensor_value_info("y", FLOAT, [2])],
    )
    report = check_model(load_ir(helper.make_model(graph)))
    assert report.nodes_checked == 0 and [f.rule for f in report.findings] == ["QL607"]


# --------------------------------------------------------------------------- files


def _save_external(proto: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save_model(
        proto,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
    )
    return path


def _weights_model(rows: int = 64, cols: int = 64) -> onnx.ModelProto:
    weights = helper.make_tensor(
        "w", TensorProto.INT8, [rows, cols], b"\x01" * (rows * cols), raw=True
    )
    scale = helper.make_tensor("s", FLOAT, [rows], [0.1] * rows)
    zp = helper.make_tensor("zp", TensorProto.INT8, [rows], [0] * rows)
    node = helper.make_node(DQ, ["w", "s", "zp"], ["y"], name="dqw", axis=0)
    graph = helper.make_graph(
        [node],
        "g",
        [],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        initializer=[weights, scale, zp],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_check_path_clean_file(tmp_path: Path) -> None:
    path = _save_external(_weights_model(), tmp_path)
    report = check_path(path)
    assert report.load_error is None and report.findings == [] and report.nodes_checked == 1
    assert report.path == str(path)


def test_check_path_unreadable_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x00not a model")
    report = check_path(path)
    assert report.load_error and report.findings == []
    assert check_path(tmp_path / "missing.onnx").load_error


@pytest.mark.parametrize(
    ("damage", "code"),
    [("delete", "QL602"), ("escape", "QL603"), ("truncate", "QL604"), ("length", "QL605")],
)
def test_check_path_data_problems_are_findings(tmp_path: Path, damage: str, code: str) -> None:
    path = _save_external(_weights_model(), tmp_path)
    data = tmp_path / "m.data"
    if damage == "delete":
        data.unlink()
    elif damage == "escape":
        proto = onnx.load_model(path, load_external_data=False)
        for entry in proto.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = "../outside.data"
        onnx.save_model(proto, path)
    elif damage == "truncate":
        with open(data, "r+b") as handle:
            handle.truncate(100)
    else:
        proto = onnx.load_model(path, load_external_data=False)
        proto.graph.initializer[0].dims[0] = 65
        onnx.save_model(proto, path)
    report = check_path(path)
    assert report.load_error is None
    hits = [f for f in report.findings if f.rule == code]
    assert hits and hits[0].severity == "error" and "'w'" in hits[0].message


def test_large_external_model_is_checked_without_reading_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MB of weights in 16 tensors: fast, and no external tensor is read."""
    rows = cols = 2048
    nodes, inits, outputs = [], [], []
    for i in range(16):
        inits.append(
            helper.make_tensor(
                f"w{i}", TensorProto.INT8, [rows, cols], b"\x01" * (rows * cols), raw=True
            )
        )
        inits.append(helper.make_tensor(f"s{i}", FLOAT, [rows], [0.1] * rows))
        nodes.append(helper.make_node(DQ, [f"w{i}", f"s{i}"], [f"y{i}"], name=f"dq{i}", axis=0))
        outputs.append(helper.make_tensor_value_info(f"y{i}", FLOAT, None))
    graph = helper.make_graph(nodes, "g", [], outputs, initializer=inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = tmp_path / "big.onnx"
    onnx.save_model(
        proto, path, save_as_external_data=True, location="big.data", size_threshold=1024 * 1024
    )
    del proto, inits
    reads: list[str] = []
    original = ir.ExternalTensor.numpy

    def spy(self):
        reads.append(self.name)
        return original(self)

    monkeypatch.setattr(ir.ExternalTensor, "numpy", spy)
    started = time.perf_counter()
    report = check_path(path)
    elapsed = time.perf_counter() - started
    assert report.load_error is None and report.nodes_checked == 16 and report.findings == []
    assert reads == []
    assert elapsed < 2.0


def test_constant_scale_values_read_only_when_small() -> None:
    """A 2 MB scale is not read (no value warnings), its shape still is."""
    n = 512 * 1024
    proto = qdq_model(
        DQ, 13, x_shape=(n,), scale_shape=(n,), scale=0.0, zp_type=None, attrs={"axis": 0}
    )
    rules = _rules(load_ir(proto))
    assert "QL501" not in rules
    small = qdq_model(
        DQ, 13, x_shape=(8,), scale_shape=(8,), scale=np.zeros(8), zp_type=None, attrs={"axis": 0}
    )
    assert "QL501" in _rules(load_ir(small))


def test_explicit_ai_onnx_domain_and_future_opset() -> None:
    proto = qdq_model(
        DQ, 13, domain="ai.onnx", imports={"ai.onnx": 13}, scale_shape=(5,), attrs={"axis": 0}
    )
    report = check_model(load_ir(proto))
    assert [(f.rule, f.domain, f.opset) for f in report.findings] == [("QL403", "", 13)]
    future = qdq_model(DQ, 30, x_type=DT.FLOAT6E2M3, ir_version=14)
    assert check_model(load_ir(future)).findings == []  # opset 30: the last known version


def test_unnamed_node_is_named_by_its_output() -> None:
    proto = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})
    proto.graph.node[0].name = ""
    (finding,) = check_model(load_ir(proto)).findings
    assert finding.node == "" and "output 'y'" in finding.message


def test_sibling_subgraphs_reusing_a_name_get_their_own_inferred_shapes() -> None:
    """then: t = Transpose(x) is [3, 4]; else: t = Identity(x) is [4, 3]; no value_info."""

    def branch(op: str, length: int, out: str) -> onnx.GraphProto:
        scale = helper.make_tensor(f"s_{out}", FLOAT, [length], [0.5] * length)
        kwargs = {"perm": [1, 0]} if op == "Transpose" else {}
        nodes = [
            helper.make_node(op, ["x"], ["t"], **kwargs),
            helper.make_node("Constant", [], [f"s_{out}"], value=scale),
            helper.make_node(DQ, ["t", f"s_{out}"], [out], name=f"dq_{out}", axis=1),
        ]
        return helper.make_graph(nodes, out, [], [helper.make_tensor_value_info(out, FLOAT, None)])

    node = helper.make_node(
        "If",
        ["c"],
        ["y"],
        name="if",
        then_branch=branch("Transpose", 4, "a"),
        else_branch=branch("Identity", 3, "b"),
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.UINT8, [4, 3]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", FLOAT, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    report = check_model(load_ir(proto))
    assert report.nodes_checked == 2 and report.findings == []
    (else_branch,) = [a.g for a in proto.graph.node[0].attribute if a.name == "else_branch"]
    tensor = else_branch.node[1].attribute[0].t
    tensor.dims[0] = 4  # else: 4 scales on a dim of 3
    tensor.float_data.append(0.5)
    hits = check_model(load_ir(proto)).findings
    assert [(f.rule, f.node) for f in hits] == [("QL403", "dq_b")]
