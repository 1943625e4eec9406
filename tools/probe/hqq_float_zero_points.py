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
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper

K, N, BS = 32, 8, 16
res = {"ort": ort.__version__}
for bits in (2, 4, 8):
    rng = np.random.default_rng(bits)
    kb = K // BS
    q = rng.integers(0, 2**bits, (N, kb, BS)).astype(np.uint8)
    per = 8 // bits
    packed = np.zeros((N, kb, BS * bits // 8), np.uint8)
    for i in range(per):
        packed |= (q[:, :, i::per] << (bits * i)).astype(np.uint8)
    scale = (rng.random((N, kb)) * 0.1 + 0.01).astype(np.float32)
    zp = (rng.random((N, kb)) * (2**bits - 1)).astype(np.float32)
    node = helper.make_node(
        "MatMulNBits",
        ["a", "b", "s", "z"],
        ["y"],
        domain="com.microsoft",
        K=K,
        N=N,
        bits=bits,
        block_size=BS,
    )
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("a", T.FLOAT, [K, K])],
        [helper.make_tensor_value_info("y", T.FLOAT, [K, N])],
        initializer=[
            numpy_helper.from_array(packed, "b"),
            numpy_helper.from_array(scale.reshape(-1), "s"),
            numpy_helper.from_array(zp.reshape(-1), "z"),
        ],
    )
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8,
    )
    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        y = ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"]).run(
            None, {"a": np.eye(K, dtype=np.float32)}
        )[0]
    except Exception as e:
        res[bits] = "refused: " + str(e).splitlines()[0][:200]
        continue
    qk = q.reshape(N, K).T.astype(np.float32)  # [K, N]
    s = np.repeat(scale, BS, axis=1).T
    z = np.repeat(zp, BS, axis=1).T
    cands = {
        "q*s-s*z": qk * s - (s * z),
        "q*s+(-s*z)": qk * s + (-(s * z)),
        "(q-z)*s": (qk - z) * s,
        "ignored(default zp)": (qk - 2 ** (bits - 1)) * s,
        "ignored(zp 0)": qk * s,
    }
    res[bits] = [k for k, v in cands.items() if np.array_equal(y, v)]
print(json.dumps(res))
