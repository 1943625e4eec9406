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

import importlib
from typing import Any

#: The modules whose names this package exports, lightest first: a name is looked up in
#: each on first use (``qlrewrite.toolkit``'s graph facts are re-exported).
_MODULES = tuple(
    f"qlrewrite.{m}"
    for m in (
        "toolkit",
        "qdq.sites",
        "qdq.constants",
        "qdq.view",
        "qdq.qoperator",
        "qdq.inference",
        "qdq.binding",
    )
)


def __getattr__(name: str) -> Any:
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module 'qlrewrite.qdq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(name for m in _MODULES for name in importlib.import_module(m).__all__)
