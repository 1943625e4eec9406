"""``check --target`` on the activation-only QDQ node groups ONNX Runtime fuses or drops (issue
41 item 2): unary, binary, variadic, Where, the dropped Q/DQ pairs, Pad, InstanceNormalization,
Relu / Clip; and on the weight-operator patterns at the other opsets a user imports (10, 19,
23) and with com.microsoft Q/DQ.

- Every family pattern the probe builds is in every table; ``check --target ort==1.X``
  errors on it exactly where the table says release X refuses it, fails at run, or computes
  otherwise than ORT_DISABLE_ALL or the ONNX reference, and nowhere else (the expectation
  read from the table's raw rows, every release).
- Measured (2026-11-28, 1.15.1-1.32.0): no family miscomputes; per-channel activations are
  refused at load (QLinearAdd / QLinearMul / QLinearConcat / QLinear lookup tables: "Scale
  and Zero-point must be a scalar") by the default session where ORT_DISABLE_ALL runs them,
  GlobalAveragePool fails at run; float8 activations are fused into QLinear kernels without
  a float8 kernel (1.18-1.31); Clip before an int4 / float8 QuantizeLinear is refused at
  load (1.19-1.32); an int4 MaxPool whose Q/DQ pair is dropped has no kernel. A Concat whose
  inputs have different scales is computed right (QLinearConcat) in every release.
- The findings name the way out measured in the tables (per tensor, uint8, ORT_DISABLE_ALL).
- The installed ONNX Runtime reproduces a row; a slow test runs real releases.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest
from example_models import DT
from family_models import qdq_family
from ort_quantized import FAMILY_CONFIGS, inputs_for, model_name_of, quantized, run_session
from release_venvs import release_outputs

from qlrewrite.checking.checker import check
from qlrewrite.targets.forms import FAMILY_OPS
from qlrewrite.targets.tables import ort_releases, table

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "probe"))

import cases  # noqa: E402  (tools/probe: the probe's model builders)
import families  # noqa: E402

WRONG = ("miscomputes", "fails at run")
RELEASES = [f"{a}.{b}" for a, b in ort_releases()]


def _wrong(row: Any) -> bool:
    """What a raw table row says: refused (at load or run), or run and computed otherwise
    than ORT_DISABLE_ALL or the ONNX reference."""
    if row == "runs":
        return False
    if not row.get("runs"):
        return True
    return row.get("optimized") in WRONG or row.get("reference") in WRONG


def _all_cases() -> Iterator[cases.Case]:
    yield from families.family_cases()
    yield from cases.other_opset_cases()
    yield from cases.contrib_conv_cases()


def _save(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def _errors(path: Path, target: str) -> list[Any]:
    report = check(path, targets=[target], select=["QL7"])
    assert report.load_error is None, report.load_error
    return report.errors


def test_every_family_op_is_probed_in_every_table() -> None:
    keys = {case.key for case in families.family_cases()}
    ops = {k.split(":")[0].removeprefix("QDQ ") for k in keys}
    assert ops == {*FAMILY_OPS, "Conv bias", "Gemm bias"}
    for release in RELEASES:
        missing = keys - set(table(f"ort-{release}").forms)
        assert not missing, (release, sorted(missing)[:3])


def test_check_errors_exactly_where_each_release_fails(tmp_path: Path) -> None:
    """Every family and other-opset pattern, every release: an error iff its row is wrong."""
    wrong = []
    for index, case in enumerate(_all_cases()):
        path = _save(case.model, tmp_path, f"c{index}.onnx")
        for release in RELEASES:
            expected = _wrong(table(f"ort-{release}").forms[case.key])
            if bool(_errors(path, f"ort=={release}")) != expected:
                wrong.append((release, case.key, expected))
    assert not wrong, wrong[:5]


def test_check_errors_exactly_where_openvino_fails(tmp_path: Path) -> None:
    """Every family pattern on OpenVINO: an error iff its row is refused or computed
    otherwise than the ONNX reference (measured: a 16-bit InstanceNormalization 55% off, a
    16-bit MaxPool refused)."""
    wrong = []
    for index, case in enumerate(families.family_cases()):
        path = _save(case.model, tmp_path, f"c{index}.onnx")
        expected = _wrong(table("openvino").forms[case.key])
        if bool(_errors(path, "openvino")) != expected:
            wrong.append((case.key, expected))
    assert not wrong, wrong[:5]
    norm = qdq_family("InstanceNormalization", DT.INT16, opset=21)
    finding = _finding(tmp_path, norm, "openvino")
    assert finding.rule == "QL706" and "the ONNX reference" in finding.message


def _finding(tmp_path: Path, model: onnx.ModelProto, target: str) -> Any:
    (finding,) = _errors(_save(model, tmp_path), target)
    return finding


def test_a_per_channel_activation_names_the_measured_ways_out(tmp_path: Path) -> None:
    model = qdq_family("Add", DT.UINT8, "per-axis")
    finding = _finding(tmp_path, model, "ort==1.24")
    assert finding.rule == "QL706" and "quantized Add" in finding.message
    assert "refused when loaded, where ORT_DISABLE_ALL runs it" in finding.message
    assert "Scale and Zero-point must be a scalar" in finding.message
    assert finding.hint.startswith("quantize this activation per tensor")
    assert "graph_optimization_level=ORT_DISABLE_ALL" in finding.hint
    assert _errors(_save(model, tmp_path), "ort==1.32") == []  # 1.32.0 runs it right
    pool = _finding(tmp_path, qdq_family("GlobalAveragePool", DT.UINT8, "per-axis"), "ort==1.32")
    assert "fails at run where ORT_DISABLE_ALL runs it" in pool.message


def test_a_shared_activation_dequantize_is_checked_in_each_group(tmp_path: Path) -> None:
    """ONNX Runtime duplicates a DequantizeLinear that feeds several nodes
    (EnsureUniqueDQForNodeUnit) and fuses each copy: a per-channel Add whose input's
    DequantizeLinear also feeds a Relu is refused at load as the Add alone is (measured
    1.15.1, 1.20.1, 1.31.1; 1.32.0 runs both)."""
    model = qdq_family("Add", DT.UINT8, "per-axis")
    model.graph.node.append(onnx.helper.make_node("Relu", ["a_f"], ["r"], name="relu"))
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [1, 4, 4, 4])
    )
    path = _save(model, tmp_path)
    assert [f.rule for f in _errors(path, "ort==1.20")] == ["QL706"]
    assert _errors(path, "ort==1.32") == []


def test_clip_before_an_int4_quantize_is_refused_with_uint8_as_the_way_out(
    tmp_path: Path,
) -> None:
    model = qdq_family("Clip", DT.INT4, params="equal", opset=21)
    finding = _finding(tmp_path, model, "ort==1.32")
    assert finding.rule == "QL706" and "Unexpected data type for QuantizeLinear" in finding.message
    assert "as uint8 per tensor" in finding.hint
    assert (
        _errors(_save(qdq_family("Relu", DT.INT4, params="equal", opset=21), tmp_path), "ort==1.32")
        == []
    )


def test_a_range_names_the_releases_once_per_group(tmp_path: Path) -> None:
    model = qdq_family("Concat", DT.UINT8, "per-axis")
    findings = _errors(_save(model, tmp_path), "ort>=1.15")
    assert [f.rule for f in findings] == ["QL706"]  # the second input's DQ adds none
    assert "1.15.1" in findings[0].message and "1.32.0" not in findings[0].message


@pytest.mark.parametrize("qtype", [DT.UINT8, DT.INT8])
def test_concat_of_different_scales_computes_right_in_every_release(
    tmp_path: Path, qtype: DT
) -> None:
    """Item 4's Concat value rule, measured for ORT: QLinearConcat requantizes each uint8
    input (int8 stays a float Concat), the default session equal to ORT_DISABLE_ALL and the
    reference within rounding, 1.15.1-1.32.0: no error."""
    model = qdq_family("Concat", qtype, params="differ")
    key = families.key_of_family(model)
    assert key is not None and key.endswith("params=differ")
    path = _save(model, tmp_path)
    for release in RELEASES:
        row = table(f"ort-{release}").forms[key]
        assert row["optimized"] == "matches" and row["reference"] == "matches"
        fused = "com.microsoft:QLinearConcat" if qtype == DT.UINT8 else None  # int8: Concat
        assert row["kernel"] == fused
        assert _errors(path, f"ort=={release}") == []


def test_int32_biases_of_conv_and_gemm_are_computed_right_in_every_release() -> None:
    """The bias DequantizeLinear of a QDQ Conv / Gemm as ORT's quantizer writes it (scale
    x_scale x w_scale, per tensor or per channel, opset 13 and 21): fused and computed as
    ORT_DISABLE_ALL and the reference in every release that loads it (a bias scale that is
    not the product is QL505 / QL730's)."""
    keys = [case.key for case in families.bias_cases()]
    assert len(keys) == 8
    for release in RELEASES:
        for key in keys:
            row = table(f"ort-{release}").forms[key]
            if isinstance(row, dict) and not row.get("runs"):
                assert row["reason"] == "ir", (release, key)
                continue
            assert row["optimized"] == row["reference"] == "matches", (release, key)
            fused = ("QLinearConv", "com.microsoft:QLinearConv", "com.microsoft:QGemm")
            assert row["kernel"] in fused, (release, key)


def _installed_release() -> str:
    ort = pytest.importorskip("onnxruntime")
    return ".".join(ort.__version__.split(".")[:2])


def _load_outcomes(path: Path) -> tuple[str, str]:
    """The default session's and ORT_DISABLE_ALL's outcome: "runs" or the error."""
    import numpy as np
    import onnxruntime as ort

    outcomes = []
    for level in (None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        options = ort.SessionOptions()
        options.log_severity_level = 4
        if level is not None:
            options.graph_optimization_level = level
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            session.run(None, {"a": np.ones([1, 4, 4, 4], np.float32)})
            outcomes.append("runs")
        except Exception as exc:  # the runtime's refusal, compared below
            outcomes.append(str(exc))
    return outcomes[0], outcomes[1]


def test_the_installed_release_refuses_a_per_channel_add_only_when_optimizing(
    tmp_path: Path,
) -> None:
    release = _installed_release()
    key_model = qdq_family("Add", DT.UINT8, "per-axis")
    row = table(f"ort-{release}").forms.get(families.key_of_family(key_model) or "")
    if not isinstance(row, dict) or row.get("unoptimized") != "runs":
        pytest.skip(f"ORT {release}'s table records no refusal of the per-channel Add")
    default, unoptimized = _load_outcomes(_save(key_model, tmp_path))
    assert unoptimized == "runs" and "must be a scalar" in default


@pytest.mark.parametrize("config", sorted(FAMILY_CONFIGS))
def test_quantizer_outputs_are_silent_where_the_installed_release_runs_them(
    tmp_path: Path, config: str
) -> None:
    """ORT's own quantize_static (QDQ 8-bit, per channel, 16-bit at opset 21 and in
    com.microsoft, QOperator) and quantize_dynamic outputs of a CNN and an attention block
    of the families: the
    installed release runs each with the default session as ORT_DISABLE_ALL does (within
    10% of the largest output), and ``check --target`` it is silent on them."""
    release = _installed_release()
    model = quantized(config)
    x = inputs_for(model_name_of(config))["x"]
    got = run_session(model, x)
    expected = run_session(model, x, optimized=False)
    assert float(abs(got - expected).max()) <= 0.1 * float(abs(expected).max())
    assert _errors(_save(model, tmp_path), f"ort=={release}") == []


# --------------------------------------------------------------------------- slow: real runs

_VERDICT = """
import json, sys
import numpy as np
import onnxruntime as ort

def outcome(path, shape, level):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if level is not None:
        options.graph_optimization_level = level
    feed = {"a": np.random.default_rng(1).uniform(0, 6, shape).astype(np.float32)}
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception:
        return "load", None
    try:
        return "ok", session.run(None, feed)[0]
    except Exception:
        return "run", None

verdicts = {}
for path, shape in json.loads(sys.argv[1]):
    default, got = outcome(path, shape, None)
    plain, expected = outcome(path, shape, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if default == "ok" and plain == "ok":
        largest = float(np.abs(expected).max()) or 1.0
        if float(np.abs(got.astype(np.float64) - expected).max()) / largest > 0.1:
            default = "miscomputes"
    verdicts[path] = default
print(json.dumps(verdicts))
"""


@pytest.mark.slow
def test_family_patterns_in_every_release(tmp_path: Path) -> None:
    """Each family pattern (uint8 / int8 / 16-bit / int4 / float8, per tensor and per
    channel) in each /work/venvs/ort-1.X: ``check --target ort==1.X`` errors exactly where
    the release refuses it, fails at run, or computes otherwise than ORT_DISABLE_ALL."""
    paths = [
        (str(_save(case.model, tmp_path, f"c{index}.onnx")), case.feeds[0][2])
        for index, case in enumerate(families.family_cases())
    ]
    wrong = []
    for release, verdicts in release_outputs(_VERDICT, paths):
        for path, verdict in verdicts.items():
            errors = _errors(Path(path), f"ort=={release}")
            if bool(errors) != (verdict != "ok"):
                wrong.append((release, Path(path).stem, verdict, [f.rule for f in errors]))
    assert not wrong, wrong[:10]
