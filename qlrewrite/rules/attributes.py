"""QL2xx: attributes that exist in the version in force, with the right type."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite import opsets
from qlrewrite.findings import ERROR, UNSAFE, Finding
from qlrewrite.qdq import NodeView
from qlrewrite.rules.registry import ALL_KINDS, rule

__all__: list[str] = []


def _first_version_with(ctx: NodeView, name: str) -> int | None:
    for row in opsets.versions(ctx.domain, ctx.op_type):
        if name in row.attributes:
            return row.since
    return None


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
    fix=UNSAFE,
    fix_summary="""
    Below opset 13, an `axis` on DequantizeLinear (as ONNX Runtime's quantizer writes for
    per_channel=True) is repaired by upgrading the model to opset 13, as `qlrewrite upgrade
    --opset 13`. Unsafe: every node's op version changes, and ONNX Runtime does not load the
    input to compare.
    """,
)
def unknown_attribute(ctx: NodeView) -> Iterator[Finding]:
    row = ctx.row
    for name, attr in ctx.attributes.items():
        if name in row.attributes:
            continue
        since = _first_version_with(ctx, name)
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
        yield ctx.finding("QL201", ERROR, message, hint)


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
)
def attribute_type(ctx: NodeView) -> Iterator[Finding]:
    for name, attr in ctx.attributes.items():
        spec = ctx.row.attributes.get(name)
        if spec is not None and attr.type != spec[0]:
            yield ctx.finding(
                "QL202",
                ERROR,
                f"attribute '{name}' is {attr.type.name}, {ctx.version_label} wants {spec[0].name}",
                f"write '{name}' as an integer attribute",
            )
