"""Inline weights against external data: peak memory and time of `check`, `fold` and
ONNX Runtime's session.

Run by hand: ``python benchmarks/inline.py [FOLDER] [--rounds N]``.

The model is ``matmul_chain`` (18 int8 / int4 / float weights of 4096 x 4096, 338 MiB)
twice: with its weights in an external data file, and inside the .onnx file (as ONNX
Runtime's quantizer saves models under 2 GB; ``matmul_chain_inline``). Each round runs,
alternating, each in a fresh process (interpreter start and imports included; peak RSS
from ``wait4`` of the process, as ``benchmarks/check.py`` measures it):

- ``check``: ``qlrewrite check MODEL``;
- ``fold``: ``qlrewrite fold MODEL -o OUT -q`` (since round 5 it builds no ONNX Runtime
  session: the fusion warning reads the measured tables). Its output has the input's
  layout: external data for the external model, one 1.2 GB .onnx file for the inline
  one. The page cache is written back (``os.sync``) before each run;
- ``ort``: ``onnxruntime.InferenceSession(MODEL)``, default session options (what
  finding a bad model by loading it costs; no run).

Printed: the median of the rounds for each, inline / external ratios, and ONNX Runtime's
session against ``check`` per layout (the median of the per-round ratios).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_models import matmul_chain, matmul_chain_inline  # noqa: E402
from check import _measure  # noqa: E402

_ORT = (
    "import sys, onnxruntime as ort; "
    "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
)
COMMANDS = ("check", "fold", "ort")


def _fold(exe: str, source: Path, out: Path) -> tuple[float, float, float]:
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir(parents=True)
    os.sync()  # the last output written back before this run starts
    try:
        return _measure([exe, "fold", str(source), "-o", str(out), "-q"])
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def _round(exe: str, folder: Path, layout: str, path: Path) -> dict[str, tuple[float, ...]]:
    out = folder / f"inline-bench-{layout}" / "out.onnx"
    return {
        "check": _measure([exe, "check", str(path)]),
        "fold": _fold(exe, path, out),
        "ort": _measure([sys.executable, "-c", _ORT, str(path)]),
    }


def _print(runs: dict[tuple[str, str], list[tuple[float, ...]]], rounds: int) -> None:
    print(f"matmul_chain, 338 MiB of weights; median of {rounds} rounds, alternating\n")
    print("| command | layout | wall s | peak RSS MiB | wall inline/ext. | RSS inline/ext. |")
    print("|---|---|---:|---:|---:|---:|")
    for command in COMMANDS:
        med = {
            layout: tuple(statistics.median(r[i] for r in runs[command, layout]) for i in (0, 1))
            for layout in ("external", "inline")
        }
        for layout, (wall, peak) in med.items():
            ratio = " | |"
            if layout == "inline":
                ratio = f" {wall / med['external'][0]:.2f}x | {peak / med['external'][1]:.2f}x |"
            print(f"| {command} | {layout} | {wall:.2f} | {peak:.0f} |" + ratio)
    print("\nONNX Runtime's session / qlrewrite check, median of the per-round ratios:")
    for layout in ("external", "inline"):
        pairs = list(zip(runs["ort", layout], runs["check", layout], strict=True))
        wall = statistics.median(o[0] / c[0] for o, c in pairs)
        peak = statistics.median(o[1] / c[1] for o, c in pairs)
        print(f"- {layout}: wall {wall:.2f}x, peak RSS {peak:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="/tmp/qlrewrite-bench")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(args.folder)
    models = {"external": matmul_chain(folder), "inline": matmul_chain_inline(folder)}
    exe = str(Path(sys.executable).parent / "qlrewrite")
    print(f"load average before the runs: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    runs: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for _ in range(args.rounds):
        for layout, path in models.items():
            for command, measured in _round(exe, folder, layout, path).items():
                runs.setdefault((command, layout), []).append(measured)
    _print(runs, args.rounds)
    print(f"\nload average after the runs: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
