"""Degenerate shapes are findings, not crashes (issue 30, item 7).

Every weight-only (MatMulNBits, GatherBlockQuantized), QOperator and Q/DQ node kind is
built with dimensions of size 0 and 1, checked, and (when check has no error) rewritten
by every command that applies. Each case ends in a finding of ``check`` or in a valid
rewrite: the output passes ``check`` and, where ONNX Runtime 1.31 runs the input, it runs
the output with the same results (bit-identical; within the summation-order bound of
docs/verify.md for MatMulNBits; within one quantization step for the QOperator kinds, as
docs/qoperator.md measures). A rewrite may also refuse in one line (exit 1). Never an
internal error.

Measured with ONNX Runtime 1.31 before deciding error or valid: it runs empty Q/DQ,
MatMulNBits with K=0 (zeros) or N=0, GatherBlockQuantized with an empty quantize axis;
it reads outside an empty GatherBlockQuantized table (QL434, error) and crashes the
process on a blocked QuantizeLinear empty at or after its axis (QL412, warning).
"""

from __future__ import annotations

import faulthandler
import functools
import itertools
import json
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from example_models import (
    DQ,
    MS,
    Q,
    gather_block_quantized_model,
    matmul_nbits_model,
    qdq_model,
)
from model_io_fixtures import cli
from onnx import helper, numpy_helper
from qoperator_models import NO_CPU_KERNEL, OPS, build, feeds_for

ort = pytest.importorskip("onnxruntime")

REWRITES = {
    "qdq": [
        ["fold"],
        ["convert", "--to", "com.microsoft"],
        ["convert", "--to", "onnx"],
        ["upgrade", "--opset", "22"],
    ],
    "nbits": [
        ["convert", "--to", "onnx"],
        ["fold", "--dequantize-weights"],
        ["upgrade", "--opset", "22"],
    ],
    "qop": [["convert", "--to", "onnx"], ["upgrade", "--opset", "21"]],
}
#: Findings that say ONNX Runtime cannot run the input: it is not run.
ORT_CANNOT = {"QL412", "QL443", "QL606"}
U = 2.0**-24


def _const_x(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with its first graph input made an initializer (values 0..6)."""
    value = proto.graph.input[0]
    dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    array = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    proto.graph.initializer.append(numpy_helper.from_array(array, value.name))
    del proto.graph.input[0]
    return proto


def _qdq(op: str, shape: tuple[int, ...], axis: int | None, block: int, const: bool) -> Any:
    if axis is None:
        proto = qdq_model(op, 21, x_shape=shape)
    else:
        scale = list(shape)
        scale[axis] = -(-shape[axis] // block) if block else shape[axis]
        scale_shape = tuple(scale) if block else (shape[axis],)
        attrs = {"axis": axis, **({"block_size": block} if block else {})}
        proto = qdq_model(
            op, 21, x_shape=shape, scale_shape=scale_shape, zp_shape=scale_shape, attrs=attrs
        )
    return _const_x(proto) if const else proto


def _case(family: str, make: Any, name: str, *, fast: bool) -> Any:
    """One case; those not ``fast`` run with ``-m slow`` (the sweep takes minutes)."""
    return pytest.param(family, make, id=name, marks=() if fast else pytest.mark.slow)


def _qdq_cases() -> Iterator[Any]:
    for op, shape, const in itertools.product((Q, DQ), [(0, 3), (4, 0), (1, 3)], (True, False)):
        for axis, block in [(None, 0), (0, 0), (1, 0), (0, 2), (1, 1)]:
            name = f"{op}-{shape}-axis{axis}-block{block}-{'const' if const else 'input'}"
            make = functools.partial(_qdq, op, shape, axis, block, const)
            yield _case("qdq", make, name, fast=const and 0 in shape)
    ms = functools.partial(qdq_model, DQ, 13, domain=MS, x_shape=(0, 3), imports={"": 13, MS: 1})
    yield _case("qdq", lambda: _const_x(ms()), "ms-DQ-(0, 3)", fast=True)


def _gather_cases() -> Iterator[Any]:
    for shape, indices, zp in itertools.product([(0, 16), (1, 16), (8, 0), (8, 1)], (3, 0), (0, 1)):
        make = functools.partial(
            gather_block_quantized_model,
            data_shape=shape,
            quantize_axis=-1,
            zp=bool(zp),
            indices_shape=(indices,),
        )
        yield _case("nbits", make, f"GBQ-{shape}-indices{indices}-zp{zp}", fast=not zp)
    for shape in [(0, 8, 4), (2, 0, 4), (2, 8, 0), (2, 1, 4)]:
        make = functools.partial(
            gather_block_quantized_model,
            data_type=onnx.TensorProto.INT4,
            data_shape=shape,
            quantize_axis=2,
            gather_axis=1,
        )
        yield _case("nbits", make, f"GBQ-int4-{shape}", fast=True)


def _matmul_nbits_cases() -> Iterator[Any]:
    for k, n, rows, extra in itertools.product((0, 1, 16), (0, 1, 8), (0, 1, 2), (0, 1)):
        options = {"zp": "packed", "bias": True} if extra else {}
        make = functools.partial(matmul_nbits_model, k=k, n=n, a_shape=[rows, k], **options)
        name = f"MatMulNBits-K{k}-N{n}-rows{rows}-{'zp-bias' if extra else 'plain'}"
        yield _case("nbits", make, name, fast=not extra and 1 not in (k, n) and rows != 2)


def _qoperator_cases() -> Iterator[Any]:
    f32, i8, i32 = np.float32, np.int8, np.int32
    for c in (0, 1):
        scale, zero = np.full(c, 0.01, f32), np.zeros(c, i8)
        for op in ("QLinearConv", "ms-QLinearConv"):
            conv = functools.partial(
                build,
                op,
                w=np.zeros((c, 2, 3, 3), i8),
                w_scale=scale,
                w_zero_point=zero,
                B=np.zeros(c, i32),
            )
            yield _case("qop", conv, f"{op}-M{c}", fast=c == 0)
        matmul = functools.partial(
            build, "QLinearMatMul", b=np.zeros((4, c), i8), b_scale=scale, b_zero_point=zero
        )
        gemm = functools.partial(
            build,
            "QGemm",
            B=np.zeros((c, 4), i8),
            b_scale=scale,
            b_zero_point=zero,
            C=np.zeros(c, i32),
        )
        yield _case("qop", matmul, f"QLinearMatMul-N{c}", fast=c == 0)
        yield _case("qop", gemm, f"QGemm-N{c}", fast=c == 0)


def consistent_cases() -> list[Any]:
    """Each kind with a dimension of size 0 or 1, every other input made to fit it."""
    return [*_qdq_cases(), *_gather_cases(), *_matmul_nbits_cases(), *_qoperator_cases()]


def _ort_in_child(path: Path) -> tuple[int | None, list[np.ndarray] | None]:
    """The exit code of a child process running ``path`` in ONNX Runtime (ONNX Runtime
    crashes the process on some shapes) and the outputs it sent (None: it could not)."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_run, args=(send, path))
    child.start()
    send.close()  # the child's end alone: a crash is an end of file here, not a wait
    try:
        result = receive.recv() if receive.poll(120) else None
    except EOFError:
        result = None
    child.join(10)
    return child.exitcode, result


def _child_run(send: Any, path: Path) -> None:
    """The child's work: quiet when ONNX Runtime crashes it (pytest's faulthandler, which a
    forked child inherits, would print every crash's Python stack into the test log)."""
    faulthandler.disable()
    send.send(_run_ort_here(path))


def _run_ort(path: Path) -> list[np.ndarray] | None:
    """The outputs of ``path`` in ONNX Runtime (optimizations off), None if it cannot; a
    crash fails the test (a rule should have named it)."""
    code, result = _ort_in_child(path)
    assert code == 0, f"ONNX Runtime crashed on {path.name} ({code})"
    return result


def _run_ort_here(path: Path) -> list[np.ndarray] | None:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        model = onnx.load(str(path))
        feeds = feeds_for(model)
        if "indices" in feeds:  # in range of any table with rows
            feeds["indices"] = np.zeros_like(feeds["indices"])
        return session.run(None, feeds)
    except Exception:  # ORT raises several kinds
        return None


def _findings(path: Path) -> list[dict]:
    result = cli("check", "--isolated", "--format", "json", str(path))
    assert result.exit_code in (0, 1), (result.exit_code, result.stderr)
    return json.loads(result.stdout)["files"][0]["findings"]


def _agree(family: str, before: np.ndarray, after: np.ndarray, k: int) -> bool:
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if family == "qop" and before.dtype.kind in "iu":
        return bool(np.all(np.abs(before.astype(np.int64) - after.astype(np.int64)) <= 1))
    if family == "nbits" and before.dtype.kind == "f" and before.size:
        gamma = (k + 1) * U / (1 - (k + 1) * U)  # docs/verify.md: summation order
        return bool(np.all(np.abs(before - after) <= 2 * gamma * np.abs(before).max()))
    return np.array_equal(before, after, equal_nan=True)


def _k_of(proto: onnx.ModelProto) -> int:
    attrs = {a.name: a.i for n in proto.graph.node for a in n.attribute}
    return int(attrs.get("K", 0))


def _rewrites_are_valid(family: str, path: Path, proto: onnx.ModelProto) -> None:
    findings = _findings(path)
    if any(f["severity"] == "error" for f in findings):
        return  # a finding: rewrites refuse it
    codes = {f["rule"] for f in findings}
    op = proto.graph.node[0].op_type
    before = None if codes & ORT_CANNOT or op in NO_CPU_KERNEL else _run_ort(path)
    for command in REWRITES[family]:
        out = path.with_name("out.onnx")
        out.unlink(missing_ok=True)
        result = cli(*command, str(path), "-o", str(out))
        assert "--debug" not in result.stderr, (command, result.stderr)
        if result.exit_code == 1:  # refused in one line (a finding, or a form it cannot write)
            lines = result.stderr.strip().splitlines()
            assert lines[-1].startswith("qlrewrite: error:") and "nothing written" in lines[-1]
            assert not out.exists(), command
            continue
        assert result.exit_code == 0, (command, result.stderr)
        assert not any(f["severity"] == "error" for f in _findings(out)), command
        if before is None:
            continue
        after = _run_ort(out)
        assert after is not None, (command, "ONNX Runtime runs the input, not the output")
        for a, b in zip(before, after, strict=True):
            assert _agree(family, a, b, _k_of(proto)), (command, a, b)


@pytest.mark.parametrize(("family", "make"), consistent_cases())
def test_degenerate_shapes_are_findings_or_valid_rewrites(
    tmp_path: Path, family: str, make: Any
) -> None:
    proto = make()
    for output in proto.graph.output:  # shape inference decides
        output.type.tensor_type.ClearField("shape")
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    _rewrites_are_valid(family, path, proto)


def _every_dim(proto: onnx.ModelProto) -> Iterator[tuple[str, onnx.ModelProto]]:
    """``proto`` with each dimension of each input of its node set to 0, then 1 (the
    other inputs as they were: most variants disagree with them)."""
    inits = {t.name: t for t in proto.graph.initializer}
    inputs = {v.name: v for v in proto.graph.input}
    for name in proto.graph.node[0].input:
        if name in inits:
            dims = list(inits[name].dims)
        elif name in inputs:
            dims = [d.dim_value for d in inputs[name].type.tensor_type.shape.dim]
        else:
            continue
        for index, size in itertools.product(range(len(dims)), (0, 1)):
            if dims[index] == size:
                continue
            variant = onnx.ModelProto()
            variant.CopyFrom(proto)
            shape = [*dims[:index], size, *dims[index + 1 :]]
            if name in inits:
                (tensor,) = [t for t in variant.graph.initializer if t.name == name]
                array = numpy_helper.to_array(tensor)
                tensor.CopyFrom(numpy_helper.from_array(np.resize(array, shape), name))
            else:
                (value,) = [v for v in variant.graph.input if v.name == name]
                value.type.tensor_type.shape.dim[index].dim_value = size
            yield f"{name}[{index}]={size}", variant


def _every_kind() -> Iterator[tuple[str, str, onnx.ModelProto]]:
    yield "qdq", "Q", _const_x(qdq_model(Q, 21))
    yield (
        "qdq",
        "DQ-per-axis",
        qdq_model(DQ, 21, scale_shape=(3,), zp_shape=(3,), attrs={"axis": 1}),
    )
    yield (
        "qdq",
        "DQ-blocked",
        _const_x(
            qdq_model(
                DQ,
                21,
                x_shape=(4, 4),
                scale_shape=(4, 2),
                zp_shape=(4, 2),
                attrs={"axis": 1, "block_size": 2},
            )
        ),
    )
    yield "nbits", "MatMulNBits", matmul_nbits_model(zp="packed", bias=True)
    yield "nbits", "GatherBlockQuantized", gather_block_quantized_model(zp=True)
    for op in OPS:
        yield "qop", op, build(op)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "kind", "proto"), list(_every_kind()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_dim_of_every_input_never_crashes(
    tmp_path: Path, family: str, kind: str, proto: onnx.ModelProto
) -> None:
    """Every input's every dimension at 0 and 1: check and every rewrite end in a finding,
    a one-line refusal or a valid output, never an internal error."""
    path = tmp_path / "m.onnx"
    for label, variant in _every_dim(proto):
        for output in variant.graph.output:
            output.type.tensor_type.ClearField("shape")
        onnx.save(variant, path)
        _findings(path)
        for command in REWRITES[family]:
            result = cli(*command, str(path), "-o", str(tmp_path / "out.onnx"))
            assert result.exit_code in (0, 1), (kind, label, command, result.stderr)
            assert "--debug" not in result.stderr, (kind, label, command, result.stderr)


def _empty_blocked_quantize() -> onnx.ModelProto:
    return qdq_model(Q, 21, x_shape=(4, 0), scale_shape=(4, 0), attrs={"axis": 1, "block_size": 2})


def _conv_without_channels() -> onnx.ModelProto:
    i8 = np.int8
    return build(
        "QLinearConv",
        w=np.zeros((0, 2, 3, 3), i8),
        w_scale=np.zeros(0, np.float32),
        w_zero_point=np.zeros(0, i8),
        B=np.zeros(0, np.int32),
    )


@pytest.mark.parametrize(
    ("make", "code"),
    [(_empty_blocked_quantize, "QL412"), (_conv_without_channels, "QL443")],
)
def test_onnx_runtime_crashes_where_the_rules_say(tmp_path: Path, make: Any, code: str) -> None:
    """The measured facts behind QL412 and QL443 (ONNX Runtime 1.31): the process dies."""
    path = tmp_path / "m.onnx"
    onnx.save(make(), path)
    exit_code, _ = _ort_in_child(path)
    assert exit_code is not None and exit_code < 0, exit_code  # killed by a signal
    assert code in {f["rule"] for f in _findings(path)}


def test_onnx_runtime_reads_outside_an_empty_table(tmp_path: Path) -> None:
    """The fact behind QL434: GatherBlockQuantized of a table with no rows returns values
    for indices no table has (Gather refuses them)."""
    path = tmp_path / "m.onnx"
    onnx.save(gather_block_quantized_model(data_shape=(0, 16)), path)
    exit_code, outputs = _ort_in_child(path)
    assert exit_code == 0 and outputs is not None and outputs[0].shape == (3, 32)
    assert [f["rule"] for f in _findings(path) if f["severity"] == "error"] == ["QL434"]
