"""The fifth audit's findings: integer outputs compare as integers (a difference of 1 near
2^60 was "within tolerance"), a zero tolerance accepts no difference, and stdin is read
through the guarded reader (closed: an AttributeError line; ``/dev/zero``: 4.2 GB read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from qlrewrite.cli import main
from qlrewrite.verify.verify import OutputVerdict, compare_arrays

_NEAR_2_60 = 2**60


def _int64_model(path: Path, value: int) -> Path:
    """``y = x + value`` over int64 (``x`` is generated: small integers)."""
    add = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph(
        [add],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4])],
        [helper.make_tensor("c", TensorProto.INT64, [4], [value] * 4)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("runtime", ["ort", "reference"])
def test_int64_outputs_differing_by_one_near_2_60_diverge(tmp_path: Path, runtime: str) -> None:
    """float64 holds no integer between 2^60 and 2^60 + 256: the difference was 0."""
    first = _int64_model(tmp_path / "a.onnx", _NEAR_2_60)
    second = _int64_model(tmp_path / "b.onnx", _NEAR_2_60 + 1)
    result = CliRunner().invoke(main, ["compare", str(first), str(second), "--runtime", runtime])
    assert result.exit_code == 1, result.output
    assert "within tolerance" not in result.output
    assert "max abs 1" in result.output
    assert "DIVERGES" in result.output


def test_integer_differences_are_exact() -> None:
    """The largest difference of int64 / uint64 values, computed as integers."""
    a = np.array([_NEAR_2_60, 7], np.int64)
    verdict = compare_arrays("y", a, a + np.array([1, 0], np.int64))
    assert (verdict.mismatched, verdict.max_abs) == (1, 1.0)
    extremes = compare_arrays("y", np.array([-(2**63)], np.int64), np.array([2**63 - 1], np.int64))
    assert extremes.max_abs == 2.0**64 - 1  # 2^64 - 1 as the float at least that large
    unsigned = compare_arrays("y", np.array([2**64 - 1], np.uint64), np.array([0], np.uint64))
    assert unsigned.max_abs >= 2**64 - 1


def test_a_float_difference_is_never_rounded_below_a_tolerance() -> None:
    """2^53 + 1 apart: the float nearest is 2^53, the one reported is the next above."""
    verdict = compare_arrays("y", np.array([0], np.int64), np.array([2**53 + 1], np.int64))
    assert verdict.max_abs > 2**53


def test_a_zero_tolerance_accepts_no_mismatch() -> None:
    """``mismatched > 0`` is never within ``--verify-tolerance 0``,
    even when the distance reads 0 (+0 against -0, two NaN payloads)."""
    zeros = compare_arrays("y", np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert zeros.mismatched == 1 and zeros.max_abs == 0.0
    assert not zeros.within(0.0)
    assert zeros.within(1e-9)
    verdict = OutputVerdict("y", exact=False, elements=4, mismatched=1, max_abs=0.0)
    assert not verdict.within(0.0)


def test_compare_with_zero_tolerances_diverges_on_a_signed_zero(tmp_path: Path) -> None:
    """``--rtol 0 --atol 0``: bit for bit (a -0 for +0 is a difference)."""
    paths = []
    for name, value in (("a", 0.0), ("b", -0.0)):
        graph = helper.make_graph(
            [
                helper.make_node("Mul", ["x", "z"], ["xz"]),
                helper.make_node("Add", ["xz", "c"], ["y"]),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
            [
                helper.make_tensor("z", TensorProto.FLOAT, [1], [0.0]),
                helper.make_tensor("c", TensorProto.FLOAT, [1], [value]),
            ],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        onnx.save(model, tmp_path / f"{name}.onnx")
        paths.append(str(tmp_path / f"{name}.onnx"))
    inputs = tmp_path / "x.npz"
    np.savez(inputs, x=np.array([-1.0], np.float32))  # -1 * 0 = -0; -0 + 0 = 0, -0 + -0 = -0
    args = ["compare", *paths, "--runtime", "reference", "--inputs", str(inputs)]
    result = CliRunner().invoke(main, [*args, "--rtol", "0", "--atol", "0"])
    assert result.exit_code == 1, result.output


def _check_stdin(stdin: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "qlrewrite", "check", "-"]
    return subprocess.run(
        command, stdin=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def test_check_of_a_closed_stdin_is_one_line() -> None:
    """``check - <&-``: was ``AttributeError: 'NoneType' object has no attribute 'buffer'``."""
    code = "import sys, os; os.close(0); sys.argv[1:] = ['check', '-']; import runpy; " + (
        "runpy.run_module('qlrewrite', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line]
    assert errors == ["qlrewrite: error: -: stdin is closed; pipe a model file into it"]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_check_of_dev_zero_is_refused_unread() -> None:
    """``check - < /dev/zero`` read 4.2 GB before refusing: a device is not read at all."""
    with open("/dev/zero", "rb") as zero:
        result = _check_stdin(zero)
    assert result.returncode == 2
    assert "stdin is a device, not a pipe or a file" in result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
