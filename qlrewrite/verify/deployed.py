"""What ONNX Runtime really runs: a model in its default session, the kernels it forms.

ONNX Runtime's default session (graph optimizations ``ORT_ENABLE_ALL``, weight
prepacking on) fuses a DequantizeLinear of a constant weight with the activation's Q/DQ
and the Conv / MatMul / Gemm they feed into one integer kernel (QLinearConv,
QLinearMatMul, QGemm, ...) or a weight-only one (MatMulNBits): a model that computes the
same by the ONNX semantics can run other kernels, at another speed, with other rounding.
The kernels are read from ORT's own optimized graph (``optimized_model_filepath``, its
initializers in a separate file, the graph read without them), never guessed.

Everything here runs ONNX Runtime in the calling process: :mod:`qlrewrite.verify.verify_child`
runs it in a child process (ORT aborts the process on some models).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from qlrewrite.io import reading
from qlrewrite.targets.fusions import INTEGER_KERNELS, kernels_only_in_original
from qlrewrite.verify.verify import (
    InputSpec,
    OutputVerdict,
    compare_arrays,
    generate_inputs,
    require_onnxruntime,
    run_session,
    ulp_words,
)

__all__ = [
    "Deployment",
    "OptimizedGraph",
    "OutputDifference",
    "compare_deployed",
    "default_session",
    "latency_words",
    "median_latency",
    "optimized_graph",
]

#: Timed runs of each model for its latency (after one warm-up run).
LATENCY_RUNS = 5


@dataclasses.dataclass(frozen=True)
class OptimizedGraph:
    """ONNX Runtime's optimized main graph, as read from the file it writes: the op types
    of its nodes, the values its nodes produce, and its integer / weight-only kernels as
    (op type, node name, input names)."""

    op_types: dict[str, int]
    produced: tuple[str, ...]
    kernels: tuple[tuple[str, str, tuple[str, ...]], ...]

    @functools.cached_property
    def produced_set(self) -> frozenset[str]:
        """:attr:`produced` as a set (looked up once per DQ)."""
        return frozenset(self.produced)

    def kernel_counts(self) -> dict[str, int]:
        """Integer / weight-only kernels by op type."""
        return dict(sorted(collections.Counter(op for op, _, _ in self.kernels).items()))

    @functools.cached_property
    def _inputs_sorted(self) -> tuple[list[str], np.ndarray]:
        """Every kernel input name, sorted, and the index of the kernel taking it (names
        sharing a prefix are adjacent: a ``weight_*`` lookup is one bisected range)."""
        pairs = sorted(
            (name, k) for k, (_, _, inputs) in enumerate(self.kernels) for name in inputs
        )
        return [name for name, _ in pairs], np.array([k for _, k in pairs], dtype=np.int64)

    def kernel_of(self, weight: str) -> str | None:
        """The op type of the first kernel that takes constant ``weight`` (by name, or as
        ORT renames what it repacks: ``weight_T``), if any. One bisection per call: fold
        asks it of every fused DQ, so a scan of every kernel was quadratic in the model."""
        names, kernel = self._inputs_sorted
        start = bisect.bisect_left(names, weight)
        exact = bisect.bisect_right(names, weight, start)
        # the names starting with "weight_" sort between "weight_" and "weight`" ("`" follows "_")
        low = bisect.bisect_left(names, f"{weight}_", exact)
        high = bisect.bisect_left(names, f"{weight}`", low)
        found = [int(kernel[a:b].min()) for a, b in ((start, exact), (low, high)) if b > a]
        return self.kernels[min(found)][0] if found else None


def default_session(ort: Any, path: str | os.PathLike, optimized: Path | None = None) -> Any:
    """ONNX Runtime's default CPU session of ``path`` (optimizations ORT_ENABLE_ALL,
    prepacking on); with ``optimized``, ORT writes its optimized graph there (its
    initializers beside it, in ``<name>.data``)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if optimized is not None:
        options.optimized_model_filepath = os.fspath(optimized)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", f"{optimized.name}.data"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def optimized_graph(path: str | os.PathLike, *, on_phase: Any = None) -> OptimizedGraph:
    """The main graph ONNX Runtime's default session makes of ``path`` (no run;
    ``on_phase`` is the child's: the model is the original)."""
    ort = require_onnxruntime()
    with tempfile.TemporaryDirectory(prefix="qlrewrite-ort-") as folder:
        target = Path(folder) / "optimized.onnx"
        session = default_session(ort, path, target)
        del session
        proto = _read_graph(target)
    nodes = proto.graph.node
    kernels = tuple(
        (n.op_type, n.name, tuple(n.input)) for n in nodes if n.op_type in INTEGER_KERNELS
    )
    return OptimizedGraph(
        op_types=dict(collections.Counter(n.op_type for n in nodes)),
        produced=tuple(sorted({o for n in nodes for o in n.output})),
        kernels=kernels,
    )


def _read_graph(path: Path) -> onnx.ModelProto:
    """The graph ORT wrote at ``path`` (its initializers in a file beside it, not read)."""
    data = reading.read_bytes(path, "ONNX Runtime optimized model", reading.MODEL_BYTES)
    return onnx.load_from_string(data)


def median_latency(
    session: Any, feeds: Mapping[str, np.ndarray], runs: int = LATENCY_RUNS
) -> float:
    """Median wall time of ``runs`` runs of ``session`` on ``feeds`` (after one warm-up),
    in milliseconds."""
    session.run(None, dict(feeds))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, dict(feeds))
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def latency_words(ratio: float) -> str:
    """``0.82x the original's time, faster`` (or slower, or the same)."""
    way = "faster" if ratio < 0.995 else "slower" if ratio > 1.005 else "the same"
    return f"{ratio:.2f}x the original's time, {way}"


@dataclasses.dataclass(frozen=True)
class OutputDifference:
    """How one output differs between two models: the largest absolute difference, that
    relative to the output's largest magnitude, in ulp, and in quantization steps (the
    output's scale; 1 for an integer output) where the step is known."""

    name: str
    max_abs: float
    relative: float | None
    ulp: int | None
    steps: float | None
    mismatched: int
    elements: int
    problem: str | None = None

    @classmethod
    def of(cls, verdict: OutputVerdict, step: float | None) -> OutputDifference:
        relative = verdict.max_abs / verdict.max_ref if verdict.max_ref > 0 else None
        if verdict.exact:
            relative = 0.0
        steps = verdict.max_abs / step if step and verdict.problem is None else None
        return cls(
            verdict.name,
            verdict.max_abs,
            relative,
            verdict.max_ulp,
            steps,
            verdict.mismatched,
            verdict.elements,
            verdict.problem,
        )

    @property
    def exact(self) -> bool:
        return self.mismatched == 0 and self.problem is None

    def describe(self) -> str:
        """``exact`` or the differences, in words."""
        if self.problem:
            return self.problem
        if self.exact:
            return "bit-identical"
        parts = [f"max abs {self.max_abs:.3g}"]
        if self.relative is not None:
            parts.append(f"{self.relative:.2%} of the largest |value|")
        if self.steps is not None:
            parts.append(f"{self.steps:.3g} quantization steps")
        if self.ulp is not None:
            parts.append(ulp_words(self.ulp))
        return f"{self.mismatched} of {self.elements} differ: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        finite = self.max_abs != float("inf")
        return {
            "name": self.name,
            "exact": self.exact,
            "max_abs": self.max_abs if finite else None,
            "relative": self.relative,
            "ulp": self.ulp,
            "steps": self.steps,
            "mismatched": self.mismatched,
            "elements": self.elements,
            "problem": self.problem,
        }


@dataclasses.dataclass
class Deployment:
    """Both models in ONNX Runtime's default session on the same inputs: the outputs'
    differences, each model's median latency (ms) and integer / weight-only kernels;
    ``reason`` says why it could not run (then nothing else is known)."""

    runtime: str
    outputs: list[OutputDifference] = dataclasses.field(default_factory=list)
    latency_ms: tuple[float, float] | None = None
    kernels: tuple[dict[str, int], dict[str, int]] = dataclasses.field(
        default_factory=lambda: ({}, {})
    )
    reason: str | None = None

    @property
    def lost_kernels(self) -> dict[str, int]:
        """Kernels ORT formed from the original and not (as many times) from the rewritten."""
        before, after = self.kernels
        return {op: n - after.get(op, 0) for op, n in before.items() if n > after.get(op, 0)}

    @property
    def differs(self) -> bool:
        """Whether the deployment warns: outputs differ, kernels lost, or not run."""
        return (
            self.reason is not None
            or bool(self.lost_kernels)
            or not all(o.exact for o in self.outputs)
        )

    def lines(self) -> list[str]:
        """What a person reads: a headline, then one line per differing output."""
        head = f"deployed ({self.runtime}):"
        if self.reason is not None:
            return [f"{head} not compared: {self.reason}"]
        exact = sum(o.exact for o in self.outputs)
        parts = [f"{exact} of {len(self.outputs)} output(s) bit-identical"]
        if self.latency_ms is not None:
            before, after = self.latency_ms
            ratio = after / before if before > 0 else float("inf")
            parts.append(f"latency {before:.3g} ms -> {after:.3g} ms ({latency_words(ratio)})")
        if lost := self.lost_kernels:
            parts.append(kernels_only_in_original(lost))
        lines = [f"{head} {'; '.join(parts)}"]
        lines += [f"  {o.name}: {o.describe()}" for o in self.outputs if not o.exact]
        return lines

    def to_json(self) -> dict[str, Any]:
        latency = None
        if self.latency_ms is not None:
            latency = {"original_ms": self.latency_ms[0], "rewritten_ms": self.latency_ms[1]}
        return {
            "runtime": self.runtime,
            "reason": self.reason,
            "differs": self.differs,
            "outputs": [o.to_json() for o in self.outputs],
            "latency": latency,
            "kernels": {"original": self.kernels[0], "rewritten": self.kernels[1]},
            "lost_kernels": self.lost_kernels,
        }


def runtime_label(ort: Any) -> str:
    """What computed a deployment: release and session."""
    return f"ONNX Runtime {ort.__version__} CPU, default session: ORT_ENABLE_ALL, prepacking on"


def compare_deployed(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    *,
    seed: int = 0,
    steps: Mapping[str, float] | None = None,
    on_phase: Any = lambda phase: None,
) -> Deployment:
    """Run both models in ONNX Runtime's default session on one seeded input set:
    differences per output (``steps``: an output's quantization step, where known),
    median latencies, and the kernels ORT forms from each."""
    ort = require_onnxruntime()
    deployment = Deployment(runtime_label(ort))
    feeds = generate_inputs(specs, np.random.default_rng(seed))
    measured = []
    for phase, path in (("original", original), ("rewritten", rewritten)):
        on_phase(phase)
        try:
            measured.append(_measure(ort, path, feeds))
        except Exception as exc:
            deployment.reason = f"ONNX Runtime fails on the {phase} model ({_short(exc)})"
            return deployment
    (out_a, ms_a, kernels_a), (out_b, ms_b, kernels_b) = measured
    deployment.latency_ms = (ms_a, ms_b)
    deployment.kernels = (kernels_a, kernels_b)
    deployment.outputs = differences(out_a, out_b, steps or {})
    return deployment


def _measure(
    ort: Any, path: str | os.PathLike, feeds: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], float, dict[str, int]]:
    """One model's outputs, median latency and kernels in the default session."""
    with tempfile.TemporaryDirectory(prefix="qlrewrite-ort-") as folder:
        target = Path(folder) / "optimized.onnx"
        session = default_session(ort, path, target)
        proto = _read_graph(target)
    kernels = collections.Counter(
        n.op_type for n in proto.graph.node if n.op_type in INTEGER_KERNELS
    )
    outputs = run_session(ort, session, feeds)
    return outputs, median_latency(session, feeds), dict(sorted(kernels.items()))


def differences(
    expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray], steps: Mapping[str, float]
) -> list[OutputDifference]:
    """Each output of ``expected`` against ``actual`` (an integer output's step is 1)."""
    found = []
    for name, value in expected.items():
        if name not in actual:
            verdict = OutputVerdict(
                name, exact=False, elements=int(value.size), max_abs=float("inf"), problem="missing"
            )
        else:
            verdict = compare_arrays(name, value, actual[name])
        step = 1.0 if value.dtype.kind in "iu" else steps.get(name)
        found.append(OutputDifference.of(verdict, step))
    return found


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
