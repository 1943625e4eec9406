"""`--verify`: the original and the rewritten model run in ONNX Runtime before anything is
written; a numeric change, an unverifiable model or a usage mistake never writes a file.

A test-only command (``perturb``) shares the rewriting options and runner with fold,
convert and upgrade; its pass moves one constant by a chosen number of ulps, so the
expected differences are known without running qlrewrite.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click
import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from qdq_models import DQ, DT, Q, qdq_model

from qlrewrite import pipeline
from qlrewrite.cli import main
from qlrewrite.cli._common import RewriteOptions, rewrite_options, run_command, run_rewrite
from qlrewrite.verify.verify import (
    EXACT_BOUND,
    Bound,
    InputSpec,
    VerificationFailed,
    VerifyOptions,
    compare_arrays,
    generate_inputs,
    parse_input_shape,
    verify_models,
)

pytest.importorskip("onnxruntime")

C_VALUES = np.array([0.1, -2.5, 3.0, 1e-3], dtype=np.float32)


class _Perturb(ir.passes.InPlacePass):
    """Moves element 0 of initializer ``c`` by ``ulps`` representable steps (0: rewrites it
    to an equal copy)."""

    def __init__(self, ulps: int) -> None:
        super().__init__()
        self.ulps = ulps

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        value = model.graph.initializers["c"]
        array = value.const_value.numpy().copy()
        for _ in range(self.ulps):
            array[0] = np.nextafter(array[0], np.float32(np.inf))
        value.const_value = ir.tensor(array, name="c")
        return ir.passes.PassResult(model, True)


@click.command("perturb")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--ulps", type=int, default=0)
@rewrite_options
@run_command
def _perturb_command(
    model: Path,
    ulps: int,
    options: RewriteOptions,
) -> None:
    run_rewrite(model, [_Perturb(ulps)], command="perturb", options=options)


def _model(batch: int | str = 2, big: bool = False) -> onnx.ModelProto:
    """y = x @ w, z = c + 0 (z shows the constant c as it is)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 300 if big else 3)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Add", ["c", "zero"], ["z"], name="show_c"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, w.shape[1]]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [4]),
        ],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(C_VALUES, "c"),
            numpy_helper.from_array(np.zeros(4, np.float32), "zero"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _save(proto: onnx.ModelProto, path: Path, external: bool = False) -> Path:
    if external:
        onnx.save_model(
            proto,
            path,
            save_as_external_data=True,
            location=path.name + ".data",
            size_threshold=1024,
        )
    else:
        onnx.save_model(proto, path)
    return path


def _invoke(command: click.Command, *args: Any) -> tuple[int, str]:
    result = CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)
    text = result.output + result.stderr
    assert "Traceback" not in text
    return result.exit_code, result.stderr


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# --------------------------------------------------------------------------- the command


def test_exact_rewrite_is_written_and_reported(tmp_path: Path) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code, err = _invoke(
        _perturb_command, source, "-o", out, "--verify", "--verify-runs", 3, "--report", report
    )
    assert code == 0, err
    assert out.exists()
    assert "verify: exact: 2 output(s) bit-identical (3 input sets, seed 0; ONNX Runtime " in err
    assert "CPU, graph optimizations off)" in err
    verify = json.loads(report.read_text())["verify"]
    assert verify["status"] == "exact" and verify["passed"] and verify["runs"] == 3
    assert {o["name"]: o["exact"] for o in verify["outputs"]} == {"y": True, "z": True}
    assert {o["name"]: o["elements"] for o in verify["outputs"]} == {"y": 18, "z": 12}


@pytest.mark.parametrize("ulps", [1, 7])
def test_numeric_change_is_refused_and_nothing_written(tmp_path: Path, ulps: int) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    before = _files(tmp_path)
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code, err = _invoke(
        _perturb_command, source, "-o", out, "--verify", "--report", report, "--ulps", ulps
    )
    moved = C_VALUES[0]
    for _ in range(ulps):
        moved = np.nextafter(moved, np.float32(np.inf))
    abs_diff = float(np.float64(moved) - np.float64(C_VALUES[0]))
    assert code == 1
    assert _files(tmp_path) == before | {"r.json"}  # no output, no staging folder
    assert f"z: 1 of 4 elements differ: max abs {abs_diff:.6g}, max ulp {ulps}" in err
    assert "verification failed" in err and "nothing written" in err
    # the verify line names no difference: it is on the output's line and the error's
    assert err.count("1 of 4 elements differ") == 2 and "differ: z" not in err
    failed = json.loads(report.read_text())
    assert failed["written"] is False
    z = next(o for o in failed["verify"]["outputs"] if o["name"] == "z")
    assert (z["exact"], z["mismatched"], z["max_ulp"]) == (False, 1, ulps)
    assert z["max_abs"] == pytest.approx(abs_diff, rel=1e-12)


def test_in_place_mismatch_leaves_the_input_alone(tmp_path: Path) -> None:
    source = _save(_model(), tmp_path / "m.onnx", external=True)
    digests = {p.name: _digest(p) for p in tmp_path.iterdir()}
    code, _ = _invoke(_perturb_command, source, "--in-place", "--verify", "--ulps", 1)
    assert code == 1
    assert {p.name: _digest(p) for p in tmp_path.iterdir()} == digests


def test_external_data_output_is_verified(tmp_path: Path) -> None:
    source = _save(_model(big=True), tmp_path / "m.onnx", external=True)
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    code, err = _invoke(_perturb_command, source, "-o", out, "--verify")
    assert code == 0, err
    assert _files(out.parent) == {"o.onnx", "o.onnx.data"}
    code, _ = _invoke(
        _perturb_command, source, "-o", out.parent / "p.onnx", "--verify", "--ulps", 2
    )
    assert code == 1
    assert _files(out.parent) == {"o.onnx", "o.onnx.data"}


def test_tolerance_accepts_a_bounded_difference(tmp_path: Path) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code, err = _invoke(
        _perturb_command,
        source,
        "-o",
        out,
        "--verify",
        "--ulps",
        3,
        "--verify-tolerance",
        "1e-6",
        "--report",
        report,
    )
    assert code == 0, err
    assert out.exists()
    verify = json.loads(report.read_text())["verify"]
    assert verify["status"] == "within-tolerance" and verify["tolerance"] == 1e-6
    assert "within tolerance 1e-06" in err and "z: 1 of 4 elements differ" in err
    code, _ = _invoke(
        _perturb_command,
        source,
        "-o",
        tmp_path / "o2.onnx",
        "--verify",
        "--ulps",
        3,
        "--verify-tolerance",
        "1e-8",
    )
    assert code == 1
    assert not (tmp_path / "o2.onnx").exists()


def test_dry_run_verifies_without_writing(tmp_path: Path) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    before = _files(tmp_path)
    code, err = _invoke(_perturb_command, source, "--dry-run", "--verify")
    assert code == 0 and "verify: exact" in err
    code, err = _invoke(_perturb_command, source, "--dry-run", "--verify", "--ulps", 1)
    assert code == 1 and "max ulp 1" in err
    assert _files(tmp_path) == before


def test_symbolic_dims_need_input_shape(tmp_path: Path) -> None:
    source = _save(_model(batch="batch"), tmp_path / "m.onnx")
    code, err = _invoke(_perturb_command, source, "--verify")
    assert code == 2
    assert "input 'x' has unknown dimension 0 ('batch')" in err
    assert "--input-shape x=" in err
    code, err = _invoke(
        _perturb_command,
        source,
        "--verify",
        "--input-shape",
        "x=5,4",
        "--report",
        tmp_path / "r.json",
    )
    assert code == 0, err
    outputs = json.loads((tmp_path / "r.json").read_text())["verify"]["outputs"]
    assert {o["name"]: o["elements"] for o in outputs}["y"] == 15


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input-shape", "x"], "is not NAME=D1,D2"),
        (["--input-shape", "x=2,a"], "dimension 'a' is not a non-negative integer"),
        (["--input-shape", "x=2,-4"], "dimension '-4'"),
        (["--input-shape", "=2,4"], "is not NAME=D1,D2"),
        (["--input-shape", "x=2,4", "--input-shape", "x=3,4"], "input 'x' is given twice"),
        (["--input-shape", "nope=2,4"], "'nope', which is not a graph input (inputs: x)"),
        (["--input-shape", "x=2,4,1"], "gives 3 dimension(s) for input 'x', which has 2"),
        (["--input-shape", "x=2,5"], "gives 5 for dimension 1 of input 'x', declared 4"),
        (["--verify-runs", "0"], "--verify-runs"),
        (["--verify-tolerance", "-1"], "--verify-tolerance"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    source = _save(_model(batch="batch"), tmp_path / "m.onnx")
    before = _files(tmp_path)
    code, err = _invoke(_perturb_command, source, "--verify", *args)
    assert code == 2
    assert message in err
    assert _files(tmp_path) == before


@pytest.mark.parametrize(
    "option",
    [
        ["--seed", "3"],
        ["--verify-runs", "2"],
        ["--input-shape", "x=1,4"],
        ["--verify-tolerance", "0.1"],
    ],
)
def test_verify_options_need_verify(tmp_path: Path, option: list[str]) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    code, err = _invoke(_perturb_command, source, *option)
    assert code == 2
    assert f"{option[0]} needs --verify" in err
    assert not (tmp_path / "m.perturb.onnx").exists()


def test_missing_onnxruntime_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    code, err = _invoke(_perturb_command, source, "--verify")
    assert code == 2
    assert "pip install 'qlrewrite[verify]'" in err
    assert not (tmp_path / "m.perturb.onnx").exists()
    code, _ = _invoke(_perturb_command, source)  # without --verify ORT is not needed
    assert code == 0


def test_unverifiable_model_is_not_a_pass(tmp_path: Path) -> None:
    """DequantizeLinear-28 (IR 14): ORT 1.31 loads up to IR 13 / opset 25, 1.32 loads IR
    14 but has no DequantizeLinear-28 kernel."""
    source = _save(qdq_model(DQ, 28, x_type=DT.INT8), tmp_path / "m.onnx")
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code, err = _invoke(main, "fold", source, "-o", out, "--verify", "--report", report)
    assert code == 1
    assert not out.exists()
    assert "cannot verify with ONNX Runtime" in err
    assert "Unsupported model IR version: 14" in err or "DequantizeLinear(28)" in err
    # ORT's error once (it was on the verify line and again on the error line)
    assert err.count("Unsupported model IR version") + err.count("DequantizeLinear(28)") == 1
    verify = json.loads(report.read_text())["verify"]
    assert verify["status"] == "unverifiable" and not verify["passed"]
    code, _ = _invoke(main, "fold", source, "-o", out)
    assert code == 0 and out.exists()


def test_type_without_a_kernel_is_unverifiable(tmp_path: Path) -> None:
    """DequantizeLinear-21 with a bfloat16 scale: valid, but ORT 1.31 has no kernel."""
    source = _save(qdq_model(DQ, 21, x_type=DT.UINT8, scale_type=DT.BFLOAT16), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    code, err = _invoke(main, "convert", source, "--to", "onnx", "-o", out, "--verify")
    assert code == 1
    assert "cannot verify with ONNX Runtime" in err and "NOT_IMPLEMENTED" in err
    assert not out.exists()


def test_fold_upgrade_convert_have_the_options() -> None:
    for name in ("fold", "upgrade", "convert"):
        if name not in main.commands:
            continue
        options = {o for p in main.commands[name].params for o in p.opts}
        assert {
            "--verify",
            "--verify-runs",
            "--seed",
            "--input-shape",
            "--verify-tolerance",
            "--verify-timeout",
        } <= options, name
    check = {o for p in main.commands["check"].params for o in p.opts}
    assert {"--verify", "--verify-timeout"} <= check


# --------------------------------------------------------------------------- the library


def test_pipeline_rewrite_with_verify(tmp_path: Path) -> None:
    source = _save(_model(), tmp_path / "m.onnx")
    result = pipeline.rewrite(source, [_Perturb(0)], command="p", verify=VerifyOptions(runs=2))
    assert result.verification is not None and result.verification.status == "exact"
    with pytest.raises(VerificationFailed) as info:
        pipeline.rewrite(source, [_Perturb(1)], command="q", verify=VerifyOptions(seed=9))
    assert info.value.verification.status == "mismatch"
    assert info.value.exit_code == 1
    assert not (tmp_path / "m.q.onnx").exists()


def _one_node(
    op: str,
    inputs: dict[str, tuple[int, list[int]]],
    outputs: dict[str, int],
    opset: int = 21,
    **attrs: Any,
) -> onnx.ModelProto:
    node = helper.make_node(op, list(inputs), list(outputs), **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def test_bfloat16_and_int4_outputs_are_read_from_their_bytes(tmp_path: Path) -> None:
    cast = _save(
        _one_node(
            "Cast",
            {"x": (TensorProto.FLOAT, [3, 5])},
            {"y": TensorProto.BFLOAT16},
            to=TensorProto.BFLOAT16,
        ),
        tmp_path / "cast.onnx",
    )
    specs = [InputSpec("x", DT.FLOAT, (3, 5))]
    assert verify_models(cast, cast, specs).status == "exact"
    back = _save(
        _one_node(
            "Cast",
            {"x": (TensorProto.BFLOAT16, [3, 5])},
            {"y": TensorProto.FLOAT},
            to=TensorProto.FLOAT,
        ),
        tmp_path / "back.onnx",
    )
    assert verify_models(back, back, [InputSpec("x", DT.BFLOAT16, (3, 5))]).status == "exact"
    q1 = _save(qdq_model(Q, 21, x_shape=(6, 5), scale=0.5, zp_type=DT.INT4), tmp_path / "q1.onnx")
    q2 = _save(qdq_model(Q, 21, x_shape=(6, 5), scale=0.25, zp_type=DT.INT4), tmp_path / "q2.onnx")
    specs = [InputSpec("x", DT.FLOAT, (6, 5))]
    assert verify_models(q1, q1, specs).status == "exact"
    result = verify_models(q1, q2, specs, VerifyOptions(runs=2, seed=4))
    assert result.status == "mismatch"
    # Independent expectation: int4 Q with scales 0.5 / 0.25 over the same inputs.
    rng = np.random.default_rng(4)
    x = np.stack([rng.standard_normal((6, 5), dtype=np.float32) for _ in range(2)])
    a = np.clip(np.rint(x / np.float32(0.5)), -8, 7)
    b = np.clip(np.rint(x / np.float32(0.25)), -8, 7)
    (y,) = result.outputs
    assert y.max_abs == np.abs(a - b).max()
    assert y.mismatched == int(np.count_nonzero(a != b))
    assert y.max_ulp is None  # integers: no ulps


def test_missing_output_and_rewritten_failure_are_mismatches(tmp_path: Path) -> None:
    two = _save(
        _one_node(
            "Split",
            {"x": (TensorProto.FLOAT, [4])},
            {"a": TensorProto.FLOAT, "b": TensorProto.FLOAT},
            opset=18,
            num_outputs=2,
        ),
        tmp_path / "two.onnx",
    )
    one = onnx.load(two)
    del one.graph.output[1]
    one = _save(one, tmp_path / "one.onnx")
    result = verify_models(two, one, [InputSpec("x", DT.FLOAT, (4,))])
    assert result.status == "mismatch"
    assert {o.name: o.problem for o in result.outputs}["b"] == "missing from the rewritten model"


# --------------------------------------------------------------------------- pieces


def test_parse_input_shape() -> None:
    assert parse_input_shape("x=1,3,224,224") == ("x", (1, 3, 224, 224))
    assert parse_input_shape("a=b=2") == ("a=b", (2,))
    assert parse_input_shape("s=") == ("s", ())
    assert parse_input_shape("x= 1, 0") == ("x", (1, 0))
    for bad in ("x", "=1", "x=1,,2", "x=1.5", "x=-1"):
        with pytest.raises(ValueError):
            parse_input_shape(bad)


def test_generated_inputs_follow_the_type_and_the_seed() -> None:
    specs = [
        InputSpec("f", DT.FLOAT, (100, 100)),
        InputSpec("h", DT.FLOAT16, (7,)),
        InputSpec("u", DT.UINT8, (20000,)),
        InputSpec("i", DT.INT8, (20000,)),
        InputSpec("s", DT.INT16, (20000,)),
        InputSpec("l", DT.INT64, (1000,)),
        InputSpec("b", DT.BOOL, (1000,)),
        InputSpec("bf", DT.BFLOAT16, (3, 2)),
    ]
    one = generate_inputs(specs, np.random.default_rng(1))
    again = generate_inputs(specs, np.random.default_rng(1))
    other = generate_inputs(specs, np.random.default_rng(2))
    for name, array in one.items():
        assert np.array_equal(array, again[name])
        assert array.shape == next(s.shape for s in specs if s.name == name)
    assert not np.array_equal(one["f"], other["f"])
    assert one["f"].dtype == np.float32 and abs(one["f"].std() - 1) < 0.05
    assert one["h"].dtype == np.float16 and one["bf"].dtype == ml_dtypes.bfloat16
    assert (one["u"].min(), one["u"].max()) == (0, 255)
    assert (one["i"].min(), one["i"].max()) == (-128, 127)
    assert one["s"].min() < -30000 and one["s"].max() > 30000
    assert one["l"].dtype == np.int64 and set(np.unique(one["l"])) == {0, 1, 2, 3}
    assert one["b"].dtype == np.bool_ and 300 < one["b"].sum() < 700


def _f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_compare_arrays_is_bitwise() -> None:
    nan = np.float32(np.nan)
    payload = np.array([0x7FC00001], dtype=np.uint32).view(np.float32)[0]
    same = compare_arrays("o", _f32(1, nan, -0.0), _f32(1, nan, -0.0))
    assert (same.exact, same.max_abs, same.max_ulp) == (True, 0.0, 0)
    zeros = compare_arrays("o", _f32(0.0), _f32(-0.0))
    assert (zeros.exact, zeros.max_abs, zeros.max_ulp) == (False, 0.0, 0)
    nans = compare_arrays("o", _f32(nan), np.array([payload]))
    assert (nans.exact, nans.max_abs) == (False, 0.0)
    one_nan = compare_arrays("o", _f32(nan, 1), _f32(1, 1))
    assert one_nan.max_abs == float("inf") and not one_nan.within(1e30)
    step = compare_arrays("o", _f32(1.0, 2.0), _f32(1.0, np.nextafter(np.float32(2), 3)))
    assert (step.mismatched, step.max_ulp, step.max_abs) == (1, 1, 2.0**-22)
    across = compare_arrays("o", _f32(np.float32(1e-45)), _f32(-np.float32(1e-45)))
    assert across.max_ulp == 2  # smallest subnormal to its negative: through +0 and -0
    half = compare_arrays("o", np.array([1.0], np.float16), np.array([1.0009766], np.float16))
    assert half.max_ulp == 1
    bf = np.array([1.0, 1.0078125], ml_dtypes.bfloat16)
    assert compare_arrays("o", bf[:1], bf[1:]).max_ulp == 1
    big = compare_arrays("o", np.array([1e308]), np.array([-1e308]))
    assert big.max_ulp == 2 * int(np.array(1e308).view(np.uint64))
    ints = compare_arrays("o", np.array([-128, 5], np.int8), np.array([127, 5], np.int8))
    assert (ints.max_abs, ints.max_ulp, ints.mismatched) == (255.0, None, 1)
    shape = compare_arrays("o", _f32(1, 2), _f32(1, 2, 3))
    assert shape.problem == "float32[2] became float32[3]" and not shape.within(1.0)
    strings = compare_arrays("o", np.array(["a", "b"], object), np.array(["a", "c"], object))
    assert (strings.exact, strings.mismatched) == (False, 1)


def test_bound_is_exact_or_a_stated_limit_with_its_reason() -> None:
    two = np.float32(2)
    three_ulp = np.nextafter(np.nextafter(np.nextafter(two, 3), 3), 3)
    near = compare_arrays("o", _f32(-8.0, 2.0), _f32(-8.0, three_ulp))  # 3 ulp, 7.2e-7 abs
    assert near.max_ulp == 3 and near.max_ref == 8.0
    assert EXACT_BOUND.exact and not EXACT_BOUND.accepts(near)
    assert EXACT_BOUND.accepts(compare_arrays("o", _f32(1), _f32(1)))
    by_ulp = Bound("order", ulp=3)
    assert by_ulp.accepts(near) and not Bound("order", ulp=2).accepts(near)
    # 3 * 2**-22 = 7.15e-7 against 5e-8 * 8 = 4e-7 and 1e-7 * 8 = 8e-7
    assert not Bound("order", relative=5e-8).accepts(near)
    assert Bound("order", relative=1e-7).accepts(near)
    either = Bound("a", relative=5e-8).join(Bound("b", ulp=3))
    assert (either.relative, either.ulp, either.reason) == (5e-8, 3, "a; b")
    assert either.accepts(near)
    assert EXACT_BOUND.join(by_ulp) == by_ulp and by_ulp.join(EXACT_BOUND) == by_ulp
    assert Bound("x", relative=1e-3).join(Bound("x", relative=2e-3)).reason == "x"
    # never: a missing/changed output, NaN against a number
    shape = compare_arrays("o", _f32(1, 2), _f32(1, 2, 3))
    nan = compare_arrays("o", _f32(np.nan), _f32(1))
    assert not Bound("any", relative=1e30, ulp=2**40).accepts(shape)
    assert not Bound("any", relative=1e30, ulp=2**40).accepts(nan)
    assert by_ulp.describe() == "differences up to 3 ulp"
    with pytest.raises(ValueError):
        Bound("a reason and no limit")
    with pytest.raises(ValueError):
        Bound(relative=1e-3)  # a limit without its reason


def _ort_crashing_model() -> onnx.ModelProto:
    """ONNX Runtime 1.31 aborts the process loading a QLinearLeakyRelu whose inputs end
    before Y_zero_point (an assertion in its graph code; QL107 says so)."""
    from qoperator_models import build

    model = build("QLinearLeakyRelu")
    del model.graph.node[0].input[4:]
    return model


@pytest.mark.parametrize("crashing", ["original", "rewritten"])
def test_ort_crashing_the_process_ends_the_verification_not_the_command(
    tmp_path: Path, crashing: str
) -> None:
    from qoperator_models import build

    from qlrewrite.verify.verify import MISMATCH, UNVERIFIABLE, input_specs
    from qlrewrite.verify.verify_child import verify_in_child

    good = _save(build("QLinearLeakyRelu"), tmp_path / "good.onnx")
    bad = _save(_ort_crashing_model(), tmp_path / "bad.onnx")
    original, rewritten = (bad, good) if crashing == "original" else (good, bad)
    specs = input_specs(ir.load(good), {})
    result = verify_in_child(original, rewritten, specs)
    assert result.status == (UNVERIFIABLE if crashing == "original" else MISMATCH)
    assert result.reason == f"ONNX Runtime crashed (SIGABRT) on the {crashing} model"
    assert not result.passed
    same = verify_in_child(good, good, specs)  # the child's answer when nothing crashes
    assert same.passed and same.status == "exact"


# ------------------------------------- issue 30, 2: the child is isolated and bounded


def _endless_loop_model() -> onnx.ModelProto:
    """A valid model of 271 bytes: a Loop of 2^62 iterations (ONNX Runtime runs it for
    ever)."""
    f, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Add", ["v", "one"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", i64, []),
            helper.make_tensor_value_info("cond", b, []),
            helper.make_tensor_value_info("v", f, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", b, []),
            helper.make_tensor_value_info("v_out", f, [1]),
        ],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)],
        "g",
        [helper.make_tensor_value_info("x", f, [1])],
        [helper.make_tensor_value_info("y", f, [1])],
        initializer=[
            numpy_helper.from_array(np.array(2**62, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "c"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_a_verification_past_its_time_limit_is_unverifiable(tmp_path: Path) -> None:
    """``fold --verify`` of an endless Loop hung for ever: now unverifiable after
    --verify-timeout, exit 1, nothing written; the next verification gets a new child."""
    source = _save(_endless_loop_model(), tmp_path / "loop.onnx")
    out = tmp_path / "out.onnx"
    before = _files(tmp_path)
    start = time.monotonic()
    code, err = _invoke(main, "fold", source, "-o", out, "--verify", "--verify-timeout", "1.5")
    assert time.monotonic() - start < 60
    assert code == 1, err
    # the reason once, on the error line (the verify line no longer repeats it)
    assert err.count("no answer within 1.5 s on the original model") == 1
    assert "cannot verify with ONNX Runtime: no answer within 1.5 s on the original" in err
    assert _files(tmp_path) == before
    with pytest.raises(VerificationFailed) as info:  # the Python API has the limit too
        pipeline.rewrite(source, [_Perturb(0)], command="p", verify=VerifyOptions(timeout=1))
    assert info.value.verification.status == "unverifiable"
    assert "no answer within 1 s" in str(info.value.verification.reason)
    good = _save(_model(), tmp_path / "m.onnx")
    result = pipeline.rewrite(good, [_Perturb(0)], command="p", verify=VerifyOptions())
    assert result.verification is not None and result.verification.status == "exact"


def test_the_verify_timeout_option_is_checked() -> None:
    with pytest.raises(ValueError):
        VerifyOptions(timeout=0)
    result = CliRunner().invoke(main, ["fold", "m.onnx", "--verify-timeout", "1"])
    assert result.exit_code == 2 and "--verify-timeout needs --verify" in result.stderr


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
@pytest.mark.parametrize("option", ["--verify-timeout", "--verify-tolerance"])
def test_verify_numbers_must_be_finite(tmp_path: Path, option: str, value: str) -> None:
    """``--verify-timeout nan`` passed the option's range (NaN compares false) and ended in a
    traceback; ``inf`` meant no time limit. Both are usage errors, exit 2, one line."""
    source = _save(_model(), tmp_path / "m.onnx")
    result = CliRunner().invoke(main, ["fold", str(source), "--verify", option, value])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + result.stderr
    assert f"Invalid value for '{option}'" in result.stderr
    assert _files(tmp_path) == {"m.onnx"}


def test_the_working_directory_is_not_on_the_childs_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A numpy.py, onnxruntime.py or qlrewrite/ in the current folder (in CI, the checkout
    under test) is never imported by the child: each would leave a marker."""
    from qlrewrite.verify import verify_child

    good = _save(_model(), tmp_path / "m.onnx")
    marker = tmp_path / "marker"
    plant = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for name in (
        "numpy.py",
        "onnxruntime.py",
        "onnx_ir.py",
        "qlrewrite/__init__.py",
        "qlrewrite/verify/verify_child.py",
        "qlrewrite/verify/verify.py",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(plant)
    verify_child._CHILD.close()  # a child started here, now
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m` puts it first
    try:
        specs = input_specs_of(good)
        result = verify_child.verify_in_child(good, good, specs)
    finally:
        verify_child._CHILD.close()
    assert not marker.exists(), marker.read_text()
    assert result.status == "exact", result.reason


def input_specs_of(path: Path) -> list[InputSpec]:
    from qlrewrite.verify.verify import input_specs

    return input_specs(ir.load(path), {})


def _fake_child(folder: Path, answer: bytes) -> tuple[Path, Path]:
    """A program that writes ``answer`` where the child answers and then runs on (or
    exits, after an answer cut short); its pid goes to a file."""
    pid, script, code = folder / "pid", folder / "fake-python", folder / "fake.py"
    out = "sys.stdout.buffer"
    then = "sys.exit(0)" if answer.endswith(b"cut") else "time.sleep(600)"
    code.write_text(f"import sys, time\n{out}.write({answer!r})\n{out}.flush()\n{then}\n")
    script.write_text(f"#!/bin/sh\necho $$ > {pid}\nexec {sys.executable} {code}\n")
    script.chmod(0o755)
    return script, pid


def _frame(message: object) -> bytes:
    data = json.dumps(message).encode()
    return len(data).to_bytes(8, "big") + data


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage!" + b"\0" * 64,  # not an answer at all
        _frame({"result": {"status": "exact"}}),  # missing fields
        _frame(
            {
                "result": {
                    "status": "exact",
                    "runs": 1,
                    "seed": 0,
                    "tolerance": None,
                    "outputs": "all",
                    "reason": None,
                    "runtime": None,
                    "bound": {"reason": None, "relative": None, "ulp": None, "per_output": []},
                }
            }
        ),  # outputs of the wrong type
        _frame(
            {
                "result": {
                    "status": "passed",
                    "runs": 1,
                    "seed": 0,
                    "tolerance": None,
                    "outputs": [],
                    "reason": None,
                    "runtime": None,
                    "bound": {"reason": None, "relative": None, "ulp": None, "per_output": []},
                }
            }
        ),  # no such status
        _frame([[[[[]]]]]),  # not an object
        _frame({"phase": "original"}) + b"\0" * 7 + b"\x40cut",  # a phase, an answer cut
    ],
)
def test_an_answer_that_cannot_be_read_kills_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: bytes
) -> None:
    """Any undecodable answer is unverifiable at once (it hung in wait() on the live
    child, or was an internal ValueError), and the child is killed."""
    from qlrewrite.verify import verify_child

    script, pid_file = _fake_child(tmp_path, answer)
    monkeypatch.setattr(sys, "executable", str(script))
    child = verify_child._Child()
    results: list[Any] = []
    task = ("a.onnx", "b.onnx", [], VerifyOptions())
    thread = threading.Thread(target=lambda: results.append(child.run(task, task[-1])))
    thread.daemon = True
    thread.start()
    thread.join(timeout=60)
    pid = int(pid_file.read_text())
    try:
        assert not thread.is_alive(), "the parent hangs on the answer"
        assert len(results) == 1 and results[0].status == "unverifiable"
        assert not results[0].passed
        assert not Path(f"/proc/{pid}").exists()  # killed and reaped
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


_PARENT = """
import sys
import onnx_ir as ir
from qlrewrite.verify import verify_child
from qlrewrite.verify.verify import input_specs
loop = sys.argv[1]
specs = input_specs(ir.load(loop), {})
print(verify_child._CHILD._started().pid, flush=True)
verify_child.verify_in_child(loop, loop, specs)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A parent SIGKILLed while its child runs an endless Loop: the child is gone within
    seconds (it ran on, spinning, for ever)."""
    loop = _save(_endless_loop_model(), tmp_path / "loop.onnx")
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(loop)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    try:
        time.sleep(3)  # the child is in the Loop
        assert _alive(pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid)
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_every_field_of_a_verification_crosses_from_the_child() -> None:
    """The child's answer, as JSON, is read back whole: every field and type, NaN and
    infinity included (a field the reader does not know would make every answer
    unverifiable)."""
    from qlrewrite.verify import verify_child
    from qlrewrite.verify.verify import OutputVerdict, Verification

    bound = Bound("a reason", relative=1e-6, ulp=2, per_output=(("y", 0.5),), unbounded=("z",))
    verdicts = [
        OutputVerdict(
            "y",
            exact=False,
            elements=4,
            mismatched=1,
            max_abs=float("inf"),
            max_ulp=2**70,
            problem=None,
            max_ref=3.0,
        ),
        OutputVerdict("z", problem="missing from the rewritten model"),
    ]
    sent = Verification(
        "mismatch",
        3,
        7,
        0.25,
        verdicts,
        "why",
        bound,
        "ONNX Runtime 1.31.1",
        probes={"p": float("nan"), "q": 1.5},
    )
    data = json.dumps({"result": verify_child._jsonable(sent)}).encode()  # as the child sends
    read, write = os.pipe()
    os.write(write, len(data).to_bytes(8, "big") + data)
    try:
        got = verify_child._read_message(read, time.monotonic() + 5)
    finally:
        os.close(read)
        os.close(write)
    received = verify_child._verification(got["result"])
    assert received.probes["q"] == 1.5 and np.isnan(received.probes["p"])
    received.probes["p"] = sent.probes["p"] = 0.0
    assert received == sent
