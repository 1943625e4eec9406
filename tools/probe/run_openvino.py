"""Probe runner for OpenVINO: read each probe model with OpenVINO's ONNX frontend, compile it
for the CPU plugin and run it once, in the python that runs this file (a venv holding only
openvino and NumPy).

    python run_openvino.py MANIFEST.json RESULTS.jsonl [--skip N]

Same protocol as run_ort.py (a ``start`` line before each case, a result line after). A
result also lists the compiled model's execution graph as ``layerType:runtimePrecision``
pairs (``runtime_ops``): a quantized node whose graph holds no integer-precision layer was
folded to float (its weights decompressed once at compile time, the math in float). A
case with ``compare`` shapes and the ONNX reference evaluator's outputs (saved by the
driver) is also run on the seeded input at each shape and compared with them
(``versus_reference``).
"""

from __future__ import annotations

import platform
import re
import sys

import numpy as np
import openvino as ov
from protocol import rel_diff, seeded_input, serve

_CORE = ov.Core()


def classify(message: str) -> str:
    """Why OpenVINO failed: "opset", "kernel" (no conversion or no CPU implementation),
    "type" or "other"."""
    text = message.lower()
    # "opset" alone, not OpenVINO's own operator names ("opset1::FakeQuantize")
    if re.search(r"opset(?![\d:])", text) or ("version" in text and "not supported" in text):
        return "opset"
    if "no conversion rule" in text or "not supported" in text or "unsupported" in text:
        return "kernel"
    if "type" in text or "element" in text or "precision" in text:
        return "type"
    return "other"


def _line(text: object) -> str:
    first = str(text).strip().splitlines()
    return " ".join(first)[:1500]


def _value(info: object, name: str) -> str | None:
    if name not in info:
        return None
    value = info[name]
    return str(getattr(value, "value", value))


def _runtime_ops(compiled: object) -> list[str]:
    ops = set()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = _value(info, "layerType") or op.get_type_name()
        precision = _value(info, "runtimePrecision") or "?"
        if layer not in ("Input", "Output", "Parameter", "Result"):
            ops.add(f"{layer}:{precision}")
    return sorted(ops)


def _folded(case: dict) -> dict:
    """The execution graph OpenVINO compiles from the pattern with its weight folded."""
    try:
        return {
            "load": True,
            "runtime_ops": _runtime_ops(_CORE.compile_model(case["folded"], "CPU")),
        }
    except Exception as exc:
        return {"load": False, "error": _line(exc)}


def run_case(case: dict) -> dict:
    """The result of one case: read + compile, then one inference (and the folded twin's
    execution graph, ``folded``)."""
    result = _run_case(case)
    if case.get("folded"):
        result["folded"] = _folded(case)
    return result


def _run_case(case: dict) -> dict:
    result: dict = {"key": case["key"], "load": False, "run": False}
    try:
        model = _CORE.read_model(case["file"])
        compiled = _CORE.compile_model(model, "CPU")
    except Exception as exc:
        result.update(error=_line(exc), reason=classify(str(exc)))
        return result
    result["load"] = True
    result["runtime_ops"] = _runtime_ops(compiled)
    feeds = {name: np.zeros(shape, dtype=dtype) for name, dtype, shape in case["feeds"]}
    try:
        compiled(feeds)
    except Exception as exc:
        result.update(error=_line(exc), reason=classify(str(exc)))
        return result
    result["run"] = True
    if case.get("reference"):
        result["versus_reference"] = [
            _versus_reference(compiled, shape, path)
            for shape, path in zip(case["compare"], case["reference"], strict=True)
        ]
    return result


def _versus_reference(compiled: object, shape: list, path: str) -> dict:
    """The compiled model's output at ``shape`` on the seeded input against the ONNX
    reference evaluator's (saved by the driver): the largest relative difference, another
    shape, or the run's error."""
    entry: dict = {"rows": shape[0]}
    try:
        got = next(iter(compiled({"a": seeded_input(shape)}).values()))
    except Exception as exc:
        entry["error"] = _line(exc)
        return entry
    expected = np.load(path)
    if got.shape != expected.shape:
        entry["shape"] = [list(got.shape), list(expected.shape)]
    else:
        entry["max_rel_diff"] = rel_diff(got, expected)
    return entry


def main(argv: list[str]) -> int:
    meta = {
        "runtime": "openvino",
        "version": ov.__version__.split("-")[0],
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    return serve(argv, meta, run_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
