"""The kinds of quantized node, each with its view class, and the walk that finds them.

:data:`QDQ` is QuantizeLinear / DequantizeLinear in ai.onnx and com.microsoft (viewed as
:class:`~qlrewrite.qdq.view.QDQView`); :data:`WEIGHT_ONLY` is com.microsoft MatMulNBits and
GatherBlockQuantized (``WeightOnlyView``); :data:`QOPERATOR` the QOperator / dynamic
operators (``QOperatorView``). :func:`iter_sites` yields a
:class:`~qlrewrite.qdq.sites.QuantizedSite` per node of the requested kinds and
:func:`view_class` says which view reads it.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq.sites import QuantizedSite, SiteKind
from qlrewrite.qdq.view import NodeView, QDQView, QOperatorView, WeightOnlyView
from qlrewrite.toolkit import MS_DOMAIN, iter_graphs, normalize_domain

__all__ = [
    "GATHER_BLOCK_QUANTIZED",
    "LEFT_ALONE",
    "MATMUL_NBITS",
    "QDQ",
    "QDQ_OPS",
    "QOPERATOR",
    "WEIGHT_ONLY",
    "iter_sites",
    "view_class",
]

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


#: QuantizeLinear / DequantizeLinear in ai.onnx and com.microsoft.
QDQ: SiteKind[QDQView] = SiteKind(
    "qdq",
    frozenset((domain, op) for domain in ("", MS_DOMAIN) for op in QDQ_OPS),
    {"x": 0, "scale": 1, "zero_point": 2},
)


def _weight_only(name: str, op_type: str) -> SiteKind[WeightOnlyView]:
    """A weight-only op's kind; its roles are read from the table (x: the row's weight)."""
    row = opsets.versions(MS_DOMAIN, op_type)[0]
    assert isinstance(row, opsets.WeightOnlyVersion), op_type
    roles = {"x": row.weight, "scale": "scales", "zero_point": "zero_points"}
    return SiteKind(
        name,
        frozenset({(MS_DOMAIN, op_type)}),
        {role: row.input_index(input_name) for role, input_name in roles.items()},
    )


#: com.microsoft MatMulNBits(A, B, scales, zero_points, g_idx, bias): x is the packed B.
MATMUL_NBITS = _weight_only("matmul-nbits", "MatMulNBits")
#: com.microsoft GatherBlockQuantized(data, indices, scales, zero_points).
GATHER_BLOCK_QUANTIZED = _weight_only("gather-block-quantized", "GatherBlockQuantized")
#: The weight-only kinds (rows: :class:`qlrewrite.opsets.WeightOnlyVersion`).
WEIGHT_ONLY = (MATMUL_NBITS, GATHER_BLOCK_QUANTIZED)


#: The QOperator / dynamic operators (QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft
#: QLinear*, QGemm, ...; rows: :class:`qlrewrite.opsets.QOperatorVersion`). Their roles are
#: per operator, several (data, scale, zero point) triples each: read them with
#: :func:`qlrewrite.qdq.qoperator.triples`.
QOPERATOR: SiteKind[QOperatorView] = SiteKind(
    "qoperator", frozenset((row.domain, row.op_type) for row in opsets.QOPERATOR_ROWS), {}
)
#: Quantized com.microsoft operators reported but neither checked nor converted
#: (:data:`qlrewrite.opsets.QUANTIZED_LEFT_ALONE` says why).
LEFT_ALONE: SiteKind[NodeView] = SiteKind("left-alone", frozenset(opsets.QUANTIZED_LEFT_ALONE), {})


def iter_sites(model: ir.Model, kinds: tuple[SiteKind, ...] = (QDQ,)) -> Iterator[QuantizedSite]:
    """Every node of ``kinds`` in all graphs, subgraphs and functions, in graph order."""
    for scope in iter_graphs(model):
        for node in scope.graph:
            domain = normalize_domain(node.domain)
            for kind in kinds:
                if (domain, node.op_type) in kind.ops:
                    imported = scope.opset(domain)
                    row = opsets.lookup(domain, node.op_type, opsets.read_at(domain, imported))
                    yield QuantizedSite(node, scope, kind, domain, imported, row)
                    break


def view_class(site: QuantizedSite) -> type[NodeView]:
    """The view of ``site``'s kind."""
    if site.kind is QDQ:
        return QDQView
    if site.kind is QOPERATOR:
        return QOperatorView
    if any(site.kind is kind for kind in WEIGHT_ONLY):
        return WeightOnlyView
    return NodeView
