"""Two models on the same inputs: how their outputs differ, in the runtimes at hand.

``--verify`` runs the rewritten model against the original twice: by the semantics
(:mod:`qlrewrite.verify.verify`, ONNX Runtime's optimizations off: it decides) and as deployed
(:mod:`qlrewrite.verify.deployed`, ORT's default session: it warns). ``qlrewrite compare`` runs
any two models in ONNX Runtime, the ONNX reference evaluator and OpenVINO when installed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from qlrewrite.errors import InputError
from qlrewrite.verify.deployed import (
    Deployment,
    OutputDifference,
    compare_deployed,
    differences,
)
from qlrewrite.verify.release_env import ReleaseSpec, environment, is_release, parse_release
from qlrewrite.verify.release_run import check_on_release, run_in_release
from qlrewrite.verify.runtimes import (
    RUNTIMES,
    Divergence,
    compare_in,
    first_divergence,
    label,
    missing,
)
from qlrewrite.verify.verify import (
    MISMATCH,
    UNVERIFIABLE,
    VERIFY_TIMEOUT,
    InputSpec,
    Verification,
    VerifyOptions,
    generate_inputs,
)
from qlrewrite.verify.verify_child import ChildFailed, call_in_child, end_child, verify_in_child

__all__ = [
    "Comparison",
    "RuntimeComparison",
    "compare_models",
    "parse_runtime",
    "verify_both",
]


def verify_both(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    options: VerifyOptions,
) -> Verification:
    """The ``--verify`` runner: the semantic verification in the child process, then
    (with ``options.deployed``, when it did not end unverifiable) both models as
    deployed, kept in ``Verification.deployment`` (ORT crashing there is said, never a
    failure), then in each ``options.releases`` (:func:`on_releases`)."""
    releases = [parse_release(r) for r in options.releases]
    for spec in releases:
        environment(spec)  # made (or refused: no network, no such release) before any run
    result = verify_in_child(original, rewritten, specs, options)
    if result.status == UNVERIFIABLE:
        return result
    if releases:
        on_releases(result, releases, (original, rewritten), specs, options)
    if not options.deployed:
        return result
    try:
        result.deployment = call_in_child(
            compare_deployed,
            Deployment,
            os.fspath(original),
            os.fspath(rewritten),
            list(specs),
            seed=options.seed,
            steps=dict(options.output_steps),
            timeout=options.timeout,
            memory=options.memory,
        )
    except ChildFailed as exc:
        result.deployment = Deployment(
            "ONNX Runtime CPU, default session", reason=f"ONNX Runtime {exc}"
        )
    return result


@dataclasses.dataclass
class RuntimeComparison:
    """Two models' outputs in one runtime: per output the difference, or why the
    runtime did not compare them (not installed, failed, crashed)."""

    runtime: str
    label: str
    outputs: list[OutputDifference] = dataclasses.field(default_factory=list)
    reason: str | None = None
    failed_on: str | None = None  # "first" or "second": the model it failed on
    details: list[str] = dataclasses.field(default_factory=list)  # per model, in a release

    def diverging(self, rtol: float, atol: float) -> list[OutputDifference]:
        """The outputs beyond ``atol + rtol x`` their largest magnitude."""
        return [o for o in self.outputs if not _within(o, rtol, atol)]


def _within(output: OutputDifference, rtol: float, atol: float) -> bool:
    if output.exact:
        return True
    if output.problem is not None or output.max_abs == float("inf"):
        return False
    magnitude = output.max_abs / output.relative if output.relative else 0.0
    limit = atol + rtol * magnitude
    return limit > 0 and output.max_abs <= limit  # a zero limit accepts no difference


@dataclasses.dataclass
class Comparison:
    """``qlrewrite compare``: each runtime's comparison, and with ``--tensors`` the first
    intermediate tensor that diverges."""

    rtol: float
    atol: float
    runtimes: list[RuntimeComparison]
    divergence: Divergence | None = None

    @property
    def diverges(self) -> bool:
        """Whether an output (in any runtime that ran) or a tensor is beyond tolerance,
        or a runtime failed on the second model only."""
        outputs = any(r.diverging(self.rtol, self.atol) for r in self.runtimes)
        failed = any(r.failed_on == "second" for r in self.runtimes)
        tensor = self.divergence is not None and self.divergence.tensor is not None
        return outputs or failed or tensor

    @property
    def compared(self) -> bool:
        """Whether some runtime ran both models (when none did, nothing was compared:
        neither 'within tolerance' nor 'diverges')."""
        return any(r.reason is None for r in self.runtimes)

    def to_json(self) -> dict[str, Any]:
        return {
            "rtol": self.rtol,
            "atol": self.atol,
            "compared": self.compared,
            "diverges": self.diverges,
            "runtimes": [
                {
                    "runtime": r.runtime,
                    "label": r.label,
                    "reason": r.reason,
                    "details": r.details,
                    "outputs": [
                        {**o.to_json(), "within": _within(o, self.rtol, self.atol)}
                        for o in r.outputs
                    ],
                }
                for r in self.runtimes
            ],
            "tensors": self.divergence.to_json() if self.divergence else None,
        }


_PHASES = ("first", "second")  # what compare's child reports it runs


def parse_runtime(value: str) -> str:
    """A runtime ``compare`` runs in: an installed one's name (``ort``, ``reference``,
    ``openvino``) or an exact release (``ort==1.16.3``, run in its own environment);
    anything else is an InputError naming the choices."""
    if value in RUNTIMES:
        return value
    if is_release(value):
        return str(parse_release(value))
    raise InputError(
        f"{value!r}: one of {', '.join(RUNTIMES)}, or a release (ort==1.16.3, openvino==2026.4)"
    )


def compare_models(
    first: str | os.PathLike,
    second: str | os.PathLike,
    feeds: Mapping[str, np.ndarray],
    *,
    runtimes: Sequence[str],
    rtol: float,
    atol: float,
    tensors: bool = False,
    steps: Mapping[str, float] | None = None,
    timeout: float = VERIFY_TIMEOUT,
    memory: int | None = None,
) -> Comparison:
    """Both models on ``feeds`` in each of ``runtimes`` (each in the bounded child
    process, ``timeout`` seconds and ``memory`` bytes per runtime, so a runtime crashing
    or running on is reported, not fatal), and with ``tensors`` the first diverging
    intermediate tensor (ONNX Runtime, optimizations off). The child and every process
    it started are ended before this returns."""
    limits = {"timeout": timeout, "memory": memory}
    try:
        found = [_compare_in(r, first, second, feeds, steps=steps, limits=limits) for r in runtimes]
        comparison = Comparison(rtol, atol, found)
        if tensors:
            comparison.divergence = _divergence(
                first, second, feeds, rtol=rtol, atol=atol, limits=limits
            )
        return comparison
    finally:
        end_child()


def on_releases(
    result: Verification,
    releases: Sequence[ReleaseSpec],
    models: tuple[str | os.PathLike[str], str | os.PathLike[str]],
    specs: Sequence[InputSpec],
    options: VerifyOptions,
) -> None:
    """``--verify-on``: the rewritten model in each release, against the original in the
    installed ONNX Runtime, kept in ``result.releases``; a release that does not run the
    rewritten model fails the verification (nothing is written)."""
    feeds = generate_inputs(specs, np.random.default_rng(options.seed))
    for spec in releases:
        check = check_on_release(
            spec,
            *models,
            feeds,
            steps=dict(options.output_steps),
            timeout=options.timeout,
            memory=options.memory,
        )
        result.releases.append(check)
        if not check.loaded and result.passed:
            result.status, result.reason = MISMATCH, f"{check.release}: {check.run}"


def _compare_in(
    runtime: str,
    first: str | os.PathLike,
    second: str | os.PathLike,
    feeds: Mapping[str, np.ndarray],
    *,
    steps: Mapping[str, float] | None,
    limits: Mapping[str, Any],
) -> RuntimeComparison:
    """Both models in one runtime, in the child (a release: in its own environment)."""
    if is_release(runtime):
        spec = parse_release(runtime)
        return _compare_in_release(spec, (first, second), feeds, steps=steps, limits=limits)
    if (reason := missing(runtime)) is not None:
        return RuntimeComparison(runtime, runtime, reason=f"skipped: {reason}")
    result = RuntimeComparison(runtime, label(runtime))
    try:
        result.outputs = call_in_child(
            compare_in,
            list[OutputDifference],
            runtime,
            os.fspath(first),
            os.fspath(second),
            dict(feeds),
            phases=_PHASES,
            steps=dict(steps or {}),
            **limits,
        )
    except ChildFailed as exc:
        result.reason, result.failed_on = str(exc), exc.phase
    return result


def _compare_in_release(
    spec: ReleaseSpec,
    models: tuple[str | os.PathLike[str], str | os.PathLike[str]],
    feeds: Mapping[str, np.ndarray],
    *,
    steps: Mapping[str, float] | None,
    limits: Mapping[str, Any],
) -> RuntimeComparison:
    """Both models in ``spec``'s own environment: loads, runs, kernels, latency, and
    their outputs compared."""
    run = run_in_release(spec, models, feeds, **limits)
    result = RuntimeComparison(str(spec), run.label(), reason=run.reason)
    if run.reason is not None:
        return result
    result.details = [f"{p} model: {run.describe(i)}" for i, p in enumerate(_PHASES)]
    for phase, model in zip(_PHASES, run.models, strict=True):
        if not model.loaded:
            result.reason = f"does not run the {phase} model: {model.error}"
            result.failed_on = phase
            return result
    result.outputs = differences(run.outputs[0], run.outputs[1], steps or {})
    return result


def _divergence(
    first: str | os.PathLike,
    second: str | os.PathLike,
    feeds: Mapping[str, np.ndarray],
    *,
    rtol: float,
    atol: float,
    limits: Mapping[str, Any],
) -> Divergence:
    """The first diverging intermediate tensor, in the child."""
    try:
        return call_in_child(
            first_divergence,
            Divergence,
            os.fspath(first),
            os.fspath(second),
            dict(feeds),
            phases=_PHASES,
            rtol=rtol,
            atol=atol,
            **limits,
        )
    except ChildFailed as exc:
        return Divergence(0, reason=f"ONNX Runtime {exc}")
