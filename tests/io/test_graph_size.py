"""Large graphs: the shortcuts that keep every command linear in the node count give the
same answers as the plain path, and the check does not grow faster than the graph."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import quantized
from qdq_models import DQ, load_ir

from qlrewrite.checking.checker import check_model, check_path
from qlrewrite.io.weightless import weightless_from_source, weightless_proto
from qlrewrite.qdq import MAIN
from qlrewrite.qdq.inference import infer

FLOAT = TensorProto.FLOAT
Q = "QuantizeLinear"


def _branch(name: str) -> onnx.GraphProto:
    """An If branch quantizing the outer value ``h`` with a Constant scale."""
    branch_scale = helper.make_tensor("bs", FLOAT, [], [0.25])
    nodes = [
        helper.make_node("Constant", [], [f"{name}_s"], value=branch_scale),
        helper.make_node("Relu", ["h"], [f"{name}_r"]),
        helper.make_node(Q, [f"{name}_r", f"{name}_s"], [f"{name}_q"], name=f"{name}_qn"),
        helper.make_node(DQ, [f"{name}_q", f"{name}_s"], [f"{name}_y"], name=f"{name}_dq"),
    ]
    out = helper.make_tensor_value_info(f"{name}_y", FLOAT, None)
    return helper.make_graph(nodes, name, [], [out])


def _mixed() -> onnx.ModelProto:
    """Shapeless activations through Q/DQ, a large and a small weight, an overridable
    initializer, an If whose branches quantize outer values, and a local function."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.integers(-8, 8, (64, 64), dtype=np.int8), "w")
    inits = [
        w,
        numpy_helper.from_array(np.full(64, 0.5, np.float32), "ws"),
        numpy_helper.from_array(np.array(0.1, np.float32), "as"),
        numpy_helper.from_array(np.array(3, np.uint8), "az"),
        numpy_helper.from_array(np.array([1, 64], np.int64), "shape"),
        numpy_helper.from_array(np.array(0.2, np.float32), "bias"),  # also a graph input
    ]
    dq_fn = helper.make_node(DQ, ["fx", "fs"], ["fy"], name="fdq")
    function = helper.make_function(
        "local", "deq", ["fx", "fs"], ["fy"], [dq_fn], [helper.make_opsetid("", 13)]
    )
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["xr"]),
        helper.make_node(Q, ["xr", "as", "az"], ["xq"], name="q"),
        helper.make_node(DQ, ["xq", "as", "az"], ["xd"], name="dq"),
        helper.make_node(DQ, ["w", "ws"], ["wd"], name="wdq", axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["h0"]),
        helper.make_node("Add", ["h0", "bias"], ["h"]),
        helper.make_node(
            "If", ["c"], ["y"], name="if", then_branch=_branch("then"), else_branch=_branch("else")
        ),
        helper.make_node("deq", ["xq", "as"], ["z"], domain="local", name="call"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", FLOAT, [64]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("bias", FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("y", FLOAT, None),
            helper.make_tensor_value_info("z", FLOAT, None),
        ],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        functions=[function],
        ir_version=8,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)],
    )


def _initializer_names(proto: onnx.ModelProto) -> set[str]:
    names = {t.name for t in proto.graph.initializer}
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        names.update(t.name for t in graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.HasField("g") else [])
                graphs.extend(attr.graphs)
    return names


MODELS = {
    "mixed": _mixed,
    **{c: (lambda c=c: quantized(c)) for c in ("cnn-u8s8", "mlp-nbits-asym", "mlp-int16-contrib")},
}


@pytest.mark.parametrize("name", list(MODELS))
def test_inference_on_the_source_copy_matches_the_serialized_model(name: str) -> None:
    proto = MODELS[name]()
    model = load_ir(proto)
    copy = weightless_from_source(proto)
    assert copy is not None
    assert not any(t.name == "w" for t in copy.graph.initializer)  # the large weight left out
    serialized = infer(model, weightless_proto(model))
    shortcut = infer(model, copy)
    initializers = _initializer_names(proto)
    assert serialized.keys() == shortcut.keys()
    for label, table in serialized.items():
        expected = {k: v for k, v in table.items() if k not in initializers}
        assert {k: v for k, v in shortcut[label].items() if k not in initializers} == expected
        assert len(expected) > 0
    assert check_model(model, weightless=copy) == check_model(model)


def test_mixed_model_needs_inference() -> None:
    """The mixed model's activation facts come from inference: the test above compares
    something (a shape the model does not declare reaches the rules)."""
    table = infer(load_ir(_mixed()))
    assert table[MAIN]["xr"] == (FLOAT, (1, 64))
    assert table[MAIN.subgraph("if", "then_branch")]["then_r"] == (FLOAT, (1, 64))


def test_no_source_copy_when_a_kept_tensor_is_external() -> None:
    proto = _mixed()
    scale = next(t for t in proto.graph.initializer if t.name == "as")
    scale.data_location = TensorProto.EXTERNAL
    scale.ClearField("raw_data")
    scale.ClearField("float_data")
    scale.external_data.add(key="location", value="data.bin")
    assert weightless_from_source(proto) is None
    assert weightless_from_source(_mixed()) is not None


def _then_branch(proto: onnx.ModelProto) -> onnx.GraphProto:
    return next(a.g for n in proto.graph.node for a in n.attribute if a.name == "then_branch")


@pytest.mark.parametrize("change", ["external attribute", "large subgraph weight", "sparse"])
def test_no_source_copy_where_it_could_differ_from_serializing(change: str) -> None:
    """The one walk that judges the copy refuses what serializing would write otherwise: an
    attribute tensor in external data, a large initializer inside a subgraph (hoisting it
    is the serializer's way only for the main graph), a sparse initializer."""
    proto = _mixed()
    branch = _then_branch(proto)
    if change == "external attribute":
        value = next(a.t for n in branch.node for a in n.attribute if a.name == "value")
        value.ClearField("float_data")
        value.data_location = TensorProto.EXTERNAL
        value.external_data.add(key="location", value="data.bin")
    elif change == "large subgraph weight":
        branch.initializer.append(numpy_helper.from_array(np.zeros(1024, np.float32), "big"))
    else:
        sparse = proto.graph.sparse_initializer.add()
        sparse.values.CopyFrom(numpy_helper.from_array(np.array([1.0], np.float32), "sp"))
        sparse.indices.CopyFrom(numpy_helper.from_array(np.array([0], np.int64), "spi"))
        sparse.dims.append(4)
    assert weightless_from_source(proto) is None


def _layers(path: Path, layers: int) -> Path:
    """``5 * layers`` nodes: Q -> DQ of the activation, per-axis DQ of an int8 weight,
    MatMul, Relu; activations without value_info (shape inference needed)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    current = "x"
    for i in range(layers):
        inits += [
            numpy_helper.from_array(np.array(0.02, np.float32), f"as{i}"),
            numpy_helper.from_array(np.array(0, np.uint8), f"az{i}"),
            numpy_helper.from_array(rng.integers(-127, 128, (16, 16), dtype=np.int8), f"w{i}"),
            numpy_helper.from_array(np.full(16, 0.01, np.float32), f"ws{i}"),
        ]
        nodes += [
            helper.make_node(Q, [current, f"as{i}", f"az{i}"], [f"q{i}"], name=f"q{i}"),
            helper.make_node(DQ, [f"q{i}", f"as{i}", f"az{i}"], [f"d{i}"], name=f"dq{i}"),
            helper.make_node(DQ, [f"w{i}", f"ws{i}"], [f"wd{i}"], name=f"wdq{i}", axis=1),
            helper.make_node("MatMul", [f"d{i}", f"wd{i}"], [f"m{i}"], name=f"mm{i}"),
            helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        current = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "layers",
        [helper.make_tensor_value_info("x", FLOAT, [1, 16])],
        [helper.make_tensor_value_info(current, FLOAT, [1, 16])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    onnx.save_model(proto, path)
    return path


def test_check_grows_linearly_with_the_node_count(tmp_path: Path) -> None:
    """A quadratic step (per node work over the whole graph) makes 4x the nodes cost 16x;
    linear is 4x. CPU time of this process (other processes' load does not count), best
    of three runs each, a bound of 8x."""

    def best(path: Path) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            report = check_path(path)
            times.append(time.process_time() - start)
        assert report.load_error is None and report.findings == []
        return min(times)

    small, large = _layers(tmp_path / "small.onnx", 150), _layers(tmp_path / "large.onnx", 600)
    assert check_path(large).nodes_checked == 1800
    seconds_small, seconds_large = best(small), best(large)
    assert seconds_large < 30
    assert seconds_large / seconds_small < 8, (seconds_small, seconds_large)


def test_convert_to_com_microsoft_keeps_the_types_downstream_of_matmul_nbits(
    tmp_path: Path,
) -> None:
    """Weights become MatMulNBits first; ONNX inference stops at that node, so the
    activation Q/DQ after it were refused ('element types ... unknown') until the new
    node's output kept the type inferred before the change."""
    from qlrewrite.io import model_io
    from qlrewrite.passes.convert.domain import ConvertDomainPass
    from qlrewrite.passes.nbits.from_onnx import NBitsFromOnnxPass

    model = model_io.load(_layers(tmp_path / "layers.onnx", 40))
    made = NBitsFromOnnxPass(include_8bit=True)(model)  # int8 weights: opt-in
    assert made.summary["matmul_nbits_made"] == 40
    converted = ConvertDomainPass("com.microsoft")(model)  # strict: raises on a refusal
    assert converted.summary["nodes_converted"] == 80  # every activation Q and DQ
    ops = {(n.domain, n.op_type) for n in model.graph}
    assert ops == {
        ("com.microsoft", "QuantizeLinear"),
        ("com.microsoft", "DequantizeLinear"),
        ("com.microsoft", "MatMulNBits"),
        ("", "Relu"),
    }
    output = next(n for n in model.graph if n.op_type == "MatMulNBits").outputs[0]
    assert output.dtype == ir.DataType.FLOAT
    assert list(output.shape) == [1, 16]


@pytest.mark.parametrize(
    "command",
    ["fold", "convert --to com.microsoft", "upgrade --opset 21"],
)
def test_rewrites_grow_linearly_with_the_node_count(tmp_path: Path, command: str) -> None:
    """Each rewrite, whole (load, input check, passes, output check, save): 4x the nodes
    within 8x the CPU time of this process (a quadratic step makes it 16x). Best of two."""
    from qlrewrite.passes.commands import convert_passes, fold_passes, upgrade_passes
    from qlrewrite.pipeline import rewrite

    passes = {
        "fold": fold_passes,
        "convert --to com.microsoft": lambda: convert_passes("com.microsoft"),
        "upgrade --opset 21": lambda: upgrade_passes(21),
    }[command]

    def best(path: Path) -> float:
        times = []
        for _ in range(2):
            start = time.process_time()
            result = rewrite(
                path, passes(), command=command.split(maxsplit=1)[0], output=tmp_path / "o.onnx"
            )
            times.append(time.process_time() - start)
            assert result.written
        return min(times)

    small, large = _layers(tmp_path / "small.onnx", 100), _layers(tmp_path / "large.onnx", 400)
    seconds_small, seconds_large = best(small), best(large)
    assert seconds_large < 30
    assert seconds_large / seconds_small < 8, (seconds_small, seconds_large)


@pytest.mark.parametrize(
    "command",
    ["fold", "convert --to com.microsoft", "upgrade --opset 21"],
)
def test_each_whole_graph_step_runs_once_per_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Shape inference twice (the input's, shared by the passes, and the output's strict
    one, in onnx.checker's full check), onnx.checker once, onnx_ir's serialization once
    (the output's: the input's weight-free copy, which upgrade's version converter takes,
    comes from the file as parsed), however many passes and nodes."""
    import onnx_ir.serde

    from qlrewrite.passes.commands import convert_passes, fold_passes, upgrade_passes
    from qlrewrite.pipeline import rewrite

    calls: dict[str, int] = {}

    def counted(owner: object, name: str) -> None:
        real = getattr(owner, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    counted(onnx.shape_inference, "infer_shapes")
    counted(onnx.checker, "check_model")
    counted(onnx_ir.serde, "serialize_model")
    passes = {
        "fold": fold_passes,
        "convert --to com.microsoft": lambda: convert_passes("com.microsoft"),
        "upgrade --opset 21": lambda: upgrade_passes(21),
    }[command]()
    model = _layers(tmp_path / "m.onnx", 20)
    rewrite(model, passes, command=command.split(maxsplit=1)[0], output=tmp_path / "o.onnx")
    assert calls == {"infer_shapes": 2, "check_model": 1, "serialize_model": 1}, calls
