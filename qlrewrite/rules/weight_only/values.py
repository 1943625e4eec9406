"""QL510: values of MatMulNBits' constant g_idx."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import MATMUL_NBITS, WeightOnlyView
from qlrewrite.rules.common import layout_attrs, matmul_nbits_layout
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []


@rule(
    "QL510",
    "matmul-nbits-g-idx-range",
    ERROR,
    summary="A constant g_idx names a block outside [0, ceil(K / block_size)).",
    explanation="""
    Each g_idx entry is the block whose scale and zero point dequantize that input feature.
    A value outside the blocks reads another row's parameters or past the end: ONNX
    Runtime's kernel refuses it when the node runs.
    """,
    example="""
    bad:  g_idx: [0, 0, ..., 128] with K=4096, block_size=32   # 128 blocks: 0..127
    good: g_idx: [0, 0, ..., 127]
    """,
    versions="com.microsoft MatMulNBits 1",
    kinds=(MATMUL_NBITS,),
    examples=[
        Example(
            "g-idx-out-of-range",
            ModelSpec("matmul_nbits", g_idx=True, g_idx_values=[0] * 31 + [2]),
            ModelSpec("matmul_nbits", g_idx=True),
        ),
    ],
)
def g_idx_range(ctx: WeightOnlyView) -> Iterator[Finding]:
    form = matmul_nbits_layout(ctx)
    g_idx = ctx.operand("g_idx")
    if form is None or g_idx is None or g_idx.array is None or g_idx.array.size == 0:
        return
    if g_idx.dtype is None or not g_idx.dtype.is_integer():  # its type is QL310's
        return
    bad = (g_idx.array < 0) | (g_idx.array >= form.k_blocks)
    if bad.any():
        first = int(np.flatnonzero(bad.ravel())[0])
        value = int(g_idx.array.ravel()[first])
        yield ctx.report(
            f"g_idx[{first}] = {value} is outside [0, {form.k_blocks}) ({int(bad.sum())} "
            f"entries out of range; {layout_attrs(form)})",
            "recompute g_idx from the quantizer, or drop it when it is arange(K) // block_size",
        )
