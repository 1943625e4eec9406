"""What the safe save costs: fsync and the model + data commit, against a plain write.

Run by hand: ``python benchmarks/save.py [--mib 512] [--rounds 5] [--folder DIR]``.

The input is a MatMul model whose weights (``--mib`` MiB, float32, 16 tensors) live in an
external data file; it is loaded lazily and written to an output that already exists
(the usual re-run: the commit replaces a model and its data). Per round, alternating:

- ``qlrewrite``: ``model_io.save`` as every command writes (staging folder, fsync of the
  data, the model and the folder, the commit: lock, data in, model renamed, old data
  removed);
- ``no-fsync``: the same with the fsyncs made no-ops (what durability costs);
- ``plain``: ``onnx_ir.save`` straight to the destination (no staging, no fsync, no
  commit: what any tool pays to write the bytes at all).

The commit alone (lock to cleanup) is timed with the commit's step hook. The page cache
is not dropped (no root needed): the data write is a memory copy plus write-back, which
is why fsync, which waits for the disk, dominates the difference.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from qlrewrite.io import atomic, model_io

N_TENSORS = 16


def _input(folder: Path, mib: int) -> Path:
    side = int((mib * 1024**2 / N_TENSORS / 4) ** 0.5)
    data = folder / "in.onnx.data"
    rng = np.random.default_rng(0)
    initializers, nodes, offset = [], [], 0
    with open(data, "wb") as out:
        for i in range(N_TENSORS):
            array = rng.standard_normal((side, side), dtype=np.float32)
            out.write(array.tobytes())
            tensor = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[side, side])
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", data.name),
                ("offset", str(offset)),
                ("length", str(array.nbytes)),
            ):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += array.nbytes
            initializers.append(tensor)
            nodes.append(helper.make_node("MatMul", [f"v{i}", f"W{i}"], [f"v{i + 1}"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info(f"v{N_TENSORS}", TensorProto.FLOAT, [1, side])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = folder / "in.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _time_qlrewrite(model: ir.Model, out: Path, fsync: bool) -> tuple[float, float]:
    marks: dict[str, float] = {}
    real_file, real_dir = atomic.fsync_file, atomic.fsync_dir
    atomic._step = lambda name: marks.__setitem__(name, time.perf_counter())
    if not fsync:
        atomic.fsync_file = lambda path: None
        atomic.fsync_dir = lambda folder: None
    try:
        started = time.perf_counter()
        model_io.save(model, out)
        total = time.perf_counter() - started
    finally:
        atomic._step = lambda name: None
        atomic.fsync_file, atomic.fsync_dir = real_file, real_dir
    return total, marks["cleaned"] - marks["locked"]


def _time_plain(model: ir.Model, out: Path) -> float:
    started = time.perf_counter()
    ir.save(model, out, external_data=out.name + ".data", size_threshold_bytes=1024)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="qlrewrite-bench-save-", dir=args.folder))
    try:
        source = _input(folder, args.mib)
        model = model_io.load(source)
        safe_dir, plain_dir = folder / "safe", folder / "plain"
        safe_dir.mkdir()
        plain_dir.mkdir()
        model_io.save(model, safe_dir / "out.onnx")  # the outputs exist: a re-run
        _time_plain(model, plain_dir / "out.onnx")
        times: dict[str, list[float]] = {"qlrewrite": [], "no-fsync": [], "plain": []}
        commits: list[float] = []
        for _ in range(args.rounds):
            total, commit = _time_qlrewrite(model, safe_dir / "out.onnx", fsync=True)
            times["qlrewrite"].append(total)
            commits.append(commit)
            times["no-fsync"].append(_time_qlrewrite(model, safe_dir / "out.onnx", False)[0])
            times["plain"].append(_time_plain(model, plain_dir / "out.onnx"))
        plain = statistics.median(times["plain"])
        print(f"{args.mib} MiB of external data, {args.rounds} rounds (median, min-max):")
        for name, values in times.items():
            median = statistics.median(values)
            print(
                f"  {name:10s} {median:6.2f} s ({min(values):.2f}-{max(values):.2f}) "
                f"{args.mib / median:7.0f} MiB/s  {median / plain:4.2f}x plain"
            )
        print(
            f"  commit (lock -> old data removed, fsync of the folder included): "
            f"{statistics.median(commits) * 1000:.1f} ms median"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
