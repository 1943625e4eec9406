"""Probe: how each ONNX Runtime release computes MatMulNBits with zero points in the scale
type (HQQ), at 2, 4 and 8 bits. Run with a release venv's python (onnxruntime, onnx and
NumPy), one JSON line out:

    /work/venvs/ort-1.X/bin/python tools/probe/hqq_float_zero_points.py

The weight (K=32, N=8, blocks of 16, float32 scales and zero points off the integer grid)
is read back by multiplying the identity (CPU provider, ORT_DISABLE_ALL: the output is the
weight, no sum rounds) and compared with candidate formulas; each width says the formulas
that match bit for bit, or the release's refusal. Measured 2026-11-28: 4 bits
``q*s-s*z`` in 1.18 to 1.32 (1.15 to 1.17 refuse), 2 bits ``q*s-s*z`` in 1.27 to 1.32
(1.15 to 1.26 refuse), 8 bits refused by every release 1.15 to 1.32
(qlrewrite/passes/nbits/to_onnx.py reads these facts).
"""

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

K, N, BLOCK = 32, 8, 16


def hqq_model(
    bits: int, k: int = K, n: int = N, block: int = BLOCK, opset: int = 17
) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray, np.ndarray]:
    """A MatMulNBits of ``bits`` (A: [k, k]) with float32 zero points off the integer grid;
    with its q [n, k], scales and zero points [n, k / block]. tests/passes/test_hqq_widths.py
    builds its models here too."""
    rng = np.random.default_rng(bits)
    blocks = k // block
    q = rng.integers(0, 2**bits, (n, blocks, block)).astype(np.uint8)
    per = 8 // bits
    packed = np.zeros((n, blocks, block * bits // 8), np.uint8)
    for i in range(per):  # a few values per byte: the probe's one-time packing
        packed |= (q[:, :, i::per] << (bits * i)).astype(np.uint8)
    scale = (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    zero = (rng.random((n, blocks)) * (2**bits - 1)).astype(np.float32)
    node = helper.make_node(
        "MatMulNBits",
        ["a", "b", "s", "z"],
        ["y"],
        domain="com.microsoft",
        K=k,
        N=n,
        bits=bits,
        block_size=block,
    )
    graph = helper.make_graph(
        [node],
        "hqq",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [k, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [k, n])],
        initializer=[
            numpy_helper.from_array(packed, "b"),
            numpy_helper.from_array(scale.reshape(-1), "s"),
            numpy_helper.from_array(zero.reshape(-1), "z"),
        ],
    )
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=imports, ir_version=8 if opset < 21 else 11)
    return model, q.reshape(n, k), scale, zero


def _matching(bits: int) -> list[str] | str:
    """The formulas the release's weight matches bit for bit, or its refusal."""
    model, q, scale, zero = hqq_model(bits)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model.SerializeToString(), options)
        y = session.run(None, {"a": np.eye(K, dtype=np.float32)})[0]
    except Exception as exc:  # the release's refusal is the finding
        return "refused: " + str(exc).splitlines()[0][:200]
    qk = q.T.astype(np.float32)  # [K, N]
    s, z = np.repeat(scale, BLOCK, axis=1).T, np.repeat(zero, BLOCK, axis=1).T
    candidates = {
        "q*s-s*z": qk * s - (s * z),
        "(q-z)*s": (qk - z) * s,
        "ignored(default zp)": (qk - 2 ** (bits - 1)) * s,
        "ignored(zp 0)": qk * s,
    }
    return [name for name, v in candidates.items() if np.array_equal(y, v)]


def main() -> None:
    print(json.dumps({"ort": ort.__version__, **{str(b): _matching(b) for b in (2, 4, 8)}}))


if __name__ == "__main__":
    main()
