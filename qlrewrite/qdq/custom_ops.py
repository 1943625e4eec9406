"""Quantization written with other producers' custom operators (not Q/DQ).

Some quantizers express formats ONNX's QuantizeLinear / DequantizeLinear could not (when
they were written) with operators of their own domain, which ONNX Runtime runs only with
the producer's custom-op library loaded:

- AMD Quark (``com.amd.quark``): BFP16 (``BFPQuantizeDequantize``), MX formats mxint8,
  mxfp8, mxfp4, mx4/mx6/mx9 (``MXQuantizeDequantize``), and ``ExtendedQuantizeLinear`` /
  ``ExtendedDequantizeLinear`` for bfloat16 and other types; older releases wrote them in
  ``com.vai.quantize`` (``VitisQuantizeLinear``, ``BFPFixNeuron``, ``MXFixNeuron``...).
- Brevitas' QONNX export and FINN (``qonnx.custom_op.general``; before that
  ``finn.custom_op.general`` and ``onnx.brevitas``): ``Quant`` (integer of any bit
  width), ``BipolarQuant``, ``FloatQuant``, ``Trunc``, ``QuantLSTMCell``, ``MultiThreshold``.

qlrewrite checks the standard operators only: ``check`` and ``info`` list these nodes
(count, domain, op). Every rewrite refuses a model that has them, except those a pass of
the rewrite converts (QONNX ``Quant``: ``convert --to onnx``,
:mod:`qlrewrite.passes.convert.qonnx_to_qdq`).
"""

from __future__ import annotations

import collections
import dataclasses

import onnx_ir as ir

from qlrewrite.qdq import iter_graphs

__all__ = [
    "CUSTOM_QUANT_DOMAINS",
    "QONNX_DOMAINS",
    "CustomQuantGroup",
    "custom_quant_groups",
    "describe",
]

_QONNX_OPS = frozenset(
    {
        "Quant",
        "IntQuant",
        "BipolarQuant",
        "FloatQuant",
        "Trunc",
        "QuantLSTMCell",
        "MultiThreshold",
    }
)

#: The domains of QONNX's operators, newest first.
QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")

#: domain -> (producer, quantization operators of that domain)
CUSTOM_QUANT_DOMAINS: dict[str, tuple[str, frozenset[str]]] = {
    "com.amd.quark": (
        "AMD Quark",
        frozenset(
            {
                "ExtendedQuantizeLinear",
                "ExtendedDequantizeLinear",
                "BFPQuantizeDequantize",
                "MXQuantizeDequantize",
            }
        ),
    ),
    "com.vai.quantize": (
        "AMD Vitis AI / Quark (older releases)",
        frozenset(
            {
                "VitisQuantizeLinear",
                "VitisDequantizeLinear",
                "BFPFixNeuron",
                "MXFixNeuron",
                "FixNeuron",
            }
        ),
    ),
    "qonnx.custom_op.general": ("Brevitas / QONNX", _QONNX_OPS),
    "finn.custom_op.general": ("FINN / QONNX (older releases)", _QONNX_OPS),
    "onnx.brevitas": ("Brevitas (older QONNX export)", _QONNX_OPS),
}


@dataclasses.dataclass(frozen=True)
class CustomQuantGroup:
    """The custom quantization nodes of one (domain, op) in a model."""

    domain: str
    op_type: str
    producer: str
    nodes: int

    def to_json(self) -> dict[str, object]:
        """``{"domain", "op_type", "producer", "nodes"}``."""
        return dataclasses.asdict(self)


def _is_custom_quant(node: ir.Node) -> bool:
    entry = CUSTOM_QUANT_DOMAINS.get(node.domain)
    if entry is None:
        return False
    return node.op_type in entry[1] or "quant" in node.op_type.lower()


def custom_quant_groups(model: ir.Model) -> list[CustomQuantGroup]:
    """The custom quantization nodes of ``model`` (main graph, subgraphs, functions),
    grouped by (domain, op) in domain then op order."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for scope in iter_graphs(model):
        graph = scope.graph
        counts.update((n.domain, n.op_type) for n in graph if _is_custom_quant(n))
    return [
        CustomQuantGroup(domain, op, CUSTOM_QUANT_DOMAINS[domain][0], count)
        for (domain, op), count in sorted(counts.items())
    ]


def describe(groups: list[CustomQuantGroup]) -> str:
    """``12 custom quantization node(s) (AMD Quark: com.amd.quark MXQuantizeDequantize x12)``"""
    total = sum(g.nodes for g in groups)
    by_producer: dict[str, list[str]] = {}
    for g in groups:
        by_producer.setdefault(g.producer, []).append(f"{g.domain} {g.op_type} x{g.nodes}")
    parts = "; ".join(f"{p}: {', '.join(ops)}" for p, ops in by_producer.items())
    return f"{total} custom quantization node(s) ({parts})"
