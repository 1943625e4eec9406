"""Resource limits: models whose dims claim terabytes are refused (or handled) before any
large allocation, and `fold --max-size` refuses before computing anything.

The commands run in a child process whose address space is capped (RLIMIT_AS), so an
allocation of even a few GB fails there with MemoryError, which the CLI would report as an
unanticipated exception: the test sees it. Each command must also answer quickly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

N = 1 << 20  # [N, N] int8 claims 1 TiB; dequantized to float32, 4 TiB
ADDRESS_SPACE = 3 << 30
SECONDS = 20  # per command, in a child process on a busy machine; the work itself is < 1 s

_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    from click.testing import CliRunner
    from qlrewrite.cli import main
    results = []
    for args in json.loads(sys.argv[1]):
        started = time.perf_counter()
        result = CliRunner().invoke(main, args)
        results.append({{"args": args, "code": result.exit_code,
                         "text": result.output + result.stderr,
                         "exception": repr(result.exception) if result.exit_code not in
                                      (0, 1, 2) else None,
                         "seconds": time.perf_counter() - started}})
    print(json.dumps(results))
    """
)


def run_capped(*commands: list[str | Path]) -> list[dict]:
    """Run CLI commands in one child process with a capped address space."""
    child = _CHILD.format(limit=ADDRESS_SPACE)
    arg = json.dumps([[str(a) for a in command] for command in commands])
    done = subprocess.run(
        [sys.executable, "-c", child, arg],
        capture_output=True,
        text=True,
        timeout=SECONDS * len(commands) + 60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_sane(result: dict, codes: set[int]) -> None:
    text = result["text"]
    assert result["code"] in codes, result
    assert "Traceback" not in text and "MemoryError" not in text, result
    assert "(run with --debug for details)" not in text, result
    assert result["seconds"] < SECONDS, result


def _dq_matmul(weight: onnx.TensorProto) -> onnx.ModelProto:
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
        initializer=[weight, scale],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _claiming(name: str, dims: list[int], raw: bytes = b"\x01\x02") -> onnx.TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.INT8, dims=dims)
    tensor.raw_data = raw
    return tensor


ALL_COMMANDS = (
    ["info"],
    ["check"],
    ["fold"],
    ["fold", "--keep-dq"],
    ["convert", "--to", "onnx"],
    ["convert", "--to", "com.microsoft"],
    ["upgrade", "--opset", "21"],
)


def test_tiny_data_claiming_terabytes_is_refused(tmp_path: Path) -> None:
    """Dims [2^20, 2^20] over 2 bytes of raw_data: unreadable (exit 2), nothing allocated."""
    models = {
        "initializer": _dq_matmul(_claiming("w_q", [N, N])),
        "overflowing": _dq_matmul(_claiming("w_q", [1 << 62, 1 << 62, 16])),
    }
    constant = _dq_matmul(_claiming("unused", [1]))
    del constant.graph.initializer[0]
    constant.graph.node.insert(
        0, helper.make_node("Constant", [], ["w_q"], value=_claiming("v", [N, N]))
    )
    models["constant-node"] = constant
    commands = []
    for name, model in models.items():
        path = tmp_path / f"{name}.onnx"
        onnx.save_model(model, path)
        for command in ALL_COMMANDS:
            extra = (
                ["-o", tmp_path / f"{name}.out.onnx"] if command[0] not in ("info", "check") else []
            )
            commands.append([*command[:1], path, *command[1:], *extra])
    results = run_capped(*commands)
    for result in results:
        refused = result["code"] == 2 or (result["args"][0] == "check" and result["code"] == 1)
        assert refused, result
        _assert_sane(result, {1, 2})
    assert not list(tmp_path.glob("*.out.onnx*"))


@pytest.fixture
def sparse_model(tmp_path: Path) -> Path:
    """A valid model whose int8 weight [2^20, 2^20] is a 1 TiB sparse external data file."""
    weight = TensorProto(name="w_q", data_type=TensorProto.INT8, dims=[N, N])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "big.data"), ("offset", "0"), ("length", str(N * N))):
        weight.external_data.add(key=key, value=value)
    path = tmp_path / "big.onnx"
    path.write_bytes(_dq_matmul(weight).SerializeToString())
    try:
        with open(tmp_path / "big.data", "wb") as handle:
            handle.truncate(N * N)
    except OSError as exc:
        pytest.skip(f"no sparse files here: {exc}")
    if (tmp_path / "big.data").stat().st_blocks * 512 > 1 << 20:
        pytest.skip("the file system does not keep files sparse")
    return path


def test_terabyte_model_is_read_lazily(sparse_model: Path) -> None:
    """info, check and every dry run answer from shapes alone: no weight is read."""
    folder = sparse_model.parent
    results = run_capped(
        ["info", sparse_model],
        ["check", sparse_model],
        ["fold", sparse_model, "--dry-run"],
        ["fold", sparse_model, "--keep-dq", "--dry-run"],
        ["upgrade", sparse_model, "--opset", "21", "--dry-run"],
        ["convert", sparse_model, "--to", "com.microsoft", "--dry-run"],
    )
    for result in results:
        _assert_sane(result, {0})
    assert "1.0 TiB -> 4.0 TiB" in results[2]["text"]
    assert sorted(p.name for p in folder.iterdir()) == ["big.data", "big.onnx"]


def test_fold_max_size_refuses_before_computing(sparse_model: Path) -> None:
    out = sparse_model.parent / "folded.onnx"
    (result,) = run_capped(["fold", sparse_model, "--max-size", "1GB", "-o", out])
    _assert_sane(result, {1})
    assert "4398046511104 bytes, above --max-size 1000000000" in result["text"]
    assert sorted(p.name for p in sparse_model.parent.iterdir()) == ["big.data", "big.onnx"]


def test_fold_max_size_on_a_small_model(tmp_path: Path) -> None:
    """The bound is on the output's initializers: 64x32 int8 -> 8 KiB of float32."""
    weight = numpy_helper.from_array(np.ones((64, 32), np.int8), "w_q")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        initializer=[weight, scale],
    )
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    small, large = tmp_path / "small.onnx", tmp_path / "large.onnx"
    refused, accepted = run_capped(
        ["fold", path, "--max-size", "8191", "-o", small],
        ["fold", path, "--max-size", "8KiB", "-o", large],
    )
    _assert_sane(refused, {1})
    assert "8192 bytes, above --max-size 8191" in refused["text"]
    assert not small.exists()
    _assert_sane(accepted, {0})
    assert large.exists()
