"""QL201-QL202: attributes that exist in the version in force, with the right type (Q/DQ
and the com.microsoft weight-only operators)."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite import opsets
from qlrewrite.findings import ERROR, UNSAFE, Finding
from qlrewrite.qdq import NodeView
from qlrewrite.rules.common import (
    PER_AXIS_OPSET,
)
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import ALL_KINDS, Example, Fix, rule

__all__: list[str] = []


def _first_version_with(domain: str, op_type: str, name: str) -> int | None:
    for row in opsets.versions(domain, op_type):
        if name in row.attributes:
            return row.since
    return None


def _upgrade_brings_it(finding: Finding) -> bool:
    """QL201's fix applies: an ai.onnx node below opset 13 with an attribute that exists
    from 13 (``axis``: what onnxruntime.quantization writes for per_channel=True)."""
    return (
        finding.domain == ""
        and finding.opset is not None
        and finding.opset < PER_AXIS_OPSET
        and _first_version_with("", finding.op_type, finding.attribute) == PER_AXIS_OPSET
    )


@rule(
    "QL201",
    "unknown-attribute",
    ERROR,
    summary="The node has an attribute that its operator version does not define.",
    explanation="""
    Each version of QuantizeLinear / DequantizeLinear defines its own attributes: `axis`
    from opset 13, `saturate` from 19, `block_size` and QuantizeLinear's `output_dtype` from
    21, DequantizeLinear's `output_dtype` and QuantizeLinear's `precision` from 23;
    com.microsoft Q/DQ know only `axis`; MatMulNBits has K, N, bits, block_size,
    accuracy_level and weight_prepacked, GatherBlockQuantized bits, block_size, gather_axis
    and quantize_axis. An attribute the version does not define is rejected by
    ONNX's checker and by ONNX Runtime, and its intent is silently lost by tools that ignore
    it. A common case: onnxruntime.quantization with per_channel=True on an opset-12 model
    writes DequantizeLinear nodes with `axis`, which neither ONNX nor ONNX Runtime loads.
    """,
    example="""
    bad:  opset 12: DequantizeLinear(w_q, w_scale, w_zp, axis=0)
    good: opset 13: DequantizeLinear(w_q, w_scale, w_zp, axis=0)  # qlrewrite upgrade --opset 13
    """,
    versions="ai.onnx 10+, com.microsoft 1",
    kinds=ALL_KINDS,
    fix=Fix(
        UNSAFE,
        """
        Below opset 13, an `axis` on DequantizeLinear (as ONNX Runtime's quantizer writes for
        per_channel=True) is repaired by upgrading the model to opset 13, as `qlrewrite
        upgrade --opset 13`. Unsafe: every node's op version changes, and ONNX Runtime does
        not load the input to compare.
        """,
        applies=_upgrade_brings_it,
        upgrade_opset=PER_AXIS_OPSET,
    ),
    examples=[
        Example(
            "axis-at-opset-12",
            ModelSpec("qdq", DQ, 12, x_type=DT.INT8, attrs={"axis": 0}),
            ModelSpec("qdq", DQ, 13, x_type=DT.INT8, attrs={"axis": 0}),
        ),
    ],
)
def unknown_attribute(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.version
    for name, attr in ctx.attributes.items():
        if name in row.attributes:
            continue
        since = _first_version_with(ctx.domain, ctx.op_type, name)
        message = f"attribute '{name}' (= {attr.value!r}) does not exist in {ctx.version_label}"
        if since is not None and since > row.since:
            message += f"; it exists from opset {since}"
            hint = f"run `qlrewrite upgrade --opset {since}`, or remove the attribute"
            if name == "axis" and not ctx.domain:
                message += (
                    " (onnxruntime.quantization writes this for per_channel=True on a model"
                    " below opset 13)"
                )
        elif ctx.domain == opsets.MS_DOMAIN and ctx.op_type in opsets.WEIGHT_ONLY_OPS:
            hint = f"remove it: {ctx.op_type} has {', '.join(row.attributes)}"
        elif ctx.domain == opsets.MS_DOMAIN:
            hint = "remove it: com.microsoft Q/DQ know only 'axis'"
            if name == "block_size":
                hint += "; blocked quantization needs ai.onnx opset 21 (`qlrewrite convert`)"
        else:
            hint = f"remove the attribute; {ctx.op_type} has no '{name}'"
        yield ctx.report(message, hint, attribute=name)


@rule(
    "QL202",
    "attribute-type",
    ERROR,
    summary="An attribute has the wrong type (all attributes of the quantized ops are integers).",
    explanation="""
    `axis`, `saturate`, `block_size`, `output_dtype` and `precision` are INT attributes,
    and so is every attribute of MatMulNBits and GatherBlockQuantized (`K`, `N`, `bits`,
    ...).
    An attribute of another type (a float, a list, a string) is rejected by ONNX's checker;
    runtimes that read it with the wrong type either fail or read garbage.
    """,
    example="""
    bad:  DequantizeLinear(x, s, zp, axis=1.0)   # FLOAT attribute
    good: DequantizeLinear(x, s, zp, axis=1)
    """,
    versions="ai.onnx 13+, com.microsoft 1",
    kinds=ALL_KINDS,
    examples=[
        Example(
            "float-axis",
            ModelSpec("qdq", DQ, 21, attrs={"axis": 1.0}),
            ModelSpec("qdq", DQ, 21, attrs={"axis": 1}),
        ),
    ],
)
def attribute_type(ctx: NodeView) -> Iterator[Finding]:
    for name, attr in ctx.attributes.items():
        spec = ctx.version.attributes.get(name)
        if spec is not None and attr.type != spec[0]:
            yield ctx.report(
                f"attribute '{name}' is {attr.type.name}, {ctx.version_label} wants {spec[0].name}",
                f"write '{name}' as an integer attribute",
                attribute=name,
            )
