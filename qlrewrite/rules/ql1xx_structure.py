"""QL1xx: structure of the node: inputs, outputs, domain import, op version (Q/DQ and the
com.microsoft weight-only operators)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, UNSAFE, Finding
from qlrewrite.qdq import WEIGHT_ONLY, NodeView
from qlrewrite.rules.common import WEIGHT_ONLY_VERSIONS
from qlrewrite.rules.registry import ALL_KINDS, CHECKED_KINDS, Fix, FixContext, rule

__all__: list[str] = []


@rule(
    "QL101",
    "input-count",
    ERROR,
    summary="A Q/DQ node needs x and scale, and at most a third input (the zero point).",
    explanation="""
    QuantizeLinear and DequantizeLinear take two or three inputs: the tensor, its scale and
    an optional zero point. A node with fewer inputs, more inputs, or an empty name in place
    of x or the scale cannot be run: ONNX Runtime refuses the model when it loads it.
    """,
    example="""
    bad:  DequantizeLinear(w_q)                      # no scale
    good: DequantizeLinear(w_q, w_scale, w_zero_point)
    """,
    versions="all",
    needs_version=False,
)
def input_count(ctx: NodeView) -> Iterator[Finding]:
    count = len(ctx.node.inputs)
    if count not in (2, 3):
        yield ctx.finding(
            "QL101",
            ERROR,
            f"has {count} inputs; {ctx.op_type} takes 2 or 3 (x, scale, optional zero point)",
            "give the node x, scale and optionally a zero point, nothing else",
        )
        return
    inputs = ctx.node.inputs
    missing = [r for r, v in zip(("x", "scale"), inputs[:2], strict=True) if v is None]
    if missing:
        yield ctx.finding(
            "QL101",
            ERROR,
            f"required input {' and '.join(missing)} is empty",
            "connect the missing input; only the zero point may be omitted",
        )


@rule(
    "QL102",
    "output-count",
    ERROR,
    summary="A quantized node (Q/DQ, MatMulNBits, GatherBlockQuantized) has exactly one output.",
    explanation="""
    QuantizeLinear, DequantizeLinear, MatMulNBits and GatherBlockQuantized each produce
    exactly one output. Extra outputs are refused by ONNX's checker
    and by ONNX Runtime; a node without an output computes nothing.
    """,
    example="""
    bad:  y, extra = QuantizeLinear(x, scale, zp)
    good: y = QuantizeLinear(x, scale, zp)
    """,
    versions="all",
    needs_version=False,
    kinds=ALL_KINDS,
)
def output_count(ctx: NodeView) -> Iterator[Finding]:
    count = len(ctx.node.outputs)
    if count != 1:
        yield ctx.finding(
            "QL102", ERROR, f"has {count} outputs; {ctx.op_type} has exactly 1",
            "keep exactly one output",
        )  # fmt: skip


def _import_com_microsoft(fix: FixContext) -> str | None:
    """QL103's fix: a com.microsoft node in a graph that does not import the domain gets
    the import com.microsoft 1 (in its function, or in the model)."""
    site = fix.site
    graph = site.graph
    imports = graph.opset_imports if isinstance(graph, ir.Function) else fix.model.opset_imports
    if opsets.MS_DOMAIN in imports:
        return None  # already added for an earlier node
    imports[opsets.MS_DOMAIN] = 1
    where = "function" if isinstance(graph, ir.Function) else "model"
    return f"{where} opset import added: com.microsoft 1"


@rule(
    "QL103",
    "domain-not-imported",
    ERROR,
    summary="The node's domain is not in the model's (or function's) opset imports.",
    explanation="""
    Every operator is resolved through the opset the model imports for its domain. A
    com.microsoft QuantizeLinear in a model that does not import com.microsoft (or an ONNX
    node in a model without an ai.onnx import) has no defined meaning: ONNX's checker
    rejects it, and tools that convert or optimize the model cannot know which version
    applies, even if ONNX Runtime happens to load it (it does, for com.microsoft
    MatMulNBits and GatherBlockQuantized too).
    """,
    example="""
    bad:  opset_import: [ai.onnx 13]      node: com.microsoft.DequantizeLinear(...)
    good: opset_import: [ai.onnx 13, com.microsoft 1]
    """,
    versions="all",
    needs_version=False,
    kinds=CHECKED_KINDS,
    fix=Fix(
        UNSAFE,
        """
        A com.microsoft node gets the import com.microsoft 1 (the only version). Unsafe: ONNX
        Runtime does not load the model without it, so nothing proves its outputs unchanged.
        A missing ai.onnx import is not fixed (which version was meant cannot be known).
        """,
        applies=lambda finding: finding.domain == opsets.MS_DOMAIN,
        node=_import_com_microsoft,
    ),
)
def domain_not_imported(ctx: NodeView) -> Iterator[Finding]:
    if ctx.imported is None:
        yield ctx.finding(
            "QL103",
            ERROR,
            f"the domain {ctx.domain_label} is not imported by the model",
            f"add an opset import for {ctx.domain_label}"
            + (" version 1" if ctx.domain else " (e.g. version 13)"),
        )


@rule(
    "QL104",
    "op-not-in-opset",
    ERROR,
    summary="The imported opset has no version of the operator (ai.onnx before 10).",
    explanation="""
    QuantizeLinear and DequantizeLinear entered ai.onnx at opset 10 (com.microsoft ops,
    MatMulNBits and GatherBlockQuantized included, at version 1). A model importing an
    older opset refers to an operator that does not exist there, so no runtime can
    resolve it.
    """,
    example="""
    bad:  opset_import: [ai.onnx 9]   node: DequantizeLinear(x, scale)
    good: opset_import: [ai.onnx 10] (or later)
    """,
    versions="ai.onnx < 10, com.microsoft < 1",
    needs_version=False,
    kinds=CHECKED_KINDS,
)
def op_not_in_opset(ctx: NodeView) -> Iterator[Finding]:
    if ctx.imported is None or ctx.row is not None:
        return
    first = opsets.versions(ctx.domain, ctx.op_type)
    since = first[0].since if first else None
    yield ctx.finding(
        "QL104",
        ERROR,
        f"{ctx.domain_label} opset {ctx.imported} has no {ctx.op_type}"
        + (f" (it exists from opset {since})" if since else ""),
        f"import {ctx.domain_label} opset {since} or later" if since else "",
    )


@rule(
    "QL105",
    "weight-only-input-count",
    ERROR,
    summary="A MatMulNBits / GatherBlockQuantized node has too few or too many inputs, or "
    "an empty required input.",
    explanation="""
    MatMulNBits takes A, B and scales, then optionally zero_points, g_idx and bias (3 to 6
    inputs; an empty name skips an optional one). GatherBlockQuantized takes data, indices
    and scales, then optionally zero_points (3 or 4). ONNX Runtime refuses any other count,
    and an empty name in a required slot, when it loads the model.
    """,
    example="""
    bad:  MatMulNBits(A, B)                                # no scales
    good: MatMulNBits(A, B, scales, "", "", bias)          # zero_points and g_idx skipped
    """,
    versions=WEIGHT_ONLY_VERSIONS,
    kinds=WEIGHT_ONLY,
)
def weight_only_input_count(ctx: NodeView) -> Iterator[Finding]:
    low, high = ctx.row.input_range
    count = len(ctx.node.inputs)
    names = [o.name for o in ctx.row.inputs]
    if not low <= count <= high:
        yield ctx.finding(
            "QL105",
            ERROR,
            f"has {count} inputs; {ctx.op_type} takes {low} to {high} ({', '.join(names)})",
            f"give the node {', '.join(names[:low])} and optionally {', '.join(names[low:])}",
        )
        return
    missing = [
        o.name
        for o, value in zip(ctx.row.inputs, ctx.node.inputs, strict=False)
        if not o.optional and value is None
    ]
    if missing:
        yield ctx.finding(
            "QL105",
            ERROR,
            f"required input {' and '.join(missing)} is empty",
            "connect the missing input; only " + ", ".join(names[low:]) + " may be empty",
        )
