"""Runtime children are bounded: no process a command starts outlives it (each child in
its own process group, ended with it), and a child's memory is capped."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qlrewrite.verify import verify_child
from qlrewrite.verify.verify_child import ChildFailed, call_in_child, end_child

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups")

_SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def start_grandchild(*, on_phase: Callable[[str], None]) -> int:
    """In the child: start a process that runs on (as OpenVINO's fork does), return its pid."""
    return subprocess.Popen(_SLEEPER).pid


def start_grandchild_and_die(*, on_phase: Callable[[str], None]) -> int:
    """In the child: start a process that runs on, then end the child without an answer."""
    import os

    subprocess.Popen(_SLEEPER)
    os._exit(3)


def allocate(size: int, *, on_phase: Callable[[str], None]) -> int:
    """In the child: touch ``size`` bytes."""
    return int(np.ones(size, dtype=np.uint8).sum())


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_a_grandchild_does_not_outlive_the_child() -> None:
    """A process the runtime child started is ended with the child's group (it was
    re-parented to init and lived on)."""
    end_child()
    grandchild = call_in_child(start_grandchild, int, phases=("first",), timeout=60)
    assert psutil.Process(grandchild).is_running()
    end_child()
    assert _gone(grandchild)


def test_a_grandchild_does_not_outlive_a_child_that_died() -> None:
    """The child ended without an answer (a crash): its group is killed before it is
    reaped, so what it started is gone too."""
    end_child()
    before = {p.pid for p in psutil.process_iter()}
    with pytest.raises(ChildFailed, match="exit 3"):
        call_in_child(start_grandchild_and_die, int, phases=("first",), timeout=60)
    time.sleep(0.2)
    sleepers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.pid not in before and p.info["cmdline"] == _SLEEPER
    ]
    assert all(_gone(p.pid) for p in sleepers)
    assert not sleepers or all(not p.is_running() for p in sleepers)


def test_the_child_runs_in_its_own_process_group() -> None:
    """Ctrl-C at the terminal reaches the command, which ends the child's group itself."""
    import os

    end_child()
    process = verify_child._CHILD._started()
    try:
        assert os.getpgid(process.pid) == process.pid != os.getpgid(0)
    finally:
        end_child()
    assert process.returncode is not None


def test_the_child_memory_is_capped() -> None:
    """A task beyond ``memory`` bytes fails with the limit named, and the command goes on."""
    with pytest.raises(ChildFailed, match="ran out of memory"):
        call_in_child(allocate, int, 1 << 30, phases=("first",), timeout=60, memory=256 << 20)
    assert call_in_child(allocate, int, 1000, phases=("first",), timeout=60) == 1000
    end_child()


def _identity_model(path: Path) -> Path:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_compare_leaves_no_process_behind(tmp_path: Path, runtime: str) -> None:
    """``compare`` in each runtime (OpenVINO forked a helper that outlived every run):
    after the comparison, no process it started is alive."""
    from qlrewrite.verify.compare import compare_models
    from qlrewrite.verify.runtimes import missing

    if missing(runtime):
        pytest.skip(f"{runtime} is not installed")
    model = _identity_model(tmp_path / "m.onnx")
    before = _descendants()
    feeds = {"x": np.ones((2, 3), np.float32)}
    result = compare_models(model, model, feeds, runtimes=[runtime], rtol=0, atol=0)
    assert result.compared and not result.diverges
    left = _descendants() - before
    assert all(_gone(pid) for pid in left), left
