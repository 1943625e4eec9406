"""QL730-QL731: valid quantized values that ONNX Runtime's default session computes wrong,
run only for ``--target ort``: an int32 bias whose scale is not x_scale x w_scale (QL730,
QL505's case) and a requantization between two Q/DQ pairs (QL731, QL507's case), with the
releases measured to miscompute them."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.qdq.bias import mismatch
from qlrewrite.rules.qdq.requantize import HINT, requantization
from qlrewrite.rules.registry import Example, TargetNode, rule
from qlrewrite.targets.tables import Table

__all__: list[str] = []

#: The first release whose Conv selector leaves a QDQ Conv unfused when its bias scale is
#: more than 1% off x_scale x w_scale (onnxruntime PR 28229; measured: 1.27.0).
_CONV_CHECKS_BIAS = (1, 27)
_CONV_TOLERANCE = 0.01


def _releases(tables: list[Table]) -> str:
    """``ORT 1.15.1, 1.16.3`` (the releases of ``tables``, all ORT)."""
    return "ORT " + ", ".join(t.release for t in tables)


@rule(
    "QL730",
    "ort-bias-scale",
    ERROR,
    summary="ONNX Runtime computes this Conv / Gemm / MatMul + Add with an int32 bias whose "
    "scale is not x_scale x w_scale wrong (measured against ORT_DISABLE_ALL).",
    explanation="""
    QL505's case, for `--target ort`: the releases whose default session fuses the op into one
    integer kernel that reads the int32 bias in units of x_scale x w_scale and so computes other
    values than the graph. Measured (bias scale 4 x the product, default session against
    ORT_DISABLE_ALL; `tests/rules/test_bias_scale.py`): Gemm and MatMul + Add in every release
    1.15.1 to 1.32.0 (32% of the largest output off); Conv in 1.15.1 to 1.26.0 (14%), and in every
    release when the scales differ by 1% or less (0.5%: one output step), as 1.27.0 onwards leave a
    Conv unfused beyond 1% (onnxruntime PR 28229).
    """,
    example="""
    bad:  Gemm(DQ(x, 0.05), DQ(w, 0.01), DQ(b: int32, 0.002))    (--target ort==1.31)
    good: Gemm(DQ(x, 0.05), DQ(w, 0.01), DQ(4 x b: int32, 0.0005))
    """,
    versions="--target ort",
    scope="target-node",
    supersedes=("QL505",),
    examples=[
        Example(
            "gemm-bias-scale-x4",
            ModelSpec("qdq_biased_op", "Gemm", bias_factor=4.0),
            ModelSpec("qdq_biased_op", "Gemm"),
            targets=("ort==1.31",),
        ),
    ],
)
def ort_bias_scale(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    if ctx.target.runtime != "ort":
        return
    found = mismatch(ctx.view)
    if found is None:
        return
    tables = list(ctx.target.tables)
    if found.op_type == "Conv" and found.worst > _CONV_TOLERANCE:
        tables = [t for t in tables if t.minor < _CONV_CHECKS_BIAS]
    if tables:
        yield ctx.report(
            f"{found.message}: fused by {_releases(tables)}, which compute other values",
            "requantize the bias to x_scale x w_scale (exact here: `qlrewrite check --fix "
            "--select QL505` does it, without --target)"
            if found.exact
            else found.hint,
        )


@rule(
    "QL731",
    "ort-requantize-collapsed",
    ERROR,
    summary="ONNX Runtime replaces Q -> DQ -> Q -> DQ with different parameters by one pair "
    "and computes other values (measured against ORT_DISABLE_ALL).",
    explanation="""
    QL507's case, for `--target ort`: DoubleQDQPairsRemover, in the default session of
    every release measured (1.15.1 to 1.32.0), replaces two uint8 / int8 Q/DQ pairs in a
    row with one pair on the intersection of their ranges, whose values are on neither
    grid (scale 0.05 then 0.5: off by up to 0.25, half the second step).
    """,
    example="""
    bad:  Q(x, 0.05, 128) -> DQ(0.05, 128) -> Q(0.5, 128) -> DQ(0.5, 128)   (--target ort)
    good: Q(x, 0.5, 128) -> DQ(0.5, 128)
    """,
    versions="--target ort",
    scope="target-node",
    supersedes=("QL507",),
    examples=[
        Example(
            "scale-0.05-then-0.5",
            ModelSpec("qdq_requantized", 0.5),
            ModelSpec("qdq_requantized", 0.05),
            targets=("ort==1.31",),
        ),
    ],
)
def ort_requantize_collapsed(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    if ctx.target.runtime != "ort":
        return
    message = requantization(ctx.view)
    if message is not None:
        yield ctx.report(f"{message} ({_releases(list(ctx.target.tables))})", HINT)
