"""One-node QuantizeLinear / DequantizeLinear models for the check rule tests.

Built with onnx.helper so that invalid nodes can be written as they appear in the wild
(onnx_ir would refuse some of them). Output types are computed here by hand from the
spec, not with qlrewrite.
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
    if zp_shape is None:
        zp_shape = scale_shape
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    inputs = [helper.make_tensor_value_info("x", int(x_type), x_shape)]
    scale_tensor = _tensor("scale", scale_type, scale_shape, scale)
    if scale_as == "initializer":
        inits.append(scale_tensor)
    elif scale_as == "constant":
        nodes.append(helper.make_node("Constant", [], ["scale"], value=scale_tensor))
    else:
        inputs.append(helper.make_tensor_value_info("scale", int(scale_type), scale_shape))
    names = ["x", "scale"]
    if zp_type is not None:
        inits.append(_tensor("zp", zp_type, zp_shape, zp))
        names.append("zp")
    if extra_input:
        names.append("x")
    if drop_inputs:
        names = names[: len(names) - drop_inputs]
    outputs = ["y"] + [f"y{i}" for i in range(1, n_outputs)]
    node_attrs = dict(attrs)
    nodes.append(helper.make_node(op, names, outputs, name="qdq", domain=domain, **node_attrs))
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
    if imports is None:
        imports = {"": opset if domain == "" else 13}
        if domain == MS:
            imports[MS] = 1
    opset_imports = [helper.make_opsetid(d, v) for d, v in imports.items()]
    if ir_version is None:
        ir_version = IR_OF_OPSET.get(opset, 10) if domain == "" else 10
    return helper.make_model(graph, opset_imports=opset_imports, ir_version=ir_version)


def blocked_with_one_element_scale(case: Mapping[str, Any]) -> bool:
    """A blocked node whose scale has one element: valid by the spec, refused by ORT (which
    takes it as per-tensor); a known disagreement (test_fuzz_qdq's KNOWN)."""
    return bool(case["attrs"].get("block_size", 0) > 0 and case["scale_shape"]
                and int(np.prod(case["scale_shape"])) == 1)  # fmt: skip


def load_ir(proto: onnx.ModelProto) -> ir.Model:
    """The onnx_ir model of ``proto`` (as qlrewrite.model_io.load would give, minus files)."""
    return ir.serde.deserialize_model(proto)
