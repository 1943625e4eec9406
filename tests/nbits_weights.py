"""MatMulNBits / GatherBlockQuantized models with random weights, and ONNX Runtime runners.

Layouts written out by hand from ONNX Runtime's contrib schema text (independent of
qlrewrite): B [N, k_blocks, block_size * bits / 8] uint8, scales [N, k_blocks] (or flat),
zero points packed uint8 [N, ceil(k_blocks * bits / 8)]; GatherBlockQuantized uint8 data
packs 8 / bits values along the last axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A CPU session with graph optimizations and weight prepacking off."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def matmul_nbits_model(
    rng: np.random.Generator,
    *,
    n: int,
    k: int,
    bits: int,
    block_size: int,
    zero_points: bool = True,
    bias: bool = False,
    opset: int = 21,
    scale_dtype: type = np.float32,
    flat_scales: bool = False,
    accuracy_level: int | None = None,
) -> onnx.ModelProto:
    """One MatMulNBits node ``Y = A @ W`` with random B, scales and zero points."""
    k_blocks = -(-k // block_size)
    b = rng.integers(0, 256, (n, k_blocks, block_size * bits // 8), dtype=np.uint8)
    scales = (rng.standard_normal((n, k_blocks)) * 0.1).astype(scale_dtype)
    if flat_scales:
        scales = scales.reshape(-1)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")]
    inputs = ["A", "B", "scales"]
    if zero_points:
        zp = rng.integers(0, 256, (n, -(-k_blocks * bits // 8)), dtype=np.uint8)
        inits.append(numpy_helper.from_array(zp, "zp"))
        inputs.append("zp")
    if bias:
        inputs += [""] * (5 - len(inputs)) + ["bias"]
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(scale_dtype), "bias"))
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block_size}
    if accuracy_level is not None:
        attrs["accuracy_level"] = accuracy_level
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain=MS, name="mm", **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(scale_dtype))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", elem, ["M", k])],
        [helper.make_tensor_value_info("Y", elem, ["M", n])],
        inits,
    )
    return _model(graph, opset)


def gather_block_quantized_model(
    rng: np.random.Generator,
    *,
    dtype: str,
    shape: Sequence[int],
    bits: int,
    block_size: int,
    quantize_axis: int,
    gather_axis: int,
    zero_points: bool,
    scale_dtype: type = np.float32,
) -> tuple[onnx.ModelProto, np.ndarray]:
    """One GatherBlockQuantized node and indices selecting every row of ``gather_axis``."""
    shape = list(shape)
    logical = list(shape)
    if dtype == "uint8":
        logical[-1] *= 8 // bits
    blocks = list(logical)
    blocks[quantize_axis] = -(-logical[quantize_axis] // block_size)
    scales = (rng.standard_normal(blocks) * 0.1).astype(scale_dtype)
    inits = [numpy_helper.from_array(scales, "scales"), _random(rng, "data", dtype, shape)]
    inputs = ["data", "idx", "scales"]
    if zero_points:
        inputs.append("zp")
        zp_shape = list(blocks)
        if dtype == "uint8":
            zp_shape[-1] = -(-blocks[-1] // (8 // bits))
        inits.append(_random(rng, "zp", dtype, zp_shape))
    node = helper.make_node(
        "GatherBlockQuantized",
        inputs,
        ["Y"],
        domain=MS,
        name="gather",
        bits=bits,
        block_size=block_size,
        quantize_axis=quantize_axis,
        gather_axis=gather_axis,
    )
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(scale_dtype))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["I"])],
        [helper.make_tensor_value_info("Y", elem, [None] * len(shape))],
        inits,
    )
    indices = np.arange(shape[gather_axis], dtype=np.int64)
    return _model(graph, 25 if bits == 2 else 21), indices


def _random(rng: np.random.Generator, name: str, dtype: str, shape: list[int]):
    if dtype == "uint8":
        return numpy_helper.from_array(rng.integers(0, 256, shape, dtype=np.uint8), name)
    elem = TensorProto.INT4 if dtype == "int4" else TensorProto.UINT4
    values = rng.integers(-8, 8, shape) if dtype == "int4" else rng.integers(0, 16, shape)
    return helper.make_tensor(name, elem, shape, values.reshape(-1).tolist())


def _model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
        ir_version=10,
    )
