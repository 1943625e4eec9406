"""QL105: inputs of the com.microsoft weight-only operators (MatMulNBits,
GatherBlockQuantized)."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import WEIGHT_ONLY, WeightOnlyView
from qlrewrite.rules.common import WEIGHT_ONLY_VERSIONS
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


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
    examples=[
        Example(
            "too-few-inputs",
            ModelSpec("edited", ModelSpec("matmul_nbits"), ModelSpec("cut_inputs", 2)),
            ModelSpec("matmul_nbits"),
        ),
    ],
)
def weight_only_input_count(ctx: WeightOnlyView) -> Iterator[Finding]:
    low, high = ctx.version.input_range
    count = len(ctx.node.inputs)
    names = [o.name for o in ctx.version.inputs]
    if not low <= count <= high:
        yield ctx.report(
            f"has {count} inputs; {ctx.op_type} takes {low} to {high} ({', '.join(names)})",
            f"give the node {', '.join(names[:low])} and optionally {', '.join(names[low:])}",
        )
        return
    missing = [
        o.name
        for o, value in zip(ctx.version.inputs, ctx.node.inputs, strict=False)
        if not o.optional and value is None
    ]
    if missing:
        yield ctx.report(
            f"required input {' and '.join(missing)} is empty",
            "connect the missing input; only " + ", ".join(names[low:]) + " may be empty",
        )
