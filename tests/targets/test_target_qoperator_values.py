"""``check --target`` and ``convert --to qoperator --target`` on QOperator nodes as their zero
points are (issue 41): the tables' value-compared QOperator rows
(``tools/probe/qoperator_values.py``: QLinearConv, QLinearMatMul, QGemm with uint8 / int8
activations and weights, per tensor and per channel, zero points 0, nonzero or differing;
the com.microsoft QLinear* ``convert`` writes with the output's zero point mid-range or at
an end), each fed from a float input and compared with the ONNX reference evaluator on the
same node written as Q/DQ.

- Every table holds every value row; ``check --target`` errors on each value model exactly
  where its row says the release refused it, failed at run, or computed it otherwise than
  the reference (QL703 on the node's form, QL707 on its zero points, QL752 on OpenVINO's
  QLinearAdd / QLinearMul), and nowhere else: every ORT release and OpenVINO.
- Measured 2026-11-28: ORT 1.15.1-1.26.0 fail at run on a QLinearConv whose per-channel
  weight zero points differ ("zero point of per-channel filter must be same"; 1.27.0 on run
  it right); no release has a kernel for an int8 activation with a uint8 weight
  (QLinearConv, QLinearMatMul, QGemm); uint8 weights per channel run right everywhere;
  1.15.1-1.28.x compute an int8 QLinearSoftmax whose output saturates at 127 (its zero
  point 127) 255% off. OpenVINO 2026.4.1 refuses per-channel QLinearConv / QLinearMatMul,
  every QGemm and QLinearGlobalAveragePool, computes a uint8 QLinearAveragePool (any zero
  point) 479-911% off and QLinearLeakyRelu 152-283% off, and saturating outputs of
  QLinearAdd / QLinearConcat / QLinearMul (and the int8 AveragePool / LeakyRelu at 127)
  wrong.
- ``convert --to qoperator --target`` leaves a group whose written node's row is wrong as
  Q/DQ.
- The installed ONNX Runtime reproduces its table's value rows through the probe's runner;
  a slow test runs every release venv and OpenVINO.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper
from table_rows import TABLES, disagreements, errors, row_wrong
from to_qoperator_models import Params, group_model

from qlrewrite.passes.commands import qoperator_passes
from qlrewrite.targets.tables import table

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tools" / "probe"
sys.path.insert(0, str(PROBE))

import drive  # noqa: E402  (tools/probe)
import qoperator_values  # noqa: E402

WRONG = ("miscomputes", "fails at run")
CASES = list(qoperator_values.qoperator_value_cases())


def _errors(path: Path, target: str) -> list[Any]:
    return errors(path, target, ["QL7"])


def _saved(folder: Path, model: onnx.ModelProto, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def test_every_table_holds_every_value_row_compared() -> None:
    keys = {case.key for case in CASES}
    assert len(keys) == len(CASES) == 204
    for name in TABLES:
        forms = table(name).forms
        assert keys <= set(forms), name
        ran = [forms[k] for k in keys if forms[k].get("runs")]
        assert all(row.get("reference") in ("matches", *WRONG) for row in ran), name


def test_check_errors_exactly_where_each_table_says(tmp_path: Path) -> None:
    """Every value model against every release and OpenVINO: an error iff its row is
    refused or wrong."""
    wrong = disagreements(CASES, tmp_path, ["QL7"])
    assert not wrong, wrong[:5]


def _weight_op(op: str, types: tuple[Any, Any], form: tuple[str, str]) -> onnx.ModelProto:
    return qoperator_values.weight_op_models(op, types, form, "nonzero", 13)[0]


def test_differing_weight_zero_points_fail_until_1_27(tmp_path: Path) -> None:
    """A QLinearConv (uint8, int8 weights per channel) whose weight zero points differ."""
    model = _weight_op("QLinearConv", (np.uint8, np.int8), ("per-channel", "differ"))
    path = _saved(tmp_path, model)
    (finding,) = _errors(path, "ort==1.26")
    assert finding.rule == "QL707"
    assert "zero point of per-channel filter must be same" in finding.message
    assert "weight differ" in finding.message and "weight zero" in finding.hint
    assert not _errors(path, "ort==1.27")
    (ranged,) = _errors(path, "ort>=1.25")
    assert "ORT 1.25.1, 1.26.0 (of ort>=1.25)" in ranged.message


def test_an_int8_activation_with_uint8_weights_has_no_kernel(tmp_path: Path) -> None:
    model = _weight_op("QLinearMatMul", (np.int8, np.uint8), ("per-tensor", "zero"))
    (finding,) = _errors(_saved(tmp_path, model), "ort==1.31")
    assert finding.rule == "QL707" and "fails when loaded" in finding.message


def test_openvino_qoperator_values_come_from_the_table(tmp_path: Path) -> None:
    """A uint8 QLinearAveragePool miscomputes in OpenVINO (QL707, against the reference);
    the int8 one with a mid-range output does not; a QLinearAdd whose output saturates
    stays QL752's (one finding)."""
    pool = _saved(tmp_path, _activation_op("QLinearAveragePool", np.uint8, "nonzero"), "pool.onnx")
    (finding,) = _errors(pool, "openvino")
    assert finding.rule == "QL707" and "the ONNX reference" in finding.message
    assert not _errors(pool, "ort==1.31")
    good = _saved(tmp_path, _activation_op("QLinearAveragePool", np.int8, "nonzero"), "good.onnx")
    assert not _errors(good, "openvino")
    add = _saved(tmp_path, _activation_op("QLinearAdd", np.uint8, "lowest"), "add.onnx")
    assert [f.rule for f in _errors(add, "openvino")] == ["QL752"]


def _activation_op(op: str, act: Any, y_zero: str) -> onnx.ModelProto:
    return qoperator_values.activation_op_models(op, act, y_zero, 13)[0]


def _differing_conv_group() -> ir.Model:
    """A QDQ Conv group (uint8, int8 weights per channel) whose weight zero points differ."""
    model = group_model("Conv", Params(per_channel=True))
    for index, init in enumerate(model.graph.initializer):
        if init.name == "w_z":
            zeros = numpy_helper.from_array(np.array([1, -2, 5, 0], np.int8), "w_z")
            model.graph.initializer[index].CopyFrom(zeros)
    return ir.serde.deserialize_model(model)


@pytest.mark.parametrize(("target", "left"), [("ort==1.20", 1), ("ort==1.31", 0), ("ort", 0)])
def test_convert_leaves_a_group_the_release_fails_on(target: str, left: int) -> None:
    model = _differing_conv_group()
    result = qoperator_passes(target=target)[0](model)
    assert result.summary.get("left_target_refuses", 0) == left
    assert result.summary["groups_converted"] == 1 - left


def test_the_installed_release_reproduces_its_value_rows(tmp_path: Path) -> None:
    """The probe's own runner in this python's ONNX Runtime (1.31 in the test extras):
    every value row's verdict as its table records it."""
    import onnxruntime as ort

    minor = ".".join(ort.__version__.split(".")[:2])
    manifest = drive.build_cases(tmp_path, ("QOperator values: ",))
    lines = drive.run_probe(Path(sys.executable), "run_ort.py", manifest, tmp_path / "r.jsonl")
    forms = drive.table_of(lines, onnx.__version__)["forms"]
    recorded = table(f"ort-{minor}").forms
    assert {k: row_wrong(v) for k, v in forms.items()} == {k: row_wrong(recorded[k]) for k in forms}


@pytest.mark.slow
def test_every_runtime_measures_its_value_rows_again(tmp_path: Path) -> None:
    """The value rows in each /work/venvs/ort-1.X and OpenVINO present, through the probe's
    runners: each row as its table records it (byte for byte but the date)."""
    manifest = drive.build_cases(tmp_path, ("QOperator values: ",))
    ran = 0
    for name in TABLES:
        folder = "openvino" if name == "openvino" else name
        python = Path("/work/venvs") / folder / "bin" / "python"
        if not python.exists():
            continue
        runner = "run_openvino.py" if name == "openvino" else "run_ort.py"
        results = tmp_path / f"{folder}.jsonl"
        lines = drive.run_probe(python, runner, manifest, results)
        forms = drive.table_of(lines, onnx.__version__)["forms"]
        recorded = table(name).forms
        assert json.dumps(forms, sort_keys=True) == json.dumps(
            {k: recorded[k] for k in forms}, sort_keys=True
        ), name
        ran += 1
    if not ran:
        pytest.skip("no release venvs under /work/venvs")
