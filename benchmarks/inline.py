"""Inline weights against external data: peak memory and time of `check` and of the fold.

Run by hand: ``python benchmarks/inline.py [FOLDER] [--rounds N]``.

The model is ``matmul_chain`` (18 int8 / int4 / float weights of 4096 x 4096, 338 MiB)
twice: with its weights in an external data file, and inside the .onnx file (as ONNX
Runtime's quantizer saves models under 2 GB; ``matmul_chain_inline``). Each round runs,
alternating, each in a fresh process (interpreter start and imports included; peak RSS
from ``wait4`` of the process, as ``benchmarks/check.py`` measures it):

- ``check``: the ``qlrewrite check`` entry point;
- ``fold``: the library's fold (``qlrewrite.api.fold`` then ``api.save``: the passes and
  the atomic save of ``qlrewrite fold``, without the ONNX Runtime session round 4's fusion
  warning builds). Its output has the input's layout, as ``qlrewrite fold`` decides it:
  external data for the external model, one 1.2 GB .onnx file for the inline one.

Printed: the median of the rounds for each, and inline / external ratios.
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

_FOLD = (
    "import sys; from qlrewrite import api; "
    "api.save(api.fold(sys.argv[1]), sys.argv[2], external_data=sys.argv[3] == 'external')"
)


def _fold(source: Path, out: Path, layout: str) -> tuple[float, float, float]:
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir(parents=True)
    os.sync()  # the last output written back before this run starts
    try:
        return _measure([sys.executable, "-c", _FOLD, str(source), str(out), layout])
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="/tmp/qlrewrite-bench")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(args.folder)
    models = {"external": matmul_chain(folder), "inline": matmul_chain_inline(folder)}
    exe = str(Path(sys.executable).parent / "qlrewrite")
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for layout, path in models.items():
            runs.setdefault(("check", layout), []).append(_measure([exe, "check", str(path)]))
            out = folder / f"inline-bench-{layout}" / "out.onnx"
            runs.setdefault(("fold", layout), []).append(_fold(path, out, layout))
    print(f"matmul_chain, 338 MiB of weights; median of {args.rounds} rounds, alternating\n")
    print("| command | layout | wall s | peak RSS MiB | wall inline/ext. | RSS inline/ext. |")
    print("|---|---|---:|---:|---:|---:|")
    for command in ("check", "fold"):
        medians = {
            layout: (
                statistics.median(r[0] for r in runs[command, layout]),
                statistics.median(r[1] for r in runs[command, layout]),
            )
            for layout in models
        }
        for layout, (wall, peak) in medians.items():
            ratio = ""
            if layout == "inline":
                base = medians["external"]
                ratio = f" {wall / base[0]:.2f}x | {peak / base[1]:.2f}x |"
            print(f"| {command} | {layout} | {wall:.2f} | {peak:.0f} |" + (ratio or " | |"))
    print(f"\nload average after the runs: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
