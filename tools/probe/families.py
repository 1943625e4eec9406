"""The probe's activation-only QDQ node groups (``tests/family_models.py``): each family ONNX
Runtime's QDQ selectors fuse or drop, one representative per key
(:func:`qlrewrite.targets.forms.family_key`), and the int32 bias of a QDQ Conv / Gemm
(:func:`~qlrewrite.targets.forms.bias_key`), each compared with ORT_DISABLE_ALL and the
ONNX reference evaluator.

Activations: uint8 and int8 at opset 13, uint8, uint16 and int16 at opset 21 (ai.onnx Q/DQ has
no 16-bit type before it), uint16 in com.microsoft Q/DQ (as ORT's quantizer writes 16-bit
activations with ``UseQDQContribOps``), int4 and float8 e4m3fn at opset 21, and uint8 per
channel (axis 1) at opset 13; every Q/DQ of the group with one scale and zero point
(``params=equal``: the ops whose output stays in the input's range) and not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import onnx
import onnx_ir as ir
from cases import Case
from example_models import DT, MS, qdq_biased_op
from family_models import qdq_family

from qlrewrite.qdq import node_views
from qlrewrite.rules.registry import CHECKED_KINDS
from qlrewrite.targets.forms import FAMILY_OPS, bias_key, family_key

#: (activation type, granularity, opset, Q/DQ domain) of every family pattern.
ACTIVATIONS = (
    (DT.UINT8, "per-tensor", 13, ""),
    (DT.INT8, "per-tensor", 13, ""),
    (DT.UINT8, "per-axis", 13, ""),
    (DT.UINT8, "per-tensor", 21, ""),
    (DT.INT8, "per-tensor", 21, ""),
    (DT.UINT16, "per-tensor", 21, ""),
    (DT.INT16, "per-tensor", 21, ""),
    (DT.UINT16, "per-tensor", 13, MS),
    (DT.INT4, "per-tensor", 21, ""),
    (DT.FLOAT8E4M3FN, "per-tensor", 21, ""),
)
#: (activation type, opset) of the groups whose output is float: the op's output not
#: quantized again (NNCF writes Q/DQ on an op's inputs only), per tensor, ai.onnx Q/DQ.
FLOAT_OUTPUT = (
    (DT.UINT8, 13),
    (DT.INT8, 13),
    (DT.UINT8, 21),
    (DT.INT8, 21),
    (DT.UINT16, 21),
    (DT.INT16, 21),
)
#: The ops whose output stays in the input's range: probed with one scale and zero point
#: for the whole group too (what ORT requires to drop a Q/DQ pair).
SAME_RANGE = tuple(
    op
    for op in FAMILY_OPS
    if op not in ("Sigmoid", "Softmax", "Add", "Mul", "ArgMax", "InstanceNormalization")
)


def key_of_family(model: onnx.ModelProto) -> str | None:
    """The family key of the model's input DequantizeLinear "dq_a" and its operator."""
    ir_model = ir.serde.deserialize_model(model)
    for site, views in node_views(ir_model, kinds=CHECKED_KINDS):
        if site.node.name == "dq_a":
            op = next(n for n in site.node.outputs[0].consumers() if n.name == "op")
            return family_key(views[0], op)
    return None


def family_cases() -> Iterator[Case]:
    """Every op of :data:`FAMILY_OPS` with each activation of :data:`ACTIVATIONS`, its
    Q/DQ parameters differing, and (the ops of :data:`SAME_RANGE`, per tensor) equal; then
    the bias patterns (:func:`bias_cases`); then the groups whose output is float
    (:data:`FLOAT_OUTPUT`) and the padded AveragePools (:data:`PADDED_POOL`)."""
    yield from _activation_cases()
    yield from bias_cases()
    yield from _float_output_cases()
    yield from _padded_pool_cases()


def _activation_cases() -> Iterator[Case]:
    for op, (qtype, granularity, opset, domain) in itertools.product(FAMILY_OPS, ACTIVATIONS):
        params = (
            ("differ", "equal") if op in SAME_RANGE and granularity == "per-tensor" else ("differ",)
        )
        for same in params:
            try:
                model = qdq_family(op, qtype, granularity, params=same, opset=opset, domain=domain)
            except (ValueError, TypeError):  # a type onnx.helper cannot write
                continue
            key = key_of_family(model)
            if key is not None:
                yield Case(key, model, [("a", "float32", [1, 4, 4, 4])], compare=[[1, 4, 4, 4]])


def _float_output_cases() -> Iterator[Case]:
    for op, (qtype, opset) in itertools.product(FAMILY_OPS, FLOAT_OUTPUT):
        if op == "ArgMax":  # its output is never quantized: probed above
            continue
        model = qdq_family(op, qtype, opset=opset, output="float")
        key = key_of_family(model)
        if key is not None:
            yield Case(key, model, [("a", "float32", [1, 4, 4, 4])], compare=[[1, 4, 4, 4]])


#: (activation type, opset, low end of the input's range) of the padded AveragePool groups:
#: uint8 with a zero point of 0 and above 0, int8 (zero point -128).
PADDED_POOL = ((DT.UINT8, 13, 0.0), (DT.UINT8, 13, -1.0), (DT.INT8, 13, 0.0), (DT.UINT8, 21, -1.0))


def _padded_pool_cases() -> Iterator[Case]:
    """AveragePool padding one row and column on each side, the padding counted in the
    average (count_include_pad=1) or not, each output quantized again and float."""
    combos = itertools.product(PADDED_POOL, ("counted", "excluded"), ("quantized", "float"))
    for (qtype, opset, low), pads, output in combos:
        if pads == "excluded" and low != 0.0:  # the zero point is not in its key
            continue
        model = qdq_family(
            "AveragePool", qtype, opset=opset, output=output, pool_pads=pads, low=low
        )
        key = key_of_family(model)
        if key is not None:
            yield Case(key, model, [("a", "float32", [1, 4, 4, 4])], compare=[[1, 4, 4, 4]])


def _input_renamed(model: onnx.ModelProto, old: str, new: str) -> onnx.ModelProto:
    """``model`` with its graph input ``old`` named ``new`` (the runner feeds "a")."""
    for value in model.graph.input:
        if value.name == old:
            value.name = new
    for node in model.graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
    return model


def bias_cases() -> Iterator[Case]:
    """The QDQ Conv and Gemm with an int32 bias DequantizeLinear as ORT's quantizer writes
    it (scale x_scale x w_scale, zero point 0: :func:`example_models.qdq_biased_op`), the
    weight and bias per tensor or per channel, at opset 13 and 21."""
    for op, per_axis, opset in itertools.product(("Conv", "Gemm"), (False, True), (13, 21)):
        model = _input_renamed(qdq_biased_op(op, per_axis=per_axis, opset=opset), "x", "a")
        ir_model = ir.serde.deserialize_model(model)
        for site, views in node_views(ir_model, kinds=CHECKED_KINDS):
            if site.node.name == "dq_b":
                consumer = next(iter(site.node.outputs[0].consumers()))
                key = bias_key(views[0], consumer)
                shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
                if key is not None:
                    yield Case(key, model, [("a", "float32", shape)], compare=[shape])
