"""Vectorised QuantizeLinear / DequantizeLinear kernels on NumPy and ml_dtypes arrays.

Bit-exact with ONNX Runtime's CPU kernels where it has one, the ONNX spec elsewhere.
Sub-byte types are one element per byte (packing stays with onnx_ir). Work is split into
cache-sized chunks run on a thread pool ($QLREWRITE_THREADS or ``threads=`` sets its size).
"""

from __future__ import annotations

from qlrewrite.kernels._chunks import check_granularity
from qlrewrite.kernels._types import int_range
from qlrewrite.kernels.dequantize import dequantize
from qlrewrite.kernels.quantize import quantize

__all__ = ["check_granularity", "dequantize", "int_range", "quantize"]
