"""What a quantized node means: the one home of every fact about one.

Everything that reads a QuantizeLinear / DequantizeLinear node (the check rules, fold,
convert, upgrade, ``info``) reads it through this package; nothing derives these facts a
second time. The operator rules themselves are data in :mod:`qlrewrite.opsets`.

=================  ===============================================================
module             decides
=================  ===============================================================
``graphs``         where graphs sit (:class:`GraphRef`: main, subgraph, function;
                   ``str()`` is the label of findings) and the opset in force for
                   each (:meth:`GraphScope.opset`; :func:`imported_version` is the
                   one reader of an opset import table)
``sites``          which nodes are quantized sites (:class:`SiteKind`), their input
                   roles, and the operator version in force (:class:`QDQSite`.row)
``constants``      is an input constant, and its tensor (initializers, Constant nodes)
``view``           the per-node view (:class:`NodeView`): attributes with defaults,
                   x / scale / zero-point / output types and shapes, the output type
                   (:attr:`NodeView.output_type`), x's type, granularity
``inference``      ONNX type and shape inference per graph, run once on first need
``binding``        building views: :func:`node_views` (one per call site inside a
                   function), :func:`site_view` (constants and declarations only)
=================  ===============================================================

Adding a kind of quantized node (com.microsoft MatMulNBits, GatherBlockQuantized):

1. add its operator versions to :data:`qlrewrite.opsets.TABLE` (attributes with defaults,
   types per role, how the output type is decided);
2. declare a :class:`~qlrewrite.qdq.sites.SiteKind` in ``sites.py`` naming its ops and the
   input index of each role (``x`` is the quantized data: MatMulNBits' ``B``,
   GatherBlockQuantized's ``data``; then ``scale``, ``zero_point``);
3. callers that handle it pass ``kinds=(QDQ, NEW_KIND)`` to :func:`iter_sites` /
   :func:`node_views`; the views then answer attributes, types and granularity for it
   from the table, as for Q/DQ.
"""

from __future__ import annotations

from qlrewrite.qdq.binding import node_views, site_view
from qlrewrite.qdq.constants import MAX_VALUE_BYTES, constant_tensor, is_constant
from qlrewrite.qdq.graphs import (
    MAIN,
    MS_DOMAIN,
    ONNX_DOMAINS,
    GraphRef,
    GraphScope,
    drop_unused_domain,
    imported_version,
    iter_graphs,
    normalize_domain,
    onnx_opset,
)
from qlrewrite.qdq.sites import QDQ, QDQ_OPS, QDQSite, SiteKind, iter_sites
from qlrewrite.qdq.view import Dims, Granularity, NodeView, ValueView, view_of

__all__ = [
    "MAIN",
    "MAX_VALUE_BYTES",
    "MS_DOMAIN",
    "ONNX_DOMAINS",
    "QDQ",
    "QDQ_OPS",
    "Dims",
    "Granularity",
    "GraphRef",
    "GraphScope",
    "NodeView",
    "QDQSite",
    "SiteKind",
    "ValueView",
    "constant_tensor",
    "drop_unused_domain",
    "imported_version",
    "is_constant",
    "iter_graphs",
    "iter_sites",
    "node_views",
    "normalize_domain",
    "onnx_opset",
    "site_view",
    "view_of",
]
