"""Saving without external data one initializer at a time (issue 23 item 4): the file
parses to the ModelProto onnx_ir's own save writes, and fold's peak memory no longer
holds the output several times over."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_tensor

from qlrewrite.io.inline_save import _padded_varint, save_inline
from qlrewrite.io.wire import encode_varint, read_varint, skip_value

_CONSTANT = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(3.0)))
_CALL = helper.make_node("f", ["w"], ["z"], domain="local")


def _neg_function() -> onnx.FunctionProto:
    """local.f(a) = Neg(a)."""
    return helper.make_function(
        "local",
        "f",
        ["a"],
        ["b"],
        [helper.make_node("Neg", ["a"], ["b"])],
        [helper.make_opsetid("", 21)],
    )


def _rich_model(folder: Path) -> Path:
    """Initializers of several types (one a string, one in external data), a Constant
    node, an If whose branch has its own initializer, a function, metadata."""
    branch_init = numpy_helper.from_array(np.array([1.5], np.float32), "b_init")
    then = helper.make_graph(
        [helper.make_node("Add", ["w", "b_init"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [4])],
        [branch_init],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [4])],
    )
    nodes = [
        _CONSTANT,
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
        _CALL,
    ]
    function = _neg_function()
    inits = [
        numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"),
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.arange(300_000, dtype=np.int8).reshape(600, 500), "big"),
        helper.make_tensor("s", onnx.TensorProto.STRING, [2], [b"a", b"bc"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [4]) for n in ("y", "z")],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        functions=[function],
        ir_version=10,
        producer_name="test",
    )
    helper.set_model_props(model, {"key": "value"})
    path = folder / "rich.onnx"
    onnx.save(model, path, save_as_external_data=True, location="rich.data", size_threshold=1000)
    return path


def test_the_file_parses_to_what_onnx_ir_writes(tmp_path: Path) -> None:
    source = _rich_model(tmp_path)
    model = ir.load(source)
    save_inline(model, tmp_path / "streamed.onnx")
    ir.save(ir.load(source), tmp_path / "reference.onnx")
    streamed = onnx.load(tmp_path / "streamed.onnx", load_external_data=False)
    reference = onnx.load(tmp_path / "reference.onnx", load_external_data=False)
    for init in reference.graph.initializer:  # onnx_ir keeps external tensors external
        if init.data_location == onnx.TensorProto.EXTERNAL:
            load_external_data_for_tensor(init, str(tmp_path))
            init.ClearField("data_location")
            del init.external_data[:]
    assert streamed == reference
    assert not any(i.external_data for i in streamed.graph.initializer)  # all inside
    onnx.checker.check_model(streamed, full_check=True)
    big = next(i for i in streamed.graph.initializer if i.name == "big")
    assert numpy_helper.to_array(big).tobytes() == np.arange(300_000, dtype=np.int8).tobytes()
    assert [i.name for i in streamed.graph.initializer] == ["w", "cond", "big", "s"]


def test_varints() -> None:
    assert encode_varint(1) == b"\x01" and encode_varint(300) == b"\xac\x02"
    assert _padded_varint(300, 5) == b"\xac\x82\x80\x80\x00"
    with pytest.raises(ValueError, match="does not fit"):
        _padded_varint(1 << 35, 5)


def _dq_model(path: Path, weights: int) -> int:
    """``weights`` int8 weights of 4 MiB behind DequantizeLinear; the folded bytes."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(weights):
        w = rng.integers(-128, 127, size=(2048, 2048), dtype=np.int8)
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(np.full((2048,), 0.01, np.float32), f"s{i}"),
        ]
        nodes += [
            helper.make_node("DequantizeLinear", [f"w{i}", f"s{i}"], [f"d{i}"], axis=1),
            helper.make_node("MatMul", [x, f"d{i}"], [f"h{i}"]),
        ]
        x = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2048])],
        [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, 2048])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, path)
    return weights * 2048 * 2048 * 4


def test_fold_peak_memory_is_one_tensor_not_the_model_four_times(tmp_path: Path) -> None:
    """A 24 MiB model folding into 96 MiB peaked at 402 MB before (benchmarks/README.md)."""
    output = _dq_model(tmp_path / "m.onnx", 6)
    args = ["fold", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out.onnx"), "-q"]
    # VmHWM: this process's peak (ru_maxrss would also count the forked test process)
    code = (
        "from qlrewrite.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit as exit:\n    assert not exit.code\n"
        "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak = int(done.stdout.split()[-2]) * 1024  # "VmHWM:  168152 kB"
    assert peak < output + 120 * 2**20, f"{peak / 2**20:.0f} MiB for a {output >> 20} MiB output"
    assert (tmp_path / "out.onnx").stat().st_size > output


def _plain_model(folder: Path) -> Path:
    """No subgraph initializer: small and large initializers (one in external data, one
    also a graph input), a Constant, a function."""
    nodes = [
        _CONSTANT,
        helper.make_node("Add", ["w", "x"], ["y"]),
        _CALL,
    ]
    function = _neg_function()
    inits = [
        numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"),
        numpy_helper.from_array(np.arange(4, dtype=np.float32), "x"),
        numpy_helper.from_array(np.arange(300_000, dtype=np.int8).reshape(600, 500), "big"),
        numpy_helper.from_array(np.arange(2000, dtype=np.float32), "big_input"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("big_input", onnx.TensorProto.FLOAT, [2000])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [4]) for n in ("y", "z")],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        functions=[function],
        ir_version=10,
    )
    path = folder / "plain.onnx"
    onnx.save(model, path, save_as_external_data=True, location="plain.data", size_threshold=1000)
    return path


@pytest.mark.parametrize("make", [_plain_model, _rich_model])
def test_written_from_the_weightless_proto_the_file_is_the_same(
    tmp_path: Path, make: object
) -> None:
    """The rewrite saves from the proto its output check serialized (one serialization
    per run): byte for byte the file of a save that serializes the model itself."""
    from qlrewrite.io.inline_save import _from_weightless
    from qlrewrite.io.weightless import weightless_proto

    model = ir.load(make(tmp_path))  # type: ignore[operator]
    weightless = weightless_proto(model)
    # copied unless a subgraph has initializers (the rich model's If branch)
    assert (_from_weightless(weightless, model) is None) == (make is _rich_model)
    as_made = weightless.SerializeToString()
    save_inline(model, tmp_path / "serialized.onnx")
    save_inline(model, tmp_path / "copied.onnx", weightless=weightless)
    assert (tmp_path / "copied.onnx").read_bytes() == (tmp_path / "serialized.onnx").read_bytes()
    assert weightless.SerializeToString() == as_made  # left as it came


def _top_fields(data: bytes) -> list[int]:
    """The field numbers of a serialized ModelProto, in the order they are written."""
    numbers, position = [], 0
    while position < len(data):
        key, position = read_varint(data, position, len(data))
        if key & 7 == 2:
            length, position = read_varint(data, position, len(data))
            position += length
        else:
            position = skip_value(data, key & 7, position, len(data))
        numbers.append(key >> 3)
    return numbers


def test_the_model_fields_keep_protobufs_order_around_the_graph(tmp_path: Path) -> None:
    """ir_version, then the graph, then the opset imports, functions and metadata, as
    onnx writes them: OpenVINO 2026.4.1 refuses a file whose two opset imports come before
    the graph when no producer name precedes them (the slow test of QL750's fix reads one
    written so)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.arange(2, dtype=np.float32), "w")],
    )
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=imports, functions=[_neg_function()])
    helper.set_model_props(model, {"key": "value"})
    model.ir_version = 10
    save_inline(ir.serde.deserialize_model(model), tmp_path / "m.onnx")
    written = (tmp_path / "m.onnx").read_bytes()
    fields = _top_fields(written)
    assert fields == _top_fields(model.SerializeToString()) == sorted(fields)
    assert onnx.load_model_from_string(written) == ir.serde.serialize_model(
        ir.serde.deserialize_model(model)
    )
