"""What a com.microsoft MatMulNBits / GatherBlockQuantized node's attributes mean.

:func:`int_attributes` gives every attribute in force (defaults from the
:class:`~qlrewrite.opsets.WeightOnlyVersion`); :func:`matmul_nbits_layout` turns them into
the :class:`~qlrewrite.kernels.nbits.MatMulNBitsLayout` (block counts, packing, the shape
of every input), :func:`gather_block_form` into a :class:`GatherBlockForm` (normalized
axes, packing, the shapes of scales and zero points), as ONNX Runtime's schemas and CPU
kernels define them. Nothing here reads a tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.kernels.nbits import MatMulNBitsLayout

__all__ = [
    "GatherBlockForm",
    "ceil_div",
    "gather_block_form",
    "int_attributes",
    "matmul_nbits_layout",
]

Dims = tuple[int | None, ...]


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers (b > 0)."""
    return -(-a // b)


def int_attributes(
    attributes: Mapping[str, ir.Attr], row: opsets.WeightOnlyVersion
) -> dict[str, int | None]:
    """Every attribute of ``row``: the node's INT value, else the default (None: absent
    without a default, or not an INT)."""
    values: dict[str, int | None] = {}
    for name in row.attributes:
        attr = attributes.get(name)
        if attr is None:
            values[name] = row.default(name)
        elif attr.type == ir.AttributeType.INT:
            values[name] = attr.as_int()
        else:
            values[name] = None
    return values


def matmul_nbits_layout(
    values: Mapping[str, int | None], row: opsets.WeightOnlyVersion
) -> MatMulNBitsLayout | None:
    """The layout of a MatMulNBits node from :func:`int_attributes` (None: K, N, bits or
    block_size missing or outside what the operator allows)."""
    k, n, bits, block = (values.get(name) for name in ("K", "N", "bits", "block_size"))
    if k is None or n is None or bits is None or block is None or k < 1 or n < 1:
        return None
    if bits not in row.storage[ir.DataType.UINT8].bits:
        return None
    if block < row.min_block_size or block & (block - 1):
        return None
    return MatMulNBitsLayout(K=k, N=n, bits=bits, block_size=block)


@dataclasses.dataclass(frozen=True)
class GatherBlockForm:
    """GatherBlockQuantized on ``data`` of a known rank: normalized axes and storage."""

    dtype: ir.DataType
    storage: opsets.WeightStorage
    rank: int
    bits: int
    block_size: int  # 0: one block over the whole quantize axis (float8 / float4 data)
    gather_axis: int  # normalized into [0, rank)
    quantize_axis: int  # normalized into [0, rank)

    @property
    def values_per_element(self) -> int:
        """Quantized values per element of data: 8 / bits for packed uint8, else 1."""
        return 8 // self.bits if self.storage.packed else 1

    def blocks(self, data_shape: Sequence[int]) -> int:
        """Blocks along the quantize axis for ``data_shape`` (packed shape for uint8)."""
        return self.blocks_of(data_shape[self.quantize_axis])

    def blocks_of(self, size: int) -> int:
        """Blocks along the quantize axis when data has ``size`` elements on it (packed
        elements for uint8)."""
        if self.block_size == 0:
            return 1
        return ceil_div(size * self.values_per_element, self.block_size)

    def scales_shape(self, data_shape: Sequence[int]) -> tuple[int, ...]:
        """The scales shape the kernel wants (float8 / float4 may also broadcast a 1)."""
        blocks = self.blocks(data_shape)
        return tuple(blocks if i == self.quantize_axis else d for i, d in enumerate(data_shape))

    def zero_point_shape(self, scales_shape: Sequence[int]) -> tuple[int, ...]:
        """The zero-point shape for ``scales_shape``: packed uint8 holds 8 / bits per byte
        along the quantize axis."""
        per_byte = self.values_per_element
        return tuple(
            ceil_div(d, per_byte) if i == self.quantize_axis else d
            for i, d in enumerate(scales_shape)
        )

    @property
    def default_zero_point(self) -> int | None:
        """The zero point when the input is absent (None: float data has none)."""
        return self.storage.default_zero_point(self.bits)


def gather_block_form(
    values: Mapping[str, int | None],
    row: opsets.WeightOnlyVersion,
    data_type: ir.DataType | None,
    rank: int | None,
) -> GatherBlockForm | None:
    """The form of a GatherBlockQuantized node (None: data type or rank unknown, an axis
    out of range, or an attribute missing)."""
    if data_type is None:
        return None
    storage = row.storage.get(data_type)
    if storage is None or rank is None or rank < 1:
        return None
    bits, block, gather, quantize = (
        values.get(name) for name in ("bits", "block_size", "gather_axis", "quantize_axis")
    )
    if bits is None or block is None or gather is None or quantize is None:
        return None
    if not (-rank <= gather < rank and -rank <= quantize < rank) or block < 0:
        return None
    if storage.packed and bits not in storage.bits:
        return None
    return GatherBlockForm(data_type, storage, rank, bits, block, gather % rank, quantize % rank)
