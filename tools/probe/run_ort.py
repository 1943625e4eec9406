"""Probe runner for ONNX Runtime: load and run each probe model in the onnxruntime of the
python that runs this file (a venv holding only onnxruntime and NumPy; no onnx, no
qlrewrite).

    python run_ort.py MANIFEST.json RESULTS.jsonl [--skip N]

MANIFEST lists the cases (key, model file, feeds). Each case writes one line
``{"start": key}`` before it is tried and one result line after, flushed, so that a case
that aborts the process (ONNX Runtime asserts on some models) is known to the driver, which
records it as a crash and starts again after it (``--skip``). A session is made with the
default options on the CPU provider (as deployed: ONNX Runtime's constant folding leaves
DequantizeLinear alone and folds other nodes with their kernel, so a node without a kernel
still fails), then run once with zero-filled feeds; outputs stay OrtValues (no conversion
to NumPy types it lacks, int4 or float8).

A case with ``compare`` shapes (the QDQ MatMul patterns) is also run, at each of them on
the same seeded inputs, by a session with ORT_DISABLE_ALL, and the outputs compared
(``versus_unoptimized``): the largest difference relative to the largest output, or the
wrong shape, or the error of a run only the optimized session fails; where the driver
saved the ONNX reference evaluator's output, each session's difference to it
(``reference_rel_diff``, ``unoptimized_reference_rel_diff``). A failure at run that
the unoptimized session does not share is classed "optimizer" (a failure at load keeps its
class: the model is refused whatever the inputs; ``unoptimized`` records whether an
ORT_DISABLE_ALL session loads and runs it: "runs", or its error). A case with a
``folded`` model (the pattern with its weight folded to float) also runs that in the
default session, its optimized graph saved, compared with the unfolded model's
ORT_DISABLE_ALL output (``folded``).
"""

from __future__ import annotations

import platform
import sys

import numpy as np
import onnxruntime as ort
from protocol import rel_diff, seeded_input, serve


def classify(message: str) -> str:
    """Why a load or a run failed, from ONNX Runtime's message: "ir" (IR version too new),
    "opset" (opset too new), "kernel" (no kernel for the node as typed), "type" (a type
    the runtime refuses in the graph) or "other"."""
    text = message.lower()
    if "ir version" in text:
        return "ir"
    if "opset" in text and (
        "not supported" in text
        or "under development" in text
        or "support for" in text
        or "guarantee" in text
    ):
        return "opset"
    if "could not find an implementation" in text or "not_implemented" in text:
        return "kernel"
    if "type" in text and ("error" in text or "invalid" in text or "unsupported" in text):
        return "type"
    return "other"


def _line(text: object) -> str:
    first = str(text).strip().splitlines()
    return (first[0] if first else "")[:1500]


def _unoptimized(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _versus(
    session: ort.InferenceSession,
    reference: ort.InferenceSession,
    shape: list,
    onnx_reference: str | None = None,
) -> dict:
    """One comparison of the optimized and unoptimized sessions' output at ``shape`` (and,
    given the ONNX reference evaluator's output saved by the driver, of each with it)."""
    feed = {"a": seeded_input(shape)}
    result: dict = {"rows": shape[0]}
    try:
        expected = reference.run(None, feed)[0]
    except Exception as exc:
        result["unoptimized_error"] = _line(exc)
        return result
    try:
        got = session.run(None, feed)[0]
    except Exception as exc:
        result["error"] = _line(exc)
        return result
    if got.shape != expected.shape:
        result["shape"] = [list(got.shape), list(expected.shape)]
        return result
    largest = float(np.abs(expected).max())
    result["max_abs_diff"] = float(np.abs(got - expected).max())
    result["max_rel_diff"] = result["max_abs_diff"] / largest if largest else 0.0
    if onnx_reference is not None:
        onnx_output = np.load(onnx_reference)
        if onnx_output.shape == got.shape:
            result["reference_rel_diff"] = rel_diff(got, onnx_output)
            result["unoptimized_reference_rel_diff"] = rel_diff(expected, onnx_output)
    return result


def _compare(case: dict, session: ort.InferenceSession, result: dict) -> None:
    """``versus_unoptimized`` of a case with compare shapes; its failure at run is classed
    "optimizer" when the unoptimized session runs every shape the optimized one fails."""
    try:
        reference = _unoptimized(case["file"])
    except Exception as exc:
        result["unoptimized_error"] = _line(exc)
        return
    references = case.get("reference") or [None] * len(case["compare"])
    result["versus_unoptimized"] = [
        _versus(session, reference, shape, onnx_reference)
        for shape, onnx_reference in zip(case["compare"], references, strict=True)
    ]
    if not result["run"] and all("error" in v for v in result["versus_unoptimized"]):
        result["reason"] = "optimizer"


def _folded(case: dict) -> dict:
    """The pattern with its weight folded to float (``case["folded"]``): loaded by the
    default session (its optimized graph saved: the kernels formed) and compared at each
    compare shape with the unfolded model's ORT_DISABLE_ALL output."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.optimized_model_filepath = case["folded_optimized"]
    try:
        session = ort.InferenceSession(case["folded"], options, providers=["CPUExecutionProvider"])
        reference = _unoptimized(case["file"])
    except Exception as exc:
        return {"load": False, "error": _line(exc)}
    return {
        "load": True,
        "versus_unoptimized": [_versus(session, reference, s) for s in case["compare"]],
    }


def _unoptimized_outcome(case: dict) -> str:
    """Whether an ORT_DISABLE_ALL session loads and runs a compared case the default
    session refused at load: "runs", else its error."""
    try:
        session = _unoptimized(case["file"])
        session.run(None, {"a": seeded_input(case["compare"][0])})
    except Exception as exc:
        return _line(exc)
    return "runs"


def run_case(case: dict) -> dict:
    result = _run_case(case)
    if case.get("compare") and "session" in result:
        _compare(case, result["session"], result)
    result.pop("session", None)
    if case.get("folded") and case.get("compare"):
        result["folded"] = _folded(case)
    return result


def _run_case(case: dict) -> dict:
    """The result of one case: load and run outcomes, with the error and its class."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if case.get("optimized"):  # a pattern: keep the optimized graph (which kernels formed)
        options.optimized_model_filepath = case["optimized"]
    result: dict = {"key": case["key"], "load": False, "run": False}
    try:
        session = ort.InferenceSession(case["file"], options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        result.update(error=_line(exc), reason=classify(str(exc)))
        if case.get("compare"):
            result["unoptimized"] = _unoptimized_outcome(case)
        return result
    result["load"] = True
    feeds = {
        name: ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype=dtype))
        for name, dtype, shape in case["feeds"]
    }
    result["session"] = session
    try:
        session.run_with_ort_values(None, feeds)
    except Exception as exc:
        result.update(error=_line(exc), reason=classify(str(exc)))
        return result
    result["run"] = True
    return result


def main(argv: list[str]) -> int:
    meta = {
        "runtime": "onnxruntime",
        "version": ort.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    return serve(argv, meta, run_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
