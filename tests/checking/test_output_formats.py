"""The output formats' registry, and the walk-through of docs/architecture.md "Adding an
output format": a toy format is one emitter module plus its registry entry, and then the
command line, the configuration and the library all know it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from qdq_models import DQ, qdq_model

from qlrewrite.checking import formats
from qlrewrite.checking.formats import FORMATS, OutputFormat, RenderOptions, output_format
from qlrewrite.cli import main
from qlrewrite.findings import Finding, Report

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: The toy emitter module a newcomer writes (step 1 of the guide), whole.
TOY_MODULE = '''
"""``--output-format toy``: one ``CODE@node`` per finding."""

from qlrewrite.checking.formats.base import OutputFormat


def render_toy(reports, options):
    return "".join(f"{f.rule}@{f.node}\\n" for r in reports for f in r.findings)


FORMAT = OutputFormat("toy", "one CODE@node per finding", render_toy)
'''


def _bad_model(tmp_path: Path) -> Path:
    """A DequantizeLinear with axis at opset 12 (QL201), node named 'dq'."""
    proto = qdq_model(DQ, 12, attrs={"axis": 0})
    proto.graph.node[0].name = "dq"
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return path


def test_every_builtin_format_is_registered_once_and_in_the_cli() -> None:
    assert list(FORMATS) == ["text", "full", "json", "sarif", "github"]
    option = next(p for p in main.commands["check"].params if p.name == "fmt")
    assert tuple(option.type.choices) == tuple(FORMATS)
    for fmt in FORMATS.values():
        assert fmt.summary in option.help
    with pytest.raises(ValueError, match="registered twice"):
        formats.register(FORMATS["json"])
    with pytest.raises(ValueError, match="unknown output format 'yaml'"):
        output_format("yaml")


def test_docs_name_every_format() -> None:
    page = (DOCS / "commands" / "check.md").read_text(encoding="utf-8")
    missing = [n for n in FORMATS if not re.search(rf"`(--(output-)?format )?{n}`", page)]
    assert not missing, f"docs/commands/check.md does not name: {missing}"


def test_a_registered_format_renders_a_report() -> None:
    """Step 1 and 2 in-process: register a format, render a report with it."""
    seen: list[RenderOptions] = []

    def render_toy(reports: list[Report], options: RenderOptions) -> str:
        seen.append(options)
        return "".join(f"{f.rule}@{f.node}\n" for r in reports for f in r.findings)

    toy = OutputFormat("toy", "one CODE@node per finding", render_toy)
    formats.register(toy)
    try:
        report = Report("m.onnx", findings=[Finding("QL201", "error", "m", node="dq")])
        options = RenderOptions(codes=["QL201"])
        assert output_format("toy").render([report], options) == "QL201@dq\n"
        assert seen == [options]
    finally:
        del FORMATS["toy"]


def test_adding_a_format_is_one_module_and_one_entry(tmp_path: Path) -> None:
    """The guide end to end, in a fresh process: the toy module (step 1) registered as
    the list in qlrewrite/checking/formats/__init__.py would (step 2); then ``check --format toy``,
    the configuration's output-format and ``--help`` know it, with no other change."""
    (tmp_path / "toy_format.py").write_text(textwrap.dedent(TOY_MODULE))
    model = _bad_model(tmp_path)
    (tmp_path / "qlrewrite.toml").write_text('output-format = "toy"\n')
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import toy_format
        from qlrewrite.checking import formats
        formats.register(toy_format.FORMAT)
        from qlrewrite.cli import main
        main(sys.argv[1:])
        """
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    flagged = run("check", str(model), "--format", "toy")
    assert (flagged.returncode, flagged.stdout) == (1, "QL201@dq\n"), flagged.stderr
    from_config = run("check", str(model))
    assert (from_config.returncode, from_config.stdout) == (1, "QL201@dq\n")
    helped = run("check", "--help")
    assert "toy: one CODE@node per finding" in " ".join(helped.stdout.split())


def test_statistics_come_from_the_formats_that_have_them(tmp_path: Path) -> None:
    model = _bad_model(tmp_path)
    result = CliRunner().invoke(main, ["check", str(model), "--statistics", "--format", "json"])
    assert json.loads(result.stdout)[0]["code"] == "QL201"
    result = CliRunner().invoke(main, ["check", str(model), "--statistics", "--format", "github"])
    assert result.exit_code == 2
    assert "--statistics prints text or full or json, not github" in result.stderr
