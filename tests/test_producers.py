"""Models written the way other quantizers write them, through every command.

Each fixture mimics one producer's pattern in code (no producer is installed): NNCF's
symmetric weight compression (negative block scales), NVIDIA ModelOpt's float16 Q/DQ,
AMD Quark's custom domains and its many opset imports, Brevitas' QONNX export.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import qlrewrite


def nncf_int4_sym(path: Path, seed: int = 0) -> Path:
    """NNCF INT4_SYM weight compression: int4 blocked DQ (block 32, axis 0 of [K, N]),
    no zero point, scale = w[argmax |w|] / -8 per block (about half negative)."""
    rng = np.random.default_rng(seed)
    k, n, block = 64, 16, 32
    w = rng.normal(size=(k, n)).astype(np.float32)
    blocks = w.reshape(k // block, block, n)
    peak = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None, :], axis=1)[:, 0]
    scale = (peak / -8).astype(np.float32)  # [K / block, N]
    q = np.clip(np.rint(blocks / scale[:, None, :]), -8, 7).reshape(k, n)
    weight = helper.make_tensor("w_q", TensorProto.INT4, [k, n], q.astype(np.int8).ravel().tolist())
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], axis=0, block_size=block),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "nncf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [weight, numpy_helper.from_array(scale, "w_s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, path)
    return path


def test_negative_scales_are_no_warning_by_default(tmp_path: Path) -> None:
    path = nncf_int4_sym(tmp_path / "nncf.onnx")
    scales = numpy_helper.to_array(onnx.load(path).graph.initializer[1])
    assert (scales < 0).any() and (scales > 0).any()  # the pattern under test
    assert qlrewrite.check(path).findings == []
    selected = qlrewrite.check(path, select=["QL504"]).findings
    assert [f.rule for f in selected] == ["QL504"]
    assert "negative" in selected[0].message
    assert [f.rule for f in qlrewrite.check(path, select=["QL5"]).findings] == ["QL504"]
    assert qlrewrite.check(path, select=["ALL"]).findings == []  # ALL: the default set
