"""Benchmark `qlrewrite fold` against ONNX Runtime's and onnxscript's constant folding.

Run by hand: ``python benchmarks/fold.py [--rounds N] [--folder DIR] [--skip onnxscript]``.

Model: ``bench_models.matmul_chain`` (16 4096 x 4096 weights: 8 int8 per-axis DQ, 8 int4
blocked-32 DQ, 2 float -> Q -> DQ; about 340 MiB in, 1.15 GiB out, external data).
Each tool runs in a fresh subprocess, alternating tool by tool for ``--rounds`` rounds;
wall time is measured from outside (interpreter start-up and imports included), peak RSS
is the child's own (``VmHWM``). Peers:

- ``ort``: ONNX Runtime's offline optimizer (``session.disable_quant_qdq=1``,
  ORT_ENABLE_BASIC, ``optimized_model_filepath`` with an external initializers file);
- ``onnxscript``: ``onnxscript.optimizer.optimize`` with Q/DQ forced through ``should_fold``
  (they are on its default blacklist) and no size limits, then ``ir.save``;
- ``io-floor``: a plain ``ir.load`` + ``ir.save`` of qlrewrite's folded output (the cost
  of writing the output at all; no fsync, unlike qlrewrite's atomic save);
- ``fsync-floor``: as many bytes as qlrewrite's output written in 64 MiB chunks and
  fsynced (the disk's floor for an atomic write; this disk varies 1.1-4.2 s per GB
  from run to run, so the ratio is taken per round).

Afterwards every MatMul weight of qlrewrite's output is compared bit for bit with ORT's
optimized model. Targets: >= 3x faster than ORT, peak RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TOOLS = ("qlrewrite", "ort", "onnxscript", "io-floor", "fsync-floor")
TARGET_SPEEDUP = 3.0
TARGET_RSS_MB = 300


# --------------------------------------------------------------------------- workers


def _work_qlrewrite(source: Path, target: Path) -> None:
    from qlrewrite.cli import main

    main(["fold", str(source), "-o", str(target), "-q"], standalone_mode=False)


def _work_ort(source: Path, target: Path) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    options.optimized_model_filepath = str(target)
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", target.name + ".data"
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _work_onnxscript(source: Path, target: Path) -> None:
    import onnx_ir as ir
    from onnxscript.optimizer._optimizer import optimize_ir

    model = ir.load(source)
    optimize_ir(
        model,
        input_size_limit=2**40,
        output_size_limit=2**40,
        should_fold=lambda node: (
            True if node.op_type in ("QuantizeLinear", "DequantizeLinear") else None
        ),
    )
    ir.save(model, target, external_data=target.name + ".data")


def _work_io_floor(source: Path, target: Path) -> None:
    import onnx_ir as ir

    ir.save(ir.load(source), target, external_data=target.name + ".data")


def _work_fsync_floor(source: Path, target: Path) -> None:
    """Write as many bytes as qlrewrite's output (``source``: its .onnx and .data) in 64 MiB
    chunks and fsync: the cost of putting the output on this disk at all."""
    size = sum(p.stat().st_size for p in source.parent.iterdir() if p.is_file())
    chunk = b"\0" * (64 << 20)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        for start in range(0, size, len(chunk)):
            out.write(chunk[: min(len(chunk), size - start)])
        out.flush()
        os.fsync(out.fileno())


WORKERS = {
    "qlrewrite": _work_qlrewrite,
    "ort": _work_ort,
    "onnxscript": _work_onnxscript,
    "io-floor": _work_io_floor,
    "fsync-floor": _work_fsync_floor,
}


def _worker_main(tool: str, source: str, target: str) -> None:
    WORKERS[tool](Path(source), Path(target))
    from bench_models import peak_rss  # the script's folder is on the path

    print(json.dumps({"peak_rss": peak_rss()}))


# --------------------------------------------------------------------------- driver


def _model(folder: Path) -> Path:
    sys.path.insert(0, str(HERE))
    from bench_models import matmul_chain

    path = matmul_chain(folder)
    _declare_output_type(path)
    return path


def _declare_output_type(path: Path) -> None:
    """bench_models leaves the graph output untyped, which onnx.checker rejects: type it."""
    import onnx

    proto = onnx.load_model(path, load_external_data=False)
    output = proto.graph.output[0]
    if not output.type.HasField("tensor_type"):
        size = proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value
        output.CopyFrom(
            onnx.helper.make_tensor_value_info(output.name, onnx.TensorProto.FLOAT, [1, size])
        )
        onnx.save_model(proto, path)


def _matmul_weights(path: Path) -> dict[str, np.ndarray]:
    """The B input of every MatMul (by node name), read from the model's initializers."""
    import onnx_ir as ir

    model = ir.load(path)
    inits = model.graph.initializers
    weights = {}
    for index, node in enumerate(model.graph):
        if node.op_type == "MatMul":
            weight = node.inputs[1]
            assert weight is not None and weight.name in inits, (path, node.name)
            weights[node.name or f"matmul#{index}"] = np.asarray(inits[weight.name].const_value)
    return weights


def _compare_with_ort(ours: Path, theirs: Path) -> str:
    a, b = _matmul_weights(ours), _matmul_weights(theirs)
    if set(a) != set(b):
        return f"different MatMul nodes: {sorted(set(a) ^ set(b))}"
    bad = [n for n in a if a[n].dtype != b[n].dtype or a[n].tobytes() != b[n].tobytes()]
    if bad:
        return f"{len(bad)} of {len(a)} weights differ: {bad}"
    return f"all {len(a)} folded weights bit-identical with ORT's"


def main() -> None:
    """Run every tool in rounds, then print the table and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/qlrewrite-bench-fold"))
    parser.add_argument("--skip", action="append", default=[], choices=TOOLS)
    args = parser.parse_args()
    source = _model(args.folder)
    from bench_models import run_worker  # on the path once _model put it there

    tools = [t for t in TOOLS if t not in args.skip]
    outputs = {t: args.folder / f"out-{t}" / f"{t}.onnx" for t in tools}
    load_before = os.getloadavg()
    results: dict[str, list[tuple[float, int]]] = {t: [] for t in tools}
    for round_index in range(args.rounds):
        for tool in tools:
            floor = tool in ("io-floor", "fsync-floor")
            source_of = outputs["qlrewrite"] if floor else source
            if floor and not outputs["qlrewrite"].exists():
                run_worker(__file__, "qlrewrite", source, outputs["qlrewrite"])
            seconds, rss = run_worker(__file__, tool, source_of, outputs[tool])
            results[tool].append((seconds, rss))
            print(f"round {round_index + 1} {tool:<10} {seconds:6.2f} s {rss / 2**20:7.0f} MiB")
    _report(results, source, load_before)
    _ratios(results, tools, outputs)


def _report(results: dict[str, list[tuple[float, int]]], source: Path, load_before: tuple) -> None:
    """The table: best and median wall, peak RSS, time against ORT."""
    tools = list(results)
    load_after = os.getloadavg()
    best = {t: min(s for s, _ in r) for t, r in results.items()}
    rss = {t: min(m for _, m in r) for t, r in results.items()}
    print()
    print(f"model: {source} ({_size(source)} in)")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (2 cores)")
    print()
    print("| tool | best wall s | median wall s | peak RSS MiB (best) | time vs ORT |")
    print("|---|---|---|---|---|")
    for tool in tools:
        times = [s for s, _ in results[tool]]
        ratio = f"{best['ort'] / best[tool]:.2f}x faster" if "ort" in best else "-"
        print(
            f"| {tool} | {best[tool]:.2f} | {statistics.median(times):.2f} | "
            f"{rss[tool] / 2**20:.0f} | {ratio} |"
        )


def _ratios(
    results: dict[str, list[tuple[float, int]]], tools: list[str], outputs: dict[str, Path]
) -> None:
    """The ratios against ORT and the floors, per round, and ORT's exactness."""
    print()
    best = {t: min(s for s, _ in r) for t, r in results.items()}
    rss = {t: min(m for _, m in r) for t, r in results.items()}
    if "ort" in best:
        speedup = best["ort"] / best["qlrewrite"]
        paired = [
            o / q for (q, _), (o, _) in zip(results["qlrewrite"], results["ort"], strict=True)
        ]
        print(
            f"speed-up vs ORT: {speedup:.2f}x best vs best, per round "
            f"{', '.join(f'{r:.2f}x' for r in paired)} (target >= {TARGET_SPEEDUP}x)"
        )
    peak = rss["qlrewrite"] / 2**20
    print(f"qlrewrite peak RSS: {peak:.0f} MiB (target <= {TARGET_RSS_MB} MiB)")
    if "fsync-floor" in best:
        paired = [
            q / f
            for (q, _), (f, _) in zip(results["qlrewrite"], results["fsync-floor"], strict=True)
        ]
        print(
            f"qlrewrite vs write+fsync floor: {best['qlrewrite'] / best['fsync-floor']:.2f}x "
            f"best vs best, per round {', '.join(f'{r:.2f}x' for r in paired)} (target <= 1.2x)"
        )
    if "io-floor" in best:
        print(f"qlrewrite / io-floor time: {best['qlrewrite'] / best['io-floor']:.2f}x")
    if "ort" in tools:
        print("exactness:", _compare_with_ort(outputs["qlrewrite"], outputs["ort"]))
        if "onnxscript" in tools:
            print("onnxscript:", _compare_with_ort(outputs["onnxscript"], outputs["ort"]))


def _size(path: Path) -> str:
    total = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return f"{total / 2**20:.0f} MiB"


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        _worker_main(*sys.argv[2:])
    else:
        main()
