"""Benchmark of qlrewrite.kernels against ONNX Runtime, the ONNX reference evaluator and memcpy.

Run by hand: ``python benchmarks/kernels.py [--size 4096] [--repeat 5] [--runs 2]
[--no-reference]``.
For each case (4096 x 4096 by default) it prints the output throughput in GB/s of: this
project with 1 thread and with every core, onnx.reference.ReferenceEvaluator, an ONNX Runtime
one-node session (intra_op_num_threads=1, no graph optimization, inputs as initializers,
output through IOBinding so no copy to NumPy is timed) and a NumPy copy of the output size
(the ceiling). Output bytes count one byte per 4-bit element for every contender, so the
ratios compare the same work. Best of --repeat calls, over --runs whole rounds.

Targets: >= 15x the reference; >= 1.0x ORT-1thread on one thread; >= 1.5x ORT-1thread with
every core.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from qlrewrite.kernels import dequantize, quantize
from qlrewrite.kernels._chunks import thread_count


@dataclass
class Case:
    name: str
    op: str
    x: np.ndarray
    scale: np.ndarray
    zp: np.ndarray | None
    out_dtype: Any
    attrs: dict = field(default_factory=dict)


def _arrays(n: int) -> dict[str, Any]:
    """The seeded inputs, scales and zero points the cases share."""
    rng = np.random.default_rng(0)
    i8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    u8 = i8.view(np.uint8)
    i4 = rng.integers(-8, 8, (n, n)).astype(ml_dtypes.int4)
    f8 = rng.standard_normal((n, n)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    xf = (rng.standard_normal((n, n)) * 3).astype(np.float32)
    per_col = rng.uniform(0.01, 0.1, n).astype(np.float32)
    blk0 = rng.uniform(0.01, 0.1, (n // 32, n)).astype(np.float32)
    blk1 = rng.uniform(0.01, 0.1, (n, n // 32)).astype(np.float32)
    return {
        "i8": i8,
        "u8": u8,
        "i4": i4,
        "f8": f8,
        "xf": xf,
        "per_col": per_col,
        "blk0": blk0,
        "blk1": blk1,
    }


def _dequantize_cases(n: int, a: dict[str, Any]) -> list[Case]:
    i8, u8, i4, f8 = a["i8"], a["u8"], a["i4"], a["f8"]
    per_col, blk0, blk1 = a["per_col"], a["blk0"], a["blk1"]
    return [
        Case(
            "int8 per-axis DQ (axis 1)",
            "DequantizeLinear",
            i8,
            per_col,
            np.zeros(n, np.int8),
            np.float32,
            {"axis": 1},
        ),
        Case(
            "uint8 per-tensor DQ",
            "DequantizeLinear",
            u8,
            np.float32(0.02),
            np.uint8(128),
            np.float32,
        ),
        Case(
            "int8 per-tensor DQ (zp 0)",
            "DequantizeLinear",
            i8,
            np.float32(0.02),
            np.int8(0),
            np.float32,
        ),
        Case(
            "int4 blocked-32 DQ axis 0",
            "DequantizeLinear",
            i4,
            blk0,
            np.zeros(blk0.shape, ml_dtypes.int4),
            np.float32,
            {"axis": 0, "block_size": 32},
        ),
        Case(
            "int4 blocked-32 DQ axis 1",
            "DequantizeLinear",
            i4,
            blk1,
            np.zeros(blk1.shape, ml_dtypes.int4),
            np.float32,
            {"axis": 1, "block_size": 32},
        ),
        Case(
            "float8e4m3fn per-tensor DQ", "DequantizeLinear", f8, np.float32(0.5), None, np.float32
        ),
    ]


def _quantize_cases(n: int, a: dict[str, Any]) -> list[Case]:
    xf, per_col, blk0 = a["xf"], a["per_col"], a["blk0"]
    return [
        Case(
            "float -> int8 per-axis Q (axis 1)",
            "QuantizeLinear",
            xf,
            per_col,
            np.zeros(n, np.int8),
            np.int8,
            {"axis": 1},
        ),
        Case(
            "float -> int4 blocked-32 Q axis 0",
            "QuantizeLinear",
            xf,
            blk0,
            np.zeros(blk0.shape, ml_dtypes.int4),
            ml_dtypes.int4,
            {"axis": 0, "block_size": 32},
        ),
    ]


def cases(n: int) -> list[Case]:
    """Every kernel case at size ``n`` x ``n``."""
    arrays = _arrays(n)
    return _dequantize_cases(n, arrays) + _quantize_cases(n, arrays)


def ours(case: Case, threads: int, fresh: bool = False) -> Callable[[], Any]:
    """Into a reused output array (as ORT's arena reuses its buffer), or a new one."""
    fn = dequantize if case.op == "DequantizeLinear" else quantize
    out = None if fresh else fn(case.x, case.scale, case.zp, **case.attrs)
    return lambda: fn(case.x, case.scale, case.zp, threads=threads, out=out, **case.attrs)


def _model(case: Case) -> onnx.ModelProto:
    inits = [
        ir.serde.serialize_tensor(ir.Tensor(np.asarray(a), name=nm))
        for nm, a in (("x", case.x), ("scale", case.scale), ("zp", case.zp))
        if a is not None
    ]
    names = ["x", "scale"] + (["zp"] if case.zp is not None else [])
    node = helper.make_node(case.op, names, ["y"], **case.attrs)
    out_type = int(ir.DataType.from_numpy(np.dtype(case.out_dtype)))
    y = helper.make_tensor_value_info("y", out_type, list(case.x.shape))
    graph = helper.make_graph([node], "g", [], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def ort_one_thread(case: Case) -> Callable[[], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(
        _model(case).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    binding = sess.io_binding()
    binding.bind_output("y", "cpu")
    return lambda: sess.run_with_iobinding(binding)


def reference(case: Case) -> Callable[[], Any]:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(_model(case))

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return evaluator.run(None, {})

    return run


def memcpy(case: Case) -> Callable[[], Any]:
    nbytes = case.x.size * np.dtype(case.out_dtype).itemsize
    src = np.ones(nbytes, np.uint8)
    dst = np.zeros_like(src)
    return lambda: np.copyto(dst, src)


def best_time(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm up (pools, sessions, page faults of the first allocation)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


LEGEND = (
    "GB/s of output (4-bit: one byte per element). Ours write into a reused output array "
    "(out=), as ORT reuses its arena; '1t new out' allocates it (page faults). x ref: best of "
    "ours vs the reference evaluator; memcpy x ref: the copy ceiling vs the reference (no "
    "kernel can beat the reference by more); 1t/ORT, all/ORT: speed-up over ORT with one thread; "
    "1t/memcpy: share of the copy ceiling reached on one thread."
)


def measure(case: Case, cores: int, repeat: int, with_reference: bool) -> dict[str, float]:
    """Best times (s) of every contender on one case."""
    return {
        "1t": best_time(ours(case, 1), repeat),
        "all": best_time(ours(case, cores), repeat),
        "fresh": best_time(ours(case, 1, fresh=True), repeat),
        "ref": best_time(reference(case), 1) if with_reference else float("nan"),
        "ort": best_time(ort_one_thread(case), repeat),
        "copy": best_time(memcpy(case), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per contender")
    parser.add_argument("--runs", type=int, default=2, help="whole rounds; best of each kept")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args(argv)
    cores = thread_count()
    loads = [os.getloadavg()[0]]
    all_cases = cases(args.size)
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.runs):  # rounds over every case, so a busy spell hits all alike
        for case in all_cases:
            times = measure(case, cores, args.repeat, not args.no_reference)
            old = best.setdefault(case.name, times)
            for key, value in times.items():
                old[key] = min(old[key], value)
        loads.append(os.getloadavg()[0])
    print(
        f"{args.size} x {args.size}; best of {args.repeat} calls x {args.runs} runs; "
        f"cores: {cores}; load average (1 min) during the runs: "
        f"{min(loads):.1f}-{max(loads):.1f}"
    )
    header = (
        "case",
        "1 thread",
        f"{cores} threads",
        "1t new out",
        "reference",
        "ORT 1t",
        "memcpy",
        "x ref",
        "memcpy x ref",
        "1t/ORT",
        "all/ORT",
        "1t/memcpy",
    )
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for case in all_cases:
        t = best[case.name]
        gb = case.x.size * np.dtype(case.out_dtype).itemsize / 1e9
        row = [case.name]
        row += [f"{gb / t[k]:.2f}" for k in ("1t", "all", "fresh", "ref", "ort", "copy")]
        row += [
            f"{t['ref'] / min(t['1t'], t['all']):.1f}x",
            f"{t['ref'] / t['copy']:.1f}x",
            f"{t['ort'] / t['1t']:.2f}x",
            f"{t['ort'] / t['all']:.2f}x",
            f"{t['copy'] / t['1t']:.0%}",
        ]
        print("| " + " | ".join(row) + " |", flush=True)
    print(LEGEND)
    return 0


if __name__ == "__main__":
    sys.exit(main())
