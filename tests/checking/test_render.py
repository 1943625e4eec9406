"""Renderers of reports and of the rule catalogue; docs/rules.md is up to date."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from qlrewrite.checking import render
from qlrewrite.checking.formats import github, sarif
from qlrewrite.checking.formats import json as json_format
from qlrewrite.findings import Finding, Report
from qlrewrite.rules import RULES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def _finding(**kw: object) -> Finding:
    base = {
        "rule": "QL403",
        "severity": "error",
        "message": "DequantizeLinear 'dq' in main: 100% wrong,\nreally: yes\r",
        "hint": "fix: it, now",
        "node": "dq",
        "op_type": "DequantizeLinear",
        "opset": 13,
    }
    return Finding(**{**base, **kw})  # type: ignore[arg-type]


def test_finding_line_and_summary() -> None:
    f = _finding(message="m", hint="h")
    assert render.finding_line(f) == "QL403 error: m (hint: h)"
    assert render.finding_line(f, "a.onnx") == "a.onnx: QL403 error: m (hint: h)"
    assert render.finding_line(_finding(message="m", hint="")) == "QL403 error: m"
    reports = [
        Report("a.onnx", findings=[f, _finding(severity="warning")], nodes_checked=3),
        Report("b.onnx", load_error="empty file"),
    ]
    assert render.summary_line(reports) == (
        "checked 2 file(s), 3 quantized node(s): 1 error(s), 1 warning(s) [QL403 x2]; "
        "1 could not be checked"
    )


def test_github_escapes_data_and_properties() -> None:
    report = Report("dir,x/a:b%.onnx", findings=[_finding()])
    line = github.render_github([report]).splitlines()[0]
    assert line.startswith("::error file=dir%2Cx/a%3Ab%25.onnx,title=QL403 per-axis-scale-length::")
    data = line.split("::", 2)[2]
    assert data == (
        "DequantizeLinear 'dq' in main: 100%25 wrong,%0Areally: yes%0D%0Ahint: fix: it, now"
    )
    assert "\n" not in line and "\r" not in line
    unreadable = github.render_github([Report("m.onnx", load_error="bad\nthing")]).splitlines()[0]
    assert unreadable == "::error file=m.onnx,title=unreadable model::bad%0Athing"


def test_sarif_locations_and_unreadable_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "m dir" / "a.onnx")  # absolute but inside the current folder
    outside = "/elsewhere/b.onnx"
    unnamed = _finding(node="", graph="main/if.then_branch")
    tensor = Finding(rule="QL605", severity="error", message="tensor 'w'", graph="main")
    reports = [
        Report(inside, findings=[unnamed]),
        Report(outside, findings=[tensor]),
        Report("c.onnx", load_error="empty file"),
    ]
    doc = json.loads(sarif.render_sarif(reports, codes=["QL605", "QL403"]))
    run = doc["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["QL403", "QL605"]
    first, second = run["results"]
    artifact = first["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "m%20dir/a.onnx", "uriBaseId": "%SRCROOT%"}
    logical = first["locations"][0]["logicalLocations"][0]
    assert logical["name"] == "DequantizeLinear"
    assert logical["fullyQualifiedName"] == "main/if.then_branch/<DequantizeLinear>"
    assert first["ruleIndex"] == 0 and second["ruleIndex"] == 1
    assert second["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "file:///elsewhere/b.onnx"
    }
    assert second["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "main"
    assert first["partialFingerprints"] != second["partialFingerprints"]
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and note["message"]["text"] == "empty file"
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "c.onnx"


def test_json_of_an_unreadable_file() -> None:
    doc = json.loads(json_format.render_json([Report("x.onnx", load_error="empty file")]))
    assert doc["files"] == [
        {
            "path": "x.onnx",
            "error": "empty file",
            "findings": [],
            "custom_quant": [],
            "summary": {
                "nodes_checked": 0,
                "custom_quant_nodes": 0,
                "errors": 0,
                "warnings": 0,
                "suppressed": 0,
            },
        }
    ]
    assert doc["summary"]["unreadable"] == 1


def test_rule_text_has_explanation_and_example() -> None:
    entry = RULES["QL305"]
    text = render.rule_text(entry)
    assert text.splitlines()[0] == f"QL305 scale-type-mismatch (error; {entry.versions})"
    assert entry.summary in text and entry.explanation in text
    assert "Example:\n  " + entry.example.splitlines()[0] in text


def _github_slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces -> -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_docs_rules_md_is_up_to_date() -> None:
    assert DOCS.read_text(encoding="utf-8") == render.rules_markdown(), (
        "docs/rules.md is out of date: run `python -m qlrewrite.checking.render docs/rules.md`"
    )


def test_catalogue_markdown_links_every_rule_to_its_section() -> None:
    text = render.rules_markdown()
    headings = {_github_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
    links = re.findall(r"^\| \[(QL\d+)\]\(#([^)]+)\)", text, flags=re.MULTILINE)
    assert [code for code, _ in links] == list(RULES)
    for code, anchor in links:
        assert anchor in headings, code
        assert f"### {code} {RULES[code].name}" in text
    for entry in RULES.values():
        assert entry.example in text and entry.explanation in text


def test_render_main_checks_and_writes(tmp_path: Path) -> None:
    target = tmp_path / "rules.md"
    assert render.main([str(target), "--check"]) == 1
    assert render.main([str(target)]) == 0
    assert render.main([str(target), "--check"]) == 0
    assert target.read_text(encoding="utf-8") == render.rules_markdown()


def _bias(i: int, scale_shape: str = "[1]") -> Finding:
    return Finding(
        rule="QL406",
        severity="warning",
        message=f"DequantizeLinear 'b{i}_DequantizeLinear' in main: zero point 'b{i}_zp' "
        f"(INT32 []) and scale 'b{i}_scale' (FLOAT {scale_shape}) differ in rank",
        hint="give both the same shape (both scalars)",
        node=f"b{i}_DequantizeLinear",
        op_type="DequantizeLinear",
    )


def test_repeated_findings_print_as_one_group_with_a_count_and_the_first_nodes() -> None:
    other = _finding(message="DequantizeLinear 'dq' in main: other", hint="")
    findings = [_bias(1), other, *(_bias(i) for i in range(2, 56))]
    report = Report("m.onnx", findings=findings, nodes_checked=60)
    lines = render.text_lines([report])
    assert lines[0] == render.finding_line(findings[0], "m.onnx")
    assert lines[1] == (
        "m.onnx: QL406 warning: 54 more like the line above, on b2_DequantizeLinear, "
        "b3_DequantizeLinear, b4_DequantizeLinear, ... (--show-all prints each)"
    )
    assert lines[2] == render.finding_line(other, "m.onnx")
    assert lines[3] == (
        "checked 1 file(s), 60 quantized node(s): 1 error(s), 55 warning(s) [QL403 x1, QL406 x55]"
    )
    assert len(lines) == 4
    every = render.text_lines([report], show_all=True)
    assert len(every) == 57 and every[:3] == [
        render.finding_line(f, "m.onnx") for f in findings[:2]
    ] + [
        render.finding_line(findings[2], "m.onnx", hint=False)  # a rule's hint once per run
    ]
    assert every[3:-1] == [render.finding_line(f, "m.onnx", hint=False) for f in findings[3:]]


def test_a_hint_prints_once_per_run_across_files() -> None:
    """A folder of models with one finding each: the hint on the first line only."""
    reports = [Report(f"m{i}.onnx", findings=[_bias(i)], nodes_checked=1) for i in range(3)]
    lines = render.text_lines(reports, summary=False)
    assert lines == [
        render.finding_line(_bias(0), "m0.onnx"),
        render.finding_line(_bias(1), "m1.onnx", hint=False),
        render.finding_line(_bias(2), "m2.onnx", hint=False),
    ]


def test_any_repeat_is_grouped_and_different_patterns_are_not_mixed() -> None:
    """Collapsed consistently: two findings alike are a group, as fifty are."""
    assert [len(g.findings) for g in render.group_findings([_bias(1)])] == [1]
    assert [len(g.findings) for g in render.group_findings([_bias(1), _bias(2)])] == [2]
    five = [_bias(i) for i in range(5)]
    assert [len(g.findings) for g in render.group_findings(five)] == [5]
    # a negative number is a number too (zero point 3 and zero point -128 group)
    signed = [dataclasses.replace(_bias(i), message=f"zero point {i - 2}") for i in range(4)]
    assert [len(g.findings) for g in render.group_findings(signed)] == [4]
    other = [
        dataclasses.replace(_bias(i), message=_bias(i).message.replace("rank", "size"))
        for i in range(6, 12)
    ]
    mixed = [_bias(i) for i in range(6)] + other
    assert [len(g.findings) for g in render.group_findings(mixed)] == [6, 6]
    # names, numbers and "(TYPE [dims])" descriptions do not split a group
    shapes = [_bias(i) for i in range(6)] + [_bias(i, "[1, 1]") for i in range(6, 12)]
    assert [len(g.findings) for g in render.group_findings(shapes)] == [12]


def test_groups_in_terminal_tables_and_counts_in_json() -> None:
    from rich.console import Console

    report = Report("m.onnx", findings=[_bias(i) for i in range(1, 9)], nodes_checked=8)
    console = Console(width=200, record=True, force_terminal=False)
    render.print_text_tables([report], console)
    text = console.export_text()
    assert "+7 more" in text and "b2_DequantizeLinear, b3_DequantizeLinear" in text
    assert "b8_DequantizeLinear" not in text
    summary = json.loads(json_format.render_json([report]))
    assert summary["summary"]["by_rule"] == {"QL406": 8}
    assert len(summary["files"][0]["findings"]) == 8  # machines get every finding
