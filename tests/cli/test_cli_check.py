"""`qlrewrite check` and `qlrewrite rules` from the command line: exit codes, formats,
folders, selection, output files; the Python API gives the same findings."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from qdq_models import DQ, DT, Q, load_ir, qdq_model
from rich.console import Console

import qlrewrite
from qlrewrite.cli import main
from qlrewrite.rules import RULES


def _bad() -> onnx.ModelProto:
    """QL403 (error): per-axis scale of 5 for a dimension of 4."""
    return qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})


def _warn() -> onnx.ModelProto:
    """QL501 (warning): zero scale."""
    return qdq_model(DQ, 21, scale=0.0)


def _both() -> onnx.ModelProto:
    """QL403 (error) and QL501 (warning) on the same node."""
    return qdq_model(DQ, 13, scale_shape=(5,), scale=[0.5, 0.5, 0.0, 0.5, 0.5], attrs={"axis": 0})


def _good() -> onnx.ModelProto:
    return qdq_model(Q, 21, x_type=DT.FLOAT)


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, path)
    return path


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def _json(*args: str | Path) -> tuple[int, dict]:
    code, out, _ = _run("check", "--format", "json", *args)
    return code, json.loads(out)


# --------------------------------------------------------------------------- exit codes


def test_exit_codes(tmp_path: Path) -> None:
    good = _save(_good(), tmp_path / "good.onnx")
    warn = _save(_warn(), tmp_path / "warn.onnx")
    bad = _save(_bad(), tmp_path / "bad.onnx")
    assert _run("check", good)[0] == 0
    assert _run("check", good, warn)[0] == 0  # warnings allowed
    assert _run("check", good, warn, "--strict")[0] == 1
    assert _run("check", good, bad)[0] == 1
    assert _run("check", good, "--strict")[0] == 0
    assert _run("check", good, tmp_path / "missing.onnx")[0] == 2


def test_unreadable_file_wins_over_findings_and_others_are_still_reported(tmp_path: Path) -> None:
    bad = _save(_bad(), tmp_path / "bad.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07 this is not protobuf \xff\xff\xff")
    code, doc = _json(bad, junk)
    assert code == 2
    files = {Path(f["path"]).name: f for f in doc["files"]}
    assert [f["rule"] for f in files["bad.onnx"]["findings"]] == ["QL403"]
    assert files["junk.onnx"]["findings"] == [] and files["junk.onnx"]["error"]
    assert "\n" not in files["junk.onnx"]["error"]
    assert files["junk.onnx"]["summary"] == {
        "nodes_checked": 0,
        "custom_quant_nodes": 0,
        "errors": 0,
        "warnings": 0,
        "suppressed": 0,
    }
    # text to a pipe: the unreadable file is one line on stderr, not a traceback
    code, out, err = _run("check", bad, junk)
    assert code == 2 and f"qlrewrite: error: {junk}: " in err and "QL403" in out
    assert str(junk) not in out
    # machine formats: the report stays parseable, people get one line on stderr
    code, out, err = _run("check", "--format", "sarif", bad, junk)
    assert code == 2 and json.loads(out)["version"] == "2.1.0"
    assert err.count("qlrewrite: error:") == 1 and str(junk) in err


def test_folder_without_models_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("no models here")
    good = _save(_good(), tmp_path / "good.onnx")
    code, doc = _json(tmp_path / "empty", good)
    assert code == 2
    assert doc["files"][0]["error"] == "no .onnx files in folder"
    assert doc["files"][1]["error"] is None


def test_usage_errors_are_exit_2() -> None:
    assert _run("check")[0] == 2  # no model
    code, _, err = _run("check", "x.onnx", "--format", "xml")
    assert code == 2 and "xml" in err


# --------------------------------------------------------------------------- formats


def test_json_shape_and_content(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "both.onnx")
    code, doc = _json(path)
    assert code == 1
    assert doc["version"] == 1 and len(doc["files"]) == 1
    entry = doc["files"][0]
    assert set(entry) >= {"path", "error", "findings", "summary"}
    assert entry["path"] == str(path) and entry["error"] is None
    assert entry["summary"] == {
        "nodes_checked": 1,
        "custom_quant_nodes": 0,
        "errors": 1,
        "warnings": 1,
        "suppressed": 0,
    }
    by_rule = {f["rule"]: f for f in entry["findings"]}
    assert set(by_rule) == {"QL403", "QL501"}
    f = by_rule["QL403"]
    assert set(f) == {
        "rule",
        "severity",
        "node",
        "op_type",
        "domain",
        "opset",
        "graph",
        "output",
        "message",
        "hint",
        "fix",
    }
    assert (f["severity"], f["node"], f["op_type"], f["domain"], f["opset"], f["graph"]) == (
        "error",
        "qdq",
        DQ,
        "",
        13,
        "main",
    )
    assert "[5]" in f["message"] and f["hint"]
    assert by_rule["QL501"]["severity"] == "warning"


def test_text_lines_when_not_a_terminal(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "both.onnx")
    good = _save(_good(), tmp_path / "good.onnx")
    code, out, _ = _run("check", path, good)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3  # one line per finding, then the summary
    assert lines[0].startswith(f"{path}: QL403 error: ") and "(hint: " in lines[0]
    assert lines[1].startswith(f"{path}: QL501 warning: ")
    assert lines[2] == (
        "checked 2 file(s), 2 quantized node(s): 1 error(s), 1 warning(s) [QL403 x1, QL501 x1]"
    )
    assert all(len(line) > 100 for line in lines[:2])  # not squeezed to 80 columns
    assert _run("check", "-q", good)[1] == ""


def test_full_tables_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=220, color_system=None)
    monkeypatch.setattr("qlrewrite.cli.check.out_console", console)
    monkeypatch.delenv("CI", raising=False)
    path = _save(_both(), tmp_path / "both.onnx")
    assert _run("check", path, "--output-format", "full")[0] == 1
    text = buffer.getvalue()
    header = next(line for line in text.splitlines() if "severity" in line)
    for column in ("rule", "severity", "graph", "node", "message", "hint"):
        assert column in header
    assert f"{path}: 1 error(s), 1 warning(s) in 1 quantized node(s)" in text
    assert "QL403" in text and "QL501" in text and "give one scale per slice" in text
    assert text.rstrip().endswith("1 error(s), 1 warning(s) [QL403 x1, QL501 x1]")


def test_github_annotations(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "sub" / "both.onnx")
    code, out, _ = _run("check", "--format", "github", path)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"::error file={path},title=QL403 per-axis-scale-length::")
    assert lines[1].startswith(f"::warning file={path},title=QL501 scale-value::")
    assert "%0Ahint: " in lines[0] and "\r" not in out
    assert lines[-1].startswith("checked 1 file(s)")


def test_sarif_for_code_scanning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _save(_both(), tmp_path / "models" / "both.onnx")
    code, out, _ = _run("check", "--format", "sarif", "models")
    assert code == 1
    doc = json.loads(out)
    assert doc["version"] == "2.1.0" and "sarif-2.1.0" in doc["$schema"]
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "qlrewrite" and driver["version"] == qlrewrite.__version__
    assert [r["id"] for r in driver["rules"]] == [c for c, r in RULES.items() if not r.opt_in]
    for rule in driver["rules"]:
        entry = RULES[rule["id"]]
        assert rule["name"] == entry.name
        assert rule["shortDescription"]["text"] == entry.summary
        assert rule["fullDescription"]["text"] == entry.explanation
        assert entry.example in rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] == entry.severity
    assert [r["ruleId"] for r in run["results"]] == ["QL403", "QL501"]
    for result in run["results"]:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] == RULES[result["ruleId"]].severity
        assert "'qdq'" in result["message"]["text"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] == "models/both.onnx"
        assert physical["region"]["startLine"] == 1
        (logical,) = location["logicalLocations"]
        assert logical["name"] == "qdq" and logical["fullyQualifiedName"] == "main/qdq"
    assert run["invocations"][0]["executionSuccessful"] is True


def test_output_file_replaces_stdout(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "both.onnx")
    report = tmp_path / "report.json"
    report.write_text("old")
    code, out, err = _run("check", "--format", "json", "-o", report, path)
    assert code == 1 and out == ""
    assert json.loads(report.read_text())["files"][0]["summary"]["errors"] == 1
    assert "report written to" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["both.onnx", "report.json"]
    code, _, err = _run("check", "-o", tmp_path / "nope" / "r.txt", path)
    assert code == 2 and "output folder does not exist" in err
    before = path.read_bytes()
    code, out, err = _run("check", "-o", path, path)  # never overwrite a model with a report
    assert code == 2 and out == "" and "names a model being checked" in err
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- folders


def test_folders_are_searched_recursively_in_sorted_order(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for name in ("b/z.onnx", "b/a.onnx", "a.onnx", "c/d/e.onnx", "B.onnx"):
        _save(_good(), root / name)
    _save(_bad(), root / ".hidden" / "bad.onnx")  # hidden folders are skipped
    (root / "c" / "weights.bin").write_bytes(b"\0" * 8)
    code, doc = _json(root, root / "a.onnx")  # a.onnx named twice: checked once
    assert code == 0
    names = [Path(f["path"]).relative_to(root).as_posix() for f in doc["files"]]
    assert names == ["B.onnx", "a.onnx", "b/a.onnx", "b/z.onnx", "c/d/e.onnx"]


# --------------------------------------------------------------------------- selection


def test_select_and_ignore_by_code_and_prefix(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "both.onnx")

    def rules(*options: str) -> list[str]:
        return [f["rule"] for f in _json(path, *options)[1]["files"][0]["findings"]]

    assert rules() == ["QL403", "QL501"]
    assert rules("--select", "QL4") == ["QL403"]
    assert rules("--select", "ql5") == ["QL501"]
    assert rules("--select", "QL1,QL2", "--select", "QL501") == ["QL501"]
    assert rules("--ignore", "QL40") == ["QL501"]
    assert rules("--select", "QL4", "--ignore", "QL403") == []
    assert rules("--select", "QL403", "--ignore", "QL4") == ["QL403"]  # more specific wins
    assert rules("--ignore", "QL403,QL501") == []
    assert _run("check", path, "--ignore", "QL4")[0] == 0  # the error is ignored


def test_unknown_code_is_a_usage_error(tmp_path: Path) -> None:
    path = _save(_good(), tmp_path / "good.onnx")
    code, out, err = _run("check", path, "--select", "QL4,QL77")
    assert code == 2 and out == ""
    assert err.strip() == "qlrewrite: error: --select: unknown rule code or prefix 'QL77'"
    assert _run("check", path, "--ignore", "E501")[0] == 2


# --------------------------------------------------------------------------- rules


def test_rules_lists_the_catalogue() -> None:
    code, out, _ = _run("rules")
    lines = out.splitlines()
    assert code == 0 and [line.split()[0] for line in lines] == list(RULES)
    assert lines[0].split()[1:4] == ["error", "-", "input-count"]  # code, severity, fix, name
    code, out, _ = _run("rules", "--format", "json")
    entries = json.loads(out)
    assert [e["code"] for e in entries] == list(RULES)
    assert entries[0]["summary"] == RULES["QL101"].summary


def test_rules_explains_one_rule() -> None:
    code, out, _ = _run("rules", "ql401")
    entry = RULES["QL401"]
    assert code == 0 and out.startswith("QL401 axis-out-of-range (error; ")
    assert entry.explanation in out
    for line in entry.example.splitlines():
        assert line in out
    assert _run("rules", "axis-out-of-range")[1] == out
    assert json.loads(_run("rules", "QL401", "--format", "json")[1])["name"] == entry.name
    code, out, err = _run("rules", "QL999")
    assert code == 2 and out == "" and "unknown rule 'QL999'" in err


def test_rules_lists_the_rules_a_prefix_names_as_select_does() -> None:
    """`rules QL4` was refused while `--select QL4` worked: a prefix lists its rules."""
    code, out, _ = _run("rules", "ql4")
    expected = [c for c in RULES if c.startswith("QL4")]
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == expected
    code, out, _ = _run("rules", "QL40,QL9", "--format", "json")
    assert code == 0 and [e["code"] for e in json.loads(out)] == [
        c for c in RULES if c.startswith(("QL40", "QL9"))
    ]
    assert len(json.loads(_run("rules", "ALL", "--format", "json")[1])) == len(RULES)
    code, out, err = _run("rules", "QL8")
    assert code == 2 and out == "" and "unknown rule 'QL8': no rule code, name or code" in err


# --------------------------------------------------------------------------- API


def test_api_gives_the_cli_findings(tmp_path: Path) -> None:
    proto = _both()
    path = _save(proto, tmp_path / "both.onnx")
    cli = _json(path)[1]["files"][0]["findings"]
    for given in (path, str(path), proto, load_ir(proto), qlrewrite.load(path)):
        report = qlrewrite.check(given)
        assert [f.to_json() for f in report.findings] == cli, type(given)
        assert report.nodes_checked == 1
    assert [f.rule for f in qlrewrite.check(path, select=["QL5"]).findings] == ["QL501"]
    # issue 23: an unreadable model raises (a script testing `not report.errors` never
    # passes a missing model); the command line reports it and exits 2
    with pytest.raises(qlrewrite.errors.InputError, match=r"missing\.onnx: no such file"):
        qlrewrite.check(tmp_path / "missing.onnx")
    with pytest.raises(qlrewrite.errors.InputError, match="QL0"):
        qlrewrite.check(path, ignore=["QL0"])


def test_installed_entry_point(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "both.onnx")
    exe = Path(sys.executable).parent / "qlrewrite"
    done = subprocess.run(
        [str(exe), "check", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(exe.parent), "CI": "true"},
    )
    assert done.returncode == 1 and done.stderr == ""
    assert json.loads(done.stdout)["files"][0]["summary"]["errors"] == 1
    done = subprocess.run(
        [str(exe), "check", str(tmp_path / "nope.onnx")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout


def test_refused_rewrite_prints_findings_one_line_each(tmp_path: Path) -> None:
    path = _save(_both(), tmp_path / "both.onnx")
    out = tmp_path / "out.onnx"
    code, _, err = _run("fold", path, "-o", out)
    assert code == 1 and not out.exists()
    lines = err.splitlines()
    assert lines[0].startswith("  QL403 error: DequantizeLinear 'qdq' in main: ")
    assert lines[0].endswith(
        "(hint: give one scale per slice (4) or set axis to the right dimension)"
    )
    assert lines[-1].startswith("qlrewrite: error: ")


def test_a_checker_crash_on_one_model_does_not_hide_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qlrewrite.checking import checker as check_module

    bad = _save(_bad(), tmp_path / "a_bad.onnx")
    boom = _save(_good(), tmp_path / "b_boom.onnx")

    real = check_module.check_path

    def check_path(path: Path, **kwargs: object) -> object:
        if Path(path).name == boom.name:
            raise ZeroDivisionError("rule bug\nsecond line")
        return real(path, **kwargs)

    monkeypatch.setattr(check_module, "check_path", check_path)
    code, doc = _json(bad, boom)
    assert code == 2
    assert [f["rule"] for f in doc["files"][0]["findings"]] == ["QL403"]
    assert doc["files"][1]["error"].startswith(
        "internal error while checking (ZeroDivisionError: rule bug); run with --debug"
    )
