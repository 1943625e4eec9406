"""The code run inside a runtime release's own environment: load each model, run it on
the given inputs, time it, name the kernels the runtime formed.

It needs only NumPy and the runtime (it never imports qlrewrite: the environment holds
neither). Started as ``python -I release_child.py TASK_FOLDER``: reads ``task.json``
(runtime, model paths, runs) and ``inputs.npz`` there, writes ``outputs-<i>.npz`` and
``answer.json`` (release, and per model: loaded, error, kernels, latency in ms). The
parent reads them bounded and checked, and believes nothing else.
"""

import json
import os
import statistics
import sys
import time


def _ort(path, feeds, runs, folder):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(folder, "profile")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    values, times = _timed(lambda: session.run(outputs, feeds), runs)
    kernels = _profiled_kernels(session.end_profiling())
    return dict(zip(outputs, values, strict=True)), kernels, times


def _profiled_kernels(profile):
    """Per op type, the nodes ORT ran (its profile's kernel events)."""
    import json as _json

    with open(profile) as handle:
        events = _json.load(handle)
    nodes = {}
    for event in events:
        args = event.get("args") or {}
        name = str(event.get("name", ""))
        if event.get("cat") == "Node" and "op_name" in args and name.endswith("_kernel_time"):
            nodes[name] = args["op_name"]
    counts = {}
    for op in nodes.values():
        counts[op] = counts.get(op, 0) + 1
    return counts


def _openvino(path, feeds, runs, folder):
    import openvino

    compiled = openvino.Core().compile_model(path, "CPU")
    names = [port.get_any_name() for port in compiled.outputs]

    def run():
        results = compiled(feeds)
        return [results[port] for port in compiled.outputs]

    values, times = _timed(run, runs)
    counts = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind = str(getattr(info["layerType"], "value", "")) if "layerType" in info else ""
        kind = kind or op.get_type_name()
        counts[kind] = counts.get(kind, 0) + 1
    return dict(zip(names, values, strict=True)), counts, times


def _timed(run, runs):
    times = []
    values = None
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        values = run()
        times.append((time.perf_counter() - start) * 1000)
    return values, times


def _release(runtime):
    if runtime == "ort":
        import onnxruntime

        return onnxruntime.__version__
    import openvino

    return openvino.__version__


def main(folder):
    import numpy as np

    with open(os.path.join(folder, "task.json")) as handle:
        task = json.load(handle)
    with np.load(os.path.join(folder, "inputs.npz"), allow_pickle=False) as arrays:
        feeds = {name: arrays[name] for name in arrays.files}
    run_model = _ort if task["runtime"] == "ort" else _openvino
    answer = {"release": str(_release(task["runtime"])), "models": []}
    for index, path in enumerate(task["models"]):
        entry = {"loaded": False, "error": None, "kernels": {}, "latency_ms": None}
        try:
            values, kernels, times = run_model(path, feeds, task["runs"], folder)
            entry.update(loaded=True, kernels=kernels, latency_ms=statistics.median(times))
            arrays = {n: np.asarray(v) for n, v in values.items()}
            np.savez(os.path.join(folder, f"outputs-{index}.npz"), **arrays)
        except Exception as exc:  # the runtime refused the model: said, not fatal
            lines = [line for line in str(exc).splitlines() if line.strip()] or [""]
            entry["error"] = f"{type(exc).__name__}: {lines[0][:300]}"
        answer["models"].append(entry)
    with open(os.path.join(folder, "answer.json"), "w") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    main(sys.argv[1])
