"""QL706: a QDQ MatMul that ONNX Runtime's default optimizations compute wrongly.

A uint8 / int8 activation (Q -> DQ) times a blocked int8 / uint8 weight DequantizeLinear
is fused by ONNX Runtime 1.19.2 .. 1.32.0 into MatMulIntegerToFloat / QLinearMatMul as if
the weight's scale were per column: other values, or a failure at run, depending on the
shapes. The probe measured it (the default session against ORT_DISABLE_ALL on the same
inputs) and ``check --target`` says it from those tables:

- ``check --target ort==1.31`` (and the installed release) errors on the pattern, and not on
  per-axis weights, 4-bit blocked weights, 16-bit activations or one block along K;
- a range names the releases measured, and QL703 keeps the releases that refuse the model;
- the installed ONNX Runtime really computes the pattern otherwise than ORT_DISABLE_ALL
  (skipped where its table says it does not), and reproduces the table's outcome on each
  blocked pattern;
- the probe's merge keeps every other form of a table and records the amendment;
- a slow test runs the patterns in every release's venv (/work/venvs/ort-1.X).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from example_models import DT, qdq_matmul_weight

from qlrewrite.checking.checker import check
from qlrewrite.targets.tables import DATA, table

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tools" / "probe"
sys.path.insert(0, str(PROBE))

import cases  # noqa: E402  (tools/probe: the probe's model builders)
import drive  # noqa: E402
import run_ort  # noqa: E402

#: The lead's reproduction, as measured: a uint8 activation, an int8 weight in blocks of 16
#: along K (4 blocks), no zero point, the MatMul's output the graph's (MatMulIntegerToFloat).
BAD: dict[str, Any] = {"zero_point": False, "output": "float"}
#: The releases whose tables say the pattern above miscomputes (measured 2026-11-26).
MISCOMPUTING = [(1, m) for m in range(19, 33)]


def _save(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def _rules(path: Path, *targets: str) -> list[str]:
    report = check(path, targets=list(targets), select=["QL7"])
    assert report.load_error is None, report.load_error
    return sorted(f.rule for f in report.errors)


def _bad(activation: DT = DT.UINT8, weight: DT = DT.INT8, **changes: Any) -> onnx.ModelProto:
    return qdq_matmul_weight(activation, weight, "blocked", **{**BAD, **changes})


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("activation", "weight", "changes"),
    [
        (DT.UINT8, DT.INT8, {}),
        (DT.INT8, DT.INT8, {}),
        (DT.UINT8, DT.UINT8, {}),
        (DT.UINT8, DT.INT8, {"zero_point": True}),  # fails at run instead
        (DT.UINT8, DT.INT8, {"output": "quantized"}),  # QLinearMatMul: fails at run
        (DT.UINT8, DT.INT8, {"along": "N", "block": 8}),
    ],
)
def test_check_errors_on_a_blocked_8bit_weight_under_8bit_activations(
    activation: DT, weight: DT, changes: dict, tmp_path: Path
) -> None:
    path = _save(_bad(activation, weight, **changes), tmp_path)
    assert _rules(path, "ort==1.31") == ["QL706"]


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (qdq_matmul_weight(DT.UINT8, DT.INT8, "per-axis", output="float"), "per-axis"),
        (qdq_matmul_weight(DT.UINT8, DT.INT8, "per-tensor", output="float"), "per-tensor"),
        (_bad(DT.UINT8, DT.INT4), "int4 blocked"),
        (_bad(DT.UINT8, DT.UINT4), "uint4 blocked"),
        (_bad(DT.UINT16, DT.INT8), "16-bit activation"),
        (_bad(DT.INT16, DT.UINT8), "16-bit activation"),
        (_bad(block=64), "one block along K"),
    ],
)
def test_check_is_quiet_where_ort_computes_it_right(
    model: onnx.ModelProto, why: str, tmp_path: Path
) -> None:
    path = _save(model, tmp_path)
    assert _rules(path, "ort==1.31") == [], why


def test_the_installed_release_is_checked_by_plain_ort(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    release = tuple(int(p) for p in ort.__version__.split(".")[:2])
    if release not in MISCOMPUTING:
        pytest.skip(f"onnxruntime {ort.__version__}: not a release measured to miscompute")
    path = _save(_bad(), tmp_path)
    assert _rules(path, "ort") == ["QL706"]
    good = _save(qdq_matmul_weight(DT.UINT8, DT.INT8, "per-axis", output="float"), tmp_path)
    assert _rules(good, "ort") == []


def test_the_finding_names_the_releases_the_difference_and_the_ways_out(
    tmp_path: Path,
) -> None:
    path = _save(_bad(), tmp_path)
    report = check(path, targets=["ort>=1.18,<1.21"], select=["QL7"])
    (finding,) = [f for f in report.errors if f.rule == "QL706"]
    assert "ORT 1.19.2, 1.20.1 (of ort>=1.18,<1.21)" in finding.message
    assert "1.18" not in finding.message.split("(of")[0]
    assert "computes other values than with ORT_DISABLE_ALL" in finding.message
    assert "% of the largest output off" in finding.message
    assert "fails at run: MatMulIntegerToFloat: Attempting to broadcast" in finding.message
    assert "qlrewrite convert --to com.microsoft makes it MatMulNBits" in finding.hint
    assert "per channel" in finding.hint
    assert "QDQSelectorActionTransformer" in finding.hint
    assert "session.disable_quant_qdq" in finding.hint
    # ORT 1.18 refuses the blocked DequantizeLinear itself: QL703 says so, not QL706
    assert "QL703" in {f.rule for f in report.errors}


def test_blocks_along_n_get_no_convert_hint(tmp_path: Path) -> None:
    """convert --to com.microsoft makes MatMulNBits of blocks along K only."""
    path = _save(_bad(along="N", block=8), tmp_path)
    (finding,) = check(path, targets=["ort==1.31"], select=["QL706"]).errors
    assert "convert" not in finding.hint
    assert "per channel" in finding.hint


def test_a_failure_at_run_is_said_as_one(tmp_path: Path) -> None:
    path = _save(_bad(zero_point=True), tmp_path)
    (finding,) = check(path, targets=["ort==1.31"], select=["QL706"]).errors
    assert "fails at run where ORT_DISABLE_ALL runs it" in finding.message
    assert "MatMulIntegerToFloat" in finding.message


def test_ql706_is_silent_for_other_targets_and_without_a_target(tmp_path: Path) -> None:
    path = _save(_bad(), tmp_path)
    assert "QL706" not in {f.rule for f in check(path, targets=["openvino"]).findings}
    assert "QL706" not in {f.rule for f in check(path).findings}


# --------------------------------------------------------------------------- the runtime


def _outputs(model: onnx.ModelProto, rows: int) -> tuple[Any, Any]:
    """(default session's output or its error, ORT_DISABLE_ALL's output)."""
    ort = pytest.importorskip("onnxruntime")
    data = model.SerializeToString()
    feed = {"a": np.random.default_rng(1).uniform(0.0, 6.0, (rows, 64)).astype(np.float32)}
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(data, off, providers=["CPUExecutionProvider"]).run(None, feed)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    try:
        got: Any = session.run(None, feed)[0]
    except Exception as exc:  # the failure at run measured
        got = exc
    return got, expected[0]


def test_the_installed_release_really_miscomputes_the_pattern() -> None:
    """Not the table: the installed ONNX Runtime, default session against ORT_DISABLE_ALL
    (skipped when its table does not say it miscomputes: a fixed release keeps CI green)."""
    ort = pytest.importorskip("onnxruntime")
    minor = ".".join(ort.__version__.split(".")[:2])
    key = cases._pattern_key_of(_bad())
    if not (DATA / f"ort-{minor}.json").exists() or table(f"ort-{minor}").divergence(key) is None:
        pytest.skip(f"onnxruntime {ort.__version__}: its table does not say it miscomputes")
    got, expected = _outputs(_bad(), rows=4)  # 4 rows: the 4 blocks' scale broadcasts
    assert not isinstance(got, Exception), got
    relative = float(np.abs(got - expected).max() / np.abs(expected).max())
    assert relative > 0.1, relative
    failed, _ = _outputs(_bad(), rows=3)
    assert isinstance(failed, Exception) and "broadcast" in str(failed)
    good, reference = _outputs(qdq_matmul_weight(DT.UINT8, DT.INT8, "per-axis"), rows=3)
    np.testing.assert_array_equal(good, reference)


def test_the_installed_release_reproduces_its_table_on_the_blocked_patterns(
    tmp_path: Path,
) -> None:
    ort = pytest.importorskip("onnxruntime")
    minor = ".".join(ort.__version__.split(".")[:2])
    if not (DATA / f"ort-{minor}.json").exists():
        pytest.skip(f"no table for onnxruntime {ort.__version__}")
    forms = table(f"ort-{minor}").forms
    compared = [c for c in cases.qdq_pattern_cases() if "blocked" in c.key][::5]
    assert len(compared) > 40
    differ = []
    for case in compared:
        path = _save(case.model, tmp_path)
        entry = {"key": case.key, "file": str(path), "feeds": case.feeds, "compare": case.compare}
        line = run_ort.run_case(entry)
        row = forms[case.key]
        measured = drive._optimized(line.get("versus_unoptimized", []))
        recorded = row.get("optimized", "matches") if isinstance(row, dict) else "matches"
        if line["run"] and measured != recorded:
            differ.append((case.key, measured, recorded))
    assert not differ, differ[:5]


def test_the_hinted_conversion_is_clean_and_computes_what_ort_disable_all_does(
    tmp_path: Path,
) -> None:
    """The first way out of the hint: MatMulNBits computes the blocks (installed ORT); a
    blocked 8-bit weight becomes one without --include-8bit."""
    import onnx_ir as ir

    from qlrewrite import api

    converted = api.convert(_bad(), "com.microsoft")
    assert "MatMulNBits" in [n.op_type for n in converted.graph]
    path = tmp_path / "nbits.onnx"
    ir.save(converted, path)
    assert _rules(path, "ort==1.31") == []
    ort = pytest.importorskip("onnxruntime")
    feed = {"a": np.random.default_rng(1).uniform(0.0, 6.0, (3, 64)).astype(np.float32)}
    _, expected = _outputs(_bad(), rows=3)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_allclose(got[0], expected, rtol=0, atol=1e-4 * np.abs(expected).max())


# --------------------------------------------------------------------------- the probe


def test_outcomes_are_told_apart_by_the_threshold() -> None:
    assert drive._optimized([{"rows": 2, "max_rel_diff": 0.0}]) == "matches"
    assert drive._optimized([{"rows": 2, "max_rel_diff": 0.02}]) == "matches"
    assert drive._optimized([{"rows": 2, "max_rel_diff": 0.5}]) == "miscomputes"
    assert drive._optimized([{"rows": 1, "shape": [[8, 16], [1, 16]]}]) == "miscomputes"
    assert drive._optimized([{"rows": 2, "max_rel_diff": 0.0}, {"rows": 3, "error": "x"}]) == (
        "fails at run"
    )
    assert drive._optimized([{"rows": 2, "unoptimized_error": "x"}]) == "matches"


def test_a_merge_replaces_only_the_keys_reprobed_and_records_it() -> None:
    old = {
        "release": "1.31.1",
        "measured": "2026-11-01",
        "forms": {"QDQ MatMul: a": "runs", "QDQ MatMul: gone": "runs", "other": {"refused": "x"}},
    }
    new = {
        "release": "1.31.1",
        "measured": "2026-11-26",
        "python": "3.11.7",
        "numpy": "2.4.6",
        "models_built_with": "onnx 1.23.2",
        "forms": {"QDQ MatMul: a": {"runs": True, "optimized": "matches"}, "QDQ MatMul: b": "runs"},
    }
    merged = drive.merged(old, new, "QDQ MatMul: ", "why")
    assert merged["forms"] == {
        "QDQ MatMul: a": {"runs": True, "optimized": "matches"},
        "QDQ MatMul: b": "runs",
        "other": {"refused": "x"},
    }
    assert merged["measured"] == "2026-11-01"
    assert merged["amended"] == [
        {
            "date": "2026-11-26",
            "keys": "QDQ MatMul: *",
            "note": "why",
            "python": "3.11.7",
            "numpy": "2.4.6",
            "models_built_with": "onnx 1.23.2",
        }
    ]
    with pytest.raises(RuntimeError, match=r"re-probed with 1\.32\.0"):
        drive.merged(old, {**new, "release": "1.32.0"}, "QDQ MatMul: ", "why")


def test_every_table_records_the_amendment_and_the_blocked_patterns() -> None:
    for major, minor in [(1, m) for m in range(15, 33)]:
        t = json.loads((DATA / f"ort-{major}.{minor}.json").read_text())
        assert [a["keys"] for a in t["amended"]] == ["QDQ MatMul: *"]
        blocked = [k for k in t["forms"] if k.startswith("QDQ MatMul: ") and "blocked" in k]
        assert len(blocked) == 256, (minor, len(blocked))
    key = cases._pattern_key_of(_bad())
    assert key is not None and key.endswith(
        "INT8 scale=FLOAT blocked along=K blocks=many zero_point=no output=float"
    )
    wrong = [(1, m) for m in range(15, 33) if table(f"ort-1.{m}").divergence(key) is not None]
    assert wrong == MISCOMPUTING


@pytest.mark.slow
def test_every_release_venv_measures_what_its_table_says(tmp_path: Path) -> None:
    """The blocked uint8 x int8 patterns in each /work/venvs/ort-1.X (those present), in
    their own process, against the committed tables."""
    chosen = [c for c in cases.qdq_pattern_cases() if "activation=UINT8" in c.key]
    chosen = [c for c in chosen if "INT8 scale" in c.key and "blocked" in c.key]
    entries = []
    for index, case in enumerate(chosen):
        path = _save(case.model, tmp_path, f"c{index}.onnx")
        entries.append(
            {"key": case.key, "file": str(path), "feeds": case.feeds, "compare": case.compare}
        )
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"cases": entries}))
    ran = 0
    for minor in range(15, 33):
        python = Path(f"/work/venvs/ort-1.{minor}/bin/python")
        if not python.exists():
            continue
        results = tmp_path / f"r{minor}.jsonl"
        command = [str(python), str(PROBE / "run_ort.py"), str(manifest), str(results)]
        subprocess.run(command, check=True, timeout=600, capture_output=True)
        lines = [json.loads(x) for x in results.read_text().splitlines() if x]
        forms = table(f"ort-1.{minor}").forms
        for line in (x for x in lines if "key" in x):
            row = forms[line["key"]]
            recorded = row.get("optimized") if isinstance(row, dict) else None
            if "versus_unoptimized" in line:
                assert drive._optimized(line["versus_unoptimized"]) == recorded, line["key"]
        ran += 1
    if not ran:
        pytest.skip("no /work/venvs/ort-1.X venv here")
