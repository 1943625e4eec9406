"""model_io.load: every unreadable input is one clear InputError; the CLI turns it into one
line on stderr and exit 2 (a traceback only with --debug); loading reads no weights."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from model_io_fixtures import cli, external_tensor, matmul_model, write_external_model
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.errors import InputError
from qlrewrite.io import model_io, output_plan, tensors
from qlrewrite.io.data_problems import data_problems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GOOD = EXAMPLES / "blocked_int4_opset21.onnx"


def _write(path: Path, proto: onnx.ModelProto) -> Path:
    path.write_bytes(proto.SerializeToString())
    return path


def _model_with(tensor: onnx.TensorProto) -> onnx.ModelProto:
    """A model whose weight 'W' is ``tensor`` (any dims: nothing checks the MatMul)."""
    return matmul_model([tensor])


# Each case writes a bad file into the folder and returns its path; the message must
# contain the expected words.
Case = Callable[[Path], Path]


def _missing(tmp: Path) -> Path:
    return tmp / "missing.onnx"


def _directory(tmp: Path) -> Path:
    (tmp / "dir.onnx").mkdir()
    return tmp / "dir.onnx"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "pipe.onnx")  # reading it would block forever
    return tmp / "pipe.onnx"


def _empty(tmp: Path) -> Path:
    (tmp / "empty.onnx").write_bytes(b"")
    return tmp / "empty.onnx"


def _random(tmp: Path) -> Path:
    path = tmp / "random.onnx"
    path.write_bytes(np.random.RandomState(1).bytes(4096))
    return path


def _truncated(tmp: Path) -> Path:
    data = GOOD.read_bytes()
    path = tmp / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    return path


def _truncated_by_one(tmp: Path) -> Path:
    data = GOOD.read_bytes()
    path = tmp / "truncated1.onnx"
    path.write_bytes(data[:-1])
    return path


def _garbage_appended(tmp: Path) -> Path:
    path = tmp / "garbage.onnx"
    path.write_bytes(GOOD.read_bytes() + np.random.RandomState(2).bytes(300))
    return path


def _json(tmp: Path) -> Path:
    # onnx.load would pick its JSON parser from the suffix: we read protobuf only.
    path = tmp / "model.json"
    path.write_text(json.dumps({"irVersion": "8", "graph": {"name": "g"}}))
    return path


def _textproto(tmp: Path) -> Path:
    path = tmp / "model.textproto"
    path.write_text('ir_version: 8 graph { node { op_type: "Relu" } }')
    return path


def _zip(tmp: Path) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.onnx", GOOD.read_bytes())
    path = tmp / "zipped.onnx"
    path.write_bytes(buffer.getvalue())
    return path


def _no_graph(tmp: Path) -> Path:
    return _write(tmp / "nograph.onnx", onnx.ModelProto(ir_version=8))


def _no_ir_version(tmp: Path) -> Path:
    proto = matmul_model()
    proto.ClearField("ir_version")
    return _write(tmp / "noir.onnx", proto)


def _undefined_input(tmp: Path) -> Path:
    proto = matmul_model()
    proto.graph.node.append(helper.make_node("Relu", ["nowhere"], ["z"], name="relu"))
    return _write(tmp / "undefined.onnx", proto)


def _invalid_utf8(where: str) -> Case:
    """A model whose node name or metadata key holds bytes that are not UTF-8."""

    def make(tmp: Path) -> Path:
        proto = matmul_model()
        proto.graph.node[0].name = "NODE_NAME_MARK"
        onnx.helper.set_model_props(proto, {"META_KEY_MARK": "v"})
        mark = b"NODE_NAME_MARK" if where == "node" else b"META_KEY_MARK"
        data = proto.SerializeToString()
        assert data.count(mark) == 1
        path = tmp / f"utf8{where}.onnx"
        path.write_bytes(data.replace(mark, mark[:3] + b"\xdc" + mark[4:]))
        return path

    return make


def _attribute_without_value(tmp: Path) -> Path:
    proto = matmul_model()
    node = helper.make_node("Constant", [], ["c"], name="const")
    attr = node.attribute.add()
    attr.name, attr.type = "value", onnx.AttributeProto.TENSOR  # and no tensor
    proto.graph.node.append(node)
    return _write(tmp / "attrnovalue.onnx", proto)


def _external_missing(tmp: Path) -> Path:
    tensor = external_tensor("W", [64, 32], "gone.data")
    return _write(tmp / "extmissing.onnx", _model_with(tensor))


def _external_absolute(tmp: Path) -> Path:
    outside = tmp / "outside.data"
    outside.write_bytes(b"\0" * 64 * 32 * 4)
    tensor = external_tensor("W", [64, 32], str(outside.resolve()))
    return _write(tmp / "extabs.onnx", _model_with(tensor))


def _external_dotdot(tmp: Path) -> Path:
    (tmp / "outside.data").write_bytes(b"\0" * 64 * 32 * 4)
    (tmp / "sub").mkdir()
    tensor = external_tensor("W", [64, 32], "../outside.data")
    return _write(tmp / "sub" / "extdotdot.onnx", _model_with(tensor))


def _external_symlink(tmp: Path) -> Path:
    (tmp / "outside.data").write_bytes(b"\0" * 64 * 32 * 4)
    (tmp / "sub").mkdir()
    (tmp / "sub" / "link.data").symlink_to(tmp / "outside.data")
    tensor = external_tensor("W", [64, 32], "link.data")
    return _write(tmp / "sub" / "extlink.onnx", _model_with(tensor))


def _external_nul_byte(tmp: Path) -> Path:
    tensor = external_tensor("W", [64, 32], "w\x00.data")
    return _write(tmp / "extnul.onnx", _model_with(tensor))


def _external_link_loop(tmp: Path) -> Path:
    (tmp / "loop.data").symlink_to(tmp / "loop.data")
    tensor = external_tensor("W", [64, 32], "loop.data")
    return _write(tmp / "extloop.onnx", _model_with(tensor))


def _external_strings(tmp: Path) -> Path:
    (tmp / "s.data").write_bytes(b"abcd")
    tensor = external_tensor("W", [2], "s.data", data_type=TensorProto.STRING)
    return _write(tmp / "extstrings.onnx", _model_with(tensor))


def _external_too_short(tmp: Path) -> Path:
    (tmp / "short.data").write_bytes(b"\0" * 100)
    tensor = external_tensor("W", [64, 32], "short.data")
    return _write(tmp / "extshort.onnx", _model_with(tensor))


def _external_length_beyond_file(tmp: Path) -> Path:
    (tmp / "w.data").write_bytes(b"\0" * 64 * 32 * 4)
    tensor = external_tensor("W", [64, 32], "w.data", offset=8, length=64 * 32 * 4)
    return _write(tmp / "extrange.onnx", _model_with(tensor))


def _external_length_wrong(tmp: Path) -> Path:
    (tmp / "w.data").write_bytes(b"\0" * 64 * 32 * 4)
    tensor = external_tensor("W", [64, 32], "w.data", offset=0, length=64 * 32 * 4 - 4)
    return _write(tmp / "extlength.onnx", _model_with(tensor))


def _raw_data_length(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[64, 32])
    tensor.raw_data = b"\0" * (64 * 32 * 4 - 4)
    return _write(tmp / "rawlen.onnx", _model_with(tensor))


def _typed_data_length(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 2])
    tensor.float_data.extend([1.0] * 7)
    return _write(tmp / "typedlen.onnx", _model_with(tensor))


def _int4_packed_length(tmp: Path) -> Path:
    # 5 int4 values need 3 packed int32_data entries (two per entry), not 5.
    tensor = TensorProto(name="W", data_type=TensorProto.INT4, dims=[5])
    tensor.int32_data.extend([1, 2, 3, 4, 5])
    return _write(tmp / "int4len.onnx", _model_with(tensor))


def _wrong_typed_field(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.INT8, dims=[4, 3])
    tensor.uint64_data.extend(range(12))
    return _write(tmp / "wrongfield.onnx", _model_with(tensor))


def _two_typed_fields(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2])
    tensor.float_data.extend([1.0, 2.0])
    tensor.int32_data.extend([1, 2])
    return _write(tmp / "twofields.onnx", _model_with(tensor))


def _raw_and_typed(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2])
    tensor.raw_data = b"\0" * 8
    tensor.float_data.extend([1.0, 2.0])
    return _write(tmp / "rawandtyped.onnx", _model_with(tensor))


def _no_data(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[64, 32])
    return _write(tmp / "nodata.onnx", _model_with(tensor))


def _negative_dims(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[-1, 32])
    tensor.raw_data = b"\0" * 128
    return _write(tmp / "negdims.onnx", _model_with(tensor))


def _huge_dims(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**62, 2**40])
    tensor.raw_data = b"\0" * 16
    return _write(tmp / "hugedims.onnx", _model_with(tensor))


def _unknown_type(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=999, dims=[2], raw_data=b"ab")
    return _write(tmp / "dtype999.onnx", _model_with(tensor))


def _undefined_type(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=0, dims=[2], raw_data=b"ab")
    return _write(tmp / "dtype0.onnx", _model_with(tensor))


def _string_length(tmp: Path) -> Path:
    tensor = TensorProto(name="W", data_type=TensorProto.STRING, dims=[2], string_data=[b"a"])
    return _write(tmp / "strings.onnx", _model_with(tensor))


def _bad_tensor_in_subgraph(tmp: Path) -> Path:
    bad = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[3], float_data=[1.0])
    branch = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])],
        initializer=[bad],
    )
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return _write(tmp / "subgraph.onnx", proto)


INPUT_ERRORS: dict[str, tuple[Case, str]] = {
    "missing": (_missing, "no such file"),
    "directory": (_directory, "is a directory"),
    "fifo": (_fifo, "not a regular file"),
    "empty": (_empty, "empty file"),
    "random-bytes": (_random, "looks like raw tensor data, not an ONNX model"),
    "truncated": (_truncated, "truncated: the file ends at byte"),
    "truncated-by-one": (_truncated_by_one, "truncated: the file ends at byte"),
    "garbage-appended": (_garbage_appended, "other bytes appended to a model?"),
    "json": (_json, "looks like text, not an ONNX model"),
    "textproto": (_textproto, "looks like text, not an ONNX model"),
    "zip": (_zip, "a zip archive, not an ONNX model"),
    "no-graph": (_no_graph, "no graph"),
    "no-ir-version": (_no_ir_version, "no IR version"),
    "undefined-input": (
        _undefined_input,
        "node 'relu' (Relu) uses 'nowhere', which is not a graph input",
    ),
    "invalid-utf8-node-name": (_invalid_utf8("node"), "NodeProto.name is not UTF-8 text"),
    "invalid-utf8-metadata": (
        _invalid_utf8("meta"),
        "StringStringEntryProto.key is not UTF-8 text",
    ),
    "attribute-without-value": (
        _attribute_without_value,
        "attribute 'value' of type TENSOR has no value",
    ),
    "external-missing": (_external_missing, "'gone.data' not found"),
    "external-absolute": (_external_absolute, "absolute path"),
    "external-dotdot": (_external_dotdot, "escapes the model folder"),
    "external-symlink": (_external_symlink, "link that leads out of the model folder"),
    "external-nul-byte": (_external_nul_byte, "cannot be used"),
    "external-link-loop": (_external_link_loop, "'loop.data'"),
    "external-strings": (_external_strings, "holds STRING data in an external data file"),
    "external-too-short": (_external_too_short, "holds 100 bytes but dims [64, 32] need 8192"),
    "external-range": (_external_length_beyond_file, "has 8184 bytes at offset 8"),
    "external-length": (_external_length_wrong, "holds 8188 bytes but dims [64, 32] need 8192"),
    "raw-data-length": (_raw_data_length, "holds 8188 bytes of data but dims [64, 32]"),
    "typed-data-length": (_typed_data_length, "holds 7 values but dims [4, 2] need 8"),
    "int4-packed-length": (_int4_packed_length, "holds 5 values but dims [5] need 3"),
    "wrong-typed-field": (
        _wrong_typed_field,
        "holds INT8 data in uint64_data (ONNX keeps it in int32_data)",
    ),
    "two-typed-fields": (_two_typed_fields, "holds FLOAT data in float_data, int32_data"),
    "raw-and-typed": (_raw_and_typed, "holds FLOAT data in raw_data and in float_data"),
    "no-data": (_no_data, "has no data but dims [64, 32]"),
    "negative-dims": (_negative_dims, "negative dimension in dims [-1, 32]"),
    "huge-dims": (_huge_dims, "dims [4611686018427387904, 1099511627776]"),
    "unknown-type": (_unknown_type, "999"),
    "undefined-type": (_undefined_type, "UNDEFINED"),
    "string-length": (_string_length, "holds 1 values but dims [2] need 2"),
    "subgraph-tensor": (
        _bad_tensor_in_subgraph,
        "'c' (main/If(y).else_branch): holds 1 values but dims [3] need 3 values (and 1 more)",
    ),
}


@pytest.mark.parametrize("level", [logging.NOTSET, logging.ERROR, logging.CRITICAL])
def test_undefined_input_found_whatever_the_log_level(tmp_path: Path, level: int) -> None:
    logger = logging.getLogger("onnx_ir")
    previous = logger.level
    logger.setLevel(level)
    try:
        with pytest.raises(InputError, match="uses 'nowhere'"):
            model_io.load(_undefined_input(tmp_path))
    finally:
        logger.setLevel(previous)
    assert logging.getLogger("onnx_ir.serde").level == logging.NOTSET


@pytest.mark.parametrize("case", INPUT_ERRORS, ids=list(INPUT_ERRORS))
def test_input_error_is_one_clear_line(case: str, tmp_path: Path) -> None:
    make, words = INPUT_ERRORS[case]
    path = make(tmp_path)
    with pytest.raises(InputError) as caught:
        model_io.load(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert words in message


@pytest.mark.parametrize("case", INPUT_ERRORS, ids=list(INPUT_ERRORS))
def test_cli_input_error_one_line_exit_2(case: str, tmp_path: Path) -> None:
    make, words = INPUT_ERRORS[case]
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = cli("info", str(path))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("qlrewrite: error: ")
    assert words in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_random_blobs_never_escape(tmp_path: Path) -> None:
    """Arbitrary bytes, including ones that parse as a protobuf, give an InputError only."""
    rng = np.random.RandomState(3)
    blobs = [rng.bytes(int(n)) for n in rng.randint(1, 300, size=60)]
    # Valid protobuf wire data that is not a model: field 1 (ir_version) only, a graph
    # field holding junk, an unknown field.
    blobs += [b"\x08\x07", b"\x3a\x02\x0a\x00", b"\x08\x07\x3a\x00", b"\xf8\x01\x01", b"\x00"]
    path = tmp_path / "blob.onnx"
    for blob in blobs:
        path.write_bytes(blob)
        try:
            model_io.load(path)
        except InputError as exc:
            assert "\n" not in str(exc)
        # A blob that happens to be a valid model is fine too.


def test_check_data_false_leaves_problems_to_data_problems(tmp_path: Path) -> None:
    path = _raw_data_length(tmp_path)
    model = model_io.load(path, check_data=False)
    problems = data_problems(model)
    assert [(p.kind, p.tensor, p.graph) for p in problems] == [("data-length", "W", "main")]


def test_external_data_inside_folder_loads(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    path, w = write_external_model(tmp_path)
    model = model_io.load(path)
    tensor = model.graph.initializers["W"].const_value
    assert isinstance(tensor, ir.ExternalTensor)
    np.testing.assert_array_equal(tensor.numpy(), w)


def test_external_data_in_a_subfolder_and_an_inner_symlink_load(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    w = np.arange(8, dtype=np.float32)
    (tmp_path / "weights" / "w.bin").write_bytes(w.tobytes())
    (tmp_path / "alias.bin").symlink_to(tmp_path / "weights" / "w.bin")
    tensors = [
        external_tensor("W", [8], "weights/w.bin"),
        external_tensor("V", [8], "alias.bin"),
    ]
    proto = matmul_model([numpy_helper.from_array(np.ones((64, 32), np.float32), "W0")])
    proto.graph.initializer.extend(tensors)
    model = model_io.load(_write(tmp_path / "m.onnx", proto))
    for name in ("W", "V"):
        np.testing.assert_array_equal(model.graph.initializers[name].const_value.numpy(), w)


def test_debug_shows_a_traceback(tmp_path: Path) -> None:
    path = _raw_data_length(tmp_path)
    command = [sys.executable, "-m", "qlrewrite"]
    plain = subprocess.run(
        [*command, "info", str(path)], capture_output=True, text=True, check=False
    )
    assert plain.returncode == 2
    assert len(plain.stderr.splitlines()) == 1
    assert "Traceback" not in plain.stderr
    debug = subprocess.run(
        [*command, "--debug", "info", str(path)], capture_output=True, text=True, check=False
    )
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert "InputError" in debug.stderr
    assert debug.stderr.splitlines()[-1] == plain.stderr.splitlines()[0]


TYPED_VALUES = {
    TensorProto.FLOAT: [1.5, -2.0, 3.25],
    TensorProto.DOUBLE: [1.5, -2.0, 3.25],
    TensorProto.FLOAT16: [1.5, -2.0, 3.25],
    TensorProto.BFLOAT16: [1.5, -2.0, 3.25],
    TensorProto.INT8: [1, -2, 3],
    TensorProto.UINT16: [1, 2, 60000],
    TensorProto.INT4: [1, -2, 7],
    TensorProto.UINT4: [1, 2, 15],
    TensorProto.BOOL: [True, False, True],
    TensorProto.INT64: [1, -2, 2**40],
    TensorProto.UINT32: [1, 2, 2**32 - 1],
    TensorProto.UINT64: [1, 2, 2**63],
    TensorProto.COMPLEX64: [1 + 2j, 3 - 4j, 0j],
    TensorProto.STRING: [b"a", b"bc", b""],
}


@pytest.mark.parametrize(
    "data_type", TYPED_VALUES, ids=[TensorProto.DataType.Name(t) for t in TYPED_VALUES]
)
def test_typed_fields_as_onnx_writes_them_load(tmp_path: Path, data_type: int) -> None:
    """onnx.helper puts each type in its own field (and packs int4): all accepted."""
    tensor = helper.make_tensor("V", data_type, [3], TYPED_VALUES[data_type])
    assert not tensor.HasField("raw_data")
    proto = matmul_model()
    proto.graph.initializer.append(tensor)
    model = model_io.load(_write(tmp_path / "typed.onnx", proto))
    expected = numpy_helper.to_array(tensor)
    if data_type == TensorProto.STRING:  # onnx decodes strings; ONNX holds bytes
        expected = np.array(TYPED_VALUES[data_type])
    np.testing.assert_array_equal(model.graph.initializers["V"].const_value.numpy(), expected)


# --------------------------------------------------------------------------- laziness


def _sparse_external_model(folder: Path, n_tensors: int, tensor_bytes: int) -> Path:
    """A model of ``n_tensors`` float tensors in one sparse data file (no disk used)."""
    side = int(np.sqrt(tensor_bytes // 4))
    data = folder / "big.onnx.data"
    with open(data, "wb") as handle:
        handle.truncate(n_tensors * side * side * 4)
    tensors = [
        external_tensor(f"W{i}", [side, side], data.name, offset=i * side * side * 4)
        for i in range(n_tensors)
    ]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h0"])]
    for i in range(1, n_tensors):
        nodes.append(helper.make_node("MatMul", [f"h{i - 1}", f"W{i}"], [f"h{i}"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info(f"h{n_tensors - 1}", TensorProto.FLOAT, [1, side])],
        initializer=tensors,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return _write(folder / "big.onnx", proto)


def test_load_reads_no_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """512 MiB of sparse external data: load stats the file but never maps or reads it."""
    path = _sparse_external_model(tmp_path, n_tensors=8, tensor_bytes=64 * 1024**2)

    def refuse(self: ir.ExternalTensor) -> None:
        raise AssertionError(f"external tensor {self.name} was read")

    monkeypatch.setattr(ir.ExternalTensor, "_load", refuse)
    tracemalloc.start()
    started = time.perf_counter()
    model = model_io.load(path)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 0.5
    assert peak < 2 * 1024**2  # Python allocations while loading: the graph, not the data
    loaded = [v.const_value for v in model.graph.initializers.values()]
    assert all(isinstance(t, ir.ExternalTensor) and t.raw is None for t in loaded)
    assert tensors.initializer_bytes(model) == 8 * 64 * 1024**2
    assert tensors.uses_external_data(model)


# --------------------------------------------------------------------------- small facts


def test_same_file(tmp_path: Path) -> None:
    real = tmp_path / "a.onnx"
    real.write_bytes(b"x")
    (tmp_path / "link.onnx").symlink_to(real)
    os.link(real, tmp_path / "hard.onnx")
    assert output_plan.same_file(tmp_path / "link.onnx", real)
    assert output_plan.same_file(tmp_path / "hard.onnx", real)
    assert output_plan.same_file(tmp_path / "sub" / ".." / "a.onnx", real)
    assert not output_plan.same_file(tmp_path / "b.onnx", real)


def test_initializer_bytes_counts_sub_byte_and_strings(tmp_path: Path) -> None:
    extra = [
        helper.make_tensor("i4", TensorProto.INT4, [5], [1, 2, 3, 4, 5]),  # 3 bytes
        helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"]),  # not counted
        numpy_helper.from_array(np.zeros((3, 4), np.float16), "h"),  # 24 bytes
    ]
    proto = matmul_model()
    proto.graph.initializer.extend(extra)
    model = model_io.load(_write(tmp_path / "m.onnx", proto))
    assert tensors.initializer_bytes(model) == 64 * 32 * 4 + 3 + 24
    assert not tensors.uses_external_data(model)


def test_a_data_file_and_a_truncated_model_are_named_as_what_they_are(tmp_path) -> None:
    """`check` of a model's external data file, or of a model cut short, says what it is
    (it said only "not an ONNX model (Wire format was corrupt)")."""
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["w"], ["y"])],
            "g",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])],
            initializer=[numpy_helper.from_array(np.linspace(-1, 1, 256, dtype=np.float32), "w")],
        )
    )
    onnx.save_model(
        model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0
    )
    result = cli("check", str(tmp_path / "m.data"))
    assert result.exit_code == 2
    assert "m.data: looks like raw tensor data, not an ONNX model" in result.stderr
    whole = tmp_path / "m.onnx"
    data = whole.read_bytes()
    # the graph is ModelProto field 7: its tag (0x3a) and length at the start of the file
    at = data.index(b"\x3a")
    length, shift, end = 0, 0, at + 1
    while True:
        length |= (data[end] & 0x7F) << shift
        shift, end = shift + 7, end + 1
        if data[end - 1] < 0x80:
            break
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: end + length // 2])
    result = cli("check", str(cut))
    assert (
        f"cut.onnx: truncated: the file ends at byte {end + length // 2}, inside a field of "
        f"{length} bytes: graph (from byte {at})"
    ) in result.stderr
