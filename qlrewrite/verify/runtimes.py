"""Run a model in ONNX Runtime, the ONNX reference evaluator or OpenVINO (CPU); with ORT,
also its intermediate tensors.

Each runtime is imported only when it runs; one that is not installed is skipped with
the reason (:func:`missing`). ONNX Runtime runs in its default session (what users
deploy); intermediate tensors are read with its optimizations off (fused away, a tensor
would not exist), by adding their names as graph outputs to a copy of the model.
:func:`compare_in` and :func:`first_divergence` are called in the verify child
(:func:`qlrewrite.verify.verify_child.call_in_child`): a runtime may crash on a model.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from qlrewrite.io import reading
from qlrewrite.targets.runtimes import COMPARED
from qlrewrite.targets.runtimes import RUNTIMES as RECORDS
from qlrewrite.verify.deployed import OutputDifference, default_session, differences
from qlrewrite.verify.verify import (
    OutputVerdict,
    compare_arrays,
    require_onnxruntime,
    run_session,
)

__all__ = [
    "RUNTIMES",
    "Divergence",
    "compare_in",
    "first_divergence",
    "label",
    "missing",
    "run_model",
]

#: Runtime name -> (module that must be importable, what to install), from each runtime's
#: record (:mod:`qlrewrite.targets.runtimes`).
RUNTIMES = {key: (str(RECORDS[key].module), RECORDS[key].install) for key in COMPARED}


def missing(runtime: str) -> str | None:
    """Why ``runtime`` cannot run here (not installed, and how to install it), or None."""
    module, install = RUNTIMES[runtime]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{module} is not installed ({install})"


def label(runtime: str) -> str:
    """What computes the outputs, with its release."""
    if runtime == "ort":
        ort = require_onnxruntime()
        return f"ONNX Runtime {ort.__version__} CPU, default session"
    if runtime == "reference":
        return f"ONNX reference evaluator (onnx {onnx.__version__})"
    import openvino

    return f"OpenVINO {openvino.__version__} CPU"


def run_model(
    runtime: str, path: str | os.PathLike, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The model's outputs by name in ``runtime``."""
    return _RUNNERS[runtime](Path(path), feeds)


def _run_ort(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    ort = require_onnxruntime()
    return run_session(ort, default_session(ort, path), feeds)


def _run_reference(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    model = _read_model(path)
    onnx.external_data_helper.load_external_data_for_model(model, os.fspath(path.parent))
    names = [o.name for o in model.graph.output]
    try:
        values = ReferenceEvaluator(model).run(None, dict(feeds))
    except RuntimeError as exc:  # its Q/DQ start at opset 19
        if not _NO_QDQ.search(str(exc)):
            raise
        values = ReferenceEvaluator(model, new_ops=_newest_qdq()).run(None, dict(feeds))
    return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}


_NO_QDQ = re.compile(r"No implementation for operator '(De)?[Qq]uantizeLinear' domain ''")


def _newest_qdq() -> list[type]:
    """The reference evaluator's newest QuantizeLinear / DequantizeLinear, in force at
    every opset: it implements them from opset 19 only, and an older model's (opset 10,
    13: 8-bit and int32, per tensor or per axis, no attribute but axis) compute the same
    in the newest version with its defaults."""
    from onnx.reference.ops import op_dequantize_linear as dq
    from onnx.reference.ops import op_quantize_linear as q

    newest_dq = max(
        (c for n, c in vars(dq).items() if n.startswith("DequantizeLinear_")),
        key=lambda c: int(c.__name__.rpartition("_")[2]),
    )
    newest_q = max(
        (c for n, c in vars(q).items() if n.startswith("QuantizeLinear_")),
        key=lambda c: int(c.__name__.rpartition("_")[2]),
    )
    return [
        type("DequantizeLinear", (newest_dq,), {"op_domain": ""}),
        type("QuantizeLinear", (newest_q,), {"op_domain": ""}),
    ]


def _run_openvino(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import openvino

    compiled = openvino.Core().compile_model(os.fspath(path), "CPU")
    results = compiled(dict(feeds))
    return {port.get_any_name(): np.asarray(results[port]) for port in compiled.outputs}


_RUNNERS: dict[str, Callable[[Path, Mapping[str, np.ndarray]], dict[str, np.ndarray]]] = {
    "ort": _run_ort,
    "reference": _run_reference,
    "openvino": _run_openvino,
}


def compare_in(
    runtime: str,
    first: str | os.PathLike,
    second: str | os.PathLike,
    feeds: Mapping[str, np.ndarray],
    *,
    steps: Mapping[str, float] | None = None,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> list[OutputDifference]:
    """Both models' outputs in ``runtime`` on ``feeds``, compared per output (matched by
    name; by position when no name is shared and the counts agree)."""
    on_phase("first")
    expected = run_model(runtime, first, feeds)
    on_phase("second")
    actual = run_model(runtime, second, feeds)
    if not set(expected) & set(actual) and len(expected) == len(actual):
        actual = dict(zip(expected, actual.values(), strict=True))
    return differences(expected, actual, steps or {})


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The intermediate tensors both models name, compared in topological order of the
    first: how many were compared, and the first beyond the tolerance (its difference
    and the first model's node producing it), or None."""

    compared: int
    tensor: OutputDifference | None = None
    node: str | None = None  # "'conv3' (Conv)"
    reason: str | None = None  # why nothing was compared
    #: Every compared tensor, in order: (name, max |difference| / its largest |value|;
    #: None where that is not a number): what ``--plot`` draws.
    by_tensor: list[tuple[str, float | None]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "node": self.node,
            "reason": self.reason,
            "tensor": self.tensor.to_json() if self.tensor else None,
            "by_tensor": [{"name": n, "relative": r} for n, r in self.by_tensor],
        }


def first_divergence(
    first: str | os.PathLike,
    second: str | os.PathLike,
    feeds: Mapping[str, np.ndarray],
    *,
    rtol: float,
    atol: float,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> Divergence:
    """The first tensor, in the first model's topological order, that both models
    produce and that differs beyond ``atol + rtol x`` its largest magnitude, read with
    ONNX Runtime's optimizations off."""
    model_a, model_b = _read_model(Path(first)), _read_model(Path(second))
    produced_b = {o for n in model_b.graph.node for o in n.output if o}
    order = [(o, n) for n in model_a.graph.node for o in n.output if o and o in produced_b]
    names = [o for o, _ in order]
    on_phase("first")
    values_a = _intermediates(Path(first), model_a, names, feeds)
    on_phase("second")
    values_b = _intermediates(Path(second), model_b, names, feeds)
    compared, first, by_tensor = 0, None, []
    for name, node in order:
        if name not in values_a or name not in values_b:
            continue
        verdict = compare_arrays(name, values_a[name], values_b[name])
        difference = OutputDifference.of(verdict, None)
        by_tensor.append((name, difference.relative))
        if first is not None:
            continue  # the first divergence is kept; the rest are drawn by --plot
        compared += 1
        if not _within(verdict, rtol, atol):
            where = f"'{node.name}' ({node.op_type})" if node.name else f"a {node.op_type}"
            first = (difference, where)
    if first is None:
        return Divergence(compared, by_tensor=by_tensor)
    return Divergence(compared, first[0], first[1], by_tensor=by_tensor)


def _read_model(path: Path) -> onnx.ModelProto:
    """The model file (its external data not read), through the one reader."""
    return onnx.load_from_string(reading.read_bytes(path, "model file", reading.MODEL_BYTES))


def _within(verdict: OutputVerdict, rtol: float, atol: float) -> bool:
    """Bit-identical, or within a limit above zero (a zero limit accepts no difference)."""
    if verdict.exact:
        return True
    limit = atol + rtol * verdict.max_ref
    return verdict.problem is None and limit > 0 and verdict.max_abs <= limit


def _intermediates(
    path: Path, model: onnx.ModelProto, names: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``names`` as ORT computes them (optimizations off), read by adding them as graph
    outputs to a copy (its external data read from the model's folder)."""
    ort = require_onnxruntime()
    declared = {o.name for o in model.graph.output}
    for name in names:
        if name not in declared:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry(
        "session.model_external_initializers_file_folder_path", os.fspath(path.parent)
    )
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return run_session(ort, session, feeds)
