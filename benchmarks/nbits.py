"""Benchmark `qlrewrite convert --to onnx` on MatMulNBits against Olive's MatMulNBitsToQDQ.

Run by hand: ``python benchmarks/nbits.py [--rounds N] [--folder DIR] [--olive-python PY]``.

Model: ``bench_models.nbits_chain`` (128 com.microsoft MatMulNBits, 4096 x 4096, 4 bits,
block 32, float32 scales, packed zero points: 1.0 GiB of B, 1.28 GiB of external data in
all). Each tool runs in a fresh subprocess, tool after tool for ``--rounds`` rounds; wall
time from outside (interpreter start-up and imports included), peak RSS is the child's own
(``VmHWM``). Contenders:

- ``qlrewrite``: ``qlrewrite convert MODEL --to onnx`` (checks before and after, atomic
  save with fsync);
- ``olive``: Olive's ``MatMulNBitsToQDQ`` pass (``olive-ai``, run with ``--olive-python``,
  an interpreter where it is installed; skipped when it cannot be imported);
- ``io-floor``: a plain ``ir.load`` + ``ir.save`` of qlrewrite's output (the cost of
  writing the output at all; no fsync);
- ``io-floor-fsync``: the same, then ``fsync`` of the data file (qlrewrite's atomic save
  flushes its output to disk before renaming it into place);
- ``qlrewrite-back``: the other direction, ``qlrewrite convert OUT --to com.microsoft`` of
  qlrewrite's output (DequantizeLinear -> MatMul back to MatMulNBits), with its own
  ``io-floor-back`` and ``io-floor-back-fsync`` (the same floors on its output).

Afterwards the first MatMul weights of qlrewrite's and Olive's outputs are compared (x,
scale and zero point of each DequantizeLinear, bit for bit). Targets: within 1.5x of the
I/O floor, peak RSS <= 300 MB, faster than Olive.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_FLOOR_RATIO = 1.5
TARGET_RSS_MB = 300


def _work(tool: str, source: Path, target: Path) -> None:
    if tool.startswith("qlrewrite"):
        from qlrewrite.cli import main

        to = "com.microsoft" if tool == "qlrewrite-back" else "onnx"
        main(["convert", str(source), "--to", to, "-o", str(target), "-q"], standalone_mode=False)
    elif tool == "olive":
        from olive.model import ONNXModelHandler
        from olive.passes.olive_pass import create_pass_from_dict
        from olive.passes.onnx.mnb_to_qdq import MatMulNBitsToQDQ

        olive_pass = create_pass_from_dict(MatMulNBitsToQDQ, {}, disable_search=True)
        olive_pass.run(ONNXModelHandler(model_path=str(source)), str(target))
    else:  # io-floor, io-floor-fsync
        import os

        import onnx_ir as ir

        ir.save(ir.load(source), target, external_data=target.name + ".data")
        if tool.endswith("-fsync"):
            with open(target.with_name(target.name + ".data"), "rb+") as data:
                os.fsync(data.fileno())
    from bench_models import peak_rss  # the script's folder is on the path

    print(json.dumps({"peak_rss": peak_rss()}))


def _dq_weights(path: Path, count: int = 4) -> list[tuple]:
    """(type, shape, bytes) of x, scale, zero point of the DequantizeLinear feeding each of
    the first ``count`` MatMuls (in chain order: the tools name nodes differently)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    onnx.load_external_data_for_model(model, str(path.parent))
    inits = {t.name: t for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    found = []
    for matmul in [n for n in model.graph.node if n.op_type == "MatMul"][:count]:
        for name in producers[matmul.input[1]].input:
            tensor = inits[name]
            data = tensor.raw_data or onnx.numpy_helper.to_array(tensor).tobytes()
            found.append((tensor.data_type, tuple(tensor.dims), data))
    return found


def _source_of(tool: str, source: Path, outputs: dict[str, Path]) -> Path:
    """The input of ``tool``: the benchmark model, or the output it is the floor of."""
    if tool.startswith("io-floor-back"):
        return outputs["qlrewrite-back"]
    if tool == "qlrewrite-back" or tool.startswith("io-floor"):
        return outputs["qlrewrite"]
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/qlrewrite-bench"))
    parser.add_argument("--olive-python", default=sys.executable)
    parser.add_argument("--skip-back", action="store_true", help="no --to com.microsoft run")
    parser.add_argument("--worker", nargs=3)
    args = parser.parse_args()
    if args.worker:
        _work(args.worker[0], Path(args.worker[1]), Path(args.worker[2]))
        return
    sys.path.insert(0, str(HERE))
    from bench_models import nbits_chain, run_worker

    source = nbits_chain(args.folder)
    tools = ("qlrewrite", "io-floor", "io-floor-fsync")
    tools += () if args.skip_back else ("qlrewrite-back", "io-floor-back", "io-floor-back-fsync")
    pythons = {tool: sys.executable for tool in tools}
    probe = subprocess.run(
        [args.olive_python, "-c", "import olive.passes.onnx.mnb_to_qdq"],
        capture_output=True,
        check=False,
    )
    if probe.returncode == 0:
        pythons["olive"] = args.olive_python
    else:
        print("olive: not importable with", args.olive_python, "- skipped")
    outputs = {tool: args.folder / f"out-{tool}" / "model.onnx" for tool in pythons}
    times: dict[str, list[float]] = {tool: [] for tool in pythons}
    peaks: dict[str, list[int]] = {tool: [] for tool in pythons}
    for round_ in range(args.rounds):
        for tool, python in pythons.items():
            src = _source_of(tool, source, outputs)
            seconds, peak = run_worker(__file__, tool, src, outputs[tool], python)
            times[tool].append(seconds)
            peaks[tool].append(peak)
            print(f"round {round_ + 1} {tool}: {seconds:.2f} s, peak RSS {peak / 2**20:.0f} MiB")
    print("\n| tool | best wall s | median wall s | peak RSS MiB |\n|---|---:|---:|---:|")
    for tool in pythons:
        print(
            f"| {tool} | {min(times[tool]):.2f} | {statistics.median(times[tool]):.2f} | "
            f"{max(peaks[tool]) / 2**20:.0f} |"
        )
    for ours, floors in (
        ("qlrewrite", ("io-floor", "io-floor-fsync")),
        ("qlrewrite-back", ("io-floor-back", "io-floor-back-fsync")),
    ):
        if ours not in pythons:
            continue
        for floor in floors:
            ratio = min(times[ours]) / min(times[floor])
            print(f"{ours} / {floor}: {ratio:.2f}x (target <= {TARGET_FLOOR_RATIO})")
        rss = max(peaks[ours]) / 2**20
        print(f"{ours} peak RSS {rss:.0f} MiB (target <= {TARGET_RSS_MB})")
    if "olive" in pythons:
        speedup = min(times["olive"]) / min(times["qlrewrite"])
        print(f"qlrewrite vs olive: {speedup:.2f}x faster (best vs best)")
        same = _dq_weights(outputs["qlrewrite"]) == _dq_weights(outputs["olive"])
        print("the first 4 MatMuls' DequantizeLinear inputs identical to Olive's:", same)


if __name__ == "__main__":
    main()
