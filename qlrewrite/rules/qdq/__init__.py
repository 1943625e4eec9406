"""The rules of QuantizeLinear / DequantizeLinear nodes (some also read the other kinds)."""

from qlrewrite.rules.qdq import attributes, bias, half_scales, shapes, structure, types, values  # noqa: F401 (register their rules)
