"""QL511: values of the constant scales of QOperator nodes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qlrewrite.findings import WARNING, Finding
from qlrewrite.qdq import QOperatorView, triples
from qlrewrite.rules.common import QOPERATOR_KINDS, QOPERATOR_VERSIONS
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


@rule(
    "QL511",
    "qoperator-scale-value",
    WARNING,
    summary="A constant scale of a QOperator node is zero, negative, NaN or infinite.",
    explanation="""
    The integer kernels divide by the output scale when they requantize, and multiply
    the input and weight scales: a zero, NaN or infinite scale gives saturated or garbage
    outputs, and ONNX Runtime runs the model regardless. ORT's quantizers never write a
    scale that is not positive and finite.
    """,
    example="""
    warn: QLinearMatMul(a, a_scale=0.0, ...)
    good: QLinearMatMul(a, a_scale=0.02, ...)
    """,
    versions=QOPERATOR_VERSIONS,
    kinds=QOPERATOR_KINDS,
    examples=[
        Example(
            "matmul-zero-output-scale",
            ModelSpec("qoperator", "QLinearMatMul", y_scale=ModelSpec("array", 0.0, DT.FLOAT)),
            ModelSpec("qoperator", "QLinearMatMul"),
        ),
    ],
)
def qoperator_scale_value(ctx: QOperatorView) -> Iterator[Finding]:
    for t in triples(ctx):
        scale = t.scale
        values = scale.array if scale is not None else None
        if scale is None or values is None:
            continue
        bad = values[~(np.isfinite(values) & (values > 0))]
        if bad.size:
            yield ctx.report(
                f"{t.label}'s scale {scale.describe()} has {bad.size} "
                f"value(s) that are not positive and finite: {bad[:4].tolist()}",
                "recompute the scale from the tensor's range",
            )
