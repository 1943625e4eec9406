"""`qlrewrite check` on a folder of many small models: one process against one per file.

Run by hand: ``python benchmarks/check_many.py [FOLDER] [--models 1000] [--per-file N]``.

Writes ``--models`` small QDQ models (a Conv-like block: Q/DQ of the activation, a
per-axis int8 weight DQ, a bias DQ with a [1] scale and a scalar zero point, MatMul, Add;
every tenth model with a per-axis scale of the wrong length, so there are findings to
report) into FOLDER/models, then times, wall clock, output discarded:

- ``qlrewrite check FOLDER/models --jobs 1`` and ``--jobs N`` for N up to the usable cores
  (one process; worker processes for N > 1);
- ``qlrewrite check FILE`` once per model, one process each (what a shell loop or a
  pre-commit hook without batching would do), on the first ``--per-file`` models
  (default: all), reported as measured and per model.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["small_model", "write_models"]


def small_model(index: int) -> onnx.ModelProto:
    """One small QDQ model; every tenth one has a per-axis scale of the wrong length."""
    rng = np.random.default_rng(index)
    channels = 16
    wrong = index % 10 == 9
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zp"),
        numpy_helper.from_array(rng.integers(-127, 127, (channels, channels), np.int8), "w_q"),
        numpy_helper.from_array(
            rng.uniform(0.01, 0.02, channels + (1 if wrong else 0)).astype(np.float32), "w_scale"
        ),
        numpy_helper.from_array(rng.integers(-500, 500, channels).astype(np.int32), "b_q"),
        numpy_helper.from_array(np.array([0.001], np.float32), "b_scale"),
        numpy_helper.from_array(np.array(0, np.int32), "b_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"], name="x_dq"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], name="w_dq", axis=1),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zp"], ["b"], name="b_dq"),
        helper.make_node("MatMul", ["xd", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["y"], name="bias"),
    ]
    graph = helper.make_graph(
        nodes,
        f"block{index}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def write_models(folder: Path, count: int) -> list[Path]:
    """``folder/m0000.onnx`` ... (kept when they exist)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"m{index:04d}.onnx"
        if not path.exists():
            onnx.save(small_model(index), path)
        paths.append(path)
    return paths


def _time(command: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    return time.perf_counter() - started, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--per-file", type=int, default=None)
    args = parser.parse_args()
    root = args.folder or Path(tempfile.mkdtemp(prefix="qlrewrite-many-"))
    paths = write_models(root / "models", args.models)
    cli = [sys.executable, "-m", "qlrewrite", "check"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{len(paths)} models in {root / 'models'}; usable cores: {cores}")
    for jobs in sorted({1, *range(2, (cores or 1) + 1)}):
        seconds, code = _time([*cli, str(root / "models"), "--jobs", str(jobs), "-q"])
        print(
            f"one process, --jobs {jobs}: {seconds:.2f} s (exit {code}), "
            f"{1000 * seconds / len(paths):.1f} ms per model"
        )
    subset = paths[: args.per_file or len(paths)]
    started = time.perf_counter()
    for path in subset:
        subprocess.run([*cli, str(path), "-q"], capture_output=True, check=False)
    seconds = time.perf_counter() - started
    print(
        f"one process per file ({len(subset)} models): {seconds:.2f} s, "
        f"{1000 * seconds / len(subset):.1f} ms per model"
    )


if __name__ == "__main__":
    main()
