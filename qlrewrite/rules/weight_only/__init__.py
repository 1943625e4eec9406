"""The rules of the com.microsoft weight-only operators (MatMulNBits, GatherBlockQuantized)."""

from qlrewrite.rules.weight_only import (  # noqa: F401 (register their rules)
    attributes,
    gather_block,
    matmul_nbits,
    structure,
    types,
    values,
)
