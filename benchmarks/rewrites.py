"""Benchmark `qlrewrite downgrade`, `retarget` and `convert --to qoperator` against writing
their output.

Run by hand: ``python benchmarks/rewrites.py [--rounds N] [--folder DIR] [--size 4096]
[--only qoperator]``.

Model: ``bench_models.matmul_chain`` (opset 21: 8 int8 per-channel, 8 blocked int4 and 2
QuantizeLinear float weights of ``--size`` x ``--size``; about 340 MiB at 4096). Each
rewrite runs in a fresh subprocess, alternating with its floor, for ``--rounds`` rounds:

- ``downgrade``: ``qlrewrite downgrade --opset 19`` (blocked int4 DQ lowered to Cast /
  Sub / Mul, int4 weights written as int8: the output is larger than the input);
- ``retarget``: ``qlrewrite retarget --zero-point unsigned`` (every int8 / int4 weight
  shifted into uint8 / uint4);
- ``qoperator``: ``qlrewrite convert --to qoperator`` on ``bench_models.qdq_matmul_chain``
  (16 Q/DQ MatMul groups with int8 per-column ``--size`` x ``--size`` weights, opset 13:
  256 MiB at 4096) -> 16 QLinearMatMul;
- each one's floor: ``onnx_ir.load`` of that command's own output and ``onnx_ir.save`` of
  it with external data: what writing those bytes costs any tool (no check, no fsync).

The target (issue 35): each rewrite within 1.5x of its floor, peak memory not growing
with the model (weights are computed one tensor at a time while the output is written).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

COMMANDS = {
    "downgrade": ["downgrade", "--opset", "19"],
    "retarget": ["retarget", "--zero-point", "unsigned"],
    "qoperator": ["convert", "--to", "qoperator"],
}


def _worker(tool: str, source: Path, target: Path) -> None:
    if tool.startswith("floor:"):
        import onnx_ir as ir

        model = ir.load(source)
        ir.save(model, target, external_data=target.name + ".data")
    else:
        from qlrewrite.cli import main

        args = [*COMMANDS[tool][:1], str(source), *COMMANDS[tool][1:]]
        main([*args, "-o", str(target), "-q"], standalone_mode=False)
    # imported after the work: bench_models imports onnx_ir, which imports sympy unless
    # qlrewrite was imported first (it defers sympy: about 0.2-0.5 s here)
    from bench_models import peak_rss

    print(json.dumps({"peak_rss": peak_rss()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/qlrewrite-bench"))
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--worker", nargs=3)
    parser.add_argument("--only", choices=sorted(COMMANDS), action="append")
    args = parser.parse_args()
    if args.worker:
        tool, source, target = args.worker
        _worker(tool, Path(source), Path(target))
        return
    from bench_models import matmul_chain, qdq_matmul_chain, run_worker

    script = str(Path(__file__).resolve())
    for command in args.only or COMMANDS:
        build = qdq_matmul_chain if command == "qoperator" else matmul_chain
        source = build(args.folder, size=args.size)
        out = args.folder / f"out_{command}" / "model.onnx"
        floor_out = args.folder / f"floor_{command}" / "model.onnx"
        kept = args.folder / f"kept_{command}"
        times: dict[str, list[float]] = {command: [], "floor": []}
        peaks: dict[str, list[int]] = {command: [], "floor": []}
        for _ in range(args.rounds):
            seconds, peak = run_worker(script, command, source, out)
            times[command].append(seconds)
            peaks[command].append(peak)
            if kept.exists():
                for old in kept.iterdir():
                    old.unlink()
            else:
                kept.mkdir(parents=True)
            for produced in out.parent.iterdir():  # the floor reads this command's output
                produced.rename(kept / produced.name)
            seconds, peak = run_worker(script, "floor:" + command, kept / "model.onnx", floor_out)
            times["floor"].append(seconds)
            peaks["floor"].append(peak)
        ratios = [a / b for a, b in zip(times[command], times["floor"], strict=True)]
        print(
            f"{command}: median {statistics.median(times[command]):.2f} s, floor "
            f"{statistics.median(times['floor']):.2f} s, ratio per round "
            f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}); "
            f"peak {max(peaks[command]) / 2**20:.0f} MiB vs floor "
            f"{max(peaks['floor']) / 2**20:.0f} MiB"
        )


if __name__ == "__main__":
    main()
