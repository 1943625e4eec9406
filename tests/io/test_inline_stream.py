"""Inline weights stream like external ones (issue 39 item 3).

A model whose weights are inside the .onnx file is walked, not parsed whole: tensors
above a few bytes stay in the file and are read when needed. What is checked here:

- outputs are byte for byte those of the model read whole (the loader as it was: every
  tensor parsed into memory), for every kind of tensor: raw data, typed fields
  (float_data, int32_data, int64_data), 4-bit packing, empty tensors, initializers of
  subgraphs, Constant nodes of the main graph and of functions; and the same
  ModelProto onnx_ir writes from the model read whole;
- peak memory: checking and folding an inline model of 40 MiB costs far less than its
  size (a child process; growth over the same process checking a tiny model);
- hostile files (truncated, lengths that lie, messages overlapping) are refused with one
  line, exit 2; a file replaced or changed after it was read is never read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from model_io_fixtures import cli
from onnx import TensorProto, helper, numpy_helper

from qlrewrite import api
from qlrewrite.errors import InputError
from qlrewrite.io import model_io, tensors
from qlrewrite.io.source import source_of

K, N = 64, 48  # int8 [K, N]: 3072 bytes, above the 1 KiB left in the file


def _int8(seed: int, shape: tuple[int, ...] = (K, N)) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


def _dq_matmul(w: str, x: str, y: str, prefix: str, *, axis: int = 1) -> list[onnx.NodeProto]:
    return [
        helper.make_node(
            "DequantizeLinear", [w, f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_f"], axis=axis
        ),
        helper.make_node("MatMul", [x, f"{prefix}_f"], [y]),
    ]


def _scale(prefix: str, n: int = N) -> list[onnx.TensorProto]:
    return [
        numpy_helper.from_array(np.linspace(0.01, 0.02, n, dtype=np.float32), f"{prefix}_s"),
        numpy_helper.from_array(np.zeros(n, np.int8), f"{prefix}_z"),
    ]


def _branch(name: str, seed: int) -> onnx.GraphProto:
    """A subgraph with its own int8 initializer and DQ -> MatMul (x from the outer scope)."""
    inits = [numpy_helper.from_array(_int8(seed), f"{name}_w"), *_scale(name)]
    return helper.make_graph(
        _dq_matmul(f"{name}_w", "x", f"{name}_y", name),
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, N])],
        initializer=inits,
    )


def _function() -> onnx.FunctionProto:
    """A local function whose weight is a Constant node."""
    weight = numpy_helper.from_array(_int8(7), "fw")
    nodes = [
        helper.make_node("Constant", [], ["fw"], value=weight),
        helper.make_node("Constant", [], ["fs"], value=numpy_helper.from_array(np.float32(0.5))),
        helper.make_node("DequantizeLinear", ["fw", "fs"], ["ff"]),
        helper.make_node("MatMul", ["fx", "ff"], ["fy"]),
    ]
    return helper.make_function("local", "F", ["fx"], ["fy"], nodes, [helper.make_opsetid("", 21)])


def _rich_initializers() -> list[onnx.TensorProto]:
    """The initializers of :func:`rich_model`: typed, raw, packed int4, int64, empty."""
    typed_int8 = helper.make_tensor("wt", TensorProto.INT8, [K, N], _int8(2).ravel().tolist())
    floats = np.random.default_rng(3).standard_normal((K, N)).astype(np.float32) / 8
    typed_float = helper.make_tensor("wf", TensorProto.FLOAT, [K, N], floats.ravel().tolist())
    int4 = _int8(4, (K, N)) % 8
    packed_raw = TensorProto(name="w4", data_type=TensorProto.INT4, dims=[K, N])
    packed_raw.raw_data = _pack4(int4)
    int64 = helper.make_tensor("i64", TensorProto.INT64, [300], list(range(-150, 150)))
    empty = numpy_helper.from_array(np.zeros((0, 8), np.float32), "empty")
    blocks = K // 32
    return [
        numpy_helper.from_array(_int8(1), "w8"),
        typed_int8,
        typed_float,
        packed_raw,
        int64,
        empty,
        *_scale("w8"),
        *_scale("wt"),
        *_scale("wf"),
        numpy_helper.from_array(np.full((blocks, N), 0.1, np.float32), "w4_s"),
        helper.make_tensor("w4_z", TensorProto.INT4, [blocks, N], [0] * (blocks * N)),
        *_scale("cw"),
    ]


def _rich_nodes() -> list[onnx.NodeProto]:
    """The nodes of :func:`rich_model`: DQ -> MatMul per weight form, a Constant, an If, a
    function call, pass-throughs."""
    constant = numpy_helper.from_array(_int8(5), "cw")
    return [
        *_dq_matmul("w8", "x", "y8", "w8"),
        *_dq_matmul("wt", "x", "yt", "wt"),
        helper.make_node("QuantizeLinear", ["wf", "wf_s", "wf_z"], ["wf_q"], axis=1),
        *_dq_matmul("wf_q", "x", "yf", "wf"),
        helper.make_node(
            "DequantizeLinear", ["w4", "w4_s", "w4_z"], ["w4_f"], axis=0, block_size=32
        ),
        helper.make_node("MatMul", ["x", "w4_f"], ["y4"]),
        helper.make_node("Constant", [], ["cw"], value=constant),
        *_dq_matmul("cw", "x", "yc", "cw"),
        helper.make_node(
            "If", ["cond"], ["yif"], then_branch=_branch("then", 8), else_branch=_branch("else", 9)
        ),
        helper.make_node("F", ["x"], ["yfn"], domain="local"),
        helper.make_node("Identity", ["i64"], ["i64_out"]),
        helper.make_node("Identity", ["empty"], ["empty_out"]),
    ]


def rich_model() -> onnx.ModelProto:
    """Every place and form a tensor's data can take, each above 1 KiB unless said."""
    nodes, inits = _rich_nodes(), _rich_initializers()
    outputs = [("y8", N), ("yt", N), ("yf", N), ("y4", N), ("yc", N), ("yif", N), ("yfn", N)]
    graph = helper.make_graph(
        nodes,
        "rich",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, d]) for n, d in outputs]
        + [
            helper.make_tensor_value_info("i64_out", TensorProto.INT64, [300]),
            helper.make_tensor_value_info("empty_out", TensorProto.FLOAT, [0, 8]),
        ],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        ir_version=10,
        functions=[_function()],
    )


def _pack4(values: np.ndarray) -> bytes:
    """int4 values packed two per byte, low nibble first, as ONNX stores them."""
    flat = (values.ravel().astype(np.uint8)) & 0x0F
    if flat.size % 2:
        flat = np.append(flat, 0)
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


@pytest.fixture(autouse=True)
def walk_every_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walk these small files too (a file under 1 MiB is parsed whole)."""
    monkeypatch.setattr(model_io, "WALK_MIN_BYTES", 0)


@pytest.fixture
def rich(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "rich.onnx"
    path.parent.mkdir()
    path.write_bytes(rich_model().SerializeToString())
    return path


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch):
    """Read models whole, as the loader did before tensors were left in the file."""

    def use() -> None:
        monkeypatch.setattr(model_io, "INLINE_TENSOR_MIN_BYTES", 1 << 62)

    return use


def test_the_tensors_are_left_in_the_file(rich: Path) -> None:
    model = model_io.load(rich)
    source = source_of(model)
    assert source is not None and source.inline is not None
    kinds = {
        slot.tensors[0].name: slot.tensors[0]
        for slot in tensors.ir_tensor_slots(model)
        if isinstance(slot.tensors[0], tensors.InlineTensor)
    }
    # raw data, typed fields, 4-bit packing, a Constant node's value, subgraph weights,
    # a function's Constant (every tensor above 1 KiB: nothing read whole)
    assert {"w8", "wt", "wf", "w4", "i64", "cw", "then_w", "else_w", "fw"} <= set(kinds)
    assert "empty" not in kinds and "w8_s" not in kinds  # 0 and 192 bytes: in the proto
    assert source.proto.ByteSize() < rich.stat().st_size / 4  # the skeleton: no weight in it


def test_values_are_those_of_the_model_read_whole(rich: Path, whole) -> None:
    lazy = {s.tensors[0].name: s.tensors[0] for s in tensors.ir_tensor_slots(model_io.load(rich))}
    whole()
    eager = {s.tensors[0].name: s.tensors[0] for s in tensors.ir_tensor_slots(model_io.load(rich))}
    assert lazy.keys() == eager.keys()
    for name, tensor in eager.items():
        expected = np.asarray(tensor.numpy())
        got = np.asarray(lazy[name].numpy())
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert got.tobytes() == expected.tobytes(), name
        assert lazy[name].tobytes() == tensor.tobytes(), name


def _run(command: list[str], source: Path, out: Path) -> bytes:
    out.parent.mkdir(parents=True, exist_ok=True)
    result = cli(*command, str(source), "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    files = sorted(out.parent.iterdir())
    return b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in files)


@pytest.mark.parametrize(
    "command",
    [
        ["fold"],
        ["fold", "--external-data"],
        ["fold", "--keep-dq"],
        ["convert", "--to", "com.microsoft"],
        ["upgrade", "--opset", "22"],
    ],
    ids=" ".join,
)
def test_outputs_are_byte_identical_to_reading_whole(
    rich: Path, tmp_path: Path, whole, command: list[str]
) -> None:
    lazy = _run(command, rich, tmp_path / "lazy" / "out.onnx")
    whole()
    eager = _run(command, rich, tmp_path / "eager" / "out.onnx")
    assert lazy == eager


def test_inline_output_is_what_onnx_ir_writes(rich: Path, tmp_path: Path, whole) -> None:
    """The streamed inline writer: the ModelProto onnx_ir serializes, tensor by tensor."""
    ours = tmp_path / "ours.onnx"
    api.save(api.fold(rich), ours, external_data=False)
    whole()
    reference = api.fold(rich)
    expected = ir.serde.serialize_model(reference)
    got = onnx.load_model(ours, load_external_data=False)
    assert got.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )


def test_in_place_reads_the_file_it_replaces_only_before(rich: Path, tmp_path: Path) -> None:
    expected = _run(["fold"], rich, tmp_path / "out" / "rich.onnx")
    result = cli("fold", str(rich), "--in-place", "-q")
    assert result.exit_code == 0, result.output
    assert rich.name.encode() + b"\0" + rich.read_bytes() == expected


def test_check_reports_are_the_same(rich: Path, whole) -> None:
    lazy = cli("check", str(rich), "--output-format", "json")
    whole()
    eager = cli("check", str(rich), "--output-format", "json")
    assert lazy.exit_code == eager.exit_code == 0
    assert json.loads(lazy.stdout) == json.loads(eager.stdout)


# --------------------------------------------------------------------------- the file


def test_a_file_replaced_after_it_was_read_is_not_read(rich: Path) -> None:
    model = model_io.load(rich)
    other = rich.with_name("other.onnx")
    other.write_bytes(rich.read_bytes())
    os.replace(other, rich)  # same bytes, another file
    with pytest.raises(InputError, match="replaced since it was read"):
        model.graph.initializers["w8"].const_value.numpy()


def test_a_file_changed_after_it_was_read_is_not_read(rich: Path) -> None:
    model = model_io.load(rich)
    data = bytearray(rich.read_bytes())
    with open(rich, "r+b") as file:  # the same file, rewritten in place
        file.write(bytes(data[:-1]))
        file.truncate()
    with pytest.raises(InputError, match="changed since it was read"):
        model.graph.initializers["w8"].const_value.numpy()


def _raw_data_of(data: bytes, tensor: np.ndarray) -> int:
    """Where the bytes of ``tensor`` (raw data) start in a serialized model."""
    at = data.find(tensor.tobytes())
    assert at > 0
    return at


def _hostile(rich: Path, how: str) -> bytes:
    data = bytearray(rich.read_bytes())
    weights = _int8(1)
    at = _raw_data_of(bytes(data), weights)
    if how == "truncated":  # the file ends inside a tensor's raw data
        return bytes(data[: at + 100])
    if how == "length-lies":  # raw data claims more bytes than its tensor holds
        assert data[at - 3 : at] == bytes([0x4A, 0x80, 0x18])  # key 9, length 3072
        data[at - 2 : at] = bytes([0x80, 0x19])  # 3200
        return bytes(data)
    if how == "overlapping":  # the raw data's length reaches into the next tensor
        data[at - 2 : at] = bytes([0x81, 0x18])  # 3073: one byte of the next field
        return bytes(data)
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "length-lies", "overlapping"])
@pytest.mark.parametrize("command", ["check", "fold", "info"])
def test_hostile_inline_files_are_refused_in_one_line(
    rich: Path, tmp_path: Path, how: str, command: str
) -> None:
    bad = tmp_path / f"{how}.onnx"
    bad.write_bytes(_hostile(rich, how))
    args = [command, str(bad)] + (["-o", str(tmp_path / "o.onnx")] if command == "fold" else [])
    result = subprocess.run(
        [sys.executable, "-m", "qlrewrite", *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert str(bad) in lines[0] or bad.name in lines[0]
    assert not (tmp_path / "o.onnx").exists()


# --------------------------------------------------------------------------- memory

_MEMORY_CHILD = textwrap.dedent(
    """
    import json, sys
    from qlrewrite import api
    from qlrewrite.checking.checker import check_path

    def rss(key):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    small, big, out, what = sys.argv[1:5]
    def run(path, target):
        if what == "check":
            check_path(path)
        else:
            api.save(api.fold(path), target, external_data=False)
    run(small, out + ".small.onnx")  # imports and caches: paid before the mark
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # the peak is now the current RSS
    except OSError as exc:
        print(json.dumps({"skip": f"cannot reset the peak RSS ({exc})"}))
        sys.exit(0)
    before = rss("VmRSS")
    run(big, out)
    print(json.dumps({"growth": rss("VmHWM") - before}))
    """
)


def _chain(path: Path, count: int, side: int) -> Path:
    """``count`` int8 [side, side] DQ -> MatMul, weights inside the file."""
    nodes, inits = [], []
    current = "x"
    for i in range(count):
        inits += [numpy_helper.from_array(_int8(i, (side, side)), f"w{i}"), *_scale(f"w{i}", side)]
        nodes += _dq_matmul(f"w{i}", current, f"h{i}", f"w{i}")
        current = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, side])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize(("what", "bound"), [("check", 0.25), ("fold", 0.75)])
def test_memory_does_not_grow_with_inline_weights(tmp_path: Path, what: str, bound: float) -> None:
    """Checking a 40 MiB inline model grows the process by a small part of it (reading it
    whole: twice its size); folding it (160 MiB of float32 out, written inline) by about
    one tensor and a few chunks, not the output."""
    small = _chain(tmp_path / "small.onnx", 1, 64)
    big = _chain(tmp_path / "big.onnx", 40, 1024)  # 40 x 1 MiB
    size = big.stat().st_size
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(small), str(big), str(tmp_path / "o.onnx"), what],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.splitlines()[-1])
    if "skip" in measured:  # not Linux: no /proc
        pytest.skip(measured["skip"])
    growth = measured["growth"]
    assert growth < bound * size, (
        f"{what}: grew {growth / 2**20:.0f} MiB for {size / 2**20:.0f} MiB"
    )


@pytest.mark.parametrize("mutation", ["short-raw-data", "typed-count", "typed-field"])
def test_tensors_whose_data_does_not_fit_are_judged_as_before(
    tmp_path: Path, whole, mutation: str
) -> None:
    """A tensor whose data does not fit its dims stays whole in the proto: `check` reports
    it as it did when the model was read whole (QL6xx findings)."""
    model = rich_model()
    tensor = next(
        t for t in model.graph.initializer if t.name == {"short-raw-data": "w8"}.get(mutation, "wt")
    )
    if mutation == "short-raw-data":
        tensor.raw_data = tensor.raw_data[:-7]
    elif mutation == "typed-count":
        del tensor.int32_data[-3:]
    else:  # INT8 values in float_data, where ONNX does not keep them
        values = list(tensor.int32_data)
        tensor.ClearField("int32_data")
        tensor.float_data.extend(float(v) for v in values)
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    lazy = cli("check", str(path), "--output-format", "json")
    whole()
    eager = cli("check", str(path), "--output-format", "json")
    assert lazy.exit_code == eager.exit_code == 1
    assert json.loads(lazy.stdout) == json.loads(eager.stdout)
    assert "QL6" in lazy.stdout


@pytest.mark.parametrize("step", [1, 3, 7, 1 << 20])
def test_packed_varints_are_counted_across_steps(
    monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """A typed field's values are counted in steps: a varint cut by a step still counts
    once; one longer than 10 bytes or unterminated is malformed (protobuf refuses it)."""
    from qlrewrite.io import wire

    monkeypatch.setattr(wire, "_COUNT_STEP", step)
    values = [0, 1, 127, 128, 300, 2**31 - 1, 2**64 - 1, 5]
    data = b"".join(wire.encode_varint(v) for v in values)
    assert wire._count_varints(data, 0, len(data)) == len(values)
    with pytest.raises(wire.Malformed):
        wire._count_varints(b"\x80" * 10 + b"\x01", 0, 11)
    with pytest.raises(wire.Malformed):
        wire._count_varints(data + b"\x81", 0, len(data) + 1)
