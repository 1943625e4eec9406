"""Models the benchmarks share, built deterministically on disk (never committed).

``matmul_chain``: the fold issue's model. A chain of 4096 x 4096 MatMuls whose weights are
8 int8 per-axis DQ, 8 int4 blocked-32 DQ (axis 0, int4 zero points) and 2 float -> Q -> DQ
pairs, at opset 21, stored as external data: about 340 MiB in, 1.15 GiB once folded.

``matmul_chain_inline``: the same model with its weights inside the .onnx file.

``qdq_matmul_chain``: ``convert --to qoperator``'s model. A chain of ``count`` Q/DQ MatMul
groups (uint8 activations quantized between them, int8 per-column ``size`` x ``size``
weights), at opset 13, stored as external data: 16 x 4096 x 4096 is 256 MiB of weights.

``nbits_chain``: the MatMulNBits issue's model. A chain of ``count`` com.microsoft
MatMulNBits (4 bits, block 32, K = N = ``size``, float32 scales, packed uint8 zero points)
with random weights, written tensor by tensor (the generator never holds the model): with
the defaults 128 x 4096 x 4096, 1.0 GiB of B plus 0.25 GiB of scales and zero points.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir

__all__ = ["matmul_chain", "matmul_chain_inline", "nbits_chain", "qdq_matmul_chain", "run_worker"]

DT = ir.DataType


def _const(graph_inits: list[ir.Value], name: str, array: np.ndarray, dtype: DT) -> ir.Value:
    value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(array.shape))
    value.const_value = ir.Tensor(array, dtype=dtype, name=name)
    graph_inits.append(value)
    return value


def matmul_chain(
    folder: str | Path, *, size: int = 4096, n_int8: int = 8, n_int4: int = 8, n_float: int = 2
) -> Path:
    """Write the model to ``folder/matmul_chain.onnx`` (+ ``.data``) unless it exists."""
    path, x = _chain_start(folder, "matmul_chain", size)
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    inits: list[ir.Value] = []
    nodes: list[ir.Node] = []
    current = x
    block = 32
    step = 0

    def matmul(weight: ir.Value) -> None:
        nonlocal current, step
        node = ir.node("MatMul", [current, weight], name=f"matmul_{step}")
        node.outputs[0].name = f"h_{step}"
        nodes.append(node)
        current = node.outputs[0]
        step += 1

    def dq(inputs: list[ir.Value], name: str, **attrs: int) -> ir.Value:
        node = ir.node("DequantizeLinear", inputs, attributes=attrs, name=name)
        node.outputs[0].name = f"{name}_out"
        nodes.append(node)
        return node.outputs[0]

    for i in range(n_int8):
        w = _const(inits, f"w8_{i}", rng.integers(-128, 128, (size, size), dtype=np.int8), DT.INT8)
        s = _const(
            inits, f"w8_{i}_scale", (rng.random(size, dtype=np.float32) + 0.5) / 4096, DT.FLOAT
        )
        z = _const(inits, f"w8_{i}_zp", np.zeros(size, dtype=np.int8), DT.INT8)
        matmul(dq([w, s, z], f"dq8_{i}", axis=1))
    for i in range(n_int4):
        q = rng.integers(-8, 8, (size, size), dtype=np.int8).astype(ml_dtypes.int4)
        w = _const(inits, f"w4_{i}", q, DT.INT4)
        s = _const(
            inits,
            f"w4_{i}_scale",
            (rng.random((size // block, size), dtype=np.float32) + 0.5) / 512,
            DT.FLOAT,
        )
        zp = rng.integers(-2, 3, (size // block, size), dtype=np.int8).astype(ml_dtypes.int4)
        z = _const(inits, f"w4_{i}_zp", zp, DT.INT4)
        matmul(dq([w, s, z], f"dq4_{i}", axis=0, block_size=block))
    for i in range(n_float):
        w = _const(
            inits, f"wf_{i}", rng.standard_normal((size, size), dtype=np.float32) / 64, DT.FLOAT
        )
        s = _const(inits, f"wf_{i}_scale", np.full(size, 4 / 64 / 127, dtype=np.float32), DT.FLOAT)
        z = _const(inits, f"wf_{i}_zp", np.zeros(size, dtype=np.int8), DT.INT8)
        qnode = ir.node("QuantizeLinear", [w, s, z], attributes={"axis": 1}, name=f"q_{i}")
        qnode.outputs[0].name = f"q_{i}_out"
        nodes.append(qnode)
        matmul(dq([qnode.outputs[0], s, z], f"dqf_{i}", axis=1))
    _chain_save(path, (x, current), nodes, inits, (21, 10))
    return path


def _chain_start(folder: str | Path, stem: str, size: int) -> tuple[Path, ir.Value]:
    """The chain's path in ``folder`` (made) and its float input x [1, size]."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    x = ir.Value(name="x", type=ir.TensorType(DT.FLOAT), shape=ir.Shape([1, size]))
    return folder / f"{stem}_{size}.onnx", x


def _chain_save(
    path: Path,
    ends: tuple[ir.Value, ir.Value],
    nodes: list[ir.Node],
    inits: list[ir.Value],
    versions: tuple[int, int],
) -> None:
    """Save the chain from x to its last value (named y, float [1, size]) with external
    data; ``versions``: (ai.onnx opset, IR version)."""
    x, last = ends
    last.name, last.type, last.shape = "y", ir.TensorType(DT.FLOAT), x.shape
    graph = ir.Graph(
        [x], [last], nodes=nodes, initializers=inits, opset_imports={"": versions[0]}, name="chain"
    )
    model = ir.Model(graph, ir_version=versions[1], producer_name="qlrewrite-benchmarks")
    ir.save(model, path, external_data=path.name + ".data")


def qdq_matmul_chain(folder: str | Path, *, size: int = 4096, count: int = 16) -> Path:
    """Write ``folder/qdq_matmul_chain_<size>.onnx`` (+ ``.data``) unless it exists: x ->
    (Q -> DQ -> MatMul(DQ(int8 weight, per column)))^count -> Q -> DQ -> y."""
    path, x = _chain_start(folder, "qdq_matmul_chain", size)
    if not path.exists():
        _write_qdq_chain(path, x, size, count)
    return path


def _write_qdq_chain(path: Path, x: ir.Value, size: int, count: int) -> None:
    rng, inits, nodes = np.random.default_rng(0), [], []

    def node(op: str, inputs: list[ir.Value], name: str, **attrs: int) -> ir.Value:
        made = ir.node(op, inputs, attributes=attrs, name=name)
        made.outputs[0].name = f"{name}_out"
        nodes.append(made)
        return made.outputs[0]

    current = x
    for i in range(count + 1):
        s = _const(inits, f"a{i}_scale", np.array(0.05 * (1 + i % 3), np.float32), DT.FLOAT)
        z = _const(inits, f"a{i}_zp", np.array(128, np.uint8), DT.UINT8)
        quantized = node("QuantizeLinear", [current, s, z], f"q{i}")
        current = node("DequantizeLinear", [quantized, s, z], f"dq{i}")
        if i == count:
            break
        w = _const(inits, f"w{i}", rng.integers(-127, 128, (size, size), dtype=np.int8), DT.INT8)
        scale = (rng.random(size, dtype=np.float32) + 0.5) / 4096
        ws = _const(inits, f"w{i}_scale", scale, DT.FLOAT)
        wz = _const(inits, f"w{i}_zp", np.zeros(size, dtype=np.int8), DT.INT8)
        weight = node("DequantizeLinear", [w, ws, wz], f"dqw{i}", axis=1)
        current = node("MatMul", [current, weight], f"matmul{i}")
    _chain_save(path, (x, current), nodes, inits, (13, 8))


def matmul_chain_inline(folder: str | Path, **sizes: int) -> Path:
    """:func:`matmul_chain` with its weights inside the .onnx file (as ONNX Runtime's
    quantizer saves models under 2 GB): ``folder/matmul_chain_<size>_inline.onnx``."""
    external = matmul_chain(folder, **sizes)
    path = external.with_name(external.stem + "_inline.onnx")
    if not path.exists():
        model = ir.load(external)
        ir.external_data.load_to_model(model)
        ir.save(model, path)
    return path


def _nbits_shapes(size: int, bits: int, block: int) -> dict[str, tuple[tuple[int, ...], DT]]:
    """The shapes and types of one MatMulNBits' B, scales and zero points (K = N = size)."""
    k_blocks = size // block
    return {
        "B": ((size, k_blocks, block * bits // 8), DT.UINT8),
        "scales": ((size, k_blocks), DT.FLOAT),
        "zp": ((size, k_blocks * bits // 8), DT.UINT8),
    }


def _lazy_weight(shapes: dict[str, tuple[tuple[int, ...], DT]], name: str, seed: int) -> ir.Value:
    """A lazily made, seeded initializer ``name`` of ``shapes`` (drawn only when saved)."""
    shape, dtype = shapes[name]

    def make() -> ir.Tensor:
        rng = np.random.default_rng(seed)
        if dtype == DT.FLOAT:
            array = ((rng.random(shape, dtype=np.float32) + 0.5) / 512).astype(np.float32)
        else:
            array = rng.integers(0, 256, shape, dtype=np.uint8)
        return ir.Tensor(array)

    tensor = ir.LazyTensor(make, dtype, ir.Shape(shape), name=f"{name}_{seed // 3}")
    return ir.Value(
        name=tensor.name, type=ir.TensorType(dtype), shape=tensor.shape, const_value=tensor
    )


def nbits_chain(folder: str | Path, *, size: int = 4096, count: int = 128) -> Path:
    """Write the model to ``folder/nbits_chain_<size>x<count>.onnx`` (+ ``.data``) unless
    it exists."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nbits_chain_{size}x{count}.onnx"
    if path.exists():
        return path
    bits, block = 4, 32
    shapes = _nbits_shapes(size, bits, block)
    lazy = functools.partial(_lazy_weight, shapes)

    x = ir.Value(name="x", type=ir.TensorType(DT.FLOAT), shape=ir.Shape([1, size]))
    current, nodes, inits = x, [], []
    for i in range(count):
        weights = [lazy(name, 3 * i + j) for j, name in enumerate(shapes)]
        inits += weights
        node = ir.node(
            "MatMulNBits",
            [current, *weights],
            attributes={"K": size, "N": size, "bits": bits, "block_size": block},
            domain="com.microsoft",
            name=f"matmul_{i}",
        )
        node.outputs[0].name = f"h_{i}"
        nodes.append(node)
        current = node.outputs[0]
    current.name = "y"
    current.type = ir.TensorType(DT.FLOAT)
    current.shape = ir.Shape([1, size])
    graph = ir.Graph(
        [x],
        [current],
        nodes=nodes,
        initializers=inits,
        opset_imports={"": 21, "com.microsoft": 1},
        name="nbits_chain",
    )
    model = ir.Model(graph, ir_version=10, producer_name="qlrewrite-benchmarks")
    ir.save(model, path, external_data=path.name + ".data")
    return path


if __name__ == "__main__":
    import sys

    print(matmul_chain(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qlrewrite-bench"))


def run_worker(
    script: str, tool: str, source: Path, target: Path, python: str = sys.executable
) -> tuple[float, int]:
    """Run ``script --worker tool source target`` in a fresh ``python`` process (``target``'s
    folder emptied first): wall seconds from outside and the peak RSS the worker prints.

    Each run starts with the page cache written back (``os.sync`` before the clock starts):
    a floor writes without fsync, and its output's writeback otherwise lands in whichever
    run comes next. Workers run with compiled bytecode (:func:`_worker_env`)."""
    if target.parent.exists():
        shutil.rmtree(target.parent)
    target.parent.mkdir(parents=True)
    env = _worker_env(python)
    os.sync()  # the last run's output written back now, not during this one
    started = time.perf_counter()
    done = subprocess.run(
        [python, script, "--worker", tool, str(source), str(target)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{tool} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])["peak_rss"]


def _worker_env(python: str) -> dict[str, str]:
    """The workers' environment: Python's bytecode cached under the temporary folder
    (``PYTHONPYCACHEPREFIX``), qlrewrite compiled there once. An installed package has its
    bytecode; an editable install under ``PYTHONDONTWRITEBYTECODE`` (set on the machines
    these figures come from) compiles every module of qlrewrite from source in every run,
    about 0.1-0.2 s that no user and no floor pays."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "qlrewrite-bench-pycache")
    if python not in _COMPILED:
        code = "import importlib.util as u; "
        code += "print(*u.find_spec('qlrewrite').submodule_search_locations)"
        found = subprocess.run(  # from the scripts' folder, as the workers see the path
            [python, "-c", code],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parent,
        )
        package = found.stdout.strip()
        if found.returncode == 0 and package:
            subprocess.run([python, "-m", "compileall", "-q", package], env=env, check=False)
        _COMPILED.add(python)
    return env


_COMPILED: set[str] = set()


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM (``ru_maxrss`` survives exec on Linux, so a
    child would report its parent's peak when that was higher)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
