"""Models run in a runtime release's own environment (:mod:`qlrewrite.verify.release_env`):
whether each loads and runs there, the kernels the release formed, its latency, and its
outputs, read back bounded and checked (the answer is never believed as sent).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qlrewrite.errors import InputError
from qlrewrite.io import reading
from qlrewrite.verify import release_child
from qlrewrite.verify.child_process import default_memory_limit, end_group, start_bounded
from qlrewrite.verify.deployed import OutputDifference, differences
from qlrewrite.verify.release_env import Installer, ReleaseSpec, environment
from qlrewrite.verify.runtimes import label, run_model
from qlrewrite.verify.verify_child import ChildFailed, call_in_child, checked

__all__ = [
    "ModelRun",
    "ReleaseCheck",
    "ReleaseRun",
    "check_on_release",
    "installed_differences",
    "run_in_release",
]

#: The largest answer read back (a few kernel counts per model).
_ANSWER_MAX = 1 << 20
#: Runs per model whose median is the latency.
LATENCY_RUNS = 5


@dataclasses.dataclass
class ModelRun:
    """One model in the release: loaded and ran (or the error), kernels formed (op type:
    nodes), median latency in ms."""

    loaded: bool
    error: str | None
    kernels: dict[str, int]
    latency_ms: float | None


@dataclasses.dataclass
class _Answer:
    release: str
    models: list[ModelRun]


@dataclasses.dataclass
class ReleaseRun:
    """The release as it reports itself, each model's run and outputs (by name; empty
    when it did not run), or why nothing ran (``reason``)."""

    spec: ReleaseSpec
    release: str = ""
    models: list[ModelRun] = dataclasses.field(default_factory=list)
    outputs: list[dict[str, np.ndarray]] = dataclasses.field(default_factory=list)
    reason: str | None = None

    def label(self) -> str:
        """``ONNX Runtime 1.16.3 CPU, default session (its own environment)``."""
        name = "ONNX Runtime" if self.spec.runtime == "ort" else "OpenVINO"
        session = ", default session" if self.spec.runtime == "ort" else ""
        return f"{name} {self.release or self.spec.version} CPU{session} (its own environment)"

    def describe(self, index: int) -> str:
        """How model ``index`` fared: ``loads, runs; kernels QLinearConv x3, ...; 1.2 ms``."""
        run = self.models[index]
        if not run.loaded:
            return f"does not load or run: {run.error}"
        kernels = ", ".join(f"{op} x{n}" for op, n in sorted(run.kernels.items()))
        latency = f"; median {run.latency_ms:.3g} ms" if run.latency_ms is not None else ""
        return f"loads, runs; kernels {kernels or 'none'}{latency}"


def run_in_release(
    spec: ReleaseSpec,
    models: Sequence[str | os.PathLike[str]],
    feeds: Mapping[str, np.ndarray],
    *,
    timeout: float,
    memory: int | None = None,
    installer: Installer | None = None,
) -> ReleaseRun:
    """Each of ``models`` on ``feeds`` in ``spec``'s environment (made on first use:
    InputError when it cannot be), in a bounded child: ``timeout`` seconds in all,
    ``memory`` bytes (None: the default limit)."""
    python = environment(spec, installer)
    result = ReleaseRun(spec)
    with tempfile.TemporaryDirectory(prefix="qlrewrite-release-") as folder:
        task = {"runtime": spec.runtime, "models": [os.fspath(m) for m in models]}
        Path(folder, "task.json").write_text(json.dumps({**task, "runs": LATENCY_RUNS}))
        np.savez(Path(folder, "inputs.npz"), **dict(feeds))
        script = release_child.__file__
        command = [os.fspath(python), "-I", script, folder]
        limit = default_memory_limit() if memory is None else memory
        process = start_bounded(command, limit, pipes=False)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            result.reason = f"no answer within {timeout:g} s"
        code = end_group(process)
        if result.reason is None:
            _read_answer(result, Path(folder), code)
    return result


def _read_answer(result: ReleaseRun, folder: Path, code: int) -> None:
    """The child's answer and outputs into ``result`` (or the reason there are none)."""
    answer_path = folder / "answer.json"
    if code != 0 or not answer_path.exists():
        result.reason = f"the release's process ended without an answer (exit {code})"
        return
    try:
        value = json.loads(reading.read_bytes(answer_path, "answer", _ANSWER_MAX))
        answer = checked(_Answer, value)
        if len(answer.models) != len(result.models or answer.models):
            raise ValueError("not one entry per model")
        result.release, result.models = answer.release[:100], answer.models
        result.outputs = [_outputs(folder, i, m) for i, m in enumerate(answer.models)]
    except (ValueError, RecursionError, OSError, InputError) as exc:
        result.reason = f"the release's process sent an answer that cannot be read ({exc})"


def _outputs(folder: Path, index: int, run: ModelRun) -> dict[str, np.ndarray]:
    """Model ``index``'s outputs as the child saved them (plain arrays only)."""
    if not run.loaded:
        return {}
    data = reading.read_bytes(folder / f"outputs-{index}.npz", "outputs", reading.MODEL_BYTES)
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}


@dataclasses.dataclass
class ReleaseCheck:
    """``--verify-on``: the rewritten model in a release (loads, runs, kernels, latency)
    and its outputs' difference to the original's in the installed ONNX Runtime."""

    release: str
    run: str  # "loads, runs; kernels ...; median ... ms", or why not
    loaded: bool
    against: str = ""  # "ONNX Runtime 1.31.1": what computed the original's outputs
    outputs: list[OutputDifference] = dataclasses.field(default_factory=list)
    reason: str | None = None  # why the difference was not measured

    def lines(self) -> list[str]:
        """The head line, then one per output."""
        head = f"on {self.release}: {self.run}"
        if self.reason is not None:
            return [head, f"difference to the original not measured: {self.reason}"]
        where = f"to the original in {self.against}"
        return [head, *(f"{o.name}: {o.describe()} ({where})" for o in self.outputs)]

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "run": self.run,
            "loaded": self.loaded,
            "against": self.against,
            "reason": self.reason,
            "outputs": [o.to_json() for o in self.outputs],
        }


def check_on_release(
    spec: ReleaseSpec,
    original: str | os.PathLike[str],
    rewritten: str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    *,
    steps: Mapping[str, float],
    timeout: float,
    memory: int | None = None,
) -> ReleaseCheck:
    """``rewritten`` run in ``spec``'s environment, compared with ``original`` in the
    installed ONNX Runtime's default session (in the verify child)."""
    run = run_in_release(spec, [rewritten], feeds, timeout=timeout, memory=memory)
    if run.reason is not None:
        return ReleaseCheck(str(spec), f"not run: {run.reason}", loaded=False)
    check = ReleaseCheck(run.label(), run.describe(0), loaded=run.models[0].loaded)
    if not check.loaded:
        check.reason = "the rewritten model did not run"
        return check
    try:
        check.against, check.outputs = call_in_child(
            installed_differences,
            tuple[str, list[OutputDifference]],
            os.fspath(original),
            run.outputs[0],
            dict(feeds),
            phases=("original",),
            steps=dict(steps),
            timeout=timeout,
            memory=memory,
        )
    except ChildFailed as exc:
        check.reason = f"ONNX Runtime {exc}"
    return check


def installed_differences(
    original: str,
    actual: Mapping[str, np.ndarray],
    feeds: Mapping[str, np.ndarray],
    *,
    steps: Mapping[str, float],
    on_phase: Callable[[str], None] = lambda phase: None,
) -> tuple[str, list[OutputDifference]]:
    """(In the verify child.) The installed ONNX Runtime's label and, per output, how
    ``actual`` differs from ``original``'s outputs in its default session."""
    on_phase("original")
    expected = run_model("ort", original, feeds)
    return label("ort"), differences(expected, actual, steps)
