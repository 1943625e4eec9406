"""Benchmark `qlrewrite integer-io` against writing its output.

Run by hand with farm-bench (pairs, A = the rewrite, B = its floor)::

    python benchmarks/integer_io.py --build --size 4096          # prints the model's path
    farm-bench -n 5 --vs "python benchmarks/integer_io.py --floor OUT FLOOR_OUT" \\
        -- qlrewrite integer-io MODEL -o OUT -q

Model (``--size`` S, ``--layers`` L, written once under ``--folder``): ``x[1, S] ->
QuantizeLinear -> DequantizeLinear -> (MatMul with a DequantizeLinear int8 weight
S x S, per-tensor -> QuantizeLinear -> DequantizeLinear) x L -> y``, weights as external
data (S=4096, L=8: 128 MiB). The floor: ``onnx_ir.load`` of the command's own output and
``onnx_ir.save`` of it with external data, what writing those bytes costs any tool. The
target (issue 44): within 1.5x of the floor, peak memory independent of the model's size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import _const  # the benchmarks folder is not a package

DT = ir.DataType


def _qdq(nodes: list[ir.Node], x: ir.Value, scale: ir.Value, zero: ir.Value) -> ir.Value:
    q = ir.node("QuantizeLinear", [x, scale, zero])
    dq = ir.node("DequantizeLinear", [q.outputs[0], scale, zero])
    nodes += [q, dq]
    return dq.outputs[0]


def io_chain(folder: Path, size: int, layers: int) -> Path:
    """Write the model (see module) unless it exists; its path."""
    path = folder / f"io_chain_{size}x{layers}.onnx"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    inits: list[ir.Value] = []
    nodes: list[ir.Node] = []
    x = ir.Value(name="x", type=ir.TensorType(DT.FLOAT), shape=ir.Shape([1, size]))
    scale = _const(inits, "s", np.array(0.05, np.float32), DT.FLOAT)
    zero = _const(inits, "z", np.array(128, np.uint8), DT.UINT8)
    value = _qdq(nodes, x, scale, zero)
    rng = np.random.default_rng(0)
    for i in range(layers):
        weight = _const(inits, f"w{i}", rng.integers(-127, 128, (size, size), np.int8), DT.INT8)
        w_scale = _const(inits, f"ws{i}", np.array(0.001, np.float32), DT.FLOAT)
        w_zero = _const(inits, f"wz{i}", np.array(0, np.int8), DT.INT8)
        dq = ir.node("DequantizeLinear", [weight, w_scale, w_zero])
        matmul = ir.node("MatMul", [value, dq.outputs[0]])
        nodes += [dq, matmul]
        value = _qdq(nodes, matmul.outputs[0], scale, zero)
    value.name = "y"
    value.type, value.shape = ir.TensorType(DT.FLOAT), ir.Shape([1, size])
    graph = ir.Graph(
        [x], [value], nodes=nodes, initializers=inits, opset_imports={"": 21}, name="io_chain"
    )
    ir.save(ir.Model(graph, ir_version=10), path, external_data=path.name + ".data")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/qlrewrite-bench"))
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--floor", nargs=2, type=Path, metavar=("SOURCE", "TARGET"))
    args = parser.parse_args()
    if args.floor:
        source, target = args.floor
        ir.save(ir.load(source), target, external_data=target.name + ".data")
    elif args.build:
        print(io_chain(args.folder, args.size, args.layers))


if __name__ == "__main__":
    main()
