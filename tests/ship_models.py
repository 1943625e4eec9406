"""Models a user ships to an older runtime (issue 42): a transformer block with an
opset-20 ``Gelu``, ``LayerNormalization`` and an ``ai.onnx.ml`` import, as ORT's
``quantize_static`` writes it (QDQ) and as its ``MatMulNBitsQuantizer`` writes it (4 bits),
and a weight with zero point 3 for TensorRT. Built in code; ORT (installed) quantizes."""

from __future__ import annotations

import functools
import logging
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["D", "block", "feeds", "nbits_block", "qdq_block", "zero_point_3_weight"]

#: Hidden width: K = 32 and 64 are two and four blocks of 16 per column (ORT 1.16 packs
#: the 4-bit zero points of an odd count of blocks per column otherwise: see the test).
D = 32


def block(opset: int = 20) -> onnx.ModelProto:
    """x -> MatMul -> Softmax -> +x -> LayerNormalization -> MatMul+b -> Gelu -> MatMul+b
    -> +h, importing ai.onnx.ml (unused), at ai.onnx ``opset``."""
    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    f = 2 * D
    inits = [
        weight("wq", (D, D)),
        weight("w1", (D, f)),
        weight("b1", (f,)),
        weight("w2", (f, D)),
        weight("b2", (D,)),
        weight("g", (D,)),
        weight("b", (D,)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("Softmax", ["q"], ["sm"], axis=-1),
        helper.make_node("Add", ["sm", "x"], ["r0"]),
        helper.make_node("LayerNormalization", ["r0", "g", "b"], ["h"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["h", "w1"], ["u"]),
        helper.make_node("Add", ["u", "b1"], ["ub"]),
        helper.make_node("Gelu", ["ub"], ["gl"]),
        helper.make_node("MatMul", ["gl", "w2"], ["d"]),
        helper.make_node("Add", ["d", "b2"], ["db"]),
        helper.make_node("Add", ["db", "h"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, D]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "block", [io[0]], [io[1]], initializer=inits)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def feeds(seed: int = 5) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((1, 4, D)).astype(np.float32)}


@functools.cache
def _qdq_bytes() -> bytes:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = iter([feeds(seed) for seed in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.left, None)

    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            folder = Path(tmp)
            onnx.save_model(block(), folder / "float.onnx")
            quantize_static(
                str(folder / "float.onnx"),
                str(folder / "q.onnx"),
                Reader(),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
            return (folder / "q.onnx").read_bytes()
    finally:
        logging.getLogger().setLevel(quiet)


def qdq_block() -> onnx.ModelProto:
    """:func:`block` quantized by ``quantize_static`` (QDQ, uint8 activations, int8
    weights)."""
    return onnx.load_model_from_string(_qdq_bytes())


@functools.cache
def _nbits_bytes() -> bytes:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        quantizer = MatMulNBitsQuantizer(block(), block_size=16, is_symmetric=False, bits=4)
        quantizer.process()
        return quantizer.model.model.SerializeToString()
    finally:
        logging.getLogger().setLevel(quiet)


def nbits_block() -> onnx.ModelProto:
    """:func:`block` with its MatMuls as 4-bit MatMulNBits (blocks of 16, zero points)."""
    return onnx.load_model_from_string(_nbits_bytes())


def zero_point_3_weight() -> onnx.ModelProto:
    """An int8 weight with zero point 3, dequantized into a MatMul (values -100..100)."""
    rng = np.random.default_rng(1)
    w = rng.integers(-100, 101, (D, 8)).astype(np.int8)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.float32(0.02), "s"),
        numpy_helper.from_array(np.int8(3), "z"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], name="dq"),
        helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "zp3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
