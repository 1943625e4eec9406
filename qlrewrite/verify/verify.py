"""``--verify``: run the original and the rewritten model in ONNX Runtime and compare.

Both models run in ONNX Runtime's CPU provider with graph optimizations off and weight
prepacking off, on the same generated inputs (a seeded NumPy generator; shapes from the
graph inputs, ``--input-shape`` for unknown dims). Every graph output is compared bit for
bit (NaN equals NaN only with the same bits); a difference is reported per output as the
largest absolute and ulp difference. ONNX Runtime is an optional extra
(``pip install 'qlrewrite[verify]'``); it is imported only when a verification runs.

A model ONNX Runtime cannot run (an opset or IR version above what it supports, a type it
has no kernel for, inputs it cannot take) is *unverifiable*: that is not a pass.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx_ir as ir

from qlrewrite.errors import InputError, Refusal
from qlrewrite.io import reading
from qlrewrite.verify.arrays import ULP_SHOWN, OutputVerdict, compare_arrays, ulp_words
from qlrewrite.verify.bound import (
    EXACT_BOUND,
    FLOAT32_UNIT_ROUNDOFF,
    Bound,
    summation_order_bound,
)
from qlrewrite.verify.inputs import (
    InputSpec,
    Unverifiable,
    generate_inputs,
    input_specs,
    input_specs_or_refuse,
    parse_input_shape,
)

__all__ = [
    "EXACT_BOUND",
    "FLOAT32_UNIT_ROUNDOFF",
    "INSTALL_HINT",
    "ULP_SHOWN",
    "VERIFY_TIMEOUT",
    "Bound",
    "InputSpec",
    "OutputVerdict",
    "Verification",
    "VerificationFailed",
    "Verifier",
    "VerifyOptions",
    "compare_arrays",
    "generate_inputs",
    "input_specs",
    "input_specs_or_refuse",
    "output_steps",
    "parse_input_shape",
    "require_onnxruntime",
    "run_session",
    "summation_order_bound",
    "ulp_words",
    "verify_models",
]

INSTALL_HINT = "pip install 'qlrewrite[verify]'"

#: Status of a verification; only the first two are a pass.
EXACT, WITHIN_TOLERANCE, MISMATCH, UNVERIFIABLE = (
    "exact",
    "within-tolerance",
    "mismatch",
    "unverifiable",
)


#: Seconds a verification may take in its child process (``--verify-timeout``).
VERIFY_TIMEOUT = 600.0


@dataclasses.dataclass(frozen=True)
class VerifyOptions:
    """How to verify: input sets, seed, shapes for unknown dims, accepted abs difference
    (``--verify-tolerance``), the rewrite's stated :class:`Bound`, and the time limit in
    seconds and memory of a verification in its child process (``--verify-timeout``,
    ``--verify-memory``: past them, the verification is unverifiable)."""

    runs: int = 1
    seed: int = 0
    input_shapes: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    tolerance: float | None = None
    bound: Bound = EXACT_BOUND
    #: Also run both models as deployed (:mod:`qlrewrite.verify.deployed`); a warning, never a
    #: failure. ``output_steps``: (output, quantization step) where an output is dequantized.
    deployed: bool = False
    output_steps: tuple[tuple[str, float], ...] = ()
    #: Values inside both models to compare too (outputs of converted nodes, by name).
    probes: tuple[str, ...] = ()
    timeout: float = VERIFY_TIMEOUT
    memory: int | None = None  # bytes the child may allocate (None: 3/4 of the RAM)
    releases: tuple[str, ...] = ()  # --verify-on: runtime releases to run the output in

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError("a verification's time limit is a positive number of seconds")


def output_steps(model: ir.Model) -> dict[str, float]:
    """The quantization step of each graph output a DequantizeLinear of one scale
    produces (its scale): where an output's difference reads in steps
    (:attr:`VerifyOptions.output_steps`, read on the input before the passes change it)."""
    from qlrewrite.qdq import constant_tensor, iter_sites  # not in the verification's child

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


@dataclasses.dataclass
class Verification:
    """The outcome of one verification (``status`` is one of the module's four statuses)."""

    status: str
    runs: int
    seed: int
    tolerance: float | None = None
    outputs: list[OutputVerdict] = dataclasses.field(default_factory=list)
    reason: str | None = None
    bound: Bound = EXACT_BOUND  # what the rewrite states it may change, and why
    runtime: str | None = None  # "ONNX Runtime 1.31.1": what computed the outputs
    #: qlrewrite.verify.deployed.Deployment, the default session's view: set in the parent process
    #: after the child's verification (which never sends it).
    deployment: Any = dataclasses.field(default=None, metadata={"parent_only": True})
    #: qlrewrite.verify.release_run.ReleaseCheck per --verify-on release (parent only).
    releases: list[Any] = dataclasses.field(default_factory=list, metadata={"parent_only": True})
    #: The largest difference measured at each probe (VerifyOptions.probes) both had.
    probes: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status in (EXACT, WITHIN_TOLERANCE)

    def describe(self, *, outputs: bool = True) -> str:
        """One line: the status and what decided it (``outputs``: with the differences of
        the first outputs that differ; the command line prints them on their own lines)."""
        if self.status == UNVERIFIABLE:
            return f"unverifiable: {self.reason}"
        if self.reason:
            return f"{self.status}: {self.reason}"
        runs = f"{self.runs} input set{'s' if self.runs != 1 else ''}, seed {self.seed}"
        if self.runtime:
            runs += f"; {self.runtime} CPU, graph optimizations off"
        if self.status == EXACT:
            return f"exact: {len(self.outputs)} output(s) bit-identical ({runs})"
        note = ""
        if not self.bound.exact:
            note = f"; {self.bound.reason}; accepted: {self.bound.describe()}"
        note = self._which_exact(outputs) + note
        if self.status == WITHIN_TOLERANCE:
            if self.tolerance is None:
                return f"within tolerance ({runs}){note}"
            return f"within tolerance {self.tolerance:g} ({runs}){note}"
        return f"mismatch ({runs}){note}"

    def _which_exact(self, outputs: bool = True) -> str:
        """``; bit-identical: y1; differ: y2 (3 of 64 elements differ: ...)``."""
        exact = [o.name for o in self.outputs if o.exact]
        differ = [f"{o.name} ({o.describe()})" for o in self.outputs if not o.exact and outputs]
        text = f"; bit-identical: {', '.join(exact[:4])}" if exact else ""
        if len(exact) > 4:
            text += f" and {len(exact) - 4} more"
        return text + (f"; differ: {'; '.join(differ[:3])}" if differ else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "passed": self.passed,
            "runs": self.runs,
            "seed": self.seed,
            "tolerance": self.tolerance,
            "relative_tolerance": self.bound.relative,
            "note": self.bound.reason,
            "bound": self.bound.to_json(),
            "runtime": self.runtime,
            "reason": self.reason,
            "outputs": [o.to_json() for o in self.outputs],
            "deployment": self.deployment.to_json() if self.deployment is not None else None,
            "releases": [r.to_json() for r in self.releases],
        }


class VerificationFailed(Refusal):
    """The rewritten model differs from the original, or could not be verified (exit 1)."""

    def __init__(self, verification: Verification) -> None:
        if verification.status == UNVERIFIABLE:
            message = (
                f"cannot verify with ONNX Runtime: {verification.reason}; nothing written "
                "(run without --verify to write the model unverified)"
            )
        else:
            message = f"verification failed: {_failure(verification)}; nothing written"
        super().__init__(message)
        self.verification = verification


def _failure(verification: Verification) -> str:
    """Why a verification that ran did not pass, naming the outputs beyond their bound."""
    if verification.reason:
        return verification.reason
    beyond = [
        o for o in verification.outputs if not o.within(verification.tolerance, verification.bound)
    ]
    detail = "; ".join(f"{o.name}: {o.describe()}" for o in beyond[:3])
    more = f" and {len(beyond) - 3} more" if len(beyond) > 3 else ""
    return f"outputs differ beyond what the rewrite allows ({detail}{more})"


def require_onnxruntime() -> Any:
    """Import onnxruntime or raise an InputError that says how to install it."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise InputError(
            f"--verify needs ONNX Runtime, which is not installed: {INSTALL_HINT}"
        ) from exc
    return onnxruntime


# --------------------------------------------------------------------------- running


def _session(ort: Any, path: Path, probes: Sequence[str] = ()) -> tuple[Any, frozenset[str]]:
    """An ONNX Runtime session of ``path`` and the probes it outputs beside its own."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.log_severity_level = 3
    source, added = _with_probes(path, probes) if probes else (None, frozenset())
    session = ort.InferenceSession(
        source or os.fspath(path), options, providers=["CPUExecutionProvider"]
    )
    return session, added


#: Models probed inside (every probe kept alive for one run): at most this large.
MAX_PROBED_BYTES = 256 << 20


def _with_probes(path: Path, probes: Sequence[str]) -> tuple[bytes | None, frozenset[str]]:
    """The model at ``path`` with the main graph's node outputs named in ``probes`` made
    graph outputs too, and their names; (None, {}) for a model too large or with external
    data (not probed)."""
    import onnx

    try:
        data = reading.read_bytes(path, "model file", MAX_PROBED_BYTES)
    except InputError:  # too large to probe (or gone: the run that reads it says so)
        return None, frozenset()
    proto = onnx.load_model_from_string(data, format="protobuf")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        return None, frozenset()
    wanted = set(probes) - {o.name for o in proto.graph.output}
    added = [name for node in proto.graph.node for name in node.output if name in wanted]
    proto.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in added)
    return proto.SerializeToString(), frozenset(added)


def _split(
    run: dict[str, np.ndarray], added: frozenset[str], probes: Sequence[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A run's graph outputs, and its probes' values (a graph output can be a probe)."""
    outputs = {n: v for n, v in run.items() if n not in added}
    return outputs, {n: run[n] for n in probes if n in run}


def _ort_value(ort: Any, array: np.ndarray) -> Any:
    if array.dtype.kind in "biuf":  # native NumPy types
        return ort.OrtValue.ortvalue_from_numpy(array)
    dtype = ir.DataType.from_numpy(array.dtype)
    unsigned = np.dtype(f"uint{array.dtype.itemsize * 8}")  # bfloat16, float8: pass the bits
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(unsigned), int(dtype))


def _to_numpy(name: str, value: Any) -> np.ndarray:
    """An output OrtValue as NumPy, read from its bytes (works for bfloat16, float8, int4)."""
    if not value.is_tensor():
        raise Unverifiable(f"output '{name}' is not a tensor; only tensors are compared")
    dtype = ir.DataType(value.element_type())
    if dtype == ir.DataType.STRING:
        return value.numpy()
    shape = tuple(value.shape())
    size = value.tensor_size_in_bytes()
    data = np.frombuffer(ctypes.string_at(value.data_ptr(), size) if size else b"", np.uint8)
    if dtype.bitwidth < 8:
        return ir.PackedTensor(data, dtype, shape=ir.Shape(shape)).numpy()
    return data.view(dtype.numpy()).reshape(shape)


def _run(ort: Any, session: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    values = session.run_with_ort_values(
        None, {name: _ort_value(ort, array) for name, array in feeds.items()}
    )
    names = [o.name for o in session.get_outputs()]
    return {name: _to_numpy(name, value) for name, value in zip(names, values, strict=True)}


def run_session(ort: Any, session: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of ``session`` on ``feeds``, by name, read from its bytes."""
    return _run(ort, session, feeds)


_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : (\w+) : ")
_SOURCE_LOCATION = re.compile(r"^\S+\.(?:cc|h|cpp):\d+ ")


def _first_line(exc: BaseException) -> str:
    """ORT's message without its source file and C++ signature, on one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    prefix = _ORT_PREFIX.match(text)
    if prefix:
        text = text[prefix.end() :]
        location = _SOURCE_LOCATION.match(text)
        if location:
            text = _skip_signature(text[location.end() :])
        text = f"{prefix.group(1)}: {text}"
    return text if len(text) <= 400 else text[:397] + "..."


def _skip_signature(text: str) -> str:
    """Drop a leading ``ns::function(args...)`` (balanced parentheses) from ``text``."""
    start = text.find("(")
    if start <= 0 or " " in text[:start]:
        return text
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return text[index + 1 :].strip()
    return text


def _is_unsupported(exc: BaseException) -> bool:
    """True if ORT refused for want of support (version, kernel), not for a model error."""
    text = str(exc)
    return type(exc).__name__ == "NotImplemented" or any(
        marker in text
        for marker in ("Unsupported model IR version", "opset", "NOT_IMPLEMENTED", "not supported")
    )


# --------------------------------------------------------------------------- verifying


def verify_models(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    options: VerifyOptions = VerifyOptions(),
    *,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> Verification:
    """Run both model files on ``options.runs`` generated input sets and compare outputs
    (in this process: :func:`qlrewrite.verify.verify_child.verify_in_child` survives ONNX Runtime
    crashing).
    ``on_phase`` hears "original" and "rewritten" before each model is loaded."""
    ort = require_onnxruntime()
    result = Verification(
        UNVERIFIABLE,
        options.runs,
        options.seed,
        options.tolerance,
        bound=options.bound,
        runtime=f"ONNX Runtime {ort.__version__}",
    )
    rng = np.random.default_rng(options.seed)
    feeds = [generate_inputs(specs, rng) for _ in range(options.runs)]
    on_phase("original")
    expected = _run_model(ort, Path(original), feeds, options.probes)
    if isinstance(expected, _RunFailure):
        _original_failed(result, expected)
        return result
    on_phase("rewritten")
    actual = _run_model(ort, Path(rewritten), feeds, options.probes)
    if isinstance(actual, _RunFailure):
        _rewritten_failed(result, actual)
        return result
    result.probes = _probed([p for _, p in expected], [p for _, p in actual])
    result.outputs = _compare_runs([o for o, _ in expected], [o for o, _ in actual])
    if all(o.exact for o in result.outputs):
        result.status = EXACT
    elif all(o.within(options.tolerance, options.bound) for o in result.outputs):
        result.status = WITHIN_TOLERANCE
    else:
        result.status = MISMATCH
    return result


#: One run's graph outputs and probe values.
_Outputs = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


def _probed(
    expected: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, float]:
    """The largest difference at each probe both runs have (inf where the type or shape
    differs)."""
    found: dict[str, float] = {}
    for before, after in zip(expected, actual, strict=True):
        for name in before.keys() & after.keys():
            verdict = compare_arrays(name, before[name], after[name])
            found[name] = max(found.get(name, 0.0), verdict.max_abs)
    return found


@dataclasses.dataclass(frozen=True)
class _RunFailure:
    """Why a model gave no outputs: ONNX Runtime could not ``load`` it, it failed to
    ``run``, or an ``output`` cannot be compared (not a tensor)."""

    stage: Literal["load", "run", "output"]
    error: Exception


def _run_model(
    ort: Any,
    path: Path,
    feeds: Sequence[Mapping[str, np.ndarray]],
    probes: Sequence[str] = (),
) -> list[_Outputs] | _RunFailure:
    """The model's outputs (and probe values) on every input set, or why there are none."""
    try:
        session, added = _session(ort, path, probes)
    except Exception as exc:
        return _RunFailure("load", exc)
    try:
        return [_split(_run(ort, session, f), added, probes) for f in feeds]
    except Unverifiable as exc:
        return _RunFailure("output", exc)
    except Exception as exc:
        return _RunFailure("run", exc)
    finally:
        del session


def _original_failed(result: Verification, failure: _RunFailure) -> None:
    """The original model gave no outputs: unverifiable, and why."""
    why = _first_line(failure.error)
    if failure.stage == "load":
        result.reason = f"ONNX Runtime cannot load the original model ({why})"
    elif failure.stage == "run":
        result.reason = f"the original model fails in ONNX Runtime on generated inputs ({why})"
    else:
        result.reason = str(failure.error)


def _rewritten_failed(result: Verification, failure: _RunFailure) -> None:
    """The rewritten model gave no outputs: unverifiable when ONNX Runtime lacks support
    or an output is not a tensor, a mismatch when it rejects or fails on the model."""
    why = _first_line(failure.error)
    if failure.stage == "output":
        result.reason = str(failure.error)
    elif failure.stage == "load" and _is_unsupported(failure.error):
        result.reason = f"ONNX Runtime cannot load the rewritten model ({why})"
    elif failure.stage == "load":
        result.status = MISMATCH
        result.reason = f"ONNX Runtime rejects the rewritten model ({why})"
    else:
        result.status = MISMATCH
        result.reason = f"the rewritten model fails in ONNX Runtime ({why})"


def _compare_runs(
    expected: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]]
) -> list[OutputVerdict]:
    verdicts: dict[str, OutputVerdict] = {}
    for before, after in zip(expected, actual, strict=True):
        for name, value in before.items():
            if name in after:
                verdict = compare_arrays(name, value, after[name])
            else:
                verdict = OutputVerdict(
                    name,
                    exact=False,
                    elements=int(value.size),
                    max_abs=float("inf"),
                    problem="missing from the rewritten model",
                )
            if name in verdicts:
                verdicts[name].merge(verdict)
            else:
                verdicts[name] = verdict
    return list(verdicts.values())


class Verifier:
    """The ``before_commit`` hook of :func:`qlrewrite.io.model_io.save` that verifies a rewrite.

    Built before the passes run, so usage errors (no ONNX Runtime, unknown dims) come first.
    Called with the staged rewritten model; raises VerificationFailed unless it passes, so a
    model that fails verification is never written. ``result`` keeps the verification.
    """

    def __init__(
        self,
        original: str | os.PathLike,
        model: ir.Model,
        options: VerifyOptions,
        *,
        run: Callable[..., Verification] = verify_models,
    ):
        require_onnxruntime()
        self.original = Path(original)
        self.options = options
        self._run = run  # verify_models, or a runner in another process
        self.result: Verification | None = None
        #: Given the differences measured at ``options.probes``: the bound they allow and
        #: the probes that exceed what their inputs allow (:meth:`expect_measured`).
        self._refine: Callable[[Mapping[str, float]], tuple[Bound, list[str]]] | None = None
        self._unprobed = options.bound  # the bounds of rewrites not re-checked on probes
        try:
            self.specs: list[InputSpec] | None = input_specs(model, options.input_shapes)
            self._reason = ""
        except Unverifiable as exc:
            self.specs, self._reason = None, str(exc)

    def expect_differences(self, results: Sequence[ir.passes.PassResult]) -> None:
        """Take the :class:`Bound` (``verify_bound``) of pass results whose rewrite ONNX
        Runtime does not compute bit-identically, joined (unless ``--verify-tolerance`` is
        given: the user's tolerance wins)."""
        if self.options.tolerance is not None:
            return
        bound = self.options.bound
        for result in results:
            stated = getattr(result, "verify_bound", None)
            if isinstance(stated, Bound):
                bound = bound.join(stated)
                if not getattr(result, "differences", None):
                    self._unprobed = self._unprobed.join(stated)
        self.options = dataclasses.replace(self.options, bound=bound)

    def expect_measured(
        self,
        probes: Sequence[str],
        refine: Callable[[Mapping[str, float]], tuple[Bound, list[str]]],
    ) -> None:
        """Compare the values named ``probes`` inside both models too, and decide with
        ``refine`` (the bound the measured differences allow, and the probes exceeding
        what their inputs allow) instead of the stated bound of the rewrites that gave
        them (unless ``--verify-tolerance`` is given)."""
        if self.options.tolerance is None and probes:
            self.options = dataclasses.replace(self.options, probes=tuple(probes))
            self._refine = refine

    def __call__(self, staged: Path) -> None:
        if self.specs is None:
            self.result = Verification(
                UNVERIFIABLE,
                self.options.runs,
                self.options.seed,
                self.options.tolerance,
                reason=self._reason,
            )
        else:
            self.result = self._run(self.original, staged, self.specs, self.options)
        if self._refine is not None and self.result.probes and self.result.outputs:
            self._decide_on_probes(self.result, self._refine)
        if not self.result.passed:
            raise VerificationFailed(self.result)

    def _decide_on_probes(
        self, result: Verification, refine: Callable[[Mapping[str, float]], tuple[Bound, list[str]]]
    ) -> None:
        """The status again, from the bound the measured differences allow."""
        measured, violations = refine(result.probes)
        result.bound = self._unprobed.join(measured)
        if violations:
            more = f" and {len(violations) - 3} more" if len(violations) > 3 else ""
            result.status = MISMATCH
            result.reason = (
                "inside the model, "
                + "; ".join(violations[:3])
                + more
                + " (a difference a correct conversion cannot make)"
            )
        elif all(o.exact for o in result.outputs):
            result.status = EXACT
        elif all(o.within(result.tolerance, result.bound) for o in result.outputs):
            result.status = WITHIN_TOLERANCE
        else:
            result.status = MISMATCH
