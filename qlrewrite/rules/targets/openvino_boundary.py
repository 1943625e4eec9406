"""QL753: a 16-bit Q -> DQ pair OpenVINO refuses to compile because it ends at a graph
output, run only for ``--target openvino``: its FQStrippingTransformation cannot hand
the output's name to the pair's input when that input is a graph input, is itself a
graph output, or comes from an operator OpenVINO builds with several outputs (MaxPool,
Split, TopK). Measured with OpenVINO 2026.4.1."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, TargetNode, rule
from qlrewrite.toolkit import MAIN

__all__: list[str] = []

#: The 16-bit types whose Q -> DQ pairs OpenVINO strips (FakeQuantize of 65536 levels).
_STRIPPED = frozenset({ir.DataType.UINT16, ir.DataType.INT16})
#: The ai.onnx operators OpenVINO builds with more than one output (MaxPool with its
#: indices): measured refused before such a pair; the other ops measured are not.
_SEVERAL_OUTPUTS = frozenset({"MaxPool", "Split", "TopK"})


def _dequantize_to_output(view: QDQView, graph: ir.Graph) -> ir.Node | None:
    """The QuantizeLinear's only reader when it is a DequantizeLinear of the same domain
    whose output is a graph output (None: otherwise)."""
    uses = list(view.node.outputs[0].uses())
    if len(uses) != 1:
        return None
    reader = uses[0].node
    if reader.op_type != "DequantizeLinear" or reader.domain != view.node.domain:
        return None
    return reader if reader.outputs and reader.outputs[0] in graph.outputs else None


def _boundary_source(value: ir.Value | None, graph: ir.Graph) -> str | None:
    """What makes the pair's input one OpenVINO cannot hand the output's name to (None:
    nothing measured)."""
    if value is None:
        return None
    if value in graph.inputs:
        return f"the graph input '{value.name}'"
    if value in graph.outputs:
        return f"'{value.name}' (a graph output too)"
    producer = value.producer()
    onnx_op = producer is not None and producer.domain in ("", "ai.onnx")
    if onnx_op and producer is not None and producer.op_type in _SEVERAL_OUTPUTS:
        return f"a {producer.op_type} (built with several outputs)"
    return None


@rule(
    "QL753",
    "openvino-16bit-pair-at-graph-output",
    ERROR,
    summary="OpenVINO refuses to compile a 16-bit Q -> DQ pair that ends at a graph output "
    "and reads a graph input, another graph output, or a MaxPool / Split / TopK.",
    explanation="""
    OpenVINO's CPU plugin reads a 16-bit QuantizeLinear -> DequantizeLinear pair as a
    FakeQuantize of 65536 levels and its FQStrippingTransformation replaces it by its
    input, giving the input the graph output's name. It cannot when the input is a graph
    input, is a graph output itself, or comes from an operator OpenVINO builds with
    several outputs (its MaxPool has the indices, Split, TopK): the model is refused
    ("replace_output_update_name ... failed"). Measured with OpenVINO 2026.4.1
    (tests/rules/test_openvino_boundary.py): uint16 and int16, per tensor and per axis,
    ai.onnx and com.microsoft, all refused (and so is a QDQ MaxPool group ending at a
    graph output, after a float op or not: its second pair reads the MaxPool). The same
    pair compiles after a Relu, Reshape, AveragePool, Conv or 34 other single-output ops
    measured, inside an If body, with two DequantizeLinear readers, or in 4 / 8 bits; a
    float op between the DequantizeLinear and the graph output (an Identity will do,
    exact) makes it compile.
    """,
    example="""
    bad:  graph input x -> Q(uint16) -> DQ -> graph output y     (--target openvino)
    good: graph input x -> Q(uint16) -> DQ -> Identity -> graph output y
    """,
    versions="--target openvino",
    scope="target-node",
    needs_version=False,
    examples=[
        Example(
            "uint16-pair-from-input-to-output",
            ModelSpec("openvino_boundary_pair", "input"),
            ModelSpec("openvino_boundary_pair", "input", after="Identity"),
            targets=("openvino",),
        ),
    ],
)
def openvino_16bit_pair_at_graph_output(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    view = ctx.view
    if ctx.target.runtime != "openvino" or not view.is_quantize or view.ref != MAIN:
        return
    graph = view.node.graph
    if view.output_type not in _STRIPPED or not isinstance(graph, ir.Graph):
        return
    dequantize = _dequantize_to_output(view, graph)
    source = _boundary_source(view.node.inputs[0], graph) if dequantize is not None else None
    if dequantize is None or source is None:
        return
    yield ctx.report(
        f"this {view.output_type.name.lower()} Q -> DQ pair reads {source} and ends at the "
        f"graph output '{dequantize.outputs[0].name}': OpenVINO 2026.4.1 cannot strip it "
        "and refuses the model when compiling",
        "put a float op between the DequantizeLinear and the graph output (an Identity "
        "compiles, measured), or quantize that tensor in 8 bits",
    )
