"""`qlrewrite check` against its peers: speed and memory, then what each one detects.

Run by hand: ``python benchmarks/check.py [FOLDER] [--repeat N] [--skip-speed]
[--skip-detection] [--no-ort-quantizer]``.

1. Speed and memory on ``matmul_chain`` (340 MiB of external data; ``qlrewrite check``
   also of the same model with its weights inside the .onnx file): each tool in a fresh
   process, best wall time of N runs (interpreter start and imports included) and peak RSS
   (``wait4`` of that process, forked by a small launcher): ``qlrewrite check`` (installed
   entry point), the in-process check alone,
   ``onnx.checker.check_model(path, full_check=True)`` and the creation of an ONNX Runtime
   InferenceSession.
2. Detection on a corpus generated in code: for every rule case of
   ``tests/rules/test_rules_cases.py`` and every version it applies to, the model that breaks
   it (invalid: error rules; questionable: warning rules) and the one that keeps it
   (valid), plus ONNX's own backend Q/DQ test models and the models ONNX Runtime's
   quantizer writes (valid). Peers: ``onnx.checker`` (full_check), ONNX Runtime (load and
   run on the CPU provider, no optimizations) and ONNX's reference evaluator (run). A peer
   "flags" a model when it raises; qlrewrite flags it on an error finding (questionable
   models: any finding).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT / "tests" / "rules")]

from bench_models import matmul_chain, matmul_chain_inline  # noqa: E402

# --------------------------------------------------------------------------- speed


# A small launcher forks and execs the tool, then reports the tool's own peak: wait4 on a
# process this script started directly would report this script's peak when that was
# higher (ru_maxrss survives exec on Linux).
_LAUNCHER = """import os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
sys.stderr.write(f"\\n{wall} {usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _measure(argv: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    stderr, _, usage = done.stderr.rpartition("\n")
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:3]} failed ({done.returncode}): {stderr.strip()[-300:]}")
    seconds, peak_kib, cpu = usage.split()
    return float(seconds), int(peak_kib) / 1024, float(cpu)


def _speed(folder: Path, repeat: int) -> None:
    path = str(matmul_chain(folder))
    inline = str(matmul_chain_inline(folder))  # the same model, weights inside the .onnx
    data = Path(path + ".data").stat().st_size
    print(f"model: {path} ({data / 2**20:.0f} MiB external data), best of {repeat} runs\n")
    exe = str(Path(sys.executable).parent / "qlrewrite")
    py = sys.executable
    tools: dict[str, list[str]] = {
        "qlrewrite check (CLI)": [exe, "check", path],
        "qlrewrite check (CLI), weights inline": [exe, "check", inline],
        "qlrewrite.check() alone": [
            py,
            "-c",
            (
                "import sys, time, qlrewrite.checking.checker as c; t = time.perf_counter(); "
                f"r = c.check({path!r}); sys.stderr.write(f'{{time.perf_counter() - t:.4f}}'); "
                "sys.exit(1 if r.load_error or r.errors else 0)"
            ),
        ],
        "import qlrewrite.cli (no check)": [py, "-c", "import qlrewrite.cli"],
        "onnx.checker full_check": [
            py,
            "-c",
            (f"import onnx; onnx.checker.check_model({path!r}, full_check=True)"),
        ],
        "ORT InferenceSession()": [
            py,
            "-c",
            (
                "import onnxruntime as ort; "
                f"ort.InferenceSession({path!r}, providers=['CPUExecutionProvider'])"
            ),
        ],
    }
    results: dict[str, tuple[float, float, float]] = {}
    for name, argv in tools.items():
        runs = [_measure(argv) for _ in range(repeat)]
        results[name] = (min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs))
    ours_s, ours_mb, _ = results["qlrewrite check (CLI)"]
    print("| tool | best wall s | best CPU s | peak RSS MiB | wall vs ours | RSS vs ours |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (seconds, mb, cpu) in results.items():
        print(
            f"| {name} | {seconds:.2f} | {cpu:.2f} | {mb:.0f} | {seconds / ours_s:.2f}x | "
            f"{mb / ours_mb:.2f}x |"
        )
    print(f"\nload average during the runs: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    inner = subprocess.run(
        tools["qlrewrite.check() alone"], capture_output=True, text=True, check=False
    ).stderr
    print(f"\nqlrewrite.check() itself, imports excluded: {float(inner) * 1000:.0f} ms")


# --------------------------------------------------------------------------- corpus


def _corpus(ort_quantizer: bool) -> Iterator[tuple[str, str, str, onnx.ModelProto, dict]]:  # noqa: C901
    """(kind, code, label, model, feeds): kind is invalid | questionable | valid."""
    from qdq_models import qdq_model
    from test_rules_cases import CASES

    from qlrewrite.rules import RULES

    seen: set[bytes] = set()

    def fresh(proto: onnx.ModelProto) -> bool:
        key = proto.SerializeToString(deterministic=True)
        if key in seen:
            return False
        seen.add(key)
        return True

    for case in CASES:
        kind = "invalid" if RULES[case.code].severity == "error" else "questionable"
        for version in case.versions:
            bad = qdq_model(**case.bad(version))
            if fresh(bad):
                yield kind, case.code, f"{case.code}-{case.label}-{version}", bad, {}
            good = qdq_model(**case.good(version))
            if fresh(good):
                yield "valid", "", f"good:{case.code}-{case.label}-{version}", good, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        backend = collect_testcases("QuantizeLinear") + collect_testcases("DequantizeLinear")
    for case in backend:
        inputs = case.data_sets[0][0] if case.data_sets else []
        feeds = {
            info.name: (numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v)
            for info, v in zip(case.model.graph.input, inputs, strict=False)
        }
        feeds = {k: v for k, v in feeds.items() if isinstance(v, np.ndarray)}
        if fresh(case.model):
            yield "valid", "", f"backend:{case.name}", case.model, feeds
    if ort_quantizer:
        from ort_quantized import CONFIGS, INVALID_CONFIGS, inputs_for, model_name_of, quantized

        for config in CONFIGS:
            try:
                proto = quantized(config)
            except Exception as exc:  # a configuration this ORT build cannot quantize
                print(f"  (skipped ORT quantizer config {config}: {type(exc).__name__})")
                continue
            feeds = inputs_for(model_name_of(config))
            if config in INVALID_CONFIGS:  # DQ with `axis` at opset 12 (QL201)
                yield "invalid", "QL201", f"ort-quantizer:{config}", proto, feeds
            else:
                yield "valid", "", f"ort-quantizer:{config}", proto, feeds


def _as_initializers(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Every graph input turned into an initializer: its feed, else zeros of its type.

    Runtimes then need no feeds of exotic types (int4, float8, ...) from Python.
    """
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    known = {t.name for t in model.graph.initializer}
    for info in model.graph.input:
        if info.name in known:
            continue
        tensor_type = info.type.tensor_type
        if info.name in feeds:
            value = np.asarray(feeds[info.name])
            try:
                tensor = numpy_helper.from_array(value, info.name)
            except Exception:
                tensor = helper.make_tensor(
                    info.name, tensor_type.elem_type, value.shape, value.ravel().tolist()
                )
        else:
            dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
            count = int(np.prod(dims)) if dims else 1
            tensor = helper.make_tensor(info.name, tensor_type.elem_type, dims, [0] * count)
        model.graph.initializer.append(tensor)
    del model.graph.input[:]
    return model


def _flags_checker(proto: onnx.ModelProto, runnable: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception:
        return True
    return False


def _flags_ort(proto: onnx.ModelProto, runnable: onnx.ModelProto) -> bool:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(
            runnable.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        session.run(None, {})
    except Exception:
        return True
    return False


def _flags_reference(proto: onnx.ModelProto, runnable: onnx.ModelProto) -> bool:
    from onnx.reference import ReferenceEvaluator

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ReferenceEvaluator(runnable).run(None, {})
    except Exception:
        return True
    return False


def _detection(ort_quantizer: bool) -> None:
    from qdq_models import load_ir

    from qlrewrite.checking.checker import check_model

    def flags_qlrewrite(proto: onnx.ModelProto, runnable: onnx.ModelProto) -> bool:
        return bool(check_model(load_ir(proto)).errors)

    peers: dict[str, Callable[[onnx.ModelProto, onnx.ModelProto], bool]] = {
        "qlrewrite check": flags_qlrewrite,
        "onnx.checker full_check": _flags_checker,
        "ORT load + run": _flags_ort,
        "reference evaluator run": _flags_reference,
    }
    records: list[tuple[str, str, str, int, dict[str, bool]]] = []
    seconds: Counter[str] = Counter()
    for kind, code, label, proto, feeds in _corpus(ort_quantizer):
        runnable = _as_initializers(proto, feeds)
        hits = {}
        for name, flags in peers.items():
            start = time.perf_counter()
            hits[name] = flags(proto, runnable)
            if name == "qlrewrite check" and kind == "questionable":
                hits[name] = bool(check_model(load_ir(proto)).findings)
            seconds[name] += time.perf_counter() - start
        records.append((kind, code, label, proto.ir_version, hits))
    _detection_table(records, list(peers), seconds, "the whole corpus")
    import onnxruntime as ort

    max_ir = 13  # ONNX Runtime 1.31 refuses IR 14 (opset 28) models when loading them
    loadable = [r for r in records if r[3] <= max_ir]
    _detection_table(loadable, list(peers), None, f"IR <= {max_ir} only (ORT {ort.__version__})")
    print("\nper rule (models that break it / caught by each tool; whole corpus):\n")
    print("| rule | models | " + " | ".join(peers) + " |")
    print("|---|---:|" + "---:|" * len(peers))
    by_code: dict[str, Counter[str]] = defaultdict(Counter)
    for kind, code, _, _, hits in records:
        if kind != "valid":
            by_code[code]["models"] += 1
            by_code[code].update(name for name, hit in hits.items() if hit)
    for code in sorted(by_code):
        row = by_code[code]
        print(f"| {code} | {row['models']} | " + " | ".join(str(row[n]) for n in peers) + " |")
    odd = [
        label for kind, _, label, _, hits in records if (kind == "valid") == hits["qlrewrite check"]
    ]
    if odd:
        print("\nqlrewrite check disagrees with the corpus on:", ", ".join(odd))
    else:
        print("\nqlrewrite check: every violation caught, no false alarm")


def _detection_table(
    records: list[tuple[str, str, str, int, dict[str, bool]]],
    peers: list[str],
    seconds: Counter[str] | None,
    title: str,
) -> None:
    totals = Counter(kind for kind, *_ in records)
    flagged: dict[str, Counter[str]] = defaultdict(Counter)
    for kind, _, _, _, hits in records:
        for name, hit in hits.items():
            flagged[name][kind] += hit
    print(
        f"\n{title}: {totals['invalid']} invalid (error rules), {totals['questionable']} "
        f"questionable (warning rules), {totals['valid']} valid models\n"
    )
    tail = " seconds |" if seconds else ""
    print("| tool | invalid caught | questionable flagged | false alarms on valid |" + tail)
    print("|---|---:|---:|---:|" + ("---:|" if seconds else ""))
    for name in peers:
        counts = flagged[name]
        print(
            f"| {name} | {counts['invalid']}/{totals['invalid']} | "
            f"{counts['questionable']}/{totals['questionable']} | "
            f"{counts['valid']}/{totals['valid']} |"
            + (f" {seconds[name]:.1f} |" if seconds else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="/tmp/qlrewrite-bench")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-detection", action="store_true")
    parser.add_argument("--no-ort-quantizer", action="store_true")
    args = parser.parse_args()
    print(f"onnx {onnx.__version__}, python {sys.version.split()[0]}\n")
    if not args.skip_speed:
        _speed(Path(args.folder), args.repeat)
        print()
    if not args.skip_detection:
        _detection(not args.no_ort_quantizer)


if __name__ == "__main__":
    main()
