"""QL721-QL724: what ONNX Runtime's QNN execution provider (Qualcomm HTP) documents it does
not run, for ``--target qnn``. Nothing here was run (QNN needs a Snapdragon NPU): each rule
cites the document it comes from. A node QNN does not take falls back to ONNX Runtime's CPU
provider (or fails when ``session.disable_cpu_ep_fallback`` is set), so these are warnings."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import WARNING, Finding
from qlrewrite.qdq import QDQ, QOPERATOR, WEIGHT_ONLY, QDQView
from qlrewrite.rules.common import quantized_type
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import Example, TargetModel, TargetNode, rule
from qlrewrite.targets.tables import Fact, documented

__all__: list[str] = []

_TARGET = ("qnn",)


def _fact(target_runtime: str, key: str) -> Fact | None:
    return documented("qnn")[key] if target_runtime == "qnn" else None


@rule(
    "QL721",
    "qnn-operator",
    WARNING,
    summary="QNN: a QOperator / dynamic or com.microsoft weight-only operator the QNN EP does "
    "not list (it falls back to the CPU).",
    explanation="""
    ONNX Runtime's QNN execution provider lists the operators it runs ("Supported ONNX
    operators"): of the quantized ones, QuantizeLinear and DequantizeLinear (ai.onnx, and
    com.microsoft for 16 bits) only. QLinearConv, QLinearMatMul, MatMulInteger,
    DynamicQuantizeLinear, com.microsoft QLinear*, MatMulNBits and GatherBlockQuantized are
    not listed: the node runs on the CPU provider, or the session fails when CPU fallback
    is disabled (a DynamicQuantizeLinear accepted and then failing at run time is
    microsoft/onnxruntime#25334). Documented, not run. `qlrewrite convert --to onnx`
    rewrites these nodes as Q/DQ exactly.
    """,
    example="""
    warn: QLinearConv(...)   (--target qnn)
    good: DequantizeLinear -> Conv -> QuantizeLinear   (qlrewrite convert --to onnx)
    """,
    versions="--target qnn (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QOPERATOR, *WEIGHT_ONLY),
    examples=[
        Example(
            "qlinear-conv",
            ModelSpec("qoperator", "QLinearConv"),
            ModelSpec("qdq", DQ, 21, x_type=DT.UINT8),
            targets=_TARGET,
        ),
    ],
)
def qnn_operator(ctx: TargetNode) -> Iterator[Finding]:
    fact = _fact(ctx.target.runtime, "operators")
    if fact is None:
        return
    view = ctx.view
    yield ctx.report(
        f"{ctx.target.label} does not list {view.domain_label} {view.op_type}: it runs on the "
        "CPU provider",
        f"qlrewrite convert --to onnx rewrites it as Q/DQ (exact); source: {fact.cited}",
    )


@rule(
    "QL722",
    "qnn-type",
    WARNING,
    summary="QNN: a Q/DQ type outside the 8- and 16-bit integers the QNN EP documents.",
    explanation="""
    The QNN HTP backend runs quantized models of 8- and 16-bit integers: "QNN operators
    typically support the uint8 and uint16 data types", and ONNX Runtime's quantizer for
    QNN writes uint8, int8, uint16 and int16 (int32 for biases) (ONNX Runtime, QNN
    Execution Provider, "Generating a quantized model"). A float8, 4-bit or 2-bit Q/DQ is
    outside what it documents. Documented, not run.
    """,
    example="""
    warn: DequantizeLinear(x: float8e4m3fn, ...)   (--target qnn)
    good: DequantizeLinear(x: uint8, ...)
    """,
    versions="--target qnn (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QDQ,),
    examples=[
        Example(
            "float8",
            ModelSpec("qdq", DQ, 21, x_type=DT.FLOAT8E4M3FN),
            ModelSpec("qdq", DQ, 21, x_type=DT.UINT8),
            targets=_TARGET,
            ort=False,  # ONNX Runtime's Python API cannot feed float8
        ),
    ],
)
def qnn_type(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    fact = _fact(ctx.target.runtime, "quantized_types")
    name = quantized_type(ctx.view)
    if fact is None or name is None or name in fact.values["types"]:
        return
    types = ", ".join(t.lower() for t in fact.values["types"])
    yield ctx.report(
        f"{name.lower()} is not among the types {ctx.target.label} documents ({types})",
        f"source: {fact.cited}",
    )


@rule(
    "QL723",
    "qnn-matmul-type",
    WARNING,
    summary="QNN: a DequantizeLinear feeding a MatMul with a type the HTP MatMul does not take.",
    explanation="""
    The QNN HTP backend's MatMul takes quantized inputs of (uint8, uint8), (uint8,
    uint16) and (uint16, uint8) only (ONNX Runtime, QNN Execution Provider, "Supported
    ONNX operators", row ai.onnx:MatMul): a MatMul fed by an int8 or int16
    DequantizeLinear is not taken as a quantized MatMul. Documented, not run.
    """,
    example="""
    warn: DequantizeLinear(x: int8) -> MatMul   (--target qnn)
    good: DequantizeLinear(x: uint8) -> MatMul
    """,
    versions="--target qnn (documented)",
    scope="target-node",
    needs_version=False,
    kinds=(QDQ,),
    examples=[
        Example(
            "int8-weight",
            ModelSpec("dq_into_matmul", DT.INT8),
            ModelSpec("dq_into_matmul", DT.UINT8),
            targets=_TARGET,
        ),
    ],
)
def qnn_matmul_type(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    fact = _fact(ctx.target.runtime, "matmul_types")
    view = ctx.view
    name = quantized_type(ctx.view)
    if fact is None or view.is_quantize or name is None or name in fact.values["types"]:
        return
    outputs = view.node.outputs
    consumers = outputs[0].consumers() if outputs else ()
    if not any(n.op_type == "MatMul" and n.domain in ("", "ai.onnx") for n in consumers):
        return
    yield ctx.report(
        f"{name.lower()} into a MatMul: {ctx.target.label}'s HTP MatMul takes uint8 / uint16",
        f"quantize the MatMul's inputs as uint8 or uint16; source: {fact.cited}",
    )


@rule(
    "QL724",
    "qnn-dynamic-shape",
    WARNING,
    summary="QNN: a graph input of dynamic shape (the QNN EP needs fixed shapes).",
    explanation="""
    "QNN EP does not support models with dynamic shapes (e.g., a dynamic batch size).
    Dynamic shapes must be fixed to a specific value" (ONNX Runtime, QNN Execution
    Provider, "Model requirements"; its onnxruntime.tools.make_dynamic_shape_fixed does
    it). Documented, not run.
    """,
    example="""
    warn: input x: uint8[batch, 3]   (--target qnn)
    good: input x: uint8[1, 3]
    """,
    versions="--target qnn (documented)",
    scope="target-model",
    needs_version=False,
    examples=[
        Example(
            "batch",
            ModelSpec("qdq", DQ, 21, x_type=DT.UINT8, x_shape=("batch", 3)),
            ModelSpec("qdq", DQ, 21, x_type=DT.UINT8),
            targets=_TARGET,
        ),
    ],
)
def qnn_dynamic_shape(ctx: TargetModel) -> Iterator[Finding]:
    fact = _fact(ctx.target.runtime, "static_shapes")
    if fact is None:
        return
    for value in ctx.context.model.graph.inputs:
        shape = value.shape
        if shape is None or any(not isinstance(d, int) for d in shape):
            dims = "unknown" if shape is None else str(shape)
            yield ctx.report(
                f"input '{value.name}' has a dynamic shape {dims}: {ctx.target.label} "
                "needs fixed shapes",
                "fix the shape (python -m onnxruntime.tools.make_dynamic_shape_fixed); "
                f"source: {fact.cited}",
            )
