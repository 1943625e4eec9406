"""`qlrewrite check` in a project: configuration files under the command line, exclude,
per-node suppression with its summary count and QL901, many files with --jobs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from qdq_models import DQ, qdq_model

from qlrewrite.checking import config
from qlrewrite.cli import main


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    config._find_config.cache_clear()
    config.load_config.cache_clear()
    monkeypatch.chdir(tmp_path)
    yield
    config._find_config.cache_clear()
    config.load_config.cache_clear()


def _warn() -> onnx.ModelProto:
    """A DQ 'qdq' (output 'y') with a zero scale: QL501 (a warning) only."""
    return qdq_model(DQ, 21, scale=0.0)


def _ql403() -> onnx.ModelProto:
    """QL403 (error): per-axis scale of 5 for a dimension of 4."""
    return qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, path)
    return path


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *(str(a) for a in args)])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def _json(*args: str | Path) -> tuple[int, dict]:
    code, out, _ = _run("--format", "json", *args)
    return code, json.loads(out)


def test_pyproject_settings_apply_and_the_command_line_overrides(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "models" / "m.onnx")
    assert _run("models", "--strict")[0] == 1  # no configuration yet: QL501 fails --strict
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.qlrewrite]\nstrict = true\nignore = ["QL501"]\n'
    )
    code, doc = _json("models")
    assert code == 0 and doc["files"][0]["findings"] == []
    code, doc = _json("models", "--select", "QL5")  # --select replaces the config's selection
    assert code == 1 and [f["rule"] for f in doc["files"][0]["findings"]] == ["QL501"]
    assert _run("models", "--select", "QL5", "--no-strict")[0] == 0
    assert _run("models", "--isolated", "--strict")[0] == 1
    assert _run("models", "--isolated")[0] == 0


def test_config_option_names_the_file(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "m.onnx")
    other = tmp_path / "ci" / "qlrewrite.toml"
    other.parent.mkdir()
    other.write_text("strict = true\n")
    assert _run("m.onnx")[0] == 0
    assert _run("m.onnx", "--config", other)[0] == 1


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("stirct = true\n", "qlrewrite.toml: unknown key 'stirct'"),
        ('ignore = ["QL4O6"]\n', "qlrewrite.toml: 'ignore': unknown rule code or prefix 'QL4O6'"),
    ],
)
def test_a_wrong_configuration_is_one_line_and_exit_2(
    tmp_path: Path, text: str, needle: str
) -> None:
    _save(_warn(), tmp_path / "m.onnx")
    (tmp_path / "qlrewrite.toml").write_text(text)
    code, out, err = _run("m.onnx")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qlrewrite: error: ") and needle in lines[0]


def test_unknown_code_on_the_command_line_is_exit_2(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "m.onnx")
    code, _, err = _run("m.onnx", "--extend-select", "QL99")
    assert code == 2 and "--extend-select: unknown rule code or prefix 'QL99'" in err


def test_output_format_from_the_configuration(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "m.onnx")
    (tmp_path / "qlrewrite.toml").write_text('output-format = "github"\n')
    out = _run("m.onnx")[1]
    assert out.startswith("::warning file=m.onnx,title=QL501 ")
    assert json.loads(_run("m.onnx", "--format", "json")[1])["version"] == 1


def test_exclude_and_force_exclude(tmp_path: Path) -> None:
    _save(_ql403(), tmp_path / "models" / "legacy" / "old.onnx")
    _save(_warn(), tmp_path / "models" / "new.onnx")
    (tmp_path / "qlrewrite.toml").write_text('exclude = ["legacy"]\n')
    code, doc = _json("models")
    assert code == 0 and [Path(f["path"]).name for f in doc["files"]] == ["new.onnx"]
    old = Path("models/legacy/old.onnx")
    assert _run(old)[0] == 1  # named on the command line: checked, as ruff does
    code, out, _ = _run(old, "--force-exclude")  # as the pre-commit hook runs it
    assert code == 0 and "checked 0 file(s)" in out


def test_per_file_ignores(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "det" / "a.onnx")
    _save(_warn(), tmp_path / "rec" / "b.onnx")
    toml = 'strict = true\n[per-file-ignores]\n"det/*" = ["QL5"]\n'
    (tmp_path / "qlrewrite.toml").write_text(toml)
    code, doc = _json(".")
    assert code == 1
    assert {Path(f["path"]).parent.name: len(f["findings"]) for f in doc["files"]} == {
        "det": 0,
        "rec": 1,
    }


def test_per_node_ignores_are_counted_and_stale_keys_reported(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "m.onnx")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.qlrewrite]\nstrict = true\n[tool.qlrewrite.per-node-ignores]\n"y" = ["QL501"]\n'
    )
    code, out, _ = _run("m.onnx")
    assert code == 0 and out.strip().endswith("0 error(s), 0 warning(s); 1 suppressed")
    code, doc = _json("m.onnx")
    assert doc["summary"]["suppressed"] == 1 and doc["files"][0]["summary"]["suppressed"] == 1
    # the node is renamed in a re-export: the key names nothing any more
    (tmp_path / "pyproject.toml").write_text(
        '[tool.qlrewrite]\n[tool.qlrewrite.per-node-ignores]\n"old_name" = ["QL501"]\n'
    )
    code, doc = _json("m.onnx")
    stale = [f for file in doc["files"] for f in file["findings"] if f["rule"] == "QL901"]
    assert code == 0 and len(stale) == 1
    assert doc["files"][-1]["path"] == str(tmp_path / "pyproject.toml")
    assert "per-node-ignores 'old_name'" in stale[0]["message"]
    assert _json("m.onnx", "--ignore", "QL901")[1]["summary"]["by_rule"] == {"QL501": 1}


def _named(proto: onnx.ModelProto, name: str) -> onnx.ModelProto:
    proto.graph.node[0].name = name
    return proto


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_per_node_ignores_entry_is_judged_over_the_whole_run(tmp_path: Path, jobs: str) -> None:
    """One entry keyed by a common node name: it silences the 2 models with the finding
    and is not reported for the 9 without (strict CI stays green); unused in every model,
    it is one QL901 naming the configuration file, whatever --jobs."""
    for i in range(11):
        proto = _warn() if i < 2 else qdq_model(DQ, 21)
        _save(_named(proto, "w_DQ"), tmp_path / "models" / f"m{i:02d}.onnx")
    toml = tmp_path / "qlrewrite.toml"
    toml.write_text('strict = true\n[per-node-ignores]\n"w_DQ" = ["QL501"]\n')
    code, out, _ = _run("models", "--jobs", jobs)
    assert code == 0, out
    assert out.splitlines() == [
        "checked 11 file(s), 11 quantized node(s): 0 error(s), 0 warning(s); 2 suppressed"
    ]
    toml.write_text('strict = true\n[per-node-ignores]\n"w_DQ" = ["QL501", "QL601"]\n')
    code, doc = _json("models", "--jobs", jobs)
    stale = [(f["path"], g["message"]) for f in doc["files"] for g in f["findings"]]
    message = (
        "per-node-ignores 'w_DQ' = ['QL501', 'QL601']: QL601 suppressed nothing in the 11 "
        f"models checked with {toml}"
    )
    assert code == 1 and stale == [(str(toml), message)]  # strict = true: the file's own
    assert doc["summary"]["files"] == 11 and doc["summary"]["warnings"] == 1
    last = _run("models", "--jobs", jobs)[1].splitlines()[-1]
    assert last.startswith("checked 11 file(s), 11 quantized node(s): 0 error(s), 1 warning(s)")


def test_an_entry_is_not_judged_when_a_model_under_it_cannot_be_read(tmp_path: Path) -> None:
    _save(_named(qdq_model(DQ, 21), "w_DQ"), tmp_path / "m.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    (tmp_path / "qlrewrite.toml").write_text(
        '[per-node-ignores]\n"w_DQ" = ["QL501"]\n"x" = ["QL5"]\n'
    )
    code, doc = _json(".")
    assert code == 2
    assert [g["rule"] for f in doc["files"] for g in f["findings"]] == []


def test_many_files_in_worker_processes_keep_their_order(tmp_path: Path) -> None:
    for i in range(12):
        _save(_ql403() if i % 3 else _warn(), tmp_path / "models" / f"m{i:02d}.onnx")
    one = _run("models", "--jobs", "1", "--show-all")
    two = _run("models", "--jobs", "2", "--show-all")
    assert one == two and one[0] == 1
    paths = [line.split(":")[0] for line in one[1].splitlines()[:-1]]
    assert paths == sorted(paths) and len(paths) == 12


def test_a_folder_of_repeated_findings_prints_grouped(tmp_path: Path) -> None:
    model = _warn()
    node = model.graph.node[0]
    for i in range(1, 8):  # 8 DQ nodes with the same warning
        copy = model.graph.node.add()
        copy.CopyFrom(node)
        copy.name, copy.output[0] = f"qdq{i}", f"y{i}"
    _save(model, tmp_path / "m.onnx")
    out = _run("m.onnx")[1].splitlines()
    assert len(out) == 3 and "7 more like the line above, on qdq1, qdq2, qdq3, ..." in out[1]
    assert len(_run("m.onnx", "--show-all")[1].splitlines()) == 9
    assert os.path.exists(tmp_path / "m.onnx")


_REAL_CHECK_ONE = None


def _dying_check_one(target, selection, debug=False):
    """check_one, except that m2.onnx and m7.onnx kill their process (as an abort in
    native code)."""
    if target.path.name in ("m2.onnx", "m7.onnx"):
        os._exit(1)
    return _REAL_CHECK_ONE(target, selection, debug)


def _dying_on_m1(target, selection, debug=False):
    """check_one, except that m1.onnx kills its process."""
    if target.path.name == "m1.onnx":
        os._exit(1)
    return _REAL_CHECK_ONE(target, selection, debug)


@pytest.mark.parametrize(("models", "jobs"), [(6, "2"), (12, "2"), (12, "3")])
def test_a_model_that_kills_its_worker_is_that_files_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models: int, jobs: str
) -> None:
    # ProcessPoolExecutor hung here (a worker blocked on the shared result queue's lock
    # after another died); each worker now has a pipe of its own.
    from qlrewrite.checking import project

    global _REAL_CHECK_ONE  # noqa: PLW0603 (read by the worker processes, forked)
    _REAL_CHECK_ONE = project.check_one
    names = [f"m{i}.onnx" for i in range(models)]
    for name in names:
        _save(_warn(), tmp_path / "models" / name)
    monkeypatch.setattr(project, "check_one", _dying_check_one)
    code, doc = _json("models", "--jobs", jobs)
    assert code == 2
    errors = {Path(f["path"]).name: f["error"] for f in doc["files"]}
    assert list(errors) == sorted(names)  # every file, in the stable (sorted) order
    died = {name for name, error in errors.items() if error}
    assert died == {"m2.onnx", "m7.onnx"} & set(names)
    assert all("process died" in errors[name] for name in died)


def test_a_worker_dead_before_the_next_file_is_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race behind a rare crash (BrokenPipeError, no JSON): the worker reports m0 and
    # dies on m1 before the parent hands it m2. Here the parent waits for that death.
    from qlrewrite.checking import project

    global _REAL_CHECK_ONE  # noqa: PLW0603 (read by the worker processes, forked)
    _REAL_CHECK_ONE = project.check_one
    names = [f"m{i}.onnx" for i in range(6)]
    for name in names:
        _save(_warn(), tmp_path / "models" / name)
    monkeypatch.setattr(project, "check_one", _dying_on_m1)
    real_hand_out = project._Workers.hand_out

    def hand_out_after_death(self, conn) -> None:
        if 1 in self.held[conn]:  # m1 is at the worker: let it die first
            self.processes[conn].join(timeout=30)
            assert not self.processes[conn].is_alive()
        real_hand_out(self, conn)

    monkeypatch.setattr(project._Workers, "hand_out", hand_out_after_death)
    code, doc = _json("models", "--jobs", "2")
    assert code == 2
    errors = {Path(f["path"]).name: f["error"] for f in doc["files"]}
    assert list(errors) == names
    assert {name for name, error in errors.items() if error} == {"m1.onnx"}


def test_a_folder_whose_models_are_all_excluded_says_so(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "legacy" / "a.onnx")
    (tmp_path / "qlrewrite.toml").write_text('exclude = ["legacy"]\n')
    code, _, err = _run("legacy", "--format", "json")
    assert code == 2
    assert f"every .onnx file in the folder is excluded (exclude in {tmp_path}" in err


class _Bar:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None, bool]] = []
        self.advanced = 0

    def __call__(self, description: str, total: int | None, enabled: bool):
        import contextlib

        self.calls.append((description, total, enabled))
        bar = self

        class Handle:
            def advance(self) -> None:
                bar.advanced += 1

        return contextlib.nullcontext(Handle())


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_progress_bar_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    import sys

    from qlrewrite.cli import _common
    from qlrewrite.cli import check as check_cli

    for i in range(5):
        _save(_warn(), tmp_path / "models" / f"m{i}.onnx")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert _common.show_progress() and not _common.show_progress(quiet=True)
    bar = _Bar()
    monkeypatch.setattr(check_cli, "progress", bar)
    # CliRunner swaps sys.stderr for its own stream: a terminal's answer for that run
    monkeypatch.setattr(
        check_cli, "show_progress", lambda quiet=False: not quiet and not os.environ.get("CI")
    )
    _run("models", "--jobs", jobs)
    assert bar.calls == [("checking", 5, True)] and bar.advanced == 5
    _run("models", "--jobs", jobs, "-q")
    assert bar.calls[-1] == ("checking", 5, False)
    monkeypatch.setenv("CI", "true")
    _run("models", "--jobs", jobs)
    assert bar.calls[-1] == ("checking", 5, False)


def test_config_and_isolated_together_is_a_usage_error(tmp_path: Path) -> None:
    _save(_warn(), tmp_path / "m.onnx")
    (tmp_path / "qlrewrite.toml").write_text("strict = true\n")
    code, _, err = _run("m.onnx", "--config", "qlrewrite.toml", "--isolated")
    assert code == 2 and "--config and --isolated" in err
