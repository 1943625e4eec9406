"""The rules of QuantizeLinear / DequantizeLinear nodes (some also read the other kinds)."""

from qlrewrite.rules.qdq import (  # noqa: F401 (register their rules)
    attributes,
    bias,
    half_scales,
    requantize,
    shapes,
    structure,
    types,
    values,
)
