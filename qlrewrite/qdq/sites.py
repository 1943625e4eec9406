"""Quantized sites: the nodes qlrewrite understands, found in every graph and function.

A :class:`SiteKind` says which ops (per domain) form one kind of quantized node and which
input plays which role (``x``: the quantized data, ``scale``, ``zero_point``): :data:`QDQ`
is QuantizeLinear / DequantizeLinear in ai.onnx and com.microsoft; :data:`WEIGHT_ONLY` is
com.microsoft MatMulNBits and GatherBlockQuantized. :func:`iter_sites` yields a
:class:`QuantizedSite` per node of the requested kinds, with its graph and the row of
:mod:`qlrewrite.opsets` in force for it (the one place the op version is decided).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Generic

import onnx_ir as ir
from typing_extensions import TypeVar

from qlrewrite import opsets
from qlrewrite.toolkit import MS_DOMAIN, GraphRef, GraphScope, iter_graphs, normalize_domain

if TYPE_CHECKING:
    from qlrewrite.qdq.view import NodeView, QDQView, QOperatorView, WeightOnlyView

__all__ = [
    "GATHER_BLOCK_QUANTIZED",
    "LEFT_ALONE",
    "MATMUL_NBITS",
    "QDQ",
    "QDQ_OPS",
    "QOPERATOR",
    "WEIGHT_ONLY",
    "QuantizedSite",
    "SiteKind",
    "iter_sites",
]

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


#: The view class of a kind's nodes (:func:`qlrewrite.qdq.view.view_class` builds it): a
#: rule declared on ``kinds=(QDQ,)`` is given a ``QDQView``, and mypy checks that its
#: ``ctx`` annotation says so. A bare ``SiteKind`` is any kind (``SiteKind[NodeView]``).
ViewT_co = TypeVar("ViewT_co", bound="NodeView", covariant=True, default="NodeView")


@dataclasses.dataclass(frozen=True)
class SiteKind(Generic[ViewT_co]):
    """One kind of quantized node: its ops per (normalized) domain and its input roles;
    its type parameter is the class of its nodes' views."""

    name: str
    ops: frozenset[tuple[str, str]]  # (domain, op_type); "" for ai.onnx
    roles: Mapping[str, int]  # role -> input index: "x", "scale", "zero_point", ...


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
LEFT_ALONE = SiteKind("left-alone", frozenset(opsets.QUANTIZED_LEFT_ALONE), {})


@dataclasses.dataclass(frozen=True)
class QuantizedSite:
    """One quantized node with where it sits and the operator version in force for it."""

    node: ir.Node
    scope: GraphScope
    kind: SiteKind
    domain: str  # normalized: "" for ai.onnx
    imported: int | None  # the version of the node's domain imported for its graph
    #: The version in force (None: no such op at that opset): OpVersion for Q/DQ,
    #: WeightOnlyVersion for the weight-only kinds, QOperatorVersion for QOPERATOR.
    row: opsets.Row | None

    @property
    def graph(self) -> ir.Graph | ir.Function:
        """The graph or function holding the node."""
        return self.scope.graph

    @property
    def ref(self) -> GraphRef:
        """Where the graph sits (``str()``: the label findings show)."""
        return self.scope.ref

    @property
    def import_missing(self) -> bool:
        """True when the graph does not import the node's domain (the node is then read at
        the version ONNX Runtime implies, :data:`qlrewrite.opsets.IMPLIED_VERSIONS`)."""
        return self.imported is None

    @property
    def opset(self) -> int | None:
        """The version of the node's domain the node is read at: the imported one, else
        the one ONNX Runtime implies (com.microsoft 1), else None."""
        return _read_at(self.domain, self.imported)

    @property
    def version(self) -> int | None:
        """The since_version of the op in force (None: none at the imported opset)."""
        return self.row.since if self.row is not None else None

    def input(self, role: str) -> ir.Value | None:
        """The node's input playing ``role`` (None: omitted, or no such role)."""
        index = self.kind.roles.get(role)
        inputs = self.node.inputs
        return inputs[index] if index is not None and index < len(inputs) else None


def _read_at(domain: str, imported: int | None) -> int | None:
    return imported if imported is not None else opsets.IMPLIED_VERSIONS.get(domain)


def iter_sites(model: ir.Model, kinds: tuple[SiteKind, ...] = (QDQ,)) -> Iterator[QuantizedSite]:
    """Every node of ``kinds`` in all graphs, subgraphs and functions, in graph order."""
    for scope in iter_graphs(model):
        for node in scope.graph:
            domain = normalize_domain(node.domain)
            for kind in kinds:
                if (domain, node.op_type) in kind.ops:
                    imported = scope.opset(domain)
                    row = opsets.lookup(domain, node.op_type, _read_at(domain, imported))
                    yield QuantizedSite(node, scope, kind, domain, imported, row)
                    break
