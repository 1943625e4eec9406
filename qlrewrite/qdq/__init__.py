"""What a quantized node means: the one home of every fact about one.

Everything that reads a QuantizeLinear / DequantizeLinear node (the check rules, fold,
convert, upgrade, ``info``) reads it through this package; nothing derives these facts a
second time. The operator rules themselves are data in :mod:`qlrewrite.opsets`.

=================  ===============================================================
module             decides
=================  ===============================================================
(toolkit)          where graphs sit (:class:`GraphRef`: main, subgraph, function;
                   ``str()`` is the label of findings) and the opset in force for
                   each (:meth:`GraphScope.opset`; :func:`imported_version` is the
                   one reader of an opset import table): re-exported from
                   :mod:`qlrewrite.toolkit`, below this package
``sites``          which nodes are quantized sites (:class:`SiteKind`), their input
                   roles, and the operator version in force (:class:`QuantizedSite`.row)
``constants``      is an input constant, and its tensor (initializers, Constant nodes)
``view``           the per-node view (:class:`NodeView`): attributes with defaults,
                   x / scale / zero-point / output types and shapes, the output type
                   (:attr:`NodeView.output_type`), x's type, granularity
``qoperator``      the (data, scale, zero point) triples of a QOperator / dynamic
                   node (:func:`triples`: QLinearConv, QLinearMatMul, QLinear*, ...)
``inference``      ONNX type and shape inference per graph, run once on first need
``binding``        building views: :func:`node_views` (one per call site inside a
                   function), :func:`site_view` (constants and declarations only)
=================  ===============================================================

Adding a kind of quantized node (as com.microsoft MatMulNBits and GatherBlockQuantized
were added, :data:`~qlrewrite.qdq.sites.WEIGHT_ONLY`):

1. add its operator versions to :data:`qlrewrite.opsets.TABLE` (attributes with defaults,
   types per role; a row class with ``attributes`` and ``default(name)``);
2. declare a :class:`~qlrewrite.qdq.sites.SiteKind` in ``sites.py`` naming its ops and the
   input index of each role (``x`` is the quantized data: MatMulNBits' ``B``,
   GatherBlockQuantized's ``data``; then ``scale``, ``zero_point``);
3. callers that handle it pass ``kinds=(...)`` to :func:`iter_sites` / :func:`node_views`
   / :func:`site_view`; the sites carry the row in force, the views answer attributes with
   defaults, types and shapes per role from it, as for Q/DQ. (``output_type``,
   ``x_type`` and ``granularity`` are the Q/DQ rules: a new kind whose output is decided
   otherwise adds its rule there, keyed on ``site.kind``.)
"""

from __future__ import annotations

from qlrewrite.qdq.binding import (
    node_views,
    site_view,
)
from qlrewrite.qdq.constants import (
    MAX_VALUE_BYTES,
    constant_tensor,
    is_constant,
    small_array,
    value_dtype,
)
from qlrewrite.qdq.inference import (
    Inference,
    infer,
    tables_of,
)
from qlrewrite.qdq.kinds import (
    GATHER_BLOCK_QUANTIZED,
    LEFT_ALONE,
    MATMUL_NBITS,
    QDQ,
    QDQ_OPS,
    QOPERATOR,
    WEIGHT_ONLY,
    iter_sites,
    view_class,
)
from qlrewrite.qdq.qoperator import (
    PER_CHANNEL,
    TripleView,
    triples,
)
from qlrewrite.qdq.sites import QuantizedSite, SiteKind
from qlrewrite.qdq.view import (
    Dims,
    Granularity,
    NodeView,
    QDQView,
    QOperatorView,
    TypeShape,
    ValueView,
    WeightOnlyView,
    view_of,
)
from qlrewrite.toolkit import (
    MAIN,
    MS_DOMAIN,
    ONNX_DOMAINS,
    FreshNames,
    GraphRef,
    GraphScope,
    ProtoGraph,
    all_graphs,
    drop_unused_domain,
    drop_unused_domains,
    ensure_import,
    ensure_import_at,
    function_kinds,
    functions_of,
    graphs_within,
    implied_imports,
    import_table,
    imported_version,
    iter_graphs,
    main_graphs,
    model_folder,
    normalize_domain,
    onnx_opset,
    owner_label,
    proto_graphs,
    replace_value,
)

__all__ = [
    "GATHER_BLOCK_QUANTIZED",
    "LEFT_ALONE",
    "MAIN",
    "MATMUL_NBITS",
    "MAX_VALUE_BYTES",
    "MS_DOMAIN",
    "ONNX_DOMAINS",
    "PER_CHANNEL",
    "QDQ",
    "QDQ_OPS",
    "QOPERATOR",
    "WEIGHT_ONLY",
    "Dims",
    "FreshNames",
    "Granularity",
    "GraphRef",
    "GraphScope",
    "Inference",
    "NodeView",
    "ProtoGraph",
    "QDQView",
    "QOperatorView",
    "QuantizedSite",
    "SiteKind",
    "TripleView",
    "TypeShape",
    "ValueView",
    "WeightOnlyView",
    "all_graphs",
    "constant_tensor",
    "drop_unused_domain",
    "drop_unused_domains",
    "ensure_import",
    "ensure_import_at",
    "function_kinds",
    "functions_of",
    "graphs_within",
    "implied_imports",
    "import_table",
    "imported_version",
    "infer",
    "is_constant",
    "iter_graphs",
    "iter_sites",
    "main_graphs",
    "model_folder",
    "node_views",
    "normalize_domain",
    "onnx_opset",
    "owner_label",
    "proto_graphs",
    "replace_value",
    "site_view",
    "small_array",
    "tables_of",
    "triples",
    "value_dtype",
    "view_class",
    "view_of",
]
