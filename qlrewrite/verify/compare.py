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
import onnx_ir as ir

from qlrewrite.qdq import constant_tensor, iter_sites
from qlrewrite.verify.deployed import (
    Deployment,
    OutputDifference,
    compare_deployed,
)
from qlrewrite.verify.runtimes import Divergence, compare_in, first_divergence, label, missing
from qlrewrite.verify.verify import UNVERIFIABLE, InputSpec, Verification, VerifyOptions
from qlrewrite.verify.verify_child import ChildFailed, call_in_child, verify_in_child

__all__ = [
    "Comparison",
    "RuntimeComparison",
    "compare_models",
    "output_steps",
    "verify_both",
]


def output_steps(model: ir.Model) -> dict[str, float]:
    """The quantization step of each graph output a DequantizeLinear of one scale
    produces (its scale): where an output's difference reads in steps."""
    outputs = {v.name for v in model.graph.outputs}
    steps = {}
    for site in iter_sites(model):
        produced = site.node.outputs[0].name
        if site.graph is not model.graph or produced not in outputs:
            continue
        if site.node.op_type != "DequantizeLinear":
            continue
        tensor = constant_tensor(site.input("scale"))
        if tensor is not None and tensor.size == 1:
            steps[produced] = float(tensor.numpy().reshape(-1)[0])
    return steps


def verify_both(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    options: VerifyOptions,
) -> Verification:
    """The ``--verify`` runner: the semantic verification in the child process, then
    (with ``options.deployed``, when it did not end unverifiable) both models as
    deployed, kept in ``Verification.deployment`` (ORT crashing there is said, never a
    failure)."""
    result = verify_in_child(original, rewritten, specs, options)
    if not options.deployed or result.status == UNVERIFIABLE:
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

    def diverging(self, rtol: float, atol: float) -> list[OutputDifference]:
        """The outputs beyond ``atol + rtol x`` their largest magnitude."""
        return [o for o in self.outputs if not _within(o, rtol, atol)]


def _within(output: OutputDifference, rtol: float, atol: float) -> bool:
    if output.exact:
        return True
    if output.problem is not None or output.max_abs == float("inf"):
        return False
    magnitude = output.max_abs / output.relative if output.relative else 0.0
    return output.max_abs <= atol + rtol * magnitude


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
) -> Comparison:
    """Both models on ``feeds`` in each of ``runtimes`` (each in the child process, so a
    runtime crashing is reported, not fatal), and with ``tensors`` the first diverging
    intermediate tensor (ONNX Runtime, optimizations off)."""
    first, second = os.fspath(first), os.fspath(second)
    found = []
    for runtime in runtimes:
        if (reason := missing(runtime)) is not None:
            found.append(RuntimeComparison(runtime, runtime, reason=f"skipped: {reason}"))
            continue
        result = RuntimeComparison(runtime, label(runtime))
        try:
            result.outputs = call_in_child(
                compare_in,
                list[OutputDifference],
                runtime,
                first,
                second,
                dict(feeds),
                phases=_PHASES,
                steps=dict(steps or {}),
            )
        except ChildFailed as exc:
            result.reason, result.failed_on = str(exc), exc.phase
        found.append(result)
    comparison = Comparison(rtol, atol, found)
    if tensors:
        try:
            comparison.divergence = call_in_child(
                first_divergence,
                Divergence,
                first,
                second,
                dict(feeds),
                phases=_PHASES,
                rtol=rtol,
                atol=atol,
            )
        except ChildFailed as exc:
            comparison.divergence = Divergence(0, reason=f"ONNX Runtime {exc}")
    return comparison
