"""`qlrewrite check` flags that ruff users reach for in CI: --exit-zero, --statistics,
--show-settings, --show-files, --output-format (and --format); errors on stderr and
summaries that count files, not folders."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from example_models import edited, external_data
from qdq_models import DQ, DT, Q, qdq_model

from qlrewrite.cli import main


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, path)
    return path


def _project(root: Path) -> dict[str, Path]:
    """Two models with QL403 (error), one with QL501 (warning), one clean."""
    bad = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})
    return {
        "bad1": _save(bad, root / "models" / "a_bad.onnx"),
        "bad2": _save(bad, root / "models" / "sub" / "b_bad.onnx"),
        "warn": _save(qdq_model(DQ, 21, scale=0.0), root / "models" / "c_warn.onnx"),
        "good": _save(qdq_model(Q, 21, x_type=DT.FLOAT), root / "models" / "d_good.onnx"),
    }


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *(str(a) for a in args)])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_exit_zero_keeps_exit_2_for_unreadable_input(tmp_path: Path) -> None:
    paths = _project(tmp_path)
    assert _run(paths["bad1"])[0] == 1
    code, out, _ = _run(paths["bad1"], "--exit-zero")
    assert code == 0 and "QL403" in out  # the findings are still reported
    assert _run(paths["warn"], "--strict", "--exit-zero")[0] == 0
    assert _run(paths["bad1"], tmp_path / "missing.onnx", "--exit-zero")[0] == 2


def test_statistics_text_and_json(tmp_path: Path) -> None:
    _project(tmp_path)
    code, out, _ = _run(tmp_path / "models", "--statistics", "--select", "QL4,QL5")
    assert code == 1
    assert out.splitlines() == [
        "2  QL403  error    per-axis-scale-length",
        "1  QL501  warning  scale-value",
    ]
    code, out, _ = _run(tmp_path / "models", "--statistics", "--output-format", "json")
    assert code == 1
    rows = json.loads(out)
    assert [(r["code"], r["count"], r["severity"]) for r in rows] == [
        ("QL403", 2, "error"),
        ("QL501", 1, "warning"),
    ]
    assert set(rows[0]) == {"code", "name", "severity", "count", "fixable"}
    code, _, err = _run(tmp_path / "models", "--statistics", "--format", "sarif")
    assert code == 2 and "--statistics" in err


def test_statistics_marks_fixable_rules(tmp_path: Path) -> None:
    """QL406 (opt-in) has a safe fix: ``[*]`` as ruff marks it."""
    model = qdq_model(DQ, 13, scale_shape=(1,), zp_shape=())
    path = _save(model, tmp_path / "one.onnx")
    code, out, _ = _run(path, "--statistics", "--select", "QL406")
    assert code == 0
    assert out.splitlines() == ["1  QL406  warning  [*] zero-point-scalar-vs-1"]


def test_show_files_lists_what_would_be_checked(tmp_path: Path) -> None:
    paths = _project(tmp_path)
    (tmp_path / "qlrewrite.toml").write_text('exclude = ["sub"]\n')
    code, out, _ = _run(tmp_path / "models", "--show-files")
    assert code == 0
    assert out.splitlines() == [str(paths[k]) for k in ("bad1", "warn", "good")]
    (tmp_path / "empty").mkdir()
    code, out, err = _run(tmp_path / "empty", paths["good"], "--show-files")
    assert code == 2 and out.splitlines() == [str(paths["good"])]
    assert f"qlrewrite: error: {tmp_path / 'empty'}: no .onnx files in folder" in err


def test_show_settings_names_the_file_and_the_resolved_rules(tmp_path: Path) -> None:
    paths = _project(tmp_path)
    config = tmp_path / "models" / "sub" / "pyproject.toml"
    config.write_text(
        '[tool.qlrewrite]\nselect = ["QL4"]\nstrict = true\n'
        '[tool.qlrewrite.per-file-ignores]\n"b_*.onnx" = ["QL403"]\n'
    )
    code, out, _ = _run(paths["bad2"], paths["good"], "--show-settings", "--format", "json")
    assert code == 0
    sub, top = json.loads(out)
    assert sub["configuration"] == str(config) and top["configuration"] is None
    assert sub["select"] == ["QL4"] and sub["strict"] is True and top["strict"] is False
    assert sub["per-file-ignores"] == ["QL403"]
    assert "QL403" not in sub["rules"] and "QL404" in sub["rules"]
    assert "QL403" in top["rules"] and "QL101" in top["rules"]
    code, out, _ = _run(paths["bad2"], "--show-settings", "--no-strict")
    lines = out.splitlines()
    assert lines[0] == str(paths["bad2"]) and f"  configuration: {config}" in lines
    assert "  strict: false" in lines and "  select: QL4" in lines
    code, out, _ = _run(paths["bad2"], "--show-settings", "--format", "json", "--ignore", "QL404")
    (entry,) = json.loads(out)
    assert entry["command-line"] == {"ignore": ["QL404"]} and "QL404" not in entry["rules"]


def test_output_format_is_the_option_and_format_its_alias(tmp_path: Path) -> None:
    paths = _project(tmp_path)
    for flag in ("--output-format", "--format"):
        code, out, _ = _run(paths["bad1"], flag, "json")
        assert code == 1 and json.loads(out)["files"][0]["findings"][0]["rule"] == "QL403"
    result = CliRunner().invoke(main, ["check", "--help"])
    assert "--output-format, --format" in result.output


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_errors_on_stderr_and_files_counted_honestly(tmp_path: Path, fmt: str) -> None:
    paths = _project(tmp_path)
    (tmp_path / "empty").mkdir()
    missing = tmp_path / "missing.onnx"
    code, out, err = _run(tmp_path / "empty", missing, paths["good"], "--format", fmt)
    assert code == 2
    assert f"qlrewrite: error: {missing}: " in err and str(missing) not in out.split("\n")[0]
    assert f"qlrewrite: error: {tmp_path / 'empty'}: no .onnx files in folder" in err
    if fmt != "json":
        summary = out.strip().splitlines()[-1]
        assert summary.startswith("checked 2 file(s), 1 quantized node(s)")
        assert summary.endswith("; 1 could not be checked; 1 folder error(s)")
    code, out, _ = _run(tmp_path / "empty")
    assert code == 2 and out.startswith("checked 0 file(s)")


def test_a_float_model_is_not_a_silent_pass(tmp_path: Path) -> None:
    """`check` of a model with no quantized node (likely the float model, not the quantized
    one) passed silently: now a warning (QL607), exit 0 unless --strict, ignorable."""
    from onnx import helper

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = _save(helper.make_model(graph), tmp_path / "float.onnx")
    code, out, _ = _run(model)
    assert code == 0 and out.startswith(f"{model}: QL607 warning: no quantized node found")
    assert out.splitlines()[-1].endswith("0 error(s), 1 warning(s) [QL607 x1]")
    assert _run(model, "--strict")[0] == 1
    clean = "checked 1 file(s), 0 quantized node(s): 0 error(s), 0 warning(s)\n"
    assert _run(model, "--strict", "--ignore", "QL607")[:2] == (0, clean)
    quantized = _save(qdq_model(DQ, 21), tmp_path / "q.onnx")
    assert _run(quantized, "--strict")[0] == 0  # one quantized node: nothing to say


def _stdin(data: bytes, *args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *(str(a) for a in args)], input=data)
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_dash_reads_the_model_from_stdin(tmp_path: Path) -> None:
    """`check -` was "no such file": it reads the model piped in (as ruff reads -), with
    other models and worker processes too; it may not name external data (no folder)."""
    import subprocess
    import sys

    paths = _project(tmp_path)
    bad = paths["bad1"].read_bytes()
    command = [sys.executable, "-m", "qlrewrite", "check", "-"]
    done = subprocess.run(command, input=bad, capture_output=True, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stdout.decode().startswith("-: QL403 error: DequantizeLinear")
    code, out, _ = _stdin(bad, "-", paths["warn"], "--jobs", "2", "--format", "json")
    assert code == 1 and [f["path"] for f in json.loads(out)["files"]] == ["-", str(paths["warn"])]
    clean = "checked 1 file(s), 1 quantized node(s): 0 error(s), 0 warning(s)\n"
    assert _stdin(paths["good"].read_bytes(), "-", "-")[:2] == (0, clean)  # read once
    code, _, err = _stdin(b"garbage", "-")
    assert code == 2 and err.startswith("qlrewrite: error: -: ")
    assert _stdin(b"", "-")[2] == "qlrewrite: error: -: empty input\n"
    external = edited(qdq_model(DQ, 21), external_data("scale", "model.data"))
    code, _, err = _stdin(external.SerializeToString(), "-")
    assert code == 2 and "in external data, which a model read from stdin has no folder" in err
    code, _, err = _stdin(bad, "-", "--fix")
    assert code == 2 and "give a path, not - (stdin)" in err
