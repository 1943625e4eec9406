"""Every command on models with many nodes: is the time linear in the node count?

Run by hand: ``python benchmarks/graph_size.py [FOLDER] [--layers 1500,6000] [--repeat 3]
[--command fold]``.

Builds ``layers_<N>.onnx`` for each layer count (five nodes per layer: QuantizeLinear and
DequantizeLinear of the activation, a per-axis DequantizeLinear of a 64 x 64 int8 weight,
MatMul, Relu; opset 13, weights inline), then times each command in a fresh process (best
wall of ``--repeat``, interpreter start-up and imports included, output discarded) and
prints a table: seconds at each size, microseconds per node at the largest size (start-up
excluded, measured as ``python -c "import qlrewrite.cli"``) and the growth factor between
the two largest sizes against the node-count factor (linear: equal).

The floors are measured in the same run, each in a fresh process as the commands are:
``load`` (start Python, import onnx_ir with sympy deferred as qlrewrite does, ``ir.load``),
``load+save`` (the same, then ``ir.save`` to a new file) and ``converter`` (``onnx.load``,
ONNX's version converter to opset 21, ``onnx.save``). The "x floor" column divides each
command's time at the largest size by the floor that command needs: load for info and
check, load+save for the rewrites, converter + load+save for upgrade (issue 21's target:
1.5x, and upgrade 1.0x its floor).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx_ir as ir

__all__ = ["layers_model"]

DT = ir.DataType
NODES_PER_LAYER = 5


def layers_model(folder: str | Path, layers: int, *, width: int = 64, opset: int = 13) -> Path:
    """Write ``folder/layers_<layers>.onnx`` (``5 * layers`` nodes) unless it exists."""
    path = Path(folder) / f"layers_{layers}.onnx"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    nodes: list[ir.Node] = []
    inits: list[ir.Value] = []

    def const(name: str, array: np.ndarray, dtype: DT) -> ir.Value:
        value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(array.shape))
        value.const_value = ir.Tensor(array, dtype=dtype, name=name)
        inits.append(value)
        return value

    def add(op: str, inputs: list[ir.Value], name: str, **attrs: int) -> ir.Value:
        node = ir.node(op, inputs, attributes=attrs, name=name)
        node.outputs[0].name = f"{name}_out"
        nodes.append(node)
        return node.outputs[0]

    x = ir.Value(name="x", type=ir.TensorType(DT.FLOAT), shape=ir.Shape([1, width]))
    current = x
    for i in range(layers):
        a_scale = const(f"a{i}_scale", np.array(0.02, np.float32), DT.FLOAT)
        a_zp = const(f"a{i}_zp", np.array(0, np.uint8), DT.UINT8)
        w = const(f"w{i}", rng.integers(-127, 128, (width, width), dtype=np.int8), DT.INT8)
        w_scale = const(f"w{i}_scale", np.full(width, 0.01, np.float32), DT.FLOAT)
        w_zp = const(f"w{i}_zp", np.zeros(width, np.int8), DT.INT8)
        q = add("QuantizeLinear", [current, a_scale, a_zp], f"q{i}")
        a = add("DequantizeLinear", [q, a_scale, a_zp], f"dq{i}")
        weight = add("DequantizeLinear", [w, w_scale, w_zp], f"wdq{i}", axis=1)
        h = add("MatMul", [a, weight], f"matmul{i}")
        current = add("Relu", [h], f"relu{i}")
    current.name = "y"
    current.type = ir.TensorType(DT.FLOAT)
    current.shape = ir.Shape([1, width])
    graph = ir.Graph(
        [x], [current], nodes=nodes, initializers=inits, opset_imports={"": opset}, name="layers"
    )
    ir.save(ir.Model(graph, ir_version=8, producer_name="qlrewrite-benchmarks"), path)
    return path


COMMANDS = {
    "info": ["info"],
    "check": ["check"],
    "fold": ["fold", "-o", "{out}"],
    "convert --to com.microsoft": ["convert", "--to", "com.microsoft", "-o", "{out}"],
    "upgrade --opset 21": ["upgrade", "--opset", "21", "-o", "{out}"],
}


def _wall(argv: list[str], repeat: int) -> float:
    """Best wall seconds of ``repeat`` fresh processes (exit 0 or 1 accepted)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        best = min(best, time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr.decode()[-300:]}")
    return best


_DEFER = (
    "from qlrewrite.cli._deferred_imports import defer_sympy; defer_sympy(); import onnx_ir as ir; "
)
FLOORS = {
    "load": _DEFER + "ir.load({src!r})",
    "load+save": _DEFER + "ir.save(ir.load({src!r}), {out!r})",
    "converter": (
        "import onnx; from onnx import version_converter as v; "
        "onnx.save(v.convert_version(onnx.load({src!r}), 21), {out!r})"
    ),
}
#: The floor each command is held to (a sum of FLOORS entries).
FLOOR_OF = {
    "info": ("load",),
    "check": ("load",),
    "fold": ("load+save",),
    "convert --to com.microsoft": ("load+save",),
    "upgrade --opset 21": ("converter", "load+save"),
}


def _floors(path: Path, out: Path, repeat: int) -> dict[str, float]:
    """Seconds of each FLOORS entry on ``path`` (fresh processes, best of ``repeat``)."""
    return {
        name: _wall([sys.executable, "-c", code.format(src=str(path), out=str(out))], repeat)
        for name, code in FLOORS.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", help="where to build the models (default: temp)")
    parser.add_argument("--layers", default="2000,8000", help="comma-separated layer counts")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per cell")
    parser.add_argument(
        "--command", action="append", choices=COMMANDS, help="time these commands only"
    )
    args = parser.parse_args()
    commands = {k: v for k, v in COMMANDS.items() if not args.command or k in args.command}
    sizes = sorted(int(s) for s in args.layers.split(","))
    with tempfile.TemporaryDirectory(prefix="qlrewrite-graph-size-") as tmp:
        folder = Path(args.folder or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {n: layers_model(folder, n) for n in sizes}
        python = [sys.executable, "-m", "qlrewrite"]
        startup = _wall([sys.executable, "-c", "import qlrewrite.cli"], args.repeat)
        print(f"start-up (python -c 'import qlrewrite.cli'): {startup:.2f} s")
        nodes = {n: n * NODES_PER_LAYER for n in sizes}
        big, small = sizes[-1], sizes[-2] if len(sizes) > 1 else sizes[-1]
        floors = {n: _floors(paths[n], folder / "floor.onnx", args.repeat) for n in sizes}
        for name in FLOORS:
            cells = ", ".join(f"{nodes[n]} nodes {floors[n][name]:.2f} s" for n in sizes)
            print(f"floor {name}: {cells}")
        header = [f"{nodes[n]} nodes s" for n in sizes]
        print(
            "| command | "
            + " | ".join(header)
            + f" | us/node at {nodes[big]} | growth | "
            + " | ".join(f"x floor at {nodes[n]}" for n in sizes)
            + " |"
        )
        print("|---|" + "---:|" * (2 * len(sizes) + 2))
        for label, argv in commands.items():
            times = {}
            for n in sizes:
                out = str(folder / f"out_{n}.onnx")
                cmd = [a.replace("{out}", out) for a in argv]
                times[n] = _wall([*python, cmd[0], str(paths[n]), *cmd[1:]], args.repeat)
            per_node = (times[big] - startup) / nodes[big] * 1e6
            growth = (times[big] - startup) / max(times[small] - startup, 1e-3)
            cells = " | ".join(f"{times[n]:.2f}" for n in sizes)
            factor = nodes[big] / nodes[small]
            ratios = " | ".join(
                f"{times[n] / sum(floors[n][name] for name in FLOOR_OF[label]):.2f}x" for n in sizes
            )
            print(
                f"| {label} | {cells} | {per_node:.0f} | {growth:.1f}x (nodes {factor:.0f}x) "
                f"| {ratios} |"
            )


if __name__ == "__main__":
    main()
