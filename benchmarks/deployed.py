"""What each rewrite does to a model as ONNX Runtime deploys it.

For ORT-quantized models built here (onnxruntime.quantization, as tests/ort_quantized.py
does), each rewrite (fold, fold --keep-fused, convert, upgrade) runs with ``--verify`` and
this prints: the semantic verdict (ORT, optimizations off: what decides the exit code),
the deployed difference (ORT's default session: ORT_ENABLE_ALL, prepacking on; the
largest |difference| relative to the output's largest |value|, and in quantization steps
where the output is dequantized), the integer / weight-only kernels ORT no longer forms,
and the latency ratio after / before (median of interleaved runs of both sessions in this
process, 1 intra-op thread unless --threads).

    python benchmarks/deployed.py [--models cnn,mlp,...] [--rewrites fold,half,...]
                                  [--opset N] [--runs N] [--threads T]

``--opset N`` upgrades each model (``qlrewrite upgrade``) before the rewrites: ``half``
writes float16 Q/DQ from opset 19 only, float32 Q/DQ between Casts below it.

Models (cached in /tmp/qlrewrite-bench-deployed):
- cnn: static QDQ, u8 activations / s8 per-channel weights, 4 Conv + Gemm, 1x32x56x56;
- block: a transformer-like block (Q/K/V/O and MLP MatMuls, Softmax), s8 per-channel,
  d = 256, 128 tokens;
- mlp: 14 MatMul + Add + Relu layers 2048 x 2048 (224 MiB of float weights), s8
  per-channel, 64 rows;
- nbits: 4-bit blocked QDQ (MatMulNBitsQuantizer, block 32, QDQ format) of 4 MatMuls
  2048 x 2048, 64 rows;
- matmulnbits: the same in com.microsoft MatMulNBits (QOperator format), rewritten by
  convert --to onnx, upgrade --convert-weight-only and fold --dequantize-weights.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

CACHE = Path(tempfile.gettempdir()) / "qlrewrite-bench-deployed"

REWRITES: dict[str, list[str]] = {
    "fold": ["fold"],
    "fold --keep-fused": ["fold", "--keep-fused"],
    "convert --to com.microsoft": ["convert", "--to", "com.microsoft"],
    "upgrade --opset 21": ["upgrade", "--opset", "21"],
    "half": ["half"],
}


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array.astype(np.float32), name)


def _model(nodes, inits, name, x_shape, y_shape, *, opset=13) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def cnn() -> tuple[onnx.ModelProto, tuple[int, ...]]:
    rng = np.random.default_rng(0)
    channels = [32, 64, 64, 128, 128]
    nodes, inits, value = [], [], "x"
    for i in range(4):
        cin, cout = channels[i], channels[i + 1]
        inits += [
            _init(f"w{i}", rng.standard_normal((cout, cin, 3, 3)) * (2 / (cin * 9)) ** 0.5),
            _init(f"b{i}", rng.standard_normal(cout) * 0.1),
        ]
        nodes += [
            helper.make_node(
                "Conv",
                [value, f"w{i}", f"b{i}"],
                [f"c{i}"],
                pads=[1] * 4,
                strides=[2 if i % 2 else 1] * 2,
            ),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        value = f"r{i}"
    inits += [_init("wf", rng.standard_normal((10, 128)) * 0.05), _init("bf", np.zeros(10))]
    nodes += [
        helper.make_node("GlobalAveragePool", [value], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    return _model(nodes, inits, "cnn", [1, 32, 56, 56], [1, 10]), (1, 32, 56, 56)


def block() -> tuple[onnx.ModelProto, tuple[int, ...]]:
    rng = np.random.default_rng(2)
    d, hidden, tokens = 256, 1024, 128
    inits = [
        _init(n, rng.standard_normal(s) * 0.05)
        for n, s in (
            ("wq", (d, d)),
            ("wk", (d, d)),
            ("wv", (d, d)),
            ("wo", (d, d)),
            ("w_up", (d, hidden)),
            ("b_up", (hidden,)),
            ("w_down", (hidden, d)),
        )
    ]
    inits.append(_init("inv_sqrt_d", np.array(1 / np.sqrt(d))))
    mm = lambda a, b, o: helper.make_node("MatMul", [a, b], [o])  # noqa: E731
    nodes = [
        mm("x", "wq", "q"),
        mm("x", "wk", "k"),
        mm("x", "wv", "v"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        mm("q", "kt", "s"),
        helper.make_node("Mul", ["s", "inv_sqrt_d"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        mm("p", "v", "att"),
        mm("att", "wo", "o"),
        helper.make_node("Add", ["o", "x"], ["h"]),
        mm("h", "w_up", "u"),
        helper.make_node("Add", ["u", "b_up"], ["ub"]),
        helper.make_node("Relu", ["ub"], ["ur"]),
        mm("ur", "w_down", "dn"),
        helper.make_node("Add", ["dn", "h"], ["y"]),
    ]
    return _model(nodes, inits, "block", [1, tokens, d], [1, tokens, d]), (1, tokens, d)


def _mlp(layers: int, size: int, rows: int, relu: bool = True):
    rng = np.random.default_rng(3)
    nodes, inits, value = [], [], "x"
    for i in range(layers):
        inits += [
            _init(f"w{i}", rng.standard_normal((size, size)) * (1 / size) ** 0.5),
            _init(f"b{i}", rng.standard_normal(size) * 0.01),
        ]
        out = "y" if i == layers - 1 else f"h{i}"
        nodes += [
            helper.make_node("MatMul", [value, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}" if relu else out]),
        ]
        if relu:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [out]))
        value = out
    return _model(nodes, inits, "mlp", [rows, size], [rows, size]), (rows, size)


def mlp() -> tuple[onnx.ModelProto, tuple[int, ...]]:
    return _mlp(14, 2048, 64)


def nbits_source() -> tuple[onnx.ModelProto, tuple[int, ...]]:
    return _mlp(4, 2048, 64, relu=False)


def _static(model: onnx.ModelProto, shape: tuple[int, ...], target: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(10)
            self._data = iter(
                [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self):
            return next(self._data, None)

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "float.onnx")
        onnx.save(model, source)
        quantize_static(
            str(source),
            str(target),
            Reader(),
            per_channel=True,
            weight_type=QuantType.QInt8,
            activation_type=QuantType.QUInt8,
        )


def _nbits(model: onnx.ModelProto, target: Path, *, qdq: bool = True) -> None:
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    form = QuantFormat.QDQ if qdq else QuantFormat.QOperator
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True, quant_format=form)
    quantizer.process()
    onnx.save(quantizer.model.model, target)


MODELS: dict[str, tuple[str, Callable]] = {
    "cnn": ("static QDQ u8/s8 per-channel CNN", lambda p: _static(*cnn(), p)),
    "block": ("transformer-like block, QDQ u8/s8 per-channel", lambda p: _static(*block(), p)),
    "mlp": (
        "14-layer MLP 2048x2048 (224 MiB float), QDQ u8/s8 per-channel",
        lambda p: _static(*mlp(), p),
    ),
    "nbits": (
        "4-bit blocked QDQ (block 32), 4 MatMuls 2048x2048",
        lambda p: _nbits(nbits_source()[0], p),
    ),
    "matmulnbits": (
        "4-bit MatMulNBits (block 32), 4 MatMuls 2048x2048",
        lambda p: _nbits(nbits_source()[0], p, qdq=False),
    ),
}
SHAPES = {
    "cnn": (1, 32, 56, 56),
    "block": (1, 128, 256),
    "mlp": (64, 2048),
    "nbits": (64, 2048),
    "matmulnbits": (64, 2048),
}
#: The rewrites of the weight-only form (com.microsoft MatMulNBits), in place of REWRITES.
WEIGHT_ONLY_REWRITES: dict[str, list[str]] = {
    "convert --to onnx": ["convert", "--to", "onnx"],
    "upgrade --opset 21 --convert-weight-only": [
        "upgrade",
        "--opset",
        "21",
        "--convert-weight-only",
    ],
    "fold --dequantize-weights": ["fold", "--dequantize-weights"],
}


def built(name: str, opset: int | None = None) -> Path:
    path = CACHE / f"{name}.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MODELS[name][1](path)
    if opset is None:
        return path
    upgraded = CACHE / f"{name}.opset{opset}.onnx"
    if not upgraded.exists():
        command = [sys.executable, "-m", "qlrewrite", "upgrade", str(path), "--opset", str(opset)]
        subprocess.run([*command, "-o", str(upgraded), "-q"], check=True)
    return upgraded


#: ORT intra-op threads for the latency (0: ORT's default); set by --threads.
SETTINGS = {"threads": 1}


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()  # ORT's defaults: ORT_ENABLE_ALL, prepacking on
    options.log_severity_level = 3
    options.intra_op_num_threads = SETTINGS["threads"]  # 0: ORT's default (one per core)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def latency_pair(
    before: Path, after: Path, shape: tuple[int, ...], runs: int
) -> tuple[float, float]:
    """Median ms of each model, runs interleaved (before, after, before, ...)."""
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    sessions = [_session(before), _session(after)]
    times: list[list[float]] = [[], []]
    for session in sessions:
        session.run(None, feeds)
    for _ in range(runs):
        for index, session in enumerate(sessions):
            start = time.perf_counter()
            session.run(None, feeds)
            times[index].append((time.perf_counter() - start) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def rewrite(source: Path, name: str, args: list[str]) -> dict:
    """Run one rewrite with --verify; its --report (and whether it wrote the output)."""
    target = source.with_name(f"{source.stem}.{name.replace(' ', '_')}.onnx")
    report = target.with_suffix(".json")
    command = [
        sys.executable,
        "-m",
        "qlrewrite",
        *args,
        str(source),
        "-o",
        str(target),
        "--verify",
        "--report",
        str(report),
        "-q",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    document = json.loads(report.read_text()) if report.exists() else {}
    return {"code": done.returncode, "stderr": done.stderr.strip(), "target": target, **document}


def _row(model: str, name: str, result: dict, shape: tuple[int, ...], runs: int) -> str:
    verify = result.get("verify") or {}
    if result["code"] != 0 and not verify:
        said = result["stderr"].removeprefix("qlrewrite: error: ")[:90]
        return f"| {model} | {name} | refused: {said} | | | |"
    status = verify.get("status", "?")
    deployed = verify.get("deployment") or {}
    outputs = deployed.get("outputs") or []
    worst = max(outputs, key=lambda o: o["relative"] or 0, default=None)
    if worst is None:
        difference = deployed.get("reason") or "?"
    elif worst["exact"]:
        difference = "bit-identical"
    else:
        steps = f", {worst['steps']:.3g} steps" if worst["steps"] is not None else ""
        relative = worst["relative"] or 0.0
        shown = f"{relative:.2%}" if relative >= 1e-4 else f"{relative:.1e}"
        difference = f"{shown}{steps}"
    lost = ", ".join(f"{k} x{n}" for k, n in (deployed.get("lost_kernels") or {}).items()) or "-"
    if result["code"] == 0:
        before, after = latency_pair(Path(result["input"]), result["target"], shape, runs)
        latency = f"{before:.2f} -> {after:.2f} ms ({after / before:.2f}x)"
    else:
        latency = "not written"
    return f"| {model} | {name} | {status} | {difference} | {lost} | {latency} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rewrites", default="", help="names of REWRITES (default: all)")
    parser.add_argument("--opset", type=int, default=None, help="upgrade each model first")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="ORT intra-op threads for the latency (0: ORT's default); "
        "1 is steadier on a shared machine",
    )
    options = parser.parse_args()
    SETTINGS["threads"] = options.threads
    for name in ("", "onnxruntime", "onnxruntime.quantization.matmul_nbits_quantizer"):
        logging.getLogger(name).setLevel(logging.ERROR)
    print(
        f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start; latency with "
        f"{options.threads or 'default'} intra-op thread(s)"
    )
    print(
        "| model | rewrite | semantics (ORT, optimizations off) | deployed: max |diff| / "
        "max |y| | kernels lost | latency before -> after |"
    )
    print("|---|---|---|---|---|---|")
    for model in options.models.split(","):
        source = built(model, options.opset)
        rewrites = WEIGHT_ONLY_REWRITES if model == "matmulnbits" else REWRITES
        chosen = options.rewrites.split(",") if options.rewrites else list(rewrites)
        for name, args in ((n, a) for n, a in rewrites.items() if n in chosen):
            result = rewrite(source, name, args)
            print(_row(model, name, result, SHAPES[model], options.runs), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
