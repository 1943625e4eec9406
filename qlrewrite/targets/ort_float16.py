"""Where ONNX Runtime's CPU provider computes a float16 node in float32.

ONNX Runtime (1.31, 1.32) has float16 CPU kernels for few operators (ai.onnx Q/DQ from
opset 19, data movement, a few normalizations; no MatMul, Gemm, Conv, Add...). Before
running a model its InsertCastTransformer (which runs whatever the optimization level):

1. runs every node with a float16 input and no float16 kernel in float32, with Casts
   inserted around it;
2. also runs in float32 a node that has a float16 kernel but is "isolated": it has an
   input produced by another node (initializers and Constant nodes are not), produces no
   graph output, and every node producing its float16 inputs or consuming its float16
   outputs runs in float32 (rule 1);
3. removes each Cast pair f16 -> f32 -> f16 or f32 -> f16 -> f32 it can, the model's own
   f32 -> f16 Casts included (``RemoveDuplicateCastTransformer``).

Before that, ``EnsureUniqueDQForNodeUnit`` gives each consumer of a DequantizeLinear its
own copy of the node, so rule 2 is decided per consumer: a float16 DQ whose input comes
from a node (a Q -> DQ chain) hands each consumer without a float16 kernel its float32
value, and each consumer with one the float16 value.

So in ``W(int8) -Q/DQ-> float16 -> MatMul`` the dequantized weight never exists in
float16: ORT hands MatMul the float32 product. A rewrite that turns that DQ into a
float16 constant rounds it, and changes the model's outputs in ORT. :func:`float32_in_ort`
says when that happens, from the table below (read from ``get_all_opkernel_def()`` of
onnxruntime 1.31.1 and 1.32.0 on x86-64; other builds, ARM64 with float16 arithmetic
or GPU providers, have other kernels).
"""

from __future__ import annotations

import functools

import onnx
import onnx_ir as ir

from qlrewrite.qdq.constants import value_dtype
from qlrewrite.toolkit import imported_version, normalize_domain

__all__ = [
    "FLOAT16_CPU_KERNELS",
    "domain_changes_result",
    "float32_in_ort",
    "has_float16_kernel",
]

_ANY = 1 << 31

#: (domain, op) -> the op versions with a float16 CPU kernel, as (first, last) ranges.
FLOAT16_CPU_KERNELS: dict[tuple[str, str], tuple[tuple[int, int], ...]] = {
    **{
        ("", op): ((1, _ANY),)
        for op in (
            "DynamicSlice",
            "Flatten",
            "Gather",
            "Identity",
            "If",
            "LayerNormalization",
            "Loop",
            "MemcpyFromHost",
            "MemcpyToHost",
            "RandomNormalLike",
            "RandomUniformLike",
            "Reshape",
            "Shape",
            "SimplifiedLayerNormalization",
            "Slice",
            "Squeeze",
            "Transpose",
            "Unsqueeze",
        )
    },
    **{
        ("", op): ((since, _ANY),)
        for op, since in (
            ("Attention", 23),
            ("BitCast", 26),
            ("Cast", 6),
            ("Celu", 28),
            ("Clip", 12),
            ("Compress", 9),
            ("Concat", 4),
            ("ConstantOfShape", 9),
            ("DequantizeLinear", 19),
            ("Expand", 8),
            ("GatherElements", 11),
            ("GatherND", 11),
            ("IsInf", 20),
            ("IsNaN", 9),
            ("Max", 12),
            ("Min", 12),
            ("Mod", 10),
            ("Optional", 15),
            ("OptionalGetElement", 15),
            ("OptionalHasElement", 18),
            ("QuantizeLinear", 19),
            ("RMSNormalization", 23),
            ("ReverseSequence", 10),
            ("RotaryEmbedding", 23),
            ("Round", 11),
            ("Scan", 8),
            ("ScatterElements", 11),
            ("ScatterND", 11),
            ("SequenceAt", 11),
            ("SequenceConstruct", 11),
            ("Shrink", 9),
            ("Sign", 9),
            ("Split", 2),
            ("SplitToSequence", 11),
            ("TensorScatter", 24),
        )
    },
    ("", "Dropout"): ((7, 11),),
    ("", "Scatter"): ((9, 10),),
    **{
        ("com.microsoft", op): ((1, _ANY),)
        for op in (
            "BranchwiseRMSNorm",
            "EngramGate",
            "ExpandDims",
            "GatedAdd",
            "GatedDeltaNet",
            "GatedRMSNorm",
            "GatherBlockQuantized",
            "GatherND",
            "GatherPacked",
            "GroupQueryAttention",
            "HyperConnectionPostMix",
            "HyperConnectionPreMix",
            "Inverse",
            "LinearAttentionGate",
            "MRotaryEmbedding",
            "MatMulNBits",
            "MoEGroupRouter",
            "QMoE",
            "RotaryEmbedding",
            "ScaledSiLU",
            "SkipLayerNormalization",
            "SkipSimplifiedLayerNormalization",
            "SparseAttention",
            "UnfoldTensor",
            "VarlenCausalConvWithState",
        )
    },
}


def has_float16_kernel(domain: str, op_type: str, version: int | None) -> bool:
    """True if ORT's CPU provider has a float16 kernel for the op at that version."""
    ranges = FLOAT16_CPU_KERNELS.get(("" if domain == "ai.onnx" else domain, op_type), ())
    return version is not None and any(lo <= version <= hi for lo, hi in ranges)


def float32_in_ort(node: ir.Node, imports: dict[str, int], output_type: ir.DataType) -> bool:
    """True if, in ORT's CPU provider, some consumer of DequantizeLinear ``node``'s float16
    output reads it as the unrounded float32 value (the others read it in float16).

    ``imports``: the opset imports in force for the node's graph (op versions of the node
    and its neighbours); ``output_type``: the node's output type (from the op's rules: a
    model need not declare it). Neighbours are judged by their kernels alone (rule 1 of
    the module docstring), as ORT judges them.
    """
    if output_type != ir.DataType.FLOAT16:
        return False
    if not _kernel(node, imports):
        return any(_is_f16(v) for v in node.inputs)  # rule 1 (ORT casts inputs only)
    graph = node.graph
    edges = [v for v in node.inputs if v is not None and _is_edge(v, graph)]
    if not edges:
        return False
    if any(_is_f16(v) and not _runs_in_float32(v.producer(), imports) for v in edges):
        return False
    # Rule 2 for the copy of each consumer in this graph (a consumer has a float16 input,
    # this output: it runs in float32 when it has no float16 kernel).
    return any(
        consumer.graph is graph and not _kernel(consumer, imports)
        for consumer, _ in node.outputs[0].uses()
    )


def _runs_in_float32(node: ir.Node | None, imports: dict[str, int]) -> bool:
    """Rule 1 for a neighbour: it has a float16 input and no float16 kernel (a value of
    unknown type counts as not float16)."""
    if node is None:
        return False
    return any(_is_f16(v) for v in node.inputs) and not _kernel(node, imports)


def _kernel(node: ir.Node, imports: dict[str, int]) -> bool:
    domain = normalize_domain(node.domain)
    imported = imported_version(imports, domain)
    return has_float16_kernel(domain, node.op_type, _since(node.op_type, domain, imported))


@functools.cache
def _since(op_type: str, domain: str, imported: int | None) -> int | None:
    if imported is None:
        return None
    if domain not in ("", "ai.onnx.ml"):
        return 1  # contrib ops: one version each
    try:
        return onnx.defs.get_schema(op_type, imported, domain).since_version
    except onnx.defs.SchemaError:
        return None


def _is_edge(value: ir.Value, graph: ir.Graph | ir.Function | None) -> bool:
    """True if ``value`` comes from a node of ``graph`` that ORT keeps as a node (ORT turns
    Constant nodes into initializers when it loads the graph)."""
    producer = value.producer()
    return producer is not None and producer.graph is graph and producer.op_type != "Constant"


def _is_f16(value: ir.Value | None) -> bool:
    return value_dtype(value) == ir.DataType.FLOAT16


def domain_changes_result(node: ir.Node, imports: dict[str, int]) -> bool:
    """True if ORT's CPU provider computes float16 Q/DQ ``node`` differently as ai.onnx
    (float16 kernels, version 19+) and as com.microsoft (none: always float32).

    - DequantizeLinear: as com.microsoft every consumer without a float16 kernel reads the
      float32 value; as ai.onnx only if the node's input comes from another node (rule 2
      per consumer copy). They differ when it does not and such a consumer exists.
    - QuantizeLinear: as com.microsoft ORT casts x to float32 and removes that Cast with
      the one before it, so x is not rounded to float16 when it comes from a Cast of a
      float32 value (or of a value of unknown type) or from a node without a float16
      kernel (run in float32); as ai.onnx the float16 kernel reads the rounded x.
    """
    graph = node.graph
    if node.op_type == "DequantizeLinear":
        if any(v is not None and _is_edge(v, graph) for v in node.inputs):
            return False
        return any(
            consumer.graph is graph and not _kernel(consumer, imports)
            for consumer, _ in node.outputs[0].uses()
        )
    x = node.inputs[0] if node.inputs else None
    if x is None or not _is_edge(x, graph):
        return False
    producer = x.producer()
    if producer is not None and producer.op_type == "Cast" and producer.domain in ("", "ai.onnx"):
        source = value_dtype(producer.inputs[0]) if producer.inputs else None
        return source in (ir.DataType.FLOAT, None)  # unknown: assume the pair ORT removes
    return producer is not None and not _kernel(producer, imports)
