"""``check --target`` on every domain's opset import, on the contrib operators at the IR
version they are used with, and on the QDQ Conv, ConvTranspose, Gemm and float8 MatMul
patterns (issue 41, items 1-3).

- Each table records the highest opset of ai.onnx, com.microsoft, ai.onnx.ml,
  ai.onnx.training and ai.onnx.preview.training the release loads (measured: ai.onnx.ml 3
  up to 1.16, 4 in 1.17, 5 from 1.18); an unused ai.onnx.ml 5 import is QL702 on 1.16 and
  ``--fix`` drops it; a used one is not dropped.
- MatMulNBits and GatherBlockQuantized at IR 7: 1.17 refuses 2- and 8-bit MatMulNBits,
  g_idx, float zero points and GatherBlockQuantized (QL703) and runs 4-bit MatMulNBits.
- QL706 on the Conv / Gemm patterns the tables measured to miscompute or fail at run,
  naming the way out the tables measured; quiet on the forms ORT's quantizer writes.
- A slow test runs ORT's quantizer outputs in every release venv (/work/venvs/ort-1.X):
  ``check --target ort==1.X`` errors exactly where the release refuses, fails at run or
  computes otherwise than ORT_DISABLE_ALL.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from example_models import (
    DT,
    gather_block_quantized_model,
    matmul_nbits_model,
    qdq_matmul_weight,
    qdq_weight_op,
)
from onnx import helper
from ort_quantized import (
    CONFIGS,
    FAMILY_CONFIGS,
    INVALID_CONFIGS,
    QOPERATOR_CONFIGS,
    model_name_of,
    quantized,
)
from release_venvs import release_outputs

from qlrewrite.checking.checker import check
from qlrewrite.cli import main
from qlrewrite.targets.tables import ort_releases, table

DOMAINS = ("ai.onnx", "com.microsoft", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training")


def _save(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def _errors(path: Path, target: str) -> list[str]:
    report = check(path, targets=[target], select=["QL7"])
    assert report.load_error is None, report.load_error
    return sorted(f.rule for f in report.errors)


def _with_import(model: onnx.ModelProto, domain: str, version: int) -> onnx.ModelProto:
    model.opset_import.append(helper.make_opsetid(domain, version))
    return model


# --------------------------------------------------------------------------- 1. domains


def test_every_table_records_each_domains_highest_opset() -> None:
    ml = {}
    for major, minor in ort_releases():
        t = table(f"ort-{major}.{minor}")
        assert set(DOMAINS) <= set(t.max_opset), t.name
        ml[minor] = t.max_opset["ai.onnx.ml"]
    assert ml[15] == ml[16] == 3 and ml[17] == 4 and all(ml[m] == 5 for m in ml if m >= 18)


def test_an_unused_ml_import_is_refused_by_1_16_and_fixed(tmp_path: Path) -> None:
    path = _save(_with_import(quantized("cnn-u8s8"), "ai.onnx.ml", 5), tmp_path)
    report = check(path, targets=["ort==1.16"], select=["QL7"])
    (finding,) = report.errors
    assert finding.rule == "QL702" and "ai.onnx.ml opset 5" in finding.message
    assert "check --fix drops the import" in finding.hint
    assert _errors(path, "ort==1.18") == []
    fixed = tmp_path / "fixed.onnx"
    result = CliRunner().invoke(
        main, ["check", str(path), "--target", "ort==1.16", "--fix", "--fix-output", str(fixed)]
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    assert {o.domain for o in onnx.load(fixed).opset_import} == {""}
    assert _errors(fixed, "ort==1.16") == []


def test_a_used_ml_import_is_refused_and_kept(tmp_path: Path) -> None:
    model = _with_import(quantized("cnn-u8s8"), "ai.onnx.ml", 5)
    graph = model.graph
    graph.node.append(helper.make_node("Binarizer", ["y"], ["yb"], domain="ai.onnx.ml"))
    graph.output.append(helper.make_tensor_value_info("yb", onnx.TensorProto.FLOAT, None))
    path = _save(model, tmp_path)
    (finding,) = check(path, targets=["ort==1.16"], select=["QL7"]).errors
    assert finding.rule == "QL702" and finding.fix is None
    assert "export the model at ai.onnx.ml opset 3" in finding.hint


# --------------------------------------------------------------------------- 3. IR version


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        ({}, False),
        ({"bits": 8}, True),
        ({"bits": 2}, True),
        ({"g_idx": True}, True),
        ({"zp": "float"}, True),
    ],
)
def test_matmul_nbits_at_ir_7_gets_a_verdict_from_1_17(
    changes: dict, refused: bool, tmp_path: Path
) -> None:
    model = matmul_nbits_model(
        k=64, n=8, block_size=32, a_shape=[2, 64], opset=13, ir_version=7, **changes
    )
    errors = _errors(_save(model, tmp_path), "ort==1.17")
    assert errors == (["QL703"] if refused else [])


def test_gather_block_quantized_is_not_registered_in_1_17(tmp_path: Path) -> None:
    path = _save(gather_block_quantized_model(opset=13, ir_version=7), tmp_path)
    report = check(path, targets=["ort==1.17"], select=["QL7"])
    (finding,) = report.errors
    assert finding.rule == "QL703" and "not a registered" in finding.message
    assert _errors(path, "ort==1.22") == ["QL703"]  # no attribute bits before 1.23
    assert _errors(path, "ort==1.23") == []


# --------------------------------------------------------------------------- 2. families


def _conv(granularity: str = "per-axis", **changes: object) -> onnx.ModelProto:
    return qdq_weight_op("Conv", DT.UINT8, DT.INT8, granularity, **changes)  # type: ignore[arg-type]


def test_a_conv_weight_per_channel_on_axis_1_miscomputes_everywhere(tmp_path: Path) -> None:
    path = _save(_conv(axis=1), tmp_path)
    for target in ("ort==1.15", "ort==1.17", "ort==1.24", "ort==1.31", "ort==1.32"):
        assert _errors(path, target) == ["QL706"], target
    (finding,) = check(path, targets=["ort==1.31"], select=["QL7"]).errors
    assert "the quantized Conv this weight feeds computes other values than with" in finding.message
    assert "per channel on axis 0 with one zero point or per tensor (measured" in finding.hint
    good = _save(_conv(axis=0), tmp_path, "good.onnx")
    assert _errors(good, "ort>=1.15") == []


@pytest.mark.parametrize(
    ("model", "failing", "running"),
    [
        (_conv(zero_points="differ"), "ort==1.24", "ort==1.27"),
        (_conv("blocked", axis=0, block=2, opset=21), "ort==1.20", None),
        (_conv(axis=2), "ort==1.31", None),
        (
            qdq_weight_op("Gemm", DT.UINT8, DT.INT8, zero_points="none", trans_b=1),
            "ort==1.24",
            "ort==1.28",
        ),
    ],
    ids=["conv-zero-points-differ", "conv-blocked", "conv-kernel-axis", "gemm-no-zero-point"],
)
def test_the_forms_ort_fails_at_run_on(
    model: onnx.ModelProto, failing: str, running: str | None, tmp_path: Path
) -> None:
    path = _save(model, tmp_path)
    (finding,) = check(path, targets=[failing], select=["QL7"]).errors
    assert finding.rule == "QL706" and "fails at run where ORT_DISABLE_ALL runs it" in (
        finding.message
    )
    if running is not None:
        assert _errors(path, running) == []


def test_a_float8_matmul_is_refused_until_1_32(tmp_path: Path) -> None:
    path = _save(qdq_matmul_weight(DT.FLOAT8E4M3FN, DT.FLOAT8E4M3FN, "per-tensor"), tmp_path)
    assert _errors(path, "ort==1.24") == ["QL703"]
    assert _errors(path, "ort==1.32") == []


# --------------------------------------------------------------------------- slow: real runs

#: Run in a release's venv: each model's verdict with the default session against
#: ORT_DISABLE_ALL on the same seeded input ("ok", "load", "run" or "miscomputes").
_VERDICTS = """
import json, sys
import numpy as np
import onnxruntime as ort

def session(path, level=None):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if level is not None:
        options.graph_optimization_level = level
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

verdicts = {}
for path, shape in json.loads(sys.argv[1]):
    try:
        default = session(path)
    except Exception:
        verdicts[path] = "load"
        continue
    feed = {default.get_inputs()[0].name:
            np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    try:
        got = default.run(None, feed)[0]
    except Exception:
        verdicts[path] = "run"
        continue
    expected = session(path, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0]
    largest = float(np.abs(expected).max()) or 1.0
    wrong = float(np.abs(got - expected).max()) / largest > 0.1
    verdicts[path] = "miscomputes" if wrong else "ok"
print(json.dumps(verdicts))
"""
_SHAPES = {
    "cnn": [1, 4, 8, 8],
    "mlp": [1, 16, 64],
    "branchy": [1, 4, 8, 8],
    "attention": [1, 8, 32],
}


@pytest.mark.slow
def test_ort_quantizer_outputs_in_every_release(tmp_path: Path) -> None:
    """``check --target ort==1.X`` errors exactly where release X refuses the quantizer's
    output, fails at run on it or computes it otherwise than ORT_DISABLE_ALL."""
    configs = sorted(
        (set(CONFIGS) | set(QOPERATOR_CONFIGS) | set(FAMILY_CONFIGS)) - INVALID_CONFIGS
    )
    models = [
        (str(_save(quantized(c), tmp_path, f"{c}.onnx")), _SHAPES[model_name_of(c)])
        for c in configs
    ]
    wrong = []
    for release, verdicts in release_outputs(_VERDICTS, models, timeout=600):
        for path, verdict in verdicts.items():
            errors = _errors(Path(path), f"ort=={release}")
            if bool(errors) != (verdict != "ok"):
                wrong.append((release, Path(path).stem, verdict, errors))
    assert not wrong, wrong
