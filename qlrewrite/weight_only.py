"""What a com.microsoft MatMulNBits / GatherBlockQuantized node's attributes mean.

A :class:`MatMulNBitsForm` or :class:`GatherBlockForm` is built from a node's attributes
(defaults from the :class:`~qlrewrite.opsets.WeightOnlyVersion` in force) and gives every
fact derived from them: block counts, packing, and the shape each input must have, as
ONNX Runtime's schema and CPU kernels define them. Nothing here reads a tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from qlrewrite import opsets

__all__ = [
    "GatherBlockForm",
    "MatMulNBitsForm",
    "ceil_div",
    "gather_block_form",
    "int_attributes",
    "matmul_nbits_form",
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


@dataclasses.dataclass(frozen=True)
class MatMulNBitsForm:
    """``Y = A @ W`` with W [K, N] stored as B [N, k_blocks, blob] (uint8, ``bits`` wide
    values packed low bits first within each block of ``block_size`` along K)."""

    k: int
    n: int
    bits: int
    block_size: int
    accuracy_level: int = 0
    weight_prepacked: int = 0

    @property
    def k_blocks(self) -> int:
        """Blocks along K: ceil(K / block_size)."""
        return ceil_div(self.k, self.block_size)

    @property
    def blob_size(self) -> int:
        """Bytes per block of B: block_size * bits / 8."""
        return self.block_size * self.bits // 8

    @property
    def zero_point_blob(self) -> int:
        """Bytes of packed uint8 zero points per row of N: ceil(k_blocks * bits / 8)."""
        return ceil_div(self.k_blocks * self.bits, 8)

    @property
    def default_zero_point(self) -> int:
        """The zero point when the input is absent: 2^(bits-1)."""
        return 1 << (self.bits - 1)

    @property
    def b_shape(self) -> tuple[int, int, int]:
        """The shape of B."""
        return (self.n, self.k_blocks, self.blob_size)

    @property
    def scales_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shapes scales may have: [N, k_blocks], or [N * k_blocks] (older models)."""
        return ((self.n, self.k_blocks), (self.n * self.k_blocks,))

    def zero_point_shapes(self, packed: bool) -> tuple[tuple[int, ...], ...]:
        """The shapes zero_points may have: packed uint8 or in a float type."""
        width = self.zero_point_blob if packed else self.k_blocks
        return ((self.n, width), (self.n * width,))

    @property
    def g_idx_shapes(self) -> tuple[tuple[int, ...], ...]:
        """g_idx: [K], or K padded to whole blocks."""
        return tuple(dict.fromkeys(((self.k,), (self.k_blocks * self.block_size,))))

    @property
    def bias_shape(self) -> tuple[int]:
        """bias: [N]."""
        return (self.n,)


def matmul_nbits_form(values: Mapping[str, int | None]) -> MatMulNBitsForm | None:
    """The form of a MatMulNBits node from :func:`int_attributes` (None: K, N, bits or
    block_size missing or unusable: not positive, or bits outside 1..8)."""
    k, n, bits, block = (values.get(name) for name in ("K", "N", "bits", "block_size"))
    if k is None or n is None or bits is None or block is None:
        return None
    if k < 0 or n < 0 or block <= 0 or not 1 <= bits <= 8:
        return None
    return MatMulNBitsForm(
        k, n, bits, block, values.get("accuracy_level") or 0, values.get("weight_prepacked") or 0
    )


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
        values = data_shape[self.quantize_axis] * self.values_per_element
        if self.block_size == 0:
            return 1
        return ceil_div(values, self.block_size)

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
    storage = row.storage.get(data_type) if data_type is not None else None
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
