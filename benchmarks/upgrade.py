"""Benchmark `qlrewrite upgrade` against ONNX's and onnxscript's version converters.

Run by hand: ``python benchmarks/upgrade.py [--rounds N] [--folder DIR] [--opset N]``.

Model: ``bench_models.matmul_chain`` (opset 21, 16 4096 x 4096 weights, about 340 MiB of
external data), upgraded to ``--opset`` (default 23). Each tool runs in a fresh
subprocess, alternating tool by tool for ``--rounds`` rounds; wall time is measured from
outside (interpreter start-up and imports included), peak RSS is the child's own
``VmHWM`` (``bench_models.peak_rss``). Peers, each writing a complete model with its own
external data file:

- ``onnx``: ``onnx.load`` (weights read) + ``onnx.version_converter.convert_version`` +
  ``onnx.save(save_as_external_data=True)``; fails above 2 GB (the converter serializes);
- ``onnxscript``: ``ir.load`` + ``onnxscript.version_converter.convert_version(fallback=True)``
  (the mode that is correct; its default mode leaves ReduceMean's ``axes`` attribute) +
  ``ir.save`` with external data.

Every output is checked with onnx.checker (weight-free) and must import opset ``--opset``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = ("qlrewrite", "onnx", "onnxscript")


def _work_qlrewrite(source: Path, target: Path, opset: int) -> None:
    from qlrewrite.cli import main

    main(
        ["upgrade", str(source), "--opset", str(opset), "-o", str(target), "-q"],
        standalone_mode=False,
    )


def _work_onnx(source: Path, target: Path, opset: int) -> None:
    import onnx
    import onnx.version_converter

    model = onnx.load(source)
    converted = onnx.version_converter.convert_version(model, opset)
    onnx.save(converted, target, save_as_external_data=True, location=target.name + ".data")


def _work_onnxscript(source: Path, target: Path, opset: int) -> None:
    import onnx_ir as ir
    from onnxscript import version_converter

    model = ir.load(source)
    version_converter.convert_version(model, opset, fallback=True)
    ir.save(model, target, external_data=target.name + ".data")


def _worker(tool: str, source: str, target: str, opset: int) -> None:
    globals()[f"_work_{tool}"](Path(source), Path(target), opset)
    sys.path.insert(0, str(HERE))
    from bench_models import peak_rss  # ru_maxrss would carry the parent's peak over exec

    peak = peak_rss() / 2**20
    print(json.dumps({"peak_mb": peak}))


def _run(tool: str, source: Path, folder: Path, opset: int) -> dict[str, float]:
    target = folder / f"out_{tool}.onnx"
    for path in (target, target.with_name(target.name + ".data")):
        path.unlink(missing_ok=True)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, __file__, "--worker", tool, str(source), str(target), str(opset)],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        return {"seconds": seconds, "peak_mb": float("nan"), "error": result.stderr[-300:]}
    _validate(target, opset)
    return {"seconds": seconds, **json.loads(result.stdout.strip().splitlines()[-1])}


def _validate(target: Path, opset: int) -> None:
    import onnx

    from qlrewrite.io import model_io
    from qlrewrite.io.weightless import weightless_proto

    model = model_io.load(target)
    # matmul_chain declares its output without a type: let inference fill it in first.
    proto = onnx.shape_inference.infer_shapes(weightless_proto(model))
    onnx.checker.check_model(proto, full_check=True)
    assert model.opset_imports[""] == opset, (target, model.opset_imports)


def main() -> None:
    """Build the model, run every tool ``--rounds`` times, print a table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/qlrewrite-bench"))
    parser.add_argument("--opset", type=int, default=23)
    parser.add_argument("--keep", action="store_true", help="Keep the outputs.")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_models import matmul_chain

    source = matmul_chain(args.folder)
    work = args.folder / "upgrade"
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, float]]] = {tool: [] for tool in TOOLS}
    for _ in range(args.rounds):
        for tool in TOOLS:
            runs[tool].append(_run(tool, source, work, args.opset))
    size = sum(p.stat().st_size for p in source.parent.glob(source.name + "*")) / 2**20
    print(
        f"model: {source.name} ({size:.0f} MiB), opset 21 -> {args.opset}, "
        f"{args.rounds} round(s), median"
    )
    print(f"{'tool':<12} {'seconds':>8} {'peak MB':>8} {'time x':>7} {'memory x':>8}")
    base = runs["qlrewrite"]
    base_s = statistics.median(r["seconds"] for r in base)
    base_mb = statistics.median(r["peak_mb"] for r in base)
    for tool, results in runs.items():
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            print(f"{tool:<12} failed: {errors[0].strip().splitlines()[-1]}")
            continue
        seconds = statistics.median(r["seconds"] for r in results)
        peak = statistics.median(r["peak_mb"] for r in results)
        print(
            f"{tool:<12} {seconds:8.2f} {peak:8.0f} {seconds / base_s:7.2f} {peak / base_mb:8.2f}"
        )
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
