"""Hostile inputs on the reading side of check: suppressions scoped to their node, file
names never read as options, unreadable folders, --diff exit codes, deep trees, malformed
configuration files, names that are not UTF-8 or hold newlines, oversized suppressions."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from qdq_models import DQ, load_ir, qdq_model

from qlrewrite.checking import config
from qlrewrite.checking.checker import check_model
from qlrewrite.checking.suppress import IGNORE_KEY, apply_suppressions
from qlrewrite.cli import main
from qlrewrite.findings import ERROR, Finding
from qlrewrite.rules.selection import select_rules
from qlrewrite.text import escape

ALL = select_rules()
FORMATS = ("text", "json", "sarif", "github")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    config.forget()
    monkeypatch.chdir(tmp_path)
    yield
    config.forget()


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *(str(a) for a in args)])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def _ignore(node: onnx.NodeProto, value: str) -> None:
    entry = node.metadata_props.add()
    entry.key, entry.value = IGNORE_KEY, value


def _ql403() -> onnx.ModelProto:
    """QL403 (error): per-axis scale of 5 for a dimension of 4."""
    return qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})


# ---------------------------------------------------------------- 6/7 suppression scope


def test_a_node_suppression_never_accepts_a_finding_about_the_model() -> None:
    proto = qdq_model(DQ, 21, scale=0.5)
    node = proto.graph.node[0]
    node.name = ""
    del node.output[:]
    del proto.graph.output[:]
    _ignore(node, "")  # every rule
    model = load_ir(proto)
    report = check_model(model)
    for graph in ("main", ""):
        model_level = Finding("QL603", ERROR, "external data at /etc/passwd", graph=graph)
        report.findings.append(model_level)
    result = apply_suppressions(report, model, {"*": ["ALL"]}, ALL)
    assert [f.rule for f in result.findings if f.rule == "QL603"] == ["QL603", "QL603"]
    assert all(f.rule != "QL603" for f in result.suppressed)


def _branch(bad: bool, ignore: bool) -> onnx.GraphProto:
    scale = [0.5] * (5 if bad else 4)
    inits = [
        numpy_helper.from_array(__import__("numpy").zeros((4, 3), "int8"), "x"),
        helper.make_tensor("s", TensorProto.FLOAT, [len(scale)], scale),
    ]
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dqb", axis=0)
    if ignore:
        _ignore(node, "QL403")
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])
    return helper.make_graph([node], "branch", [], [out], initializer=inits)


@pytest.mark.parametrize("clean_first", [True, False])
def test_a_suppression_on_one_node_does_not_hide_a_node_named_alike(clean_first: bool) -> None:
    ifs = []
    for index, bad in enumerate((not clean_first, clean_first)):
        branch = _branch(bad=bad, ignore=not bad)
        ifs.append(
            helper.make_node(
                "If", ["c"], [f"o{index}"], name="cond", then_branch=branch, else_branch=branch
            )
        )
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    outs = [helper.make_tensor_value_info(f"o{i}", TensorProto.FLOAT, [4, 3]) for i in (0, 1)]
    graph = helper.make_graph(ifs, "g", [cond], outs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = load_ir(proto)
    report = check_model(model)
    assert any(f.rule == "QL403" for f in report.findings)
    result = apply_suppressions(report, model, {}, ALL)
    assert any(f.rule == "QL403" for f in result.findings)
    assert not any(f.rule == "QL403" for f in result.suppressed)


# ---------------------------------------------------------------- 16 bounded suppressions


def test_a_suppression_with_200000_unknown_codes_is_bounded() -> None:
    proto = qdq_model(DQ, 21, scale=0.0)
    _ignore(proto.graph.node[0], " ".join(f"XX{i}" for i in range(200_000)) + " QL501")
    model = load_ir(proto)
    start = time.process_time()
    result = apply_suppressions(check_model(model), model, {}, ALL)
    assert time.process_time() - start < 2.0
    stale = [f for f in result.findings if f.rule == "QL901"]
    assert 1 <= len(stale) <= 10
    assert any("more" in f.message for f in stale)
    assert sum(len(f.message) for f in stale) < 2000


# ---------------------------------------------------------------- 9 unreadable folders


def test_an_unreadable_folder_is_exit_2_with_one_visible_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    onnx.save(qdq_model(DQ, 21), tmp_path / "ok.onnx")
    (tmp_path / "locked").mkdir()
    onnx.save(_ql403(), tmp_path / "locked" / "bad.onnx")
    real = os.scandir

    def scandir(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    for fmt in FORMATS:
        code, out, err = _run("--format", fmt, tmp_path)
        assert code == 2, (fmt, out, err)
        assert "locked" in out + err
    code, out, err = _run(tmp_path)  # errors on stderr (issue 23), the summary counts files
    assert "locked: cannot read folder (Permission denied)" in err
    assert "checked 1 file(s)" in out and "1 folder error(s)" in out


# ---------------------------------------------------------------- 10 --diff exit codes


def test_diff_keeps_the_exit_codes_of_check(tmp_path: Path) -> None:
    (tmp_path / "garbage.onnx").write_bytes(b"not a model")
    (tmp_path / "empty").mkdir()
    for target in ("missing.onnx", "garbage.onnx", "empty"):
        code, out, err = _run("--diff", tmp_path / target)
        assert code == 2, (target, out, err)
        assert target in err
    onnx.save(qdq_model(DQ, 21), tmp_path / "ok.onnx")
    assert _run("--diff", tmp_path / "ok.onnx")[0] == 0


def test_diff_exits_1_only_when_something_would_change(tmp_path: Path) -> None:
    """As ruff's --diff (and the docs): an error finding with no fix changes nothing, so
    --diff exits 0 (it exited 1); the check itself still exits 1."""
    onnx.save(qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0}), tmp_path / "e.onnx")
    assert _run(tmp_path / "e.onnx")[0] == 1  # QL403: an error, no fix
    code, out, err = _run("--diff", "--strict", tmp_path / "e.onnx")
    assert (code, out) == (0, "") and "0 change(s) would be made" in err


# ---------------------------------------------------------------- 11 deep trees


def test_a_model_deep_in_folders_is_checked() -> None:
    # Outside pytest's temporary folders: their clean-up recurses and would fail on a
    # tree left by a killed run.
    tmp_path = Path(tempfile.mkdtemp(prefix="qlrewrite-deep-"))
    deep = str(tmp_path)
    for _ in range(1200):  # Path.mkdir(parents=True) itself recurses
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    onnx.save(_ql403(), os.path.join(deep, "m.onnx"))
    (tmp_path / "qlrewrite.toml").write_text('ignore = ["QL5"]\n')
    try:
        code, out, err = _run(tmp_path)
        assert code == 1 and "QL403" in out, err
        os.chdir(deep)
        code, out, err = _run("m.onnx")
        assert code == 1 and "QL403" in out, err
    finally:  # pytest's clean-up of old temporary folders recurses: leave no deep tree
        os.chdir(tmp_path.parent)
        os.remove(os.path.join(deep, "m.onnx"))
        while deep != str(tmp_path):
            os.rmdir(deep)
            deep = os.path.dirname(deep)
        (tmp_path / "qlrewrite.toml").unlink()
        tmp_path.rmdir()


def test_a_folder_symlink_loop_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    onnx.save(_ql403(), tmp_path / "a" / "m.onnx")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "dir.onnx").symlink_to(tmp_path / "a")  # a folder, not a model
    code, out, _ = _run("--format", "json", tmp_path)
    assert code == 1 and len(json.loads(out)["files"]) == 1


# ---------------------------------------------------------------- 12 malformed configuration

MALFORMED = [
    ("pyproject.toml", "tool = 1\n", "tool"),
    ("pyproject.toml", 'tool = "x"\n', "tool"),
    ("pyproject.toml", "tool = [1, 2]\n", "tool"),
    ("pyproject.toml", "[tool]\nqlrewrite = 3\n", "qlrewrite"),
    ("pyproject.toml", "[tool.qlrewrite]\nselect = 1\n", "select"),
    ("pyproject.toml", "[tool.qlrewrite]\nper-node-ignores = {a = 2}\n", "per-node-ignores"),
    ("pyproject.toml", "x = " + "[" * 3000 + "]" * 3000 + "\n", "nested"),
    ("qlrewrite.toml", "x = " + "[" * 3000 + "]" * 3000 + "\n", "nested"),
    ("qlrewrite.toml", "select = 1\n", "select"),
    ("qlrewrite.toml", "select = [1]\n", "select"),
    ("qlrewrite.toml", "extend-select = {a = 1}\n", "extend-select"),
    ("qlrewrite.toml", "ignore = true\n", "ignore"),
    ("qlrewrite.toml", 'strict = "yes"\n', "strict"),
    ("qlrewrite.toml", "exclude = 3\n", "exclude"),
    ("qlrewrite.toml", "per-file-ignores = 3\n", "per-file-ignores"),
    ("qlrewrite.toml", "per-file-ignores = {a = 3}\n", "per-file-ignores"),
    ("qlrewrite.toml", "per-node-ignores = [1]\n", "per-node-ignores"),
    ("qlrewrite.toml", "per-node-ignores = {a = [[1]]}\n", "per-node-ignores"),
    ("qlrewrite.toml", "output-format = 1\n", "output-format"),
    ("qlrewrite.toml", "output-format = [1]\n", "output-format"),
    ("qlrewrite.toml", "output-format = {a = 1}\n", "output-format"),
    ("qlrewrite.toml", b"select = ['\xff']\n", "TOML"),
]


@pytest.mark.parametrize(("name", "text", "key"), MALFORMED)
def test_a_malformed_configuration_is_one_line_naming_file_and_key(
    tmp_path: Path, name: str, text: str | bytes, key: str
) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    (tmp_path / name).write_bytes(data)
    (tmp_path / "m").mkdir()
    onnx.save(qdq_model(DQ, 21), tmp_path / "m" / "ok.onnx")
    code, out, err = _run(tmp_path / "m" / "ok.onnx")
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and key in lines[0], err


# ---------------------------------------------------------------- 13/17 escaped names


def test_escape_keeps_one_line_and_encodes() -> None:
    text = escape("a\nb\r::warning file=x\u2028\x1b[31m" + os.fsdecode(b"\xff"))
    assert "\n" not in text and "\r" not in text and "\u2028" not in text
    assert "\x1b" not in text and "\\xff" in text
    text.encode("utf-8")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("to_file", [False, True])
def test_a_file_name_that_is_not_utf8_is_reported(tmp_path: Path, fmt: str, to_file: bool) -> None:
    name = os.fsdecode(b"bad\xff.onnx")
    onnx.save(_ql403(), os.path.join(str(tmp_path), name))
    args = ["--format", fmt, tmp_path]
    if to_file:
        args += ["-o", tmp_path / "report.out"]
    code, out, err = _run(*args)
    assert code == 1, (out, err)
    text = (tmp_path / "report.out").read_text("utf-8") if to_file else out
    if fmt == "json":
        assert json.loads(text)["files"][0]["path"].endswith("bad\\xff.onnx")
    elif fmt == "sarif":
        assert "bad%5Cxff.onnx" in json.dumps(json.loads(text))
    else:
        assert "bad\\xff.onnx" in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_node_name_with_newlines_forges_no_line(tmp_path: Path, fmt: str) -> None:
    proto = _ql403()
    proto.graph.node[0].name = "n\n::warning file=evil.onnx::forged\r\nQL999 error: x"
    onnx.save(proto, tmp_path / "m.onnx")
    code, out, err = _run("--format", fmt, "--isolated", tmp_path / "m.onnx")
    assert code == 1, err
    lines = out.splitlines()
    assert not any(line.startswith(("::warning file=evil", "QL999")) for line in lines)
    if fmt in ("text", "github"):
        assert sum("QL403" in line for line in lines) >= 1
        assert all("forged" not in line or "QL403" in line for line in lines)


def test_an_unreadable_file_name_with_a_newline_is_one_line_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "x\n::error file=y::forged.onnx"
    path.write_bytes(b"garbage")
    for fmt in FORMATS:
        code, out, err = _run("--format", fmt, path)
        assert code == 2
        assert not any(line.startswith("::error file=y") for line in (out + err).splitlines())
        assert len([line for line in err.splitlines() if line.strip()]) <= 2


def test_an_external_data_location_with_a_newline_is_one_line(tmp_path: Path) -> None:
    proto = qdq_model(DQ, 21)
    tensor = proto.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../w\n::error file=z::forged\nqlrewrite: error: x"
    onnx.save(proto, tmp_path / "m.onnx")
    for command in (["check"], ["fold", "-o", str(tmp_path / "o.onnx")]):
        result = CliRunner().invoke(main, [*command, str(tmp_path / "m.onnx")])
        assert result.exit_code in (1, 2), result.output
        lines = (result.stdout + result.stderr).splitlines()
        assert not any(line.startswith(("::error file=z", "qlrewrite: error: x")) for line in lines)
