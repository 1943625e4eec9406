"""The models the rules' examples are built from: one quantized node, written with
onnx.helper so that invalid nodes can be written as they appear in the wild (onnx_ir
would refuse some of them).

Output types and shapes are computed here by hand from the spec text and ONNX Runtime's
contrib schemas, not with qlrewrite: a rule's test compares the checker with what these
models are, so they must not share its code. Data is zero-filled (the rules read only
small constant scales and zero points). Each rule's :class:`Example` names these
builders in its :class:`~qlrewrite.rules.model_spec.ModelSpec` (:mod:`model_specs`
builds them); the tests call them directly.

MatMulNBits shapes (ONNX Runtime's contrib schema text and CPU kernel checks): B [N,
k_blocks, blob], scales [N, k_blocks] or [N * k_blocks], zero points packed uint8 [N,
ceil(k_blocks * bits / 8)] or in the scale type [N, k_blocks], g_idx [K], bias [N].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

__all__ = [
    "DQ",
    "DT",
    "IR_OF_OPSET",
    "MS",
    "ONNX_VERSIONS",
    "Q",
    "array",
    "cut_inputs",
    "data_length",
    "default_output_type",
    "dq_into_matmul",
    "edited",
    "external_data",
    "float_model",
    "function_qdq_model",
    "gather_block_quantized_model",
    "ignore_metadata",
    "matmul_nbits_model",
    "nbits_shapes",
    "qdq_matmul",
    "qdq_matmul_weight",
    "qdq_model",
    "qdq_weight_op",
    "weight_dq_matmul",
]

DT = ir.DataType
MS = "com.microsoft"
Q = "QuantizeLinear"
DQ = "DequantizeLinear"

#: The IR version that came with each ai.onnx opset that has a Q/DQ version.
IR_OF_OPSET = {10: 5, 13: 7, 19: 9, 21: 10, 23: 11, 24: 12, 25: 13, 28: 14}
ONNX_VERSIONS = tuple(IR_OF_OPSET)
UNSET: Any = object()


def _tensor(name: str, dtype: DT, shape: Sequence[int], values: Any) -> onnx.TensorProto:
    shape = list(shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if values is None:
        values = 0
    array = np.broadcast_to(np.asarray(values, dtype=np.float64), (count,))
    if dtype in (DT.FLOAT, DT.FLOAT16, DT.BFLOAT16, DT.DOUBLE) or dtype.name.startswith(
        ("FLOAT8", "FLOAT4", "FLOAT6")
    ):
        vals = array.tolist()
    else:
        vals = array.astype(np.int64).tolist()
    return helper.make_tensor(name, int(dtype), shape, vals)


def default_output_type(
    op: str,
    opset: int,
    *,
    domain: str,
    scale_type: DT,
    zp_type: DT | None,
    attrs: Mapping[str, Any],
) -> DT:
    """The output type by the spec text (hand-written, independent of qlrewrite.opsets)."""
    if op == Q:
        if zp_type is not None:
            return zp_type
        if attrs.get("output_dtype"):
            return DT(attrs["output_dtype"])
        return DT.UINT8
    if domain == "" and opset < 19:
        return DT.FLOAT
    if domain == "" and opset >= 23 and attrs.get("output_dtype"):
        return DT(attrs["output_dtype"])
    return scale_type


def qdq_model(
    op: str = DQ,
    opset: int = 21,
    *,
    domain: str = "",
    x_type: DT = UNSET,
    x_shape: Sequence[int | str] | None = (4, 3),
    scale_type: DT = DT.FLOAT,
    scale_shape: Sequence[int] = (),
    scale: Any = 0.5,
    zp_type: DT | None = UNSET,
    zp_shape: Sequence[int] | None = None,
    zp: Any = 0,
    attrs: Mapping[str, Any] | None = None,
    ir_version: int | None = None,
    out_type: DT | None = UNSET,
    imports: Mapping[str, int] | None = None,
    scale_as: str = "initializer",  # initializer | constant | input
    n_outputs: int = 1,
    drop_inputs: int = 0,
    extra_input: bool = False,
) -> onnx.ModelProto:
    """A model with one Q/DQ node ``y = op(x, scale[, zero_point])`` and x a graph input.

    ``zp_type=None`` omits the zero point; ``out_type=None`` leaves the output's type
    undeclared. ``imports`` replaces the opset imports entirely.
    """
    attrs = dict(attrs or {})
    if x_type is UNSET:
        x_type = DT.FLOAT if op == Q else DT.UINT8
    if zp_type is UNSET:
        zp_type = DT.UINT8 if op == Q else x_type
    inputs = [helper.make_tensor_value_info("x", int(x_type), x_shape)]
    inits, nodes = _scale_source(inputs, scale_as, _tensor("scale", scale_type, scale_shape, scale))
    names = ["x", "scale"]
    if zp_type is not None:
        inits.append(_tensor("zp", zp_type, scale_shape if zp_shape is None else zp_shape, zp))
        names.append("zp")
    names = [*names, *(["x"] if extra_input else [])]
    names = names[: len(names) - drop_inputs]
    outputs = ["y"] + [f"y{i}" for i in range(1, n_outputs)]
    nodes.append(helper.make_node(op, names, outputs, name="qdq", domain=domain, **attrs))
    if out_type is UNSET:
        out_type = default_output_type(
            op, opset, domain=domain, scale_type=scale_type, zp_type=zp_type, attrs=attrs
        )
    graph_outputs = [
        helper.make_tensor_value_info("y", int(out_type), x_shape)
        if out_type is not None
        else helper.make_empty_tensor_value_info("y")
    ]
    graph = helper.make_graph(nodes, "g", inputs, graph_outputs, initializer=inits)
    return _qdq_model_of(graph, opset, domain, imports, ir_version)


def _scale_source(
    inputs: list[onnx.ValueInfoProto], scale_as: str, scale: onnx.TensorProto
) -> tuple[list[onnx.TensorProto], list[onnx.NodeProto]]:
    """The initializers and nodes that give the scale (or a graph input added to
    ``inputs``): ``scale_as`` is initializer, constant or input."""
    if scale_as == "initializer":
        return [scale], []
    if scale_as == "constant":
        return [], [helper.make_node("Constant", [], ["scale"], value=scale)]
    inputs.append(helper.make_tensor_value_info("scale", scale.data_type, list(scale.dims)))
    return [], []


def _qdq_model_of(
    graph: onnx.GraphProto,
    opset: int,
    domain: str,
    imports: Mapping[str, int] | None,
    ir_version: int | None,
) -> onnx.ModelProto:
    """``graph`` as a model importing ``opset`` (and com.microsoft 1 for its nodes), or
    ``imports`` exactly; the IR version that came with the opset unless given."""
    if imports is None:
        imports = {"": opset if domain == "" else 13}
        if domain == MS:
            imports[MS] = 1
    opset_imports = [helper.make_opsetid(d, v) for d, v in imports.items()]
    if ir_version is None:
        ir_version = IR_OF_OPSET.get(opset, 10) if domain == "" else 10
    return helper.make_model(graph, opset_imports=opset_imports, ir_version=ir_version)


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
    node_attrs = {name: v for name, v in node_attrs.items() if name not in drop_attrs}
    zero_points = None
    if zp is not None:
        zero_points = _nbits_zero_points(zp, shapes, zp_type, zp_shape, scale_type)
    g_idx_tensor = bias_tensor = None
    if g_idx:
        g_idx_shape = g_idx_shape or shapes["g_idx"]
        g_idx_tensor = _nbits_g_idx(k, block_size, g_idx_shape, g_idx_values, g_idx_type)
    if bias:
        bias_tensor = _zeros("bias", bias_type or a_type, bias_shape or shapes["bias"])
    optional = {"zero_points": zero_points, "g_idx": g_idx_tensor, "bias": bias_tensor}
    inits = [
        _zeros("B", b_type, b_shape or shapes["B"]),
        _zeros("scales", scale_type, scale_shape or shapes["scales"], 0.5),
        *(t for t in optional.values() if t is not None),
        *(_zeros(f"extra{i}", a_type, (1,)) for i in range(extra_inputs)),
    ]
    names = ["A", "B", "scales", *_optional_names(optional)]
    names.extend(f"extra{i}" for i in range(extra_inputs))
    node = helper.make_node("MatMulNBits", names, ["Y"], name="mm", domain=MS, **node_attrs)
    graph = _nbits_graph(node, inits, a_type, a_shape, n=n, graph_inputs=inputs_as_graph_inputs)
    return _ms_model(graph, opset, ms_opset, ir_version)


def _nbits_graph(
    node: onnx.NodeProto,
    inits: list[onnx.TensorProto],
    a_type: DT,
    a_shape: Sequence[int | str] | None,
    *,
    n: int,
    graph_inputs: Sequence[str],
) -> onnx.GraphProto:
    """The graph of the one MatMulNBits ``node``: input A, output Y ``[..., n]``, the
    initializers named in ``graph_inputs`` moved to graph inputs."""
    y_shape = None if a_shape is None else [*a_shape[:-1], n]
    a = helper.make_tensor_value_info("A", int(a_type), a_shape)
    y = helper.make_tensor_value_info("Y", int(a_type), y_shape)
    inputs = [a, *_to_graph_inputs(inits, graph_inputs)]
    return helper.make_graph([node], "g", inputs, [y], initializer=inits)


def _to_graph_inputs(
    inits: list[onnx.TensorProto], names: Sequence[str]
) -> list[onnx.ValueInfoProto]:
    """The initializers named in ``names``, taken out of ``inits`` as graph inputs."""
    moved = [init for init in inits if init.name in names]
    for init in moved:
        inits.remove(init)
    return [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in moved]


def _nbits_zero_points(
    zp: str,
    shapes: Mapping[str, tuple[int, ...]],
    zp_type: DT | None,
    zp_shape: Sequence[int] | None,
    scale_type: DT,
) -> onnx.TensorProto:
    """MatMulNBits' zero points: ``zp`` is packed, packed1d, float or float1d."""
    packed = zp.startswith("packed")
    shape = shapes["zp_packed" if packed else "zp_float"]
    if zp.endswith("1d"):
        shape = (shape[0] * shape[1],)
    dtype = zp_type or (DT.UINT8 if packed else scale_type)
    return _zeros("zero_points", dtype, zp_shape or shape, 0)


def _nbits_g_idx(
    k: int, block_size: int, shape: Sequence[int], values: Sequence[int] | None, dtype: DT
) -> onnx.TensorProto:
    """MatMulNBits' g_idx: ``values`` (default: each input feature's block), resized."""
    blocks = np.arange(k, dtype=np.int64) // block_size
    if values is not None:
        blocks = np.asarray(values, dtype=np.int64)
    shape = tuple(shape)
    array = np.resize(blocks, int(np.prod(shape, dtype=np.int64))).reshape(shape)
    return onnx.numpy_helper.from_array(array.astype(dtype.numpy()), "g_idx")


def _optional_names(optional: Mapping[str, onnx.TensorProto | None]) -> list[str]:
    """The optional inputs' names up to the last one given ("" for one skipped)."""
    names = [name if tensor is not None else "" for name, tensor in optional.items()]
    while names and not names[-1]:
        names.pop()
    return names


def _ms_model(
    graph: onnx.GraphProto, opset: int, ms_opset: int | None, ir_version: int
) -> onnx.ModelProto:
    """``graph`` as a model importing ai.onnx ``opset`` and com.microsoft ``ms_opset``
    (None: no com.microsoft import)."""
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
    per_byte = 8 // (4 if bits is None else bits) if data_type == DT.UINT8 else 1
    default_scales, zp_default = _gbq_shapes(
        data_shape, q_axis, 128 if block_size is None else block_size, per_byte
    )
    written = {"bits": bits, "block_size": block_size}
    written |= {"gather_axis": gather_axis, "quantize_axis": quantize_axis}
    node_attrs = {k: v for k, v in written.items() if v is not None} | dict(attrs or {})
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
    out_shape = [*data_shape[:g_axis], *indices_shape, *data_shape[g_axis + 1 :]]
    if per_byte > 1 and isinstance(out_shape[-1], int):
        out_shape[-1] *= per_byte
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("indices", int(indices_type), indices_shape)],
        [helper.make_tensor_value_info("output", int(scale_type), out_shape)],
        initializer=inits,
    )
    return _ms_model(graph, opset, ms_opset, ir_version)


def _gbq_shapes(
    data_shape: Sequence[int], q_axis: int, block: int, per_byte: int
) -> tuple[list[int], list[int]]:
    """The scales' and the zero points' shapes ORT's GatherBlockQuantized kernel wants."""
    blocks = _ceil(data_shape[q_axis] * per_byte, block) if block > 0 else 1
    scales = [d if i != q_axis else blocks for i, d in enumerate(data_shape)]
    zero_points = [d if i != q_axis else _ceil(blocks, per_byte) for i, d in enumerate(data_shape)]
    return scales, zero_points


def edited(proto: onnx.ModelProto, *edits: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    """``proto`` after ``edits`` (each changes it in place): for nodes no builder argument
    makes (a second output, an empty input, a float attribute)."""
    for edit in edits:
        edit(proto)
    return proto


_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "int64_data",
    "double_data",
    "uint64_data",
    "string_data",
)


def _initializer(proto: onnx.ModelProto, name: str) -> onnx.TensorProto:
    tensor: onnx.TensorProto = next(t for t in proto.graph.initializer if t.name == name)
    return tensor


def external_data(
    name: str, location: str, *, offset: int = 0, length: int | None = None
) -> Callable[[onnx.ModelProto], None]:
    """An edit: initializer ``name``'s data referenced in the external file ``location``
    (the file itself is not written)."""

    def edit(proto: onnx.ModelProto) -> None:
        tensor = _initializer(proto, name)
        for field in _DATA_FIELDS:
            tensor.ClearField(field)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        entries = {"location": location, "offset": str(offset)}
        if length is not None:
            entries["length"] = str(length)
        for key, value in entries.items():
            tensor.external_data.add(key=key, value=value)

    return edit


def data_length(name: str, nbytes: int) -> Callable[[onnx.ModelProto], None]:
    """An edit: initializer ``name`` stored with ``nbytes`` bytes of raw data."""

    def edit(proto: onnx.ModelProto) -> None:
        tensor = _initializer(proto, name)
        for field in _DATA_FIELDS:
            tensor.ClearField(field)
        tensor.raw_data = bytes(nbytes)

    return edit


def ignore_metadata(codes: str) -> Callable[[onnx.ModelProto], None]:
    """An edit: the first node gets ``qlrewrite:ignore`` = ``codes`` in its metadata."""

    def edit(proto: onnx.ModelProto) -> None:
        proto.graph.node[0].metadata_props.add(key="qlrewrite:ignore", value=codes)

    return edit


def cut_inputs(count: int) -> Callable[[onnx.ModelProto], None]:
    """An edit: the first node keeps only its first ``count`` inputs."""

    def edit(proto: onnx.ModelProto) -> None:
        del proto.graph.node[0].input[count:]

    return edit


def reversed_nodes() -> Callable[[onnx.ModelProto], None]:
    """An edit: the main graph's nodes in reverse order (each reads before its writer)."""

    def edit(proto: onnx.ModelProto) -> None:
        nodes = list(proto.graph.node)
        del proto.graph.node[:]
        proto.graph.node.extend(reversed(nodes))

    return edit


def rewired(node: str, index: int, value: str) -> Callable[[onnx.ModelProto], None]:
    """An edit: input ``index`` of the main graph's node named ``node`` reads ``value``."""

    def edit(proto: onnx.ModelProto) -> None:
        (found,) = [n for n in proto.graph.node if n.name == node]
        found.input[index] = value

    return edit


def function_qdq_model(function_imports: Mapping[str, int]) -> onnx.ModelProto:
    """A model whose main graph calls the local function ``local.f``, which holds one
    com.microsoft DequantizeLinear (uint8 ``x`` [4, 3], scale 0.5, zero point 0) and
    imports ``function_imports``; the model imports ai.onnx 13 and com.microsoft 1."""
    scale = helper.make_node("Constant", [], ["s"], value=_tensor("s", DT.FLOAT, (), 0.5))
    zero = helper.make_node("Constant", [], ["z"], value=_tensor("z", DT.UINT8, (), 0))
    dq = helper.make_node(DQ, ["x", "s", "z"], ["y"], name="dq", domain=MS)
    function = helper.make_function(
        "local",
        "f",
        ["x"],
        ["y"],
        [scale, zero, dq],
        [helper.make_opsetid(d, v) for d, v in function_imports.items()],
    )
    graph = helper.make_graph(
        [helper.make_node("f", ["x"], ["y"], name="call", domain="local")],
        "main",
        [helper.make_tensor_value_info("x", DT.UINT8, (4, 3))],
        [helper.make_tensor_value_info("y", DT.FLOAT, (4, 3))],
    )
    imports = {"": 13, MS: 1, "local": 1}
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()],
        functions=[function],
        ir_version=IR_OF_OPSET[13],
    )


def array(values: Any, dtype: DT, shape: Sequence[int] | None = None) -> np.ndarray:
    """``values`` as a NumPy array of ``dtype`` (repeated to ``shape`` when given): an
    override of a QOperator model's constant."""
    result = np.asarray(values, dtype=dtype.numpy())
    return result if shape is None else np.broadcast_to(result, tuple(shape)).copy()


def float_model() -> onnx.ModelProto:
    """A float model: one Relu, nothing quantized."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 3])
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def dq_into_matmul(x_type: DT) -> onnx.ModelProto:
    """DQ(constant weight [3, 2] of ``x_type``) -> MatMul."""
    proto = qdq_model(DQ, 21, x_type=x_type, x_shape=(3, 2))
    proto.graph.node.append(helper.make_node("MatMul", ["a", "y"], ["z"], name="mm"))
    proto.graph.input.append(helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 3]))
    del proto.graph.output[:]
    proto.graph.output.append(helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2, 2]))
    return proto


def weight_dq_matmul(dtype: DT, zero_point: int = 0) -> onnx.ModelProto:
    """DequantizeLinear of a constant [64, 8] weight of ``dtype`` (per-tensor, zero point
    ``zero_point``) into a MatMul: the form the probe measured as "weight DQ->MatMul"."""
    weight = ir.serde.serialize_tensor(
        ir.Tensor(np.ones((64, 8), dtype=dtype.numpy()), dtype=dtype, name="w")
    )
    zero = ir.serde.serialize_tensor(
        ir.Tensor(np.array(zero_point, dtype=dtype.numpy()), dtype=dtype, name="z")
    )
    scale = helper.make_tensor("s", onnx.TensorProto.FLOAT, [], [0.01])
    nodes = [
        helper.make_node(DQ, ["w", "s", "z"], ["wf"], name="dq"),
        helper.make_node("MatMul", ["a", "wf"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
        initializer=[weight, scale, zero],
    )
    imports = [helper.make_opsetid("", 21)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def qdq_matmul(activation: DT) -> onnx.ModelProto:
    """Q -> DQ of a [2, 64] activation of ``activation`` into a MatMul with a dequantized
    int8 [64, 8] weight, its output quantized again: the QDQ form ORT's quantizer writes."""
    model = weight_dq_matmul(DT.INT8)
    graph = model.graph
    zero = ir.Tensor(np.zeros((), dtype=activation.numpy()), dtype=activation, name="az")
    graph.initializer.extend(
        [
            helper.make_tensor("as", onnx.TensorProto.FLOAT, [], [0.05]),
            ir.serde.serialize_tensor(zero),
        ]
    )
    quantize = [
        helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"], name="qa"),
        helper.make_node(DQ, ["aq", "as", "az"], ["af"], name="dqa"),
    ]
    graph.node[1].input[0] = "af"
    graph.node[1].output[0] = "yf"
    graph.node.extend(
        [
            helper.make_node("QuantizeLinear", ["yf", "as", "az"], ["yq"], name="qy"),
            helper.make_node(DQ, ["yq", "as", "az"], ["y"], name="dqy"),
        ]
    )
    for node in reversed(quantize):
        graph.node.insert(0, node)
    return model


#: The float8 types, whose zero point is always 0 (their "range" is small integers, exact).
FLOAT8_TYPES = (DT.FLOAT8E4M3FN, DT.FLOAT8E4M3FNUZ, DT.FLOAT8E5M2, DT.FLOAT8E5M2FNUZ)


def _weight_range(dtype: DT) -> tuple[int, int]:
    """The integer range of a weight type (inclusive; float8: [-8, 8], zero point 0)."""
    if dtype in FLOAT8_TYPES:
        return -8, 8
    bits = {DT.INT4: 4, DT.UINT4: 4, DT.INT8: 8, DT.UINT8: 8, DT.INT16: 16, DT.UINT16: 16}
    width = bits[dtype]
    if dtype in (DT.UINT4, DT.UINT8, DT.UINT16):
        return 0, 2**width - 1
    return -(2 ** (width - 1)), 2 ** (width - 1) - 1


def _typed(name: str, array: np.ndarray, dtype: DT) -> onnx.TensorProto:
    return ir.serde.serialize_tensor(ir.Tensor(array.astype(dtype.numpy()), dtype=dtype, name=name))


def _weight_scale_shape(granularity: str, along: str, block: int, k: int, n: int) -> tuple:
    if granularity == "per-tensor":
        return ()
    if granularity == "per-axis":
        return (n,)
    return (k // block, n) if along == "K" else (k, n // block)


def _quantized_weight(
    weight: DT, granularity: str, *, along: str, block: int, zero_point: bool, k: int, n: int
) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """DequantizeLinear "dq" of a random constant [k, n] weight into "wf": scales that
    differ per channel and per block (a misread scale shows), zero points near the middle."""
    rng = np.random.default_rng(0)
    low, high = _weight_range(weight)
    shape = _weight_scale_shape(granularity, along, block, k, n)
    scale = rng.uniform(0.5, 2.0, shape).astype(np.float32) * np.float32(0.1 / max(-low, high))
    inits = [
        _typed("w", rng.integers(low, high, (k, n), endpoint=True), weight),
        helper.make_tensor("ws", onnx.TensorProto.FLOAT, shape, scale.ravel().tolist()),
    ]
    inputs = ["w", "ws"]
    if zero_point:
        middle = (low + high + 1) // 2
        spread = 0 if weight in FLOAT8_TYPES else 2
        inits.append(_typed("wz", middle + rng.integers(-spread, spread + 1, shape), weight))
        inputs.append("wz")
    attrs: dict[str, int] = {}
    if granularity == "per-axis":
        attrs = {"axis": 1}
    elif granularity == "blocked":
        attrs = {"axis": 0 if along == "K" else 1, "block_size": block}
    return helper.make_node(DQ, inputs, ["wf"], name="dq", **attrs), inits


def _quantize_pair_of(name: str, dtype: DT, zero: int) -> tuple[list[onnx.NodeProto], list]:
    """Q -> DQ of ``name`` into ``name``_f: scale 0.05, zero point ``zero`` of ``dtype``."""
    inits = [
        helper.make_tensor(f"{name}_s", onnx.TensorProto.FLOAT, [], [0.05]),
        _typed(f"{name}_z", np.array(zero), dtype),
    ]
    quantized = [name, f"{name}_s", f"{name}_z"]
    nodes = [
        helper.make_node(Q, quantized, [f"{name}_q"], name=f"q_{name}"),
        helper.make_node(
            DQ, [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_f"], name=f"dq_{name}"
        ),
    ]
    return nodes, inits


def qdq_matmul_weight(
    activation: DT,
    weight: DT = DT.INT8,
    granularity: str = "per-axis",
    *,
    along: str = "K",
    block: int = 16,
    zero_point: bool = True,
    output: str = "quantized",
    k: int = 64,
    n: int = 16,
    opset: int = 21,
) -> onnx.ModelProto:
    """A QDQ MatMul at ``opset`` (21): activation "a" [rows, k] (rows symbolic) quantized to
    ``activation`` (scale 0.05, zero point 0: feed values in [0, 6)) and dequantized, times
    the DequantizeLinear "dq" of a random constant [k, n] ``weight`` (``granularity``
    per-tensor, per-axis or blocked ``along`` K (axis 0) or N (axis 1) in blocks of
    ``block``; ``zero_point`` given or not); with ``output`` "quantized" the MatMul's
    output is quantized and dequantized again (zero point mid-range), "float" it is the
    graph output. The probe's QDQ MatMul patterns and QL706's example."""
    dq, inits = _quantized_weight(
        weight, granularity, along=along, block=block, zero_point=zero_point, k=k, n=n
    )
    nodes_a, inits_a = _quantize_pair_of("a", activation, 0)
    nodes = [dq, *nodes_a, helper.make_node("MatMul", ["a_f", "wf"], ["y"], name="mm")]
    inits += inits_a
    out = "y"
    if output == "quantized":
        low, high = _weight_range(activation)
        nodes_y, inits_y = _quantize_pair_of("y", activation, (low + high + 1) // 2)
        nodes, inits, out = nodes + nodes_y, inits + inits_y, "y_f"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, ["rows", n])],
        initializer=inits,
    )
    imports = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_OF_OPSET.get(opset, 10))


#: The weight operators of :func:`qdq_weight_op`: (activation shape, weight shape, output
#: shape); Gemm's weight is given for transB=0 ([K, N]; transB=1 transposes it). As many
#: input as output channels: a scale on the wrong axis still broadcasts, so a kernel that
#: misreads it computes other values rather than failing.
WEIGHT_OPS = {
    "Conv": ((1, 4, 6, 6), (4, 4, 3, 3), (1, 4, 4, 4)),
    "ConvTranspose": ((1, 4, 4, 4), (4, 4, 3, 3), (1, 4, 6, 6)),
    "Gemm": (("rows", 32), (32, 32), ("rows", 32)),
}


def _weight_op_dq(
    weight: DT, shape: tuple[int, ...], granularity: str, *, axis: int, block: int, zero_points: str
) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """DequantizeLinear "dq" of a random constant ``weight`` of ``shape`` into "wf": scales
    that differ per channel and block; ``zero_points`` "equal" (the type's middle), "differ"
    (around it; float8: 0) or "none"."""
    rng = np.random.default_rng(0)
    low, high = _weight_range(weight)
    if granularity == "per-tensor":
        scale_shape: tuple[int, ...] = ()
    elif granularity == "per-axis":
        scale_shape = (shape[axis],)
    else:
        scale_shape = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
    unit = np.float32(0.1 / max(-low, high))
    scale = rng.uniform(0.5, 2.0, scale_shape).astype(np.float32) * unit
    inits = [
        _typed("w", rng.integers(low, high, shape, endpoint=True), weight),
        helper.make_tensor("ws", onnx.TensorProto.FLOAT, scale_shape, scale.ravel().tolist()),
    ]
    inputs = ["w", "ws"]
    if zero_points != "none":
        middle = np.full(scale_shape, (low + high + 1) // 2)
        if zero_points == "differ" and weight not in FLOAT8_TYPES:
            middle = middle + (np.arange(middle.size).reshape(scale_shape) % 3 - 1)
        inits.append(_typed("wz", middle, weight))
        inputs.append("wz")
    attrs: dict[str, int] = {}
    if granularity != "per-tensor":
        attrs["axis"] = axis
    if granularity == "blocked":
        attrs["block_size"] = block
    return helper.make_node(DQ, inputs, ["wf"], name="dq", **attrs), inits


def qdq_weight_op(
    op: str,
    activation: DT,
    weight: DT = DT.INT8,
    granularity: str = "per-axis",
    *,
    axis: int = 0,
    block: int = 2,
    zero_points: str = "equal",
    trans_b: int = 0,
    opset: int = 13,
    output: str = "quantized",
    activation_zero: int = 0,
) -> onnx.ModelProto:
    """A QDQ Conv, ConvTranspose or Gemm (:data:`WEIGHT_OPS`) as ORT's quantizer writes it:
    activation "a" quantized to ``activation`` (scale 0.05, zero point ``activation_zero``,
    0 by default: feed values in [0, 6)) and dequantized, the DequantizeLinear "dq" of a
    constant ``weight`` quantized ``granularity`` on ``axis`` (blocks of ``block``;
    ``zero_points`` "equal", "differ" or "none"), the output quantized and dequantized
    (scale 0.025, zero point mid-range: a step is about 1% of the largest output); with
    ``output`` "float" the op's output is the graph's. The probe's weight-operator
    patterns."""
    a_shape, w_shape, y_shape = WEIGHT_OPS[op]
    if op == "Gemm" and trans_b:
        w_shape = w_shape[::-1]
    dq, inits = _weight_op_dq(
        weight, w_shape, granularity, axis=axis, block=block, zero_points=zero_points
    )
    nodes_a, inits_a = _quantize_pair_of("a", activation, activation_zero)
    attrs = {"transB": trans_b} if op == "Gemm" else {}
    node = helper.make_node(op, ["a_f", "wf"], ["y"], name="op", **attrs)
    low, high = _weight_range(activation)
    nodes_y, inits_y = _quantize_pair_of("y", activation, (low + high + 1) // 2)
    inits_y[0] = helper.make_tensor("y_s", onnx.TensorProto.FLOAT, [], [0.025])
    if output == "float":
        nodes_y, inits_y = [], []
    graph = helper.make_graph(
        [dq, *nodes_a, node, *nodes_y],
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("y_f" if nodes_y else "y", onnx.TensorProto.FLOAT, y_shape)],
        initializer=[*inits, *inits_a, *inits_y],
    )
    imports = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_OF_OPSET.get(opset, 10))


#: The ops of :func:`qdq_biased_op`: (activation shape, int8 weight shape, output shape).
BIASED_OPS = {
    "Conv": ((1, 4, 6, 6), (8, 4, 3, 3), (1, 8, 4, 4)),
    "Gemm": ((3, 16), (16, 8), (3, 8)),
    "MatMul": ((3, 16), (16, 8), (3, 8)),
}


def qdq_biased_op(
    op: str,
    bias_factor: float = 1.0,
    *,
    per_axis: bool = False,
    bias: Sequence[int] | None = None,
    opset: int = 13,
) -> onnx.ModelProto:
    """A QDQ Conv, Gemm or MatMul + Add (:data:`BIASED_OPS`) with an int32 bias: activation
    "x" (feed values in [-3, 3)) quantized to uint8 (scale 0.05, zero point 128) and
    dequantized, a random int8 weight "w" (scale 0.01, or per output channel 0.01 x
    1..8 with ``per_axis``), the int32 bias "b" (random in [-2000, 2000), or ``bias``)
    dequantized with scale float32(x_scale x w_scale) x ``bias_factor`` (zero points 0,
    given: ORT 1.31.1 fuses none of these without the weight's), the output
    quantized and dequantized (scale 0.5, zero point 128). QL505's examples."""
    x_shape, w_shape, y_shape = BIASED_OPS[op]
    channels = y_shape[1]
    rng = np.random.default_rng(0)
    w_scale = np.float32(0.01) * (np.arange(1, channels + 1, dtype=np.float32) if per_axis else 1)
    w_scale = np.asarray(w_scale, np.float32)
    b_scale = (np.float32(0.05) * w_scale * np.float32(bias_factor)).astype(np.float32)
    b = np.asarray(bias if bias is not None else rng.integers(-2000, 2000, channels), np.int32)
    axis = {"axis": 0 if op == "Conv" else 1} if per_axis else {}
    inits = [
        _typed("w", rng.integers(-100, 100, w_shape), DT.INT8),
        helper.make_tensor("ws", onnx.TensorProto.FLOAT, w_scale.shape, w_scale.ravel().tolist()),
        _typed("wz", np.zeros(w_scale.shape), DT.INT8),
        _typed("b", b, DT.INT32),
        helper.make_tensor("bs", onnx.TensorProto.FLOAT, b_scale.shape, b_scale.ravel().tolist()),
        _typed("bz", np.zeros(b_scale.shape), DT.INT32),
    ]
    nodes_x, inits_x = _quantize_pair_of("x", DT.UINT8, 128)
    nodes = [
        *nodes_x,
        helper.make_node(DQ, ["w", "ws", "wz"], ["wf"], name="dq_w", **axis),
        helper.make_node(
            DQ, ["b", "bs", "bz"], ["bf"], name="dq_b", **({"axis": 0} if per_axis else {})
        ),
    ]
    if op == "MatMul":
        nodes.append(helper.make_node("MatMul", ["x_f", "wf"], ["mm"], name="op"))
        nodes.append(helper.make_node("Add", ["mm", "bf"], ["y"], name="add"))
    else:
        nodes.append(helper.make_node(op, ["x_f", "wf", "bf"], ["y"], name="op"))
    nodes_y, inits_y = _quantize_pair_of("y", DT.UINT8, 128)
    inits_y[0] = helper.make_tensor("y_s", onnx.TensorProto.FLOAT, [], [0.5])
    graph = helper.make_graph(
        [*nodes, *nodes_y],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y_f", onnx.TensorProto.FLOAT, y_shape)],
        initializer=[*inits, *inits_x, *inits_y],
    )
    imports = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_OF_OPSET.get(opset, 10))


def qdq_requantized(
    scale: float = 0.5, zero_point: int = 128, *, dtype: DT = DT.UINT8, consumers: int = 1
) -> onnx.ModelProto:
    """x [1, 4, 6, 6] (feed values in [-3, 3)) quantized and dequantized with scale 0.05,
    zero point 128 (``dtype``'s middle), then requantized ("q2", "dq2") with ``scale`` and
    ``zero_point`` into a MaxPool; ``consumers`` 2: the first DequantizeLinear's output is
    also a graph output. QL507's examples."""
    _, high = _weight_range(dtype)
    middle = 128 if dtype == DT.UINT8 else 0
    inits = [
        helper.make_tensor("s1", onnx.TensorProto.FLOAT, [], [0.05]),
        _typed("z1", np.array(middle), dtype),
        helper.make_tensor("s2", onnx.TensorProto.FLOAT, [], [scale]),
        _typed("z2", np.array(min(zero_point, high)), dtype),
    ]
    nodes = [
        helper.make_node(Q, ["x", "s1", "z1"], ["x1"], name="q1"),
        helper.make_node(DQ, ["x1", "s1", "z1"], ["f1"], name="dq1"),
        helper.make_node(Q, ["f1", "s2", "z2"], ["x2"], name="q2"),
        helper.make_node(DQ, ["x2", "s2", "z2"], ["f2"], name="dq2"),
        helper.make_node("MaxPool", ["f2"], ["y"], name="pool", kernel_shape=[1, 1]),
    ]
    outputs = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])]
    if consumers == 2:
        outputs.append(helper.make_tensor_value_info("f1", onnx.TensorProto.FLOAT, [1, 4, 6, 6]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
        outputs,
        initializer=inits,
    )
    imports = [helper.make_opsetid("", 13)]
    return helper.make_model(graph, opset_imports=imports, ir_version=7)


def pad_pool(
    count_include_pad: int, opset: int = 13, quantized: bool = False, zero: int = 128
) -> onnx.ModelProto:
    """A float Pad (constant 0, one row and column on each side) of "a" [1, 4, 6, 6] into an
    AveragePool (3x3, no pads of its own) with ``count_include_pad``: the pair ONNX
    Runtime's PadFusion folds into the pool; ``quantized``: "a" quantized to uint8 (zero
    point ``zero``) and dequantized first (Q/DQ on the Pad's input only, as NNCF writes)."""
    pads = helper.make_tensor("pads", onnx.TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])
    quantize, inits = _quantize_pair_of("a", DT.UINT8, zero) if quantized else ([], [])
    nodes = [
        *quantize,
        helper.make_node("Pad", ["a_f" if quantized else "a", "pads"], ["p"], name="pad"),
        helper.make_node(
            "AveragePool",
            ["p"],
            ["y"],
            name="pool",
            kernel_shape=[3, 3],
            count_include_pad=count_include_pad,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
        initializer=[pads, *inits],
    )
    imports = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_OF_OPSET.get(opset, 8))
