"""8-bit weights as ONNX Runtime deploys them: left as DequantizeLinear -> MatMul (what
`convert --to com.microsoft` does by default) or made MatMulNBits (--include-8bit) at
accuracy_level 0 and 4.

For int8 weights [K, N] (per column, or blocked by 32 along K) times a [rows, K] float
activation, with and without a quantized activation (Q -> DQ before the MatMul), this
prints the op ORT's default session forms from each (ORT_ENABLE_ALL, read from its
optimized graph), the median latency (interleaved runs in this process, 1 intra-op
thread) and the ratio to the DequantizeLinear form, and the largest |difference| from
the DequantizeLinear form's deployed output.

    python benchmarks/convert_8bit.py [--k 1024] [--n 1024] [--rows 8] [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def weight_matmul(k: int, n: int, rows: int, *, block: int | None, act: bool) -> onnx.ModelProto:
    """x [rows, k] (through Q -> DQ with ``act``) times DequantizeLinear(int8 w [k, n])."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (k, n), dtype=np.int8)
    if block:
        scale, attrs = np.full((k // block, n), 0.01, np.float32), {"axis": 0, "block_size": block}
    else:
        scale, attrs = np.full(n, 0.01, np.float32), {"axis": 1}
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "ws")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], **attrs)]
    a = "x"
    if act:
        inits += [
            numpy_helper.from_array(np.array(0.02, np.float32), "as"),
            numpy_helper.from_array(np.array(128, np.uint8), "az"),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
        ]
        a = "xd"
    nodes.append(helper.make_node("MatMul", [a, "wf"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _session(path: Path, folder: Path) -> tuple[ort.InferenceSession, str]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(folder / "optimized.onnx").graph.node]
    return session, "+".join(o for o in ops if o not in ("QuantizeLinear",))


def _median_us(sessions: list[ort.InferenceSession], x: np.ndarray, runs: int) -> list[float]:
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(runs):  # interleaved: load on the machine hits every form alike
        for index, session in enumerate(sessions):
            start = time.perf_counter()
            session.run(None, {"x": x})
            times[index].append((time.perf_counter() - start) * 1e6)
    return [statistics.median(t) for t in times]


def _runs(session: ort.InferenceSession, x: np.ndarray) -> np.ndarray | str:
    """The session's output, or why it failed (ORT 1.19-1.32 fail on some fused forms)."""
    try:
        return np.asarray(session.run(None, {"x": x})[0])
    except Exception as exc:  # ORT's own errors, printed as measured
        return f"fails: {str(exc).rsplit(':', 1)[-1].strip()[:70]}"


def _convert(source: Path, out: Path, *args: str) -> None:
    command = [sys.executable, "-m", "qlrewrite", "convert", str(source), "--to"]
    command += ["com.microsoft", "--include-8bit", "-o", str(out), *args]
    subprocess.run(command, check=True, capture_output=True)


FORMS = ("DequantizeLinear (default)", "MatMulNBits level 0", "MatMulNBits level 4")


def _measure(folder: Path, source: Path, x: np.ndarray, runs: int) -> list[str]:
    """One line per form: the ops ORT forms, median latency, ratio and |difference|."""
    paths = [source]
    for level in (0, 4):
        paths.append(folder / f"l{level}.onnx")
        _convert(source, paths[-1], "--accuracy-level", str(level))
    made = [_session(p, folder) for p in paths]
    outputs = [_runs(session, x) for session, _ in made]
    running = [index for index, y in enumerate(outputs) if not isinstance(y, str)]
    medians = dict(zip(running, _median_us([made[i][0] for i in running], x, runs), strict=True))
    lines = []
    for index, form in enumerate(FORMS):
        y, ops = outputs[index], made[index][1]
        if isinstance(y, str):
            lines.append(f"  {form:27} {ops:28} {y}")
            continue
        base = outputs[0]
        ratio = f"{medians[index] / medians[0]:6.2f}x" if 0 in medians else "   n/a"
        diff = f"{float(np.abs(y - base).max()):.3g}" if not isinstance(base, str) else "n/a"
        lines.append(f"  {form:27} {ops:28} {medians[index]:9.1f} us {ratio}  |diff| {diff}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(f"ONNX Runtime {ort.__version__}, K={args.k} N={args.n} rows={args.rows}")
    x = np.random.default_rng(1).standard_normal((args.rows, args.k)).astype(np.float32)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for act in (False, True):
            for block in (None, 32):
                source = folder / "m.onnx"
                onnx.save(weight_matmul(args.k, args.n, args.rows, block=block, act=act), source)
                kind = "Q/DQ activation" if act else "float activation"
                print(f"\n{kind}, {'blocked 32' if block else 'per column'}")
                print("\n".join(_measure(folder, source, x, args.runs)))


if __name__ == "__main__":
    main()
