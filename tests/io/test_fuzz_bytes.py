"""Byte-level mutation of valid models: every command survives hostile files.

Seeds: the example models (examples/*.onnx), models written by onnxruntime.quantization,
and a model with external data (either file is mutated). Mutations flip bits, insert,
delete, duplicate and overwrite bytes, or truncate, from a seeded RNG; field mutations
edit the parsed model (dims, element types, attributes, inputs, operators, opset and IR
versions) so that the file still parses and the rules and rewrites are reached. Every command
(info, check, fold, fold --keep-dq, convert both ways, upgrade) runs in-process through
the CLI on each mutant, and must:

- exit 0, 1 or 2, with no traceback and no unanticipated exception (run_command turns
  those into "... (run with --debug for details)": a bug, not a clear message);
- finish within a time limit (no hang);
- leave its input untouched (hashes) and no staging folder behind;
- write either nothing or a model that loads (never a partial file).

``QLREWRITE_FUZZ_MUTATIONS`` raises the number of mutants for a long run by hand.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import quantized

from qlrewrite.cli import main
from qlrewrite.io import model_io

MUTATIONS = int(os.environ.get("QLREWRITE_FUZZ_MUTATIONS", "10"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUANTIZED = ("cnn-u8s8", "mlp-int16-contrib", "mlp-nbits-sym", "cnn-int4-per-channel-contrib")
TIME_LIMIT = 30  # seconds per command: tiny models, so anything near this is a hang

COMMANDS = (
    ("info",),
    ("check",),
    ("check", "--format", "json"),
    ("fold",),
    ("fold", "--keep-dq"),
    ("convert", "--to", "onnx"),
    ("convert", "--to", "com.microsoft"),
    ("upgrade", "--opset", "21"),
)
WRITES = {"fold", "convert", "upgrade"}
UNANTICIPATED = "(run with --debug for details)"


def _external_model(folder: Path) -> Path:
    """A DQ(int8 per-axis weight) -> MatMul model whose weight lives in model.onnx.data."""
    rng = np.random.default_rng(3)
    weight = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    scale = (rng.random(32) * 0.1 + 0.01).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=1, name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
        initializer=[
            numpy_helper.from_array(weight, "w_q"),
            numpy_helper.from_array(scale, "w_scale"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = folder / "model.onnx"
    onnx.save_model(
        model, path, save_as_external_data=True, location="model.onnx.data", size_threshold=1024
    )
    return path


def seeds(folder: Path) -> dict[str, dict[str, bytes]]:
    """name -> {file name: bytes}: the model files a mutant starts from."""
    found: dict[str, dict[str, bytes]] = {}
    for path in sorted(EXAMPLES.glob("*.onnx")):
        found[path.stem] = {"model.onnx": path.read_bytes()}
    for config in QUANTIZED:
        found[config] = {"model.onnx": quantized(config).SerializeToString()}
    ext = folder / "ext"
    ext.mkdir(exist_ok=True)
    model = _external_model(ext)
    found["external"] = {p.name: p.read_bytes() for p in (model, ext / "model.onnx.data")}
    return found


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One to three random edits of ``data``."""
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        if not buf:
            break
        kind = int(rng.integers(0, 7))
        at = int(rng.integers(0, len(buf)))
        if kind == 0:  # flip bits
            buf[at] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:  # random byte
            buf[at] = int(rng.integers(0, 256))
        elif kind == 2:  # insert bytes
            buf[at:at] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        elif kind == 3:  # delete a range
            del buf[at : at + int(rng.integers(1, 17))]
        elif kind == 4:  # truncate
            del buf[at:]
        elif kind == 5:  # duplicate a chunk
            buf[at:at] = buf[at : at + int(rng.integers(1, 33))]
        else:  # a large varint (lengths, dims, counts)
            buf[at : at + 5] = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
    return bytes(buf)


class Hang(Exception):
    """A command ran past TIME_LIMIT."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def _alarm(signum: int, frame: object) -> None:
        raise Hang(f"no answer after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in folder.iterdir()
    }


def run_mutant(  # noqa: C901
    folder: Path, files: dict[str, bytes], command: tuple[str, ...]
) -> tuple[list[str], int]:
    """Run ``command`` on the mutant in ``folder``: the broken promises (empty: ok) and the
    exit code."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    out_dir = folder / "out"
    out_dir.mkdir()
    before = _digests(folder)
    args = [*command[:1], str(folder / "model.onnx"), *command[1:]]
    if command[0] in WRITES:
        args += ["-o", str(out_dir / "result.onnx")]
    problems = []
    with time_limit(TIME_LIMIT):
        result = CliRunner().invoke(main, args, catch_exceptions=False)
    text = result.output + result.stderr
    if result.exit_code not in (0, 1, 2):
        problems.append(f"exit code {result.exit_code}")
    if "Traceback" in text:
        problems.append("traceback")
    if UNANTICIPATED in text:
        problems.append("unanticipated exception: " + text.strip().splitlines()[-1])
    if _digests(folder) != before:
        problems.append("input modified or stray file beside it")
    written = sorted(p.name for p in out_dir.iterdir())
    if written and "result.onnx" not in written:
        problems.append(f"stray files {written}")
    if "result.onnx" in written:
        if result.exit_code != 0:
            problems.append(f"wrote a model but exit code {result.exit_code}")
        try:
            model_io.load(out_dir / "result.onnx")
        except Exception as exc:
            problems.append(f"wrote an unloadable model: {exc}")
    return problems, result.exit_code


def fuzz(
    folder: Path, count: int, seed: int = 0, fields: bool = False
) -> tuple[int, list[tuple[str, str, str]]]:
    """``count`` mutants of each seed through every command; (runs, problems found).

    ``fields``: edit parsed fields of the model file (mutate_fields) instead of bytes.
    """
    rng = np.random.default_rng(seed)
    runs, found = 0, []
    for name, files in seeds(folder).items():
        for index in range(count):
            target = "model.onnx" if fields else str(rng.choice(sorted(files)))
            mutant = dict(files)
            edit = mutate_fields if fields else mutate
            mutant[target] = edit(files[target], rng)
            for command in COMMANDS:
                runs += 1
                for problem in run_mutant(folder / "m", mutant, command)[0]:
                    found.append((f"{name}#{index}:{target}", " ".join(command), problem))
    return runs, found


def test_mutants_never_break_a_promise(tmp_path: Path) -> None:
    runs, found = fuzz(tmp_path, MUTATIONS)
    assert runs == MUTATIONS * len(COMMANDS) * (len(list(EXAMPLES.glob("*.onnx"))) + 5)
    assert not found, found[:10]


def test_field_mutants_never_break_a_promise(tmp_path: Path) -> None:
    runs, found = fuzz(tmp_path, max(MUTATIONS // 2, 1), seed=1, fields=True)
    assert runs == max(MUTATIONS // 2, 1) * len(COMMANDS) * (len(list(EXAMPLES.glob("*.onnx"))) + 5)
    assert not found, found[:10]


def test_mutate_is_seeded_and_changes_the_bytes() -> None:
    data = bytes(range(256)) * 4
    one = [mutate(data, np.random.default_rng(7)) for _ in range(3)]
    assert one[0] == one[1] == one[2]
    rng = np.random.default_rng(8)
    assert all(mutate(data, rng) != data for _ in range(50))


def test_time_limit_stops_a_hang() -> None:
    with pytest.raises(Hang), time_limit(1):
        while True:
            pass


def _wrong_field_model(path: Path) -> Path:
    """An INT8 weight whose values sit in uint64_data (ONNX wants int32_data)."""
    weight = TensorProto(name="w_q", data_type=TensorProto.INT8, dims=[4, 3])
    weight.uint64_data.extend(range(12))
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        initializer=[weight, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, id=" ".join(c)) for c in COMMANDS],
)
def test_values_in_the_wrong_typed_field(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Found by the mutation run: a refusal (exit 1 or 2) with a clear message, never a
    crash, and never a clean bill of health from check."""
    path = _wrong_field_model(tmp_path / "model.onnx")
    problems, code = run_mutant(tmp_path / "m", {"model.onnx": path.read_bytes()}, command)
    assert not problems, problems
    assert code in ((0, 1, 2) if command[0] == "info" else (1, 2))


def _undefined_attribute_model(path: Path) -> Path:
    """A per-axis DequantizeLinear whose ``axis`` attribute has type UNDEFINED (0)."""
    weight = numpy_helper.from_array(np.ones((4, 3), np.int8), "w_q")
    scale = numpy_helper.from_array(np.full(3, 0.5, np.float32), "s")
    dq = helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="dq", axis=1)
    dq.attribute[0].type = onnx.AttributeProto.UNDEFINED
    graph = helper.make_graph(
        [dq, helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        initializer=[weight, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, id=" ".join(c)) for c in COMMANDS],
)
def test_attribute_of_undefined_type(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Found by the mutation run: check names the attribute (QL202); nothing crashes."""
    path = _undefined_attribute_model(tmp_path / "model.onnx")
    problems, code = run_mutant(tmp_path / "m", {"model.onnx": path.read_bytes()}, command)
    assert not problems, problems
    assert code in ((0, 1, 2) if command[0] == "info" else (1, 2))


# --------------------------------------------------------------------------- proto fields


def mutate_fields(data: bytes, rng: np.random.Generator) -> bytes:  # noqa: C901
    """One to three edits of parsed fields (still a well-formed protobuf): reaches the
    rules, fold, convert and upgrade where random bytes mostly stop at the parser."""
    model = onnx.load_model_from_string(data)
    graph = model.graph
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(0, 9))
        if kind == 0 and graph.initializer:  # dims
            tensor = graph.initializer[int(rng.integers(0, len(graph.initializer)))]
            dims = list(tensor.dims)
            if dims and rng.random() < 0.5:
                dims[int(rng.integers(0, len(dims)))] = int(rng.integers(-1, 9))
            else:
                dims.append(int(rng.integers(1, 4)))
            del tensor.dims[:]
            tensor.dims.extend(dims)
        elif kind == 1 and graph.initializer:  # element type
            tensor = graph.initializer[int(rng.integers(0, len(graph.initializer)))]
            tensor.data_type = int(rng.integers(0, 27))
        elif kind == 2 and graph.node:  # attribute value or type
            node = graph.node[int(rng.integers(0, len(graph.node)))]
            if node.attribute:
                attr = node.attribute[int(rng.integers(0, len(node.attribute)))]
                if rng.random() < 0.7:
                    attr.i = int(rng.integers(-4, 40))
                else:
                    attr.type = int(rng.integers(0, 15))
            else:
                name = str(rng.choice(["axis", "block_size", "saturate", "output_dtype"]))
                node.attribute.append(helper.make_attribute(name, int(rng.integers(-2, 30))))
        elif kind == 3 and graph.node:  # inputs
            node = graph.node[int(rng.integers(0, len(graph.node)))]
            if node.input and rng.random() < 0.5:
                del node.input[int(rng.integers(0, len(node.input)))]
            else:
                node.input.append(str(rng.choice(["", "x", "nowhere", *list(node.input)])))
        elif kind == 4 and graph.node:  # operator
            node = graph.node[int(rng.integers(0, len(graph.node)))]
            node.op_type = str(rng.choice(["QuantizeLinear", "DequantizeLinear", "Relu"]))
            node.domain = str(rng.choice(["", "com.microsoft", "ai.onnx"]))
        elif kind == 5 and model.opset_import:  # opset
            model.opset_import[0].version = int(rng.integers(1, 30))
        elif kind == 6:  # IR version
            model.ir_version = int(rng.integers(1, 15))
        elif kind == 7 and graph.initializer:  # drop an initializer
            del graph.initializer[int(rng.integers(0, len(graph.initializer)))]
        elif kind == 8 and graph.output:  # declared output type
            graph.output[0].type.tensor_type.elem_type = int(rng.integers(0, 27))
    return model.SerializeToString()


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, id=" ".join(c)) for c in COMMANDS],
)
def test_string_typed_external_weight(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Found by the field mutation run: an external initializer of type STRING feeding a
    DequantizeLinear is refused by every command (upgrade crashed on it)."""
    (tmp_path / "src").mkdir()
    source = _external_model(tmp_path / "src")
    model = onnx.load_model(source, load_external_data=False)
    model.graph.initializer[0].data_type = TensorProto.STRING
    files = {
        "model.onnx": model.SerializeToString(),
        "model.onnx.data": (source.parent / "model.onnx.data").read_bytes(),
    }
    problems, code = run_mutant(tmp_path / "m", files, command)
    assert not problems, problems
    assert code in ((0, 1, 2) if command[0] == "info" else (1, 2))
