"""Proof on a release itself: ``compare --runtime ort==1.16.3`` runs the models in that
release's own environment, made once (atomically, under a lock) in the user's cache.

CI-safe tests make the "environment" a wrapper around this test's own Python (the
installer is replaced); the slow test wraps the real ORT 1.16.3 venv when present."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from qlrewrite.cli import main
from qlrewrite.errors import InputError
from qlrewrite.verify import release_env
from qlrewrite.verify.release_env import ReleaseSpec, environment, parse_release
from qlrewrite.verify.release_run import run_in_release

_ORT_116 = Path("/work/venvs/ort-1.16/bin/python")


def _wrapper_installer(python: str, calls: list[str] | None = None, delay: float = 0.0):
    """An installer that makes ``folder/bin/python`` run ``python`` (no download)."""

    def install(folder: Path, requirements: Sequence[str], spec: ReleaseSpec) -> None:
        if calls is not None:
            calls.append(str(folder))
        time.sleep(delay)
        (folder / "bin").mkdir(parents=True)
        script = folder / "bin" / "python"
        script.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    return install


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "qlrewrite" / "runtimes"


def _model(path: Path, scale: float) -> Path:
    """``y = DequantizeLinear(QuantizeLinear(x))`` at ``scale``, then ``Relu``."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [
            helper.make_tensor("s", TensorProto.FLOAT, [], [scale]),
            helper.make_tensor("z", TensorProto.UINT8, [], [128]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("ort==1.16.3", ["onnxruntime==1.16.3", "numpy<2"]),
        ("onnxruntime==1.20", ["onnxruntime==1.20.*"]),
        ("openvino==2026.4", ["openvino==2026.4.*"]),
    ],
)
def test_a_release_names_its_package(text: str, requirements: list[str]) -> None:
    assert parse_release(text).requirements == requirements


@pytest.mark.parametrize("text", ["ort==latest", "tensorrt==10.0", "ort==1", "ort>=1.16"])
def test_an_unknown_release_is_one_line(text: str) -> None:
    with pytest.raises(InputError, match="not a runtime release"):
        parse_release(text)


def test_the_cache_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert release_env.cache_root() == tmp_path / "qlrewrite" / "runtimes"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert release_env.cache_root() == Path.home() / ".cache" / "qlrewrite" / "runtimes"


def test_the_environment_is_made_once_and_reused(cache: Path) -> None:
    calls: list[str] = []
    spec = parse_release("ort==1.16.3")
    first = environment(spec, _wrapper_installer(sys.executable, calls))
    again = environment(spec, _wrapper_installer(sys.executable, calls))
    assert first == again == cache / "onnxruntime-1.16.3" / "bin" / "python"
    assert len(calls) == 1
    assert not [p for p in cache.iterdir() if ".partial" in p.name]


def test_a_failed_install_leaves_nothing_behind(cache: Path) -> None:
    """No network or no such release: one line naming the release; no half-made
    environment is left for the next run to use."""

    def failing(folder: Path, requirements: Sequence[str], spec: ReleaseSpec) -> None:
        folder.mkdir(parents=True)
        (folder / "half").write_text("x")
        release_env._run([sys.executable, "-c", "raise SystemExit('no route')"], spec, "nope")

    with pytest.raises(InputError, match=r"^ort==1\.16\.3: nope .*no route"):
        environment(parse_release("ort==1.16.3"), failing)
    assert [p.name for p in cache.iterdir()] == ["onnxruntime-1.16.3.lock"]


def test_an_environment_whose_runtime_does_not_import_is_not_kept(cache: Path) -> None:
    """An install that 'succeeded' but cannot import the runtime is not made complete."""
    bare = _wrapper_installer("/bin/false")
    with pytest.raises(InputError, match="does not import"):
        environment(parse_release("ort==1.16.3"), bare)
    assert not (cache / "onnxruntime-1.16.3").exists()


def test_concurrent_first_uses_make_one_environment(cache: Path) -> None:
    calls: list[str] = []
    spec = parse_release("ort==1.16.3")
    installer = _wrapper_installer(sys.executable, calls, delay=0.5)
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda: found.append(environment(spec, installer)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(set(found)) == 1 and len(found) == 3


def test_run_in_a_release_reports_loads_kernels_and_outputs(cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    a, b = _model(tmp_path / "a.onnx", 0.1), _model(tmp_path / "b.onnx", 0.2)
    feeds = {"x": np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)}
    run = run_in_release(
        parse_release("ort==1.16.3"),
        [a, b],
        feeds,
        timeout=120,
        installer=_wrapper_installer(sys.executable),
    )
    assert run.reason is None, run.reason
    assert [m.loaded for m in run.models] == [True, True]
    assert run.models[0].latency_ms is not None and run.models[0].kernels
    expected = np.maximum(np.clip(np.round(feeds["x"] / 0.1) + 128, 0, 255) - 128, 0) * 0.1
    np.testing.assert_allclose(run.outputs[0]["y"], expected.astype(np.float32), rtol=1e-6)


def test_a_release_child_over_its_time_is_ended(cache: Path, tmp_path: Path) -> None:
    """A release that runs on is stopped at the time limit, its process group ended."""
    sleeper = tmp_path / "sleepy"
    sleeper.write_text(
        f'#!/bin/sh\ncase "$2" in -c) exec "{sys.executable}" "$@";; esac\nsleep 300\n'
    )
    sleeper.chmod(0o755)
    a = _model(tmp_path / "a.onnx", 0.1)
    start = time.monotonic()
    run = run_in_release(
        parse_release("ort==1.16.3"),
        [a, a],
        {"x": np.zeros((2, 8), np.float32)},
        timeout=2,
        installer=_wrapper_installer(str(sleeper)),
    )
    assert run.reason == "no answer within 2 s"
    assert time.monotonic() - start < 30


def test_compare_on_a_release_names_it(cache: Path, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(release_env, "install_from_registry", _wrapper_installer(sys.executable))
    a, b = _model(tmp_path / "a.onnx", 0.1), _model(tmp_path / "b.onnx", 0.2)
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--runtime", "ort==1.16.3"])
    assert result.exit_code == 1, result.output
    assert "ort==1.16.3 (ONNX Runtime" in result.output
    assert "first model: loads, runs; kernels" in result.output
    assert "DIVERGES" in result.output


def test_compare_without_network_is_one_line(cache: Path, tmp_path: Path, monkeypatch) -> None:
    def offline(folder: Path, requirements: Sequence[str], spec: ReleaseSpec) -> None:
        raise InputError(f"{spec}: cannot install {requirements[0]} (no network?)")

    monkeypatch.setattr(release_env, "install_from_registry", offline)
    a = _model(tmp_path / "a.onnx", 0.1)
    result = CliRunner().invoke(main, ["compare", str(a), str(a), "--runtime", "ort==1.16.3"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "qlrewrite: error: ort==1.16.3: cannot install onnxruntime==1.16.3 (no network?)"
    ]


def test_compare_refuses_an_unknown_runtime_spelling(tmp_path: Path) -> None:
    a = _model(tmp_path / "a.onnx", 0.1)
    result = CliRunner().invoke(main, ["compare", str(a), str(a), "--runtime", "ort==soon"])
    assert result.exit_code == 2
    assert "not a runtime release" in result.output


@pytest.mark.slow
@pytest.mark.skipif(not _ORT_116.exists(), reason="needs /work/venvs/ort-1.16 (ORT 1.16.3)")
def test_compare_really_runs_in_ort_1_16_3(cache: Path, tmp_path: Path, monkeypatch) -> None:
    """The real release: its report names 1.16.3, the kernels it formed, the difference."""
    monkeypatch.setattr(release_env, "install_from_registry", _wrapper_installer(str(_ORT_116)))
    a, b = _model(tmp_path / "a.onnx", 0.1), _model(tmp_path / "b.onnx", 0.2)
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--runtime", "ort==1.16.3"])
    assert "ONNX Runtime 1.16.3 CPU" in result.output, result.output
    assert "kernels" in result.output and "max abs" in result.output
    assert os.path.isdir(cache / "onnxruntime-1.16.3")


def _weight_model(path: Path) -> Path:
    """``y = x @ DequantizeLinear(w)``: fold rewrites it."""
    w = onnx.numpy_helper.from_array(np.arange(-8, 8, dtype=np.int8).reshape(4, 4), "w")
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w, helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, path)
    return path


def _fold_on(tmp_path: Path, *extra: str):
    model = _weight_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    args = ["fold", str(model), "-o", str(out), "--verify-on", "ort==1.16.3", *extra]
    return CliRunner().invoke(main, args), out


def test_verify_on_reports_the_release_run(cache: Path, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(release_env, "install_from_registry", _wrapper_installer(sys.executable))
    result, out = _fold_on(tmp_path, "--verify=semantics")
    assert result.exit_code == 0, result.output
    assert "verify on ONNX Runtime" in result.output and "loads, runs; kernels" in result.output
    assert "(to the original in ONNX Runtime" in result.output
    assert out.exists()


def test_verify_on_a_release_that_does_not_run_it_writes_nothing(
    cache: Path, tmp_path: Path, monkeypatch
) -> None:
    pytest.importorskip("onnxruntime")
    from qlrewrite.verify import release_run

    monkeypatch.setattr(release_env, "install_from_registry", _wrapper_installer(sys.executable))

    def refusing(spec, models, feeds, **limits):
        run = release_run.ReleaseRun(spec, "1.16.3")
        run.models = [release_run.ModelRun(False, "Fail: opset 21 is not supported", {}, None)]
        run.outputs = [{}]
        return run

    monkeypatch.setattr(release_run, "run_in_release", refusing)
    result, out = _fold_on(tmp_path)
    assert result.exit_code == 1, result.output
    assert "opset 21 is not supported" in result.output
    assert not out.exists()


def test_verify_on_without_network_is_one_line(cache: Path, tmp_path: Path, monkeypatch) -> None:
    def offline(folder: Path, requirements: Sequence[str], spec: ReleaseSpec) -> None:
        raise InputError(f"{spec}: cannot install {requirements[0]} (no network?)")

    monkeypatch.setattr(release_env, "install_from_registry", offline)
    result, out = _fold_on(tmp_path)
    assert result.exit_code == 2
    assert "qlrewrite: error: ort==1.16.3: cannot install" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.skipif(not _ORT_116.exists(), reason="needs /work/venvs/ort-1.16 (ORT 1.16.3)")
def test_verify_on_really_runs_in_ort_1_16_3(cache: Path, tmp_path: Path, monkeypatch) -> None:
    """The real release: the report names 1.16.3, its kernels and the difference."""
    monkeypatch.setattr(release_env, "install_from_registry", _wrapper_installer(str(_ORT_116)))
    result, out = _fold_on(tmp_path)
    assert result.exit_code == 0, result.output
    assert out.exists()
    assert "verify on ONNX Runtime 1.16.3 CPU" in result.output
    assert "kernels MatMul x1" in result.output
    assert "y: " in result.output and "to the original in ONNX Runtime" in result.output
