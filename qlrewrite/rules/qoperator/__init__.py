"""The rules of the QOperator / dynamic operators (QLinearConv, QLinearMatMul, ...)."""

from qlrewrite.rules.qoperator import shapes, structure, types, values  # noqa: F401 (register their rules)
