"""QL101-QL104, QL106: structure of the node: inputs, outputs, domain import, op version
(Q/DQ; QL102-QL104 and QL106 also read the weight-only and QOperator nodes)."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite import opsets
from qlrewrite.findings import ERROR, SAFE, UNSAFE, WARNING, Finding
from qlrewrite.qdq import NodeView, QDQView
from qlrewrite.rules.model_spec import DQ, MS, ModelSpec
from qlrewrite.rules.registry import ALL_KINDS, CHECKED_KINDS, Example, Fix, FixContext, rule
from qlrewrite.toolkit import ensure_import, functions_of

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
    examples=[
        Example(
            "one-input",
            ModelSpec("qdq", DQ, 21, drop_inputs=2),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def input_count(ctx: QDQView) -> Iterator[Finding]:
    count = len(ctx.node.inputs)
    if count not in (2, 3):
        yield ctx.report(
            f"has {count} inputs; {ctx.op_type} takes 2 or 3 (x, scale, optional zero point)",
            "give the node x, scale and optionally a zero point, nothing else",
        )
        return
    inputs = ctx.node.inputs
    missing = [r for r, v in zip(("x", "scale"), inputs[:2], strict=True) if v is None]
    if missing:
        yield ctx.report(
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
    examples=[
        Example(
            "two-outputs",
            ModelSpec("qdq", DQ, 21, n_outputs=2),
            ModelSpec("qdq", DQ, 21),
        ),
    ],
)
def output_count(ctx: NodeView) -> Iterator[Finding]:
    count = len(ctx.node.outputs)
    if count != 1:
        yield ctx.report(
            f"has {count} outputs; {ctx.op_type} has exactly 1",
            "keep exactly one output",
        )


def _import_com_microsoft(fix: FixContext) -> str | None:
    """QL103's and QL106's fix: a com.microsoft node in a graph that does not import the
    domain gets the import com.microsoft 1: in the model (main graph and its subgraphs), or
    in the function the node sits in (subgraphs of a function included)."""
    ref = fix.site.ref
    owners = functions_of(fix.model, ref) if ref.in_function else [fix.model]
    added = [owner for owner in owners if ensure_import(owner, opsets.MS_DOMAIN, 1)]
    if not added:
        return None  # already added for an earlier node
    where = "function" if ref.in_function else "model"
    return f"{where} opset import added: com.microsoft 1"


@rule(
    "QL103",
    "domain-not-imported",
    WARNING,
    summary="A com.microsoft node in a model that does not import com.microsoft.",
    explanation="""
    ONNX Runtime's own weight-only quantizer (MatMulNBitsQuantizer with GPTQ, k-quant or
    INC RTN) writes MatMulNBits nodes without adding the com.microsoft opset import. ONNX
    Runtime runs such models: it gives every domain the model does not import the newest
    version it knows, and com.microsoft has only version 1, so the nodes are read as
    com.microsoft 1 (qlrewrite reads them so too, and checks them as such). ONNX's checker
    and tools that read the imports refuse or misread the model, so the import should be
    there. Every rewrite adds it to its output. Where ONNX Runtime refuses the model (a
    function without the import) or reads a version that changes with each release (an
    ai.onnx node without an ai.onnx import) the finding is QL106, an error.
    """,
    example="""
    bad:  opset_import: [ai.onnx 17]      node: com.microsoft.MatMulNBits(...)
    good: opset_import: [ai.onnx 17, com.microsoft 1]
    """,
    versions="com.microsoft, main graph and its subgraphs",
    needs_version=False,
    kinds=CHECKED_KINDS,
    fix=Fix(
        SAFE,
        """
        The model gets the opset import com.microsoft 1, the version ONNX Runtime already
        reads the nodes as: its outputs stay bit-identical.
        """,
        node=_import_com_microsoft,
    ),
    examples=[
        Example(
            "ms-not-imported",
            ModelSpec("qdq", DQ, 13, domain=MS, imports={"": 13}),
            ModelSpec("qdq", DQ, 13, domain=MS),
        ),
        Example(
            "matmul-nbits-not-imported",  # ONNX Runtime's GPTQ / k-quant / INC RTN output
            ModelSpec("matmul_nbits", ms_opset=None, opset=17, ir_version=8),
            ModelSpec("matmul_nbits", opset=17, ir_version=8),
        ),
    ],
)
def domain_not_imported(ctx: NodeView) -> Iterator[Finding]:
    if ctx.imported is None and ctx.domain == opsets.MS_DOMAIN and not ctx.site.ref.in_function:
        yield ctx.report(
            f"the domain {ctx.domain_label} is not imported by the model; ONNX Runtime reads "
            f"the node as {ctx.domain_label} 1, onnx.checker refuses the model",
            f"add the opset import {ctx.domain_label} 1 (`qlrewrite check --fix`)",
        )


@rule(
    "QL106",
    "domain-import-required",
    ERROR,
    summary="A node whose domain its graph does not import, where runtimes refuse it.",
    explanation="""
    Every operator is resolved through the opset its graph imports for its domain. A
    model-local function has its own imports: ONNX Runtime refuses a function with a
    com.microsoft node that does not import com.microsoft ("No opset registered for domain
    com.microsoft in function f"), whatever the model imports. An ai.onnx node in a model
    without an ai.onnx import has no defined version: ONNX's checker refuses it, and ONNX
    Runtime reads it as the newest opset it knows, which changes with each release.
    (A com.microsoft node of the main graph without the import is QL103, a warning.)
    """,
    example="""
    bad:  function f: opset_import: [ai.onnx 21]      node: com.microsoft.MatMulNBits(...)
    good: function f: opset_import: [ai.onnx 21, com.microsoft 1]
    """,
    versions="all",
    needs_version=False,
    kinds=CHECKED_KINDS,
    fix=Fix(
        UNSAFE,
        """
        A com.microsoft node in a function gets the import com.microsoft 1 in that function
        (the only version). Unsafe: ONNX Runtime does not load the model without it, so
        nothing proves its outputs unchanged. A missing ai.onnx import is not fixed (which
        version was meant cannot be known).
        """,
        applies=lambda finding: finding.domain == opsets.MS_DOMAIN,
        node=_import_com_microsoft,
    ),
    examples=[
        # (an ai.onnx node without an ai.onnx import, which has no fix, is a case of
        # tests/rules/test_rules_cases.py)
        Example(
            "ms-not-imported-by-function",
            ModelSpec("function_qdq", {"": 13}),
            ModelSpec("function_qdq", {"": 13, MS: 1}),
        ),
    ],
)
def domain_import_required(ctx: NodeView) -> Iterator[Finding]:
    if ctx.imported is None and (ctx.domain != opsets.MS_DOMAIN or ctx.site.ref.in_function):
        where = "the function" if ctx.site.ref.in_function else "the model"
        yield ctx.report(
            f"the domain {ctx.domain_label} is not imported by {where}",
            f"add an opset import for {ctx.domain_label}"
            + (f" version 1 to {where}" if ctx.domain else " (e.g. version 13)"),
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
    upgrade_repairs=True,
    needs_version=False,
    kinds=CHECKED_KINDS,
    examples=[
        Example(
            "opset-9",
            ModelSpec("qdq", DQ, 9),
            ModelSpec("qdq", DQ, 10),
        ),
    ],
)
def op_not_in_opset(ctx: NodeView) -> Iterator[Finding]:
    if ctx.imported is None or ctx.row is not None:
        return
    first = opsets.versions(ctx.domain, ctx.op_type)
    since = first[0].since if first else None
    yield ctx.report(
        f"{ctx.domain_label} opset {ctx.imported} has no {ctx.op_type}"
        + (f" (it exists from opset {since})" if since else ""),
        f"import {ctx.domain_label} opset {since} or later" if since else "",
    )
