"""QL732: a MatMulNBits that ONNX Runtime 1.16 computes wrong on every session: packed
zero points with a half byte of padding at the end of each column's row, which 1.16 reads
as one stream over all columns (the layout before 1.17)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite.findings import ERROR, Finding
from qlrewrite.kernels.nbits import MatMulNBitsLayout
from qlrewrite.qdq import MATMUL_NBITS, WeightOnlyView
from qlrewrite.rules.common import matmul_nbits_layout
from qlrewrite.rules.model_spec import ModelSpec
from qlrewrite.rules.registry import Example, TargetNode, rule

__all__: list[str] = []

#: The ORT releases whose MatMulNBits kernel reads packed zero points without the padding
#: at the end of each column (measured: 1.16.3; 1.15.1 has no MatMulNBits, 1.17.3 to
#: 1.32.0 read the padded rows the contrib schema defines).
_UNPADDED_RELEASES = frozenset({(1, 16)})


def _padded(view: WeightOnlyView, layout: MatMulNBitsLayout) -> bool:
    """Packed uint8 zero points whose rows (one per column n) end in padding, with more
    than one row (one row: both layouts are the same bytes)."""
    zero_points = view.operand("zero_points")
    if zero_points is None or zero_points.dtype != ir.DataType.UINT8:
        return False
    return layout.N > 1 and (layout.k_blocks * layout.bits) % 8 != 0


@rule(
    "QL732",
    "ort-nbits-zero-point-rows",
    ERROR,
    summary="ONNX Runtime 1.16 reads this MatMulNBits' packed zero points without the padding "
    "at the end of each column and computes other values.",
    explanation="""
    The contrib schema packs a MatMulNBits' uint8 zero points per column n: ceil(k_blocks x
    bits / 8) bytes each, the last one half empty when k_blocks x bits is not a multiple
    of 8 (an odd count of 4-bit blocks). ONNX Runtime 1.16 read them as one stream over
    all columns (the layout before 1.17), so every column after the first takes its
    neighbours' zero points: measured in 1.16.3 with optimizations off and on, K=48,
    block_size=16 (3 blocks), N=4: 6.7 off on outputs of at most 7.3; 1.17.3 to 1.32.0
    compute the same model within 1e-6 of the reference
    (`tests/targets/test_target_nbits_zero_points.py`). One column (N=1), an even count
    of 4-bit blocks, or no zero points: the same in every release.
    """,
    example="""
    bad:  MatMulNBits(K=48, N=8, bits=4, block_size=16, zero_points [8, 2])   (ort==1.16)
    good: MatMulNBits(K=64, N=8, bits=4, block_size=16, zero_points [8, 2])
    """,
    versions="--target ort",
    scope="target-node",
    kinds=(MATMUL_NBITS,),
    examples=[
        Example(
            "odd-block-count",
            ModelSpec("matmul_nbits", k=48, zp="packed", opset=13, ir_version=8),
            ModelSpec("matmul_nbits", k=64, zp="packed", opset=13, ir_version=8),
            targets=("ort==1.16",),
        ),
    ],
)
def ort_nbits_zero_point_rows(ctx: TargetNode[WeightOnlyView]) -> Iterator[Finding]:
    if ctx.target.runtime != "ort" or ctx.view.op_type != "MatMulNBits":
        return
    layout = matmul_nbits_layout(ctx.view)
    if layout is None or not _padded(ctx.view, layout):
        return
    tables = [t for t in ctx.target.tables if t.minor in _UNPADDED_RELEASES]
    if tables:
        releases = ", ".join(t.release for t in tables)
        yield ctx.report(
            f"{layout.k_blocks} blocks of {layout.bits} bits per column: ORT {releases} reads "
            "the packed zero points without each column's padding and computes other values",
            "run on ORT 1.17 or later, or quantize with an even count of 4-bit blocks per "
            "column (block_size) or without zero points",
        )
