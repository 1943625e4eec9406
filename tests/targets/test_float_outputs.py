"""``check --target`` on QDQ groups whose output is float: Q/DQ on an op's inputs only, as
NNCF writes them (issue 41: the held-out quantizers). The probe measures each family and
weight pattern with its output quantized again and with it float; the table key says which
(``output=quantized|float``), so one form's verdict is never read for the other.

Measured (2026-11-28) on NNCF 3.4.0's outputs of a 26-op CNN, every release 1.15-1.32:
- ORT 1.27.0-1.32.0 refuse at load an int8 DequantizeLinear at opset 21 whose MaxPool,
  Reshape, Transpose, Squeeze, Unsqueeze or Slice output is float: the propagated
  QuantizeLinear gets ``output_dtype`` INT8 and a uint8 zero point ("output_dtype INT8 does
  not match y_zero_point type UINT8"; QL706: ORT_DISABLE_ALL runs it); 1.26.0 runs it;
  uint8, 16-bit and opset 13-19 run.
- A QDQ MatMul whose output is float is fused into MatMulIntegerToFloat, which 1.18-1.19 run
  at opset 21; the same MatMul with its output quantized is QLinearMatMul(21), which they
  refuse. Before the key said which, check said 1.18 refuses both.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from example_models import DT, qdq_matmul_weight
from family_models import qdq_family

from qlrewrite.checking.checker import check

PROPAGATED = ("MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice")


def _rules(model: onnx.ModelProto, folder: Path, target: str) -> list[str]:
    path = folder / "m.onnx"
    onnx.save(model, path)
    report = check(path, targets=[target], select=["QL7"])
    assert report.load_error is None, report.load_error
    return sorted({f.rule for f in report.errors})


@pytest.mark.parametrize("op", PROPAGATED)
def test_an_int8_group_with_a_float_output_is_refused_from_1_27(op: str, tmp_path: Path) -> None:
    model = qdq_family(op, DT.INT8, opset=21, output="float")
    assert _rules(model, tmp_path, "ort==1.26") == []
    for release in ("1.27", "1.32"):
        assert _rules(model, tmp_path, f"ort=={release}") == ["QL706"], release


def test_the_refusal_names_what_the_release_said(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(qdq_family("MaxPool", DT.INT8, opset=21, output="float"), path)
    (finding,) = check(path, targets=["ort==1.31"], select=["QL7"]).errors
    assert "output_dtype INT8 does not match y_zero_point type UINT8" in finding.message
    assert "ORT_DISABLE_ALL" in finding.message  # the unoptimized session runs it


@pytest.mark.parametrize(
    ("qtype", "opset"), [(DT.UINT8, 21), (DT.INT16, 21), (DT.INT8, 13)], ids=str
)
def test_the_other_float_outputs_run(qtype: DT, opset: int, tmp_path: Path) -> None:
    model = qdq_family("MaxPool", qtype, opset=opset, output="float")
    assert _rules(model, tmp_path, "ort==1.31") == []


def test_the_same_group_quantized_again_runs_in_1_31(tmp_path: Path) -> None:
    model = qdq_family("MaxPool", DT.INT8, opset=21)
    assert _rules(model, tmp_path, "ort==1.31") == []


@pytest.mark.parametrize("release", ["1.18", "1.19"])
def test_a_matmul_with_a_float_output_runs_where_qlinearmatmul_21_is_refused(
    release: str, tmp_path: Path
) -> None:
    float_output = qdq_matmul_weight(DT.INT8, DT.INT8, "per-axis", output="float")
    assert _rules(float_output, tmp_path, f"ort=={release}") == []
    quantized = qdq_matmul_weight(DT.INT8, DT.INT8, "per-axis")
    assert _rules(quantized, tmp_path, f"ort=={release}") == ["QL703"]
