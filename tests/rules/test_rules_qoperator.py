"""The check rules of the QOperator family: each fires on a model that breaks it and stays
silent on one that keeps it, and ONNX Runtime agrees: every good model loads and runs,
every model breaking an error rule fails (where ORT is more lenient than the rule, the
case says why and the test pins that ORT runs it)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from qoperator_models import NO_CPU_KERNEL, OPS, build, ort_error

from qlrewrite.checking.checker import check_model
from qlrewrite.rules import RULES

f32, u8, i8, i32 = np.float32, np.uint8, np.int8, np.int32


def _codes(proto: onnx.ModelProto) -> list[str]:
    import onnx_ir as ir

    return [f.rule for f in check_model(ir.serde.deserialize_model(proto)).findings]


def _drop_input(index: int) -> Callable[[onnx.ModelProto], None]:
    def cut(proto: onnx.ModelProto) -> None:
        del proto.graph.node[0].input[index:]

    return cut


def _empty_input(index: int) -> Callable[[onnx.ModelProto], None]:
    def empty(proto: onnx.ModelProto) -> None:
        proto.graph.node[0].input[index] = ""

    return empty


def _no_ms_import(proto: onnx.ModelProto) -> None:
    kept = [o for o in proto.opset_import if o.domain != "com.microsoft"]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)


@dataclasses.dataclass(frozen=True)
class Case:
    code: str
    label: str
    op: str
    bad: dict = dataclasses.field(default_factory=dict)
    post: Callable[[onnx.ModelProto], None] | None = None
    #: Why ONNX Runtime runs the bad model although the rule says error (None: it fails).
    ort_lenient: str | None = None

    def model(self) -> onnx.ModelProto:
        proto = build(self.op, **self.bad)
        if self.post is not None:
            self.post(proto)
        return proto


CASES = [
    Case("QL107", "matmul-7-inputs", "QLinearMatMul", post=_drop_input(7)),
    Case("QL107", "conv-empty-w", "QLinearConv", post=_empty_input(3)),
    Case("QL107", "concat-half-three", "QLinearConcat", post=_drop_input(7)),
    Case("QL107", "concat-empty-data", "QLinearConcat", post=_empty_input(5)),
    Case("QL107", "add-empty-zero-point", "QLinearAdd", post=_empty_input(2)),
    Case("QL107", "mul-empty-last-zero-point", "QLinearMul", post=_empty_input(7)),
    Case("QL107", "average-pool-empty-zero-point", "QLinearAveragePool", post=_empty_input(2)),
    Case("QL314", "conv-w-zp-uint8", "QLinearConv", {"w_zero_point": np.zeros(3, u8)}),
    Case("QL314", "conv-x-zp-int8", "QLinearConv", {"x_zero_point": np.array(0, i8)}),
    Case("QL314", "conv-bias-float", "QLinearConv", {"B": np.zeros(3, f32)}),
    Case("QL314", "conv-scale-float16", "QLinearConv", {"y_scale": np.array(0.2, np.float16)}),
    Case("QL314", "matmul-b-zp-uint8", "QLinearMatMul", {"b_zero_point": np.zeros(3, u8)}),
    Case("QL314", "add-zp-int8", "QLinearAdd", {"B_zero_point": np.array(0, i8)}),
    Case("QL314", "concat-zp-int8", "QLinearConcat", {"b_zero_point": np.array(0, i8)}),
    Case(
        "QL440",
        "conv-w-scale-2-of-3",
        "QLinearConv",
        {"w_scale": np.full(2, 0.01, f32), "w_zero_point": np.zeros(2, i8)},
    ),
    Case("QL440", "conv-w-scale-rank-2", "QLinearConv", {"w_scale": np.full((3, 1), 0.01, f32)}),
    Case("QL440", "conv-x-scale-per-channel", "QLinearConv", {"x_scale": np.full(2, 0.05, f32)}),
    Case("QL440", "conv-y-scale-per-channel", "QLinearConv", {"y_scale": np.full(3, 0.2, f32)}),
    Case(
        "QL440",
        "matmul-b-scale-along-k",
        "QLinearMatMul",
        {"b_scale": np.full(4, 0.01, f32), "b_zero_point": np.zeros(4, i8)},
    ),
    Case("QL440", "matmul-a-scale-1d", "QLinearMatMul", {"a_scale": np.full(2, 0.05, f32)}),
    Case("QL440", "add-scale-1-element", "QLinearAdd", {"C_scale": np.full(1, 0.1, f32)}),
    Case("QL440", "add-scale-1d", "QLinearAdd", {"A_scale": np.full(3, 0.05, f32)}),
    Case("QL440", "sigmoid-y-scale-1d", "QLinearSigmoid", {"Y_scale": np.full(2, 0.1, f32)}),
    Case(
        "QL440",
        "global-pool-zp-1d",
        "QLinearGlobalAveragePool",
        {"x_zero_point": np.full(3, 128, u8)},
    ),
    Case(
        "QL440",
        "gemm-b-scale-along-k",
        "QGemm",
        {"b_scale": np.full(4, 0.01, f32), "b_zero_point": np.zeros(4, i8)},
    ),
    Case("QL440", "gemm-y-scale-1d", "QGemm", {"y_scale": np.full(3, 0.1, f32)}),
    Case(
        "QL440",
        "concat-input-scale-1d",
        "QLinearConcat",
        {"a_scale": np.full(2, 0.1, f32)},
        ort_lenient="ORT's QLinearConcat reads the first scale value only",
    ),
    Case("QL440", "matmul-zp-2-of-3", "QLinearMatMul", {"b_zero_point": np.zeros(2, i8)}),
    Case("QL440", "conv-zp-2-of-3", "QLinearConv", {"w_zero_point": np.zeros(2, i8)}),
    Case("QL442", "conv-bias-2-of-3", "QLinearConv", {"B": np.array([1, 2], i32)}),
    Case("QL442", "conv-bias-2d", "QLinearConv", {"B": np.array([[1, 2, 3]], i32)}),
    Case("QL442", "gemm-bias-2-of-3", "QGemm", {"C": np.array([1, 2], i32)}),
    Case(
        "QL103",
        "no-com-microsoft-import",
        "QLinearAdd",
        post=_no_ms_import,
        ort_lenient="ORT resolves com.microsoft ops without the import; onnx.checker "
        "and other runtimes do not",
    ),
    Case("QL511", "zero-scale", "QLinearMatMul", {"y_scale": np.array(0.0, f32)}),
]


#: The rules these cases try (test_rules_cases checks every rule has cases somewhere).
CODES = {case.code for case in CASES}


@pytest.mark.parametrize("op", sorted(OPS))
def test_good_model_is_clean_and_runs(op: str) -> None:
    model = build(op)
    assert _codes(model) == []
    error = ort_error(model)
    if op in NO_CPU_KERNEL:
        assert "Could not find an implementation" in error  # else: drop it from the set
    else:
        assert error is None


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.code}-{c.label}")
def test_bad_model_fires_and_ort_agrees(case: Case) -> None:
    model = case.model()
    assert case.code in _codes(model)
    error = ort_error(model)
    if RULES[case.code].severity != "error":
        return
    if case.ort_lenient:
        assert error is None, f"ORT now refuses it ({error}): drop ort_lenient"
    else:
        assert error is not None


def test_ms_per_tensor_accepts_one_element_scale_except_binary() -> None:
    # A 1-element 1-D scale is per-tensor for ORT's QLinearConv / QLinearMatMul.
    for op, name in (("QLinearConv", "x_scale"), ("QLinearMatMul", "y_scale")):
        model = build(op, **{name: np.full(1, 0.05, f32)})
        assert _codes(model) == [] and ort_error(model) is None
    # Per-column MatMul scales written [1, N]: ORT runs them, the rules accept them.
    column = {"b_scale": np.full((1, 3), 0.01, f32), "b_zero_point": np.zeros((1, 3), i8)}
    model = build("QLinearMatMul", **column)
    assert _codes(model) == [] and ort_error(model) is None
    # ... but not [1, N] on QGemm (ORT: "a scalar or 1D tensor of size 1 or N")
    model = build("QGemm", **column)
    assert "QL440" in _codes(model) and ort_error(model) is not None
    # Per-channel scale with one shared zero point: ORT runs it, the rules accept it.
    model = build("QLinearConv", w_zero_point=np.array(0, i8))
    assert _codes(model) == [] and ort_error(model) is None


def test_every_new_rule_has_a_case() -> None:
    codes = {c.code for c in CASES}
    assert {"QL107", "QL314", "QL440", "QL442", "QL511"} <= codes


@pytest.mark.parametrize(("op", "index"), [("QLinearAdd", 7), ("QLinearAveragePool", 4)])
def test_optional_zero_point_left_out_at_the_end_is_clean_and_runs(op: str, index: int) -> None:
    # The same zero point that an empty name makes an error (QL107) may be left out.
    model = build(op)
    del model.graph.node[0].input[index:]
    assert _codes(model) == [] and ort_error(model) is None


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
def test_inputs_ending_before_y_zero_point_crash_ort_and_are_an_error(op: str) -> None:
    # ONNX Runtime 1.31 aborts the process loading it: tried in a child process.
    model = build(op)
    del model.graph.node[0].input[4:]
    assert "QL107" in _codes(model)
    script = (
        "import sys, onnxruntime as ort; "
        "ort.InferenceSession(sys.stdin.buffer.read(), providers=['CPUExecutionProvider'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=model.SerializeToString(),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode < 0 or done.returncode == 134, "ORT loads it now: relax the rule"
    empty = build(op)
    empty.graph.node[0].input[4] = ""  # an empty name in its place: accepted
    assert _codes(empty) == [] and ort_error(empty) is None
