"""The Python API does what the command line does (issue 43): nine tasks, each through
``qlrewrite.<function>`` and through ``qlrewrite <command>``, give the same output (the
same bytes for a written model, the same JSON for a report) and the same warnings; and
every option of every command has its API spelling, listed in docs/python-api.md."""

from __future__ import annotations

import inspect
import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from cnn_models import cnn26
from onnx import TensorProto, helper, numpy_helper

import qlrewrite
from qlrewrite.cli import COMMANDS, main

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str | Path) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output + result.stderr, result.output
    return result


def _cli_warnings(stderr: str) -> list[str]:
    """The ``  warning: ...`` lines a rewriting command prints under its summary."""
    return [
        line.removeprefix("  warning: ")
        for line in stderr.splitlines()
        if line.startswith("  warning: ")
    ]


def _api(function: Any, *args: Any, **kwargs: Any) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = function(*args, **kwargs)
    return result, [w for w in caught if issubclass(w.category, qlrewrite.QlrewriteWarning)]


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parity") / "cnn.onnx"
    onnx.save(cnn26(), path)
    return path


def _same_rewrite(
    tmp_path: Path, cli_args: list[str], function: Any, *args: Any, **kwargs: Any
) -> None:
    """``qlrewrite CLI_ARGS -o cli.onnx`` and ``save(function(*args, **kwargs))``: the same
    bytes and the same warnings (texts, in order)."""
    cli_out, api_out = tmp_path / "cli.onnx", tmp_path / "api.onnx"
    done = _cli(*cli_args, "-o", cli_out)
    assert done.exit_code == 0, done.output
    model, caught = _api(function, *args, **kwargs)
    qlrewrite.save(model, api_out)
    assert api_out.read_bytes() == cli_out.read_bytes()
    assert [str(w.message) for w in caught] == _cli_warnings(done.stderr)
    summary = qlrewrite.summary_of(model)
    assert summary is not None and summary.warnings == _cli_warnings(done.stderr)


def test_check_with_a_target(cnn: Path) -> None:
    done = _cli("check", cnn, "--target", "ort==1.16", "--output-format", "json")
    report = qlrewrite.check(cnn, target="ort==1.16")
    assert done.exit_code == 1
    cli_findings = json.loads(done.stdout)["files"][0]["findings"]
    assert cli_findings == [f.to_json() for f in report.findings]
    assert {f.rule for f in report.errors} == {"QL701", "QL702"}


def test_downgrade(cnn: Path, tmp_path: Path) -> None:
    _same_rewrite(tmp_path, ["downgrade", str(cnn), "--opset", "19"], qlrewrite.downgrade, cnn, 19)


def test_retarget(cnn: Path, tmp_path: Path) -> None:
    args = ["retarget", str(cnn), "--zero-point", "signed"]
    _same_rewrite(tmp_path, args, qlrewrite.retarget, cnn, zero_point="signed")


def _fold_parity(tmp_path: Path, cnn: Path, *flags: str, **kwargs: Any) -> None:
    _same_rewrite(tmp_path, ["fold", str(cnn), *flags], qlrewrite.fold, cnn, **kwargs)


def test_fold_without_kept_fusions(cnn: Path, tmp_path: Path) -> None:
    _fold_parity(tmp_path, cnn)


def test_fold_with_kept_fusions(cnn: Path, tmp_path: Path) -> None:
    _fold_parity(tmp_path, cnn, "--keep-fused", keep_fused=True)


def test_compare_with_tensors(cnn: Path, tmp_path: Path) -> None:
    other = tmp_path / "retargeted.onnx"
    qlrewrite.save(qlrewrite.retarget(cnn, zero_point="signed"), other)
    args = ["compare", cnn, other, "--runtime", "ort", "--tensors", "--output-format", "json"]
    done = _cli(*args)
    comparison, caught = _api(qlrewrite.compare, cnn, other, runtime="ort", tensors=True)
    cli = json.loads(done.stdout)
    assert (cli.pop("first"), cli.pop("second")) == (str(cnn), str(other))
    assert cli == json.loads(json.dumps(comparison.to_json()))
    assert done.exit_code == int(comparison.diverges) and caught == []


def test_verify(cnn: Path, tmp_path: Path) -> None:
    """``retarget --verify`` and ``verify_rewrite(original, retarget(...))``: the same
    verdict in the same words."""
    done = _cli("retarget", cnn, "--zero-point", "signed", "--verify", "-o", tmp_path / "v.onnx")
    assert done.exit_code == 0, done.output
    rewritten = qlrewrite.retarget(cnn, zero_point="signed")
    verification, caught = _api(qlrewrite.verify_rewrite, cnn, rewritten)
    assert f"  verify: {verification.describe(outputs=False)}" in done.stderr.splitlines()
    cli_deployment = [line for line in done.stderr.splitlines() if "verify deployed" in line]
    if verification.deployment is not None and verification.deployment.differs:
        assert [w.category for w in caught] == [qlrewrite.errors.DeploymentWarning]
        assert cli_deployment and cli_deployment[0].startswith("  warning: verify deployed")
    else:
        assert caught == []


def test_info(cnn: Path) -> None:
    done = _cli("info", cnn, "--output-format", "json", "--target", "tensorrt")
    assert json.loads(done.stdout) == qlrewrite.info(cnn, target="tensorrt")


def _fixable(path: Path) -> Path:
    """A DequantizeLinear whose zero point is a scalar and scale a 1-element vector
    (QL406, opt-in, a safe fix)."""
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.int8).reshape(2, 3), "w"),
        numpy_helper.from_array(np.ones(1, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
    ]
    node = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], name="dq")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([node], "g", [], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_fix(tmp_path: Path) -> None:
    path = _fixable(tmp_path / "m.onnx")
    cli_out, api_out = tmp_path / "cli.onnx", tmp_path / "api.onnx"
    done = _cli("check", path, "--select", "QL406", "--fix", "--fix-output", cli_out)
    assert done.exit_code == 0, done.output
    fixed, caught = _api(qlrewrite.fix, path, select="QL406")
    qlrewrite.save(fixed, api_out)
    assert api_out.read_bytes() == cli_out.read_bytes() and caught == []


def test_config(cnn: Path, tmp_path: Path) -> None:
    """The project's configuration, found from the model's folder (the command's default;
    ``config=True`` in the API)."""
    folder = tmp_path / "project"
    folder.mkdir()
    model = folder / "cnn.onnx"
    model.write_bytes(cnn.read_bytes())
    (folder / "pyproject.toml").write_text(
        '[tool.qlrewrite]\ntarget = ["tensorrt"]\nignore = ["QL712"]\n'
    )
    done = _cli("check", model, "--output-format", "json")
    report = qlrewrite.check(model, config=True)
    assert json.loads(done.stdout)["files"][0]["findings"] == [f.to_json() for f in report.findings]
    assert {f.rule for f in report.findings} == {"QL711"}
    assert {f.rule for f in qlrewrite.check(model).findings} == set()  # no configuration read


# -- every option has its API spelling, and docs/python-api.md lists both ----------------

#: Options of the command line that no API call needs: where output goes, how it is
#: printed, what is checked around the call (the API returns, and the caller saves).
CLI_ONLY = {
    "output",
    "in_place",
    "dry_run",
    "report_path",
    "external_data",
    "quiet",
    "debug",
    "max_size",
    "output_format",
    "plot",
    "verify",
    "verify_semantics",
    "verify_runs",
    "verify_tolerance",
    "verify_timeout",
    "verify_memory",
    "verify_on",
    "seed",
    "input_shape",
    "strict",
    "config_file",
    "isolated",
    "force_exclude",
    "show_all",
    "jobs",
    "exit_zero",
    "statistics",
    "show_settings",
    "show_files",
    "diff",
    "fix_output",
    "fix",
    "extend_select",
    "models",
    "model",
    "first",
    "second",
    "code",
    "unsafe_fixes",
}

#: Command -> API function, and option -> parameter where the names differ.
API_OF = {
    "info": ("info", {}),
    "check": ("check", {}),
    "fold": ("fold", {}),
    "convert": ("convert", {}),
    "upgrade": ("upgrade", {}),
    "downgrade": ("downgrade", {}),
    "retarget": ("retarget", {"narrow_weights": "narrow", "drop_redundant_qdq": "drop_redundant"}),
    "compare": ("compare", {"runtimes": "runtime", "inputs_path": "inputs"}),
}


def _options(command: str) -> list[str]:
    return [p.name for p in main.commands[command].params if p.name and p.name not in CLI_ONLY]


@pytest.mark.parametrize("command", list(API_OF))
def test_every_option_has_its_api_spelling(command: str) -> None:
    function, renamed = API_OF[command]
    parameters = inspect.signature(getattr(qlrewrite, function)).parameters
    missing = [o for o in _options(command) if renamed.get(o, o) not in parameters]
    assert missing == [], f"qlrewrite.{function} lacks {missing}"


def test_fix_and_verify_spellings() -> None:
    """check --fix's options are fix()'s; --verify's details are verify_rewrite()'s."""
    fix = inspect.signature(qlrewrite.fix).parameters
    assert {"unsafe", "select", "ignore"} <= set(fix)
    verify = inspect.signature(qlrewrite.verify_rewrite).parameters
    assert {"runs", "seed", "input_shape", "tolerance", "timeout", "semantics_only"} <= set(verify)
    assert {"memory", "releases"} <= set(verify)  # --verify-memory, --verify-on


def test_docs_list_every_option_beside_its_api_spelling() -> None:
    """docs/python-api.md's table of spellings names every option of every command (that
    the API takes) next to its parameter."""
    text = (ROOT / "docs" / "python-api.md").read_text()
    rows = re.findall(r"^\| `qlrewrite (\w+)[^`]*` \| `(--[\w-]+)[^`]*` \| `([\w.]+)", text, re.M)
    listed = {(command, option) for command, option, _ in rows}
    for command in [*API_OF, "rules"]:
        if command not in COMMANDS:
            continue
        click_command = main.commands[command]
        for param in click_command.params:
            if param.name in CLI_ONLY or not getattr(param, "opts", None):
                continue
            option = next((o for o in param.opts if o.startswith("--")), None)
            if option is None:
                continue
            assert (command, option) in listed, f"docs/python-api.md lacks {command} {option}"
