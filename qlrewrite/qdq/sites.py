"""Quantized sites: what a kind of quantized node is, and one such node where it sits.

A :class:`SiteKind` says which ops (per domain) form one kind of quantized node and which
input plays which role (``x``: the quantized data, ``scale``, ``zero_point``); the kinds
themselves, each with its view class, are declared in :mod:`qlrewrite.qdq.kinds`. A
:class:`QuantizedSite` is one node of a kind with its graph and the row of
:mod:`qlrewrite.opsets` in force for it (the one place the op version is decided).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Generic

import onnx_ir as ir
from typing_extensions import TypeVar

from qlrewrite import opsets
from qlrewrite.toolkit import GraphRef, GraphScope

__all__ = ["QuantizedSite", "SiteKind"]


#: The view class of a kind's nodes (:mod:`qlrewrite.qdq.kinds` declares each kind with
#: it): a rule declared on ``kinds=(QDQ,)`` is given a ``QDQView``, and mypy checks that
#: its ``ctx`` annotation says so. A bare ``SiteKind`` is any kind.
ViewT_co = TypeVar("ViewT_co", covariant=True, default=Any)


@dataclasses.dataclass(frozen=True)
class SiteKind(Generic[ViewT_co]):
    """One kind of quantized node: its ops per (normalized) domain and its input roles;
    its type parameter is the class of its nodes' views."""

    name: str
    ops: frozenset[tuple[str, str]]  # (domain, op_type); "" for ai.onnx
    roles: Mapping[str, int]  # role -> input index: "x", "scale", "zero_point", ...


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
        return opsets.read_at(self.domain, self.imported)

    @property
    def version(self) -> int | None:
        """The since_version of the op in force (None: none at the imported opset)."""
        return self.row.since if self.row is not None else None

    def input(self, role: str) -> ir.Value | None:
        """The node's input playing ``role`` (None: omitted, or no such role)."""
        index = self.kind.roles.get(role)
        inputs = self.node.inputs
        return inputs[index] if index is not None and index < len(inputs) else None
