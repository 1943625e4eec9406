"""The repository's pre-commit hook and GitHub Action, run the way CI and editors run them.

pre-commit: the manifest (.pre-commit-hooks.yaml) is validated by pre-commit's own schema,
then run with `pre-commit run --all-files` in a git repository made in the test. The hook
is declared `language: python`, which pre-commit installs from the package index into a
fresh environment; tests never download, so the run uses the manifest's hook as a
`repo: local` hook with `language: system` (the qlrewrite of this environment): the same
entry, args, files, types_or and pass_filenames, filtered and passed by pre-commit itself.
Action: action.yml's inputs and steps are read, and its script part (ci/action.sh check)
runs locally as the composite action's step runs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import yaml
from ort_quantized import quantized
from qdq_models import DQ, qdq_model

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(tmp_path: Path) -> dict[str, str]:
    if not (BIN / "qlrewrite").exists() and shutil.which("qlrewrite") is None:
        pytest.skip("the qlrewrite console script is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    env.pop("CI", None)
    return env


def _bad() -> onnx.ModelProto:
    """QL403 (error): per-axis scale of 5 for a dimension of 4."""
    return qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})


def _warn() -> onnx.ModelProto:
    """QL501 (a warning: a zero scale) only."""
    return qdq_model(DQ, 21, scale=0.0)


def _project(tmp_path: Path) -> Path:
    """A repository with models ORT's quantizer wrote, a pyproject.toml and nothing else
    of qlrewrite: the int4 model's QL601 (IR version 7 for int4) is accepted in the config,
    a zero-scale model's QL501 on one node, and a legacy folder is excluded."""
    repo = tmp_path / "repo"
    (repo / "models" / "legacy").mkdir(parents=True)
    onnx.save(quantized("cnn-u8s8"), repo / "models" / "cnn_u8s8.onnx")
    onnx.save(quantized("cnn-int4-per-channel-21"), repo / "models" / "cnn_int4.onnx")
    onnx.save(_warn(), repo / "models" / "detector.onnx")
    onnx.save(quantized("cnn-opset12-per-channel"), repo / "models" / "legacy" / "old.onnx")
    (repo / "models" / "notes.onnx.txt").write_text("not a model")
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "demo"\n\n[tool.qlrewrite]\nstrict = true\n'
        'exclude = ["legacy"]\n[tool.qlrewrite.per-file-ignores]\n"models/cnn_int4*" = ["QL601"]\n'
        '[tool.qlrewrite.per-node-ignores]\n"qdq" = ["QL501"]\n'
    )
    return repo


def _manifest() -> list[dict]:
    return yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def test_the_manifest_is_valid_for_pre_commit() -> None:
    from pre_commit.clientlib import load_manifest

    hooks = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    (hook,) = [h for h in hooks if h["id"] == "qlrewrite-check"]
    assert hook["pass_filenames"] is True and hook["language"] == "python"
    assert hook["require_serial"] is True  # QL901 judges keys against every model at once
    assert hook["types_or"] == ["binary"] and hook["entry"].startswith("qlrewrite check")
    # options end before the file names pre-commit appends (entry + args + file names)
    assert "--force-exclude" in hook["entry"].split() and hook["args"][-1] == "--"


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _git(repo: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def _use_the_hook(repo: Path, env: dict[str, str]) -> None:
    """A git repository at ``repo`` whose pre-commit configuration runs the manifest's hook
    (as a local hook: tests never download), everything staged."""
    (hook,) = _manifest()
    local = {**hook, "language": "system"}
    local.pop("minimum_pre_commit_version", None)
    config = {"repos": [{"repo": "local", "hooks": [local]}]}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    _git(repo, "init", "-q", env=env)
    _git(repo, "add", "-A", env=env)


def test_pre_commit_runs_the_hook_on_onnx_files(tmp_path: Path) -> None:
    env = _env(tmp_path)
    repo = _project(tmp_path)
    _use_the_hook(repo, env)

    def run() -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pre_commit", "run", "--all-files", "--verbose"]
        return _run(command, repo, env)

    # legacy/ is excluded by the configuration (the hook passes --force-exclude), QL501 is
    # ignored for models/*: the strict project passes; the text file is never passed
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "qlrewrite check" in done.stdout and "Passed" in done.stdout
    assert "checked 3 file(s)" in done.stdout and "notes" not in done.stdout
    assert "1 suppressed" in done.stdout
    # a new model with an error fails the commit, naming the rule
    onnx.save(_bad(), repo / "models" / "new.onnx")
    _git(repo, "add", "-A", env=env)
    done = run()
    assert done.returncode == 1 and "Failed" in done.stdout
    assert "models/new.onnx: QL403 error" in done.stdout


def test_pre_commit_reads_a_file_named_like_an_option_as_a_file(tmp_path: Path) -> None:
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    onnx.save(_bad(), repo / "--config=cfg.onnx")
    onnx.save(_bad(), repo / "--isolated.onnx")
    _use_the_hook(repo, env)
    command = [sys.executable, "-m", "pre_commit", "run", "--all-files", "--verbose"]
    done = _run(command, repo, env)
    assert done.returncode == 1 and "Failed" in done.stdout, done.stdout + done.stderr
    assert "--config=cfg.onnx: QL403 error" in done.stdout
    assert "--isolated.onnx: QL403 error" in done.stdout


def _action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_action_declares_its_inputs_and_a_composite_run() -> None:
    action = _action()
    assert {"version", "paths", "args", "sarif"} <= set(action["inputs"])
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in uses)
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action"))
    assert "inputs.sarif == 'true'" in upload["if"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert 'action.sh" install' in runs and 'action.sh" check' in runs
    script = (ROOT / "ci" / "action.sh").read_text()
    assert 'pip install --quiet "qlrewrite==${INPUT_VERSION}"' in script


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_action_script_checks_annotates_and_writes_sarif(tmp_path: Path) -> None:
    env = _env(tmp_path)
    repo = _project(tmp_path)
    onnx.save(_bad(), repo / "models" / "new.onnx")
    outputs = tmp_path / "github_output"
    env.update(
        GITHUB_OUTPUT=str(outputs),
        INPUT_PATHS="models\nmodels/legacy/old.onnx",
        INPUT_ARGS="--ignore QL5",
        INPUT_SARIF="true",
        INPUT_SARIF_FILE="out.sarif",
    )
    done = _run(["bash", str(ROOT / "ci" / "action.sh"), "check"], repo, env)
    assert done.returncode == 0, done.stderr  # the step records the code; a later one fails
    assert _outputs(outputs) == {"exit-code": "1", "sarif-written": "true"}
    assert "::error file=models/new.onnx,title=QL403 per-axis-scale-length::" in done.stdout
    assert "::error file=models/legacy/old.onnx,title=QL201" in done.stdout  # named: checked
    sarif = json.loads((repo / "out.sarif").read_text())
    results = sarif["runs"][0]["results"]
    assert sorted({r["ruleId"] for r in results}) == ["QL201", "QL402", "QL403"]
    # a clean project: exit code 0, no SARIF unless asked
    (repo / "models" / "new.onnx").unlink()
    outputs.unlink()
    env.update(INPUT_PATHS="models", INPUT_SARIF="false")
    done = _run(["bash", str(ROOT / "ci" / "action.sh"), "check"], repo, env)
    assert done.returncode == 0 and _outputs(outputs) == {
        "exit-code": "0",
        "sarif-written": "false",
    }


def _blocks(kind: str) -> list[str]:
    """The ``kind`` code blocks of the configuration and CI pages (once in the README)."""
    pages = [ROOT / "docs" / "configuration.md", ROOT / "docs" / "ci.md"]
    text = "\n".join(page.read_text() for page in pages)
    return re.findall(rf"```{kind}\n(.*?)```", text, re.S)


def test_docs_snippets_match_the_hook_the_action_and_the_configuration(tmp_path: Path) -> None:
    from qlrewrite.checking import config

    (toml,) = [b for b in _blocks("toml") if "[tool.qlrewrite]" in b]
    path = tmp_path / "pyproject.toml"
    path.write_text(toml)
    config.forget()
    settings = config.load_config(path)  # every key and code of the example is valid
    assert settings.strict is True and settings.per_node_ignores
    yamls = [yaml.safe_load(b) for b in _blocks("yaml")]
    hook_ids = {h["id"] for h in _manifest()}
    local, checkout = [y["repos"][0] for y in yamls if "repos" in y]
    # the local hook is the manifest's, run by the system's qlrewrite (no invented URL)
    (manifest,) = _manifest()
    (hook,) = local["hooks"]
    assert local["repo"] == "local" and hook["language"] == "system"
    for key in ("id", "entry", "args", "files", "types_or", "require_serial"):
        assert hook[key] == manifest[key], key
    assert {h["id"] for h in checkout["hooks"]} <= hook_ids and "://" not in checkout["repo"]
    (workflow,) = [y for y in yamls if "jobs" in y]
    step = next(s for s in workflow["jobs"]["qlrewrite"]["steps"] if "with" in s)
    assert step["uses"].startswith("./")
    assert set(step["with"]) <= set(_action()["inputs"])


def test_pre_commit_passes_target_args_through(tmp_path: Path) -> None:
    """A hook whose args add ``--target`` (ending with ``--``, as the manifest says) checks
    the staged models against that runtime: IR version 14 fails for ONNX Runtime 1.31."""
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    onnx.save(qdq_model(DQ, 21, ir_version=14), repo / "model.onnx")
    (hook,) = _manifest()
    local = {**hook, "language": "system", "args": ["--target", "ort==1.31", "--"]}
    local.pop("minimum_pre_commit_version", None)
    config = {"repos": [{"repo": "local", "hooks": [local]}]}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    _git(repo, "init", "-q", env=env)
    _git(repo, "add", "-A", env=env)
    command = [sys.executable, "-m", "pre_commit", "run", "--all-files", "--verbose"]
    done = _run(command, repo, env)
    assert done.returncode == 1 and "Failed" in done.stdout, done.stdout + done.stderr
    assert "model.onnx: QL701 error: IR version 14 is newer than ORT 1.31.1" in done.stdout
