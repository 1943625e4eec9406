"""One-node com.microsoft MatMulNBits / GatherBlockQuantized models for the rule tests.

Built with onnx.helper so that invalid nodes can be written as they appear in the wild.
Shapes follow ONNX Runtime's contrib schema text and its CPU kernels' checks, written out
here by hand (independent of qlrewrite): B [N, k_blocks, blob], scales [N, k_blocks] or
[N * k_blocks], zero points packed uint8 [N, ceil(k_blocks * bits / 8)] or in the scale
type [N, k_blocks], g_idx [K], bias [N]. Data is zero-filled: the rules read no weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

DT = ir.DataType
MS = "com.microsoft"
UNSET: Any = object()


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _zeros(name: str, dtype: DT, shape: Sequence[int], fill: float = 0) -> onnx.TensorProto:
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype in (DT.INT4, DT.UINT4, DT.INT2, DT.UINT2) or dtype.name.startswith(
        ("FLOAT8", "FLOAT4")
    ):
        return helper.make_tensor(name, int(dtype), list(shape), [fill] * count)
    array = np.full(list(shape), fill, dtype=dtype.numpy())
    return onnx.numpy_helper.from_array(array, name)


def nbits_shapes(k: int, n: int, bits: int, block_size: int) -> dict[str, tuple[int, ...]]:
    """The shapes the schema text gives each input (2-D scales and zero points)."""
    k_blocks = _ceil(k, block_size) if block_size > 0 else 1
    return {
        "B": (n, k_blocks, block_size * bits // 8),
        "scales": (n, k_blocks),
        "zp_packed": (n, _ceil(k_blocks * bits, 8)),
        "zp_float": (n, k_blocks),
        "g_idx": (k,),
        "bias": (n,),
    }


def matmul_nbits_model(
    *,
    k: int = 32,
    n: int = 8,
    bits: int = 4,
    block_size: int = 16,
    a_type: DT = DT.FLOAT,
    a_shape: Sequence[int | str] | None = UNSET,
    b_shape: Sequence[int] | None = None,
    b_type: DT = DT.UINT8,
    scale_type: DT | None = None,
    scale_shape: Sequence[int] | None = None,
    zp: str | None = None,  # None, "packed", "packed1d", "float", "float1d"
    zp_type: DT | None = None,
    zp_shape: Sequence[int] | None = None,
    g_idx: bool = False,
    g_idx_shape: Sequence[int] | None = None,
    g_idx_type: DT = DT.INT32,
    g_idx_values: Sequence[int] | None = None,
    bias: bool = False,
    bias_shape: Sequence[int] | None = None,
    bias_type: DT | None = None,
    attrs: Mapping[str, Any] | None = None,
    drop_attrs: Sequence[str] = (),
    ms_opset: int | None = 1,
    opset: int = 21,
    ir_version: int = 10,
    inputs_as_graph_inputs: Sequence[str] = (),
    extra_inputs: int = 0,
) -> onnx.ModelProto:
    """A model ``Y = MatMulNBits(A, B, scales[, zero_points][, g_idx][, bias])``.

    Defaults give a valid node; every argument can be bent to make an invalid one.
    """
    shapes = nbits_shapes(k, n, bits, block_size)
    scale_type = scale_type or a_type
    a_shape = [2, k] if a_shape is UNSET else a_shape
    node_attrs = {"K": k, "N": n, "bits": bits, "block_size": block_size, **(attrs or {})}
    for name in drop_attrs:
        node_attrs.pop(name, None)
    inits = [
        _zeros("B", b_type, b_shape or shapes["B"]),
        _zeros("scales", scale_type, scale_shape or shapes["scales"], 0.5),
    ]
    names = ["A", "B", "scales"]
    if zp is not None or g_idx or bias:
        names.append("" if zp is None else "zero_points")
    if zp is not None:
        packed = zp.startswith("packed")
        shape = shapes["zp_packed" if packed else "zp_float"]
        if zp.endswith("1d"):
            shape = (shape[0] * shape[1],)
        dtype = zp_type or (DT.UINT8 if packed else scale_type)
        inits.append(_zeros("zero_points", dtype, zp_shape or shape, 0))
    if g_idx or bias:
        names.append("g_idx" if g_idx else "")
    if g_idx:
        blocks = np.arange(k, dtype=np.int64) // block_size
        shape = tuple(g_idx_shape or shapes["g_idx"])
        if g_idx_values is not None:
            blocks = np.asarray(g_idx_values, dtype=np.int64)
        values = np.resize(blocks, int(np.prod(shape, dtype=np.int64))).reshape(shape)
        inits.append(onnx.numpy_helper.from_array(values.astype(g_idx_type.numpy()), "g_idx"))
    if bias:
        names.append("bias")
        inits.append(_zeros("bias", bias_type or a_type, bias_shape or shapes["bias"]))
    names.extend(f"extra{i}" for i in range(extra_inputs))
    inits.extend(_zeros(f"extra{i}", a_type, (1,)) for i in range(extra_inputs))
    node = helper.make_node("MatMulNBits", names, ["Y"], name="mm", domain=MS, **node_attrs)
    graph_inputs = [helper.make_tensor_value_info("A", int(a_type), a_shape)]
    for init in list(inits):
        if init.name in inputs_as_graph_inputs:
            inits.remove(init)
            graph_inputs.append(
                helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            )
    y_shape = None if a_shape is None else [*a_shape[:-1], n]
    graph = helper.make_graph(
        [node], "g", graph_inputs, [helper.make_tensor_value_info("Y", int(a_type), y_shape)],
        initializer=inits,
    )  # fmt: skip
    imports = [helper.make_opsetid("", opset)]
    if ms_opset is not None:
        imports.append(helper.make_opsetid(MS, ms_opset))
    return helper.make_model(graph, opset_imports=imports, ir_version=ir_version)


def gather_block_quantized_model(
    *,
    data_type: DT = DT.UINT8,
    data_shape: Sequence[int] = (8, 16),  # uint8: packed shape (last dim = values * bits / 8)
    bits: int | None = 4,
    block_size: int | None = 16,
    gather_axis: int | None = None,
    quantize_axis: int | None = None,
    scale_type: DT = DT.FLOAT,
    scale_shape: Sequence[int] | None = None,
    zp: bool = False,
    zp_type: DT | None = None,
    zp_shape: Sequence[int] | None = None,
    indices_type: DT = DT.INT64,
    indices_shape: Sequence[int | str] = (3,),
    attrs: Mapping[str, Any] | None = None,
    ms_opset: int | None = 1,
    opset: int = 21,
    ir_version: int = 10,
) -> onnx.ModelProto:
    """A model ``output = GatherBlockQuantized(data, indices, scales[, zero_points])``.

    Scale and zero-point shapes default to the ones ORT's kernel wants for the given
    data shape, axes, bits and block size (computed here by hand from its checks).
    """
    rank = len(data_shape)
    q_axis = (1 if quantize_axis is None else quantize_axis) % rank
    block = 128 if block_size is None else block_size
    nbits = 4 if bits is None else bits
    per_byte = 8 // nbits if data_type == DT.UINT8 else 1
    values = data_shape[q_axis] * per_byte
    blocks = _ceil(values, block) if block > 0 else 1
    default_scales = [d if i != q_axis else blocks for i, d in enumerate(data_shape)]
    zp_default = [d if i != q_axis else _ceil(blocks, per_byte) for i, d in enumerate(data_shape)]
    node_attrs = {
        name: value
        for name, value in (("bits", bits), ("block_size", block_size),
                            ("gather_axis", gather_axis), ("quantize_axis", quantize_axis))
        if value is not None
    }  # fmt: skip
    node_attrs.update(attrs or {})
    inits = [
        _zeros("data", data_type, data_shape),
        _zeros("scales", scale_type, scale_shape or default_scales, 0.5),
    ]
    names = ["data", "indices", "scales"]
    if zp:
        names.append("zero_points")
        inits.append(_zeros("zero_points", zp_type or data_type, zp_shape or zp_default))
    node = helper.make_node(
        "GatherBlockQuantized", names, ["output"], name="gbq", domain=MS, **node_attrs
    )
    g_axis = (0 if gather_axis is None else gather_axis) % rank
    out_dims = [*data_shape[:g_axis], *indices_shape, *data_shape[g_axis + 1 :]]
    if per_byte > 1:
        out_dims[-1] = out_dims[-1] * per_byte if isinstance(out_dims[-1], int) else out_dims[-1]
    out_shape = out_dims
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("indices", int(indices_type), indices_shape)],
        [helper.make_tensor_value_info("output", int(scale_type), out_shape)], initializer=inits,
    )  # fmt: skip
    imports = [helper.make_opsetid("", opset)]
    if ms_opset is not None:
        imports.append(helper.make_opsetid(MS, ms_opset))
    return helper.make_model(graph, opset_imports=imports, ir_version=ir_version)


_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


def ort_runs(proto: onnx.ModelProto, *, prepack: bool = False) -> bool:
    """True when ONNX Runtime's CPU provider loads the model and runs it on ones / zeros
    (unknown dims: 2; indices: 0).

    Weight prepacking is off unless ``prepack``: with it, ORT packs B at load and its
    kernel's input check no longer sees B (a float16 MatMulNBits then runs with a B of
    any shape, reading it by K and N; see test_prepacking_hides_wrong_b_shape).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    try:
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = {}
        for info in session.get_inputs():
            shape = [d if isinstance(d, int) else 2 for d in info.shape]
            dtype = _NUMPY[info.type]
            fill = 0 if np.issubdtype(dtype, np.integer) else 1
            feeds[info.name] = np.full(shape, fill, dtype=dtype)
        session.run(None, feeds)
    except Exception:
        return False
    return True
