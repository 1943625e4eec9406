"""MatMulNBits / GatherBlockQuantized (com.microsoft) -> standard ONNX.

- ``MatMulNBits(A, B, scales, zero_points, bias)`` becomes
  ``MatMul(A, DequantizeLinear(x, scale, zero_point))`` (then ``Add(bias)``): x is the
  weight laid out ``[K, N]``, blocked along K (axis 0), or per-axis (axis 1, scale ``[N]``)
  when one block covers K. With zero points x is unsigned (uint2 / uint4 / uint8) and the
  zero points follow; without, x is signed (int2 / int4 / int8: ``q - 2**(bits-1)``, the
  default zero point taken out) and has no zero point. Either way the dequantized weight is
  bit-identical to the one ONNX Runtime's kernel computes (``float32(q - zp) * scale``).
- ``GatherBlockQuantized(data, indices, scales, zero_points)`` becomes
  ``Gather(DequantizeLinear(data, scales, zero_points), indices)``, blocked along
  ``quantize_axis``; uint8 data holding 2 or 4 bits per value is read as uint2 / uint4
  (int2 / int4 / int8 without zero points, as above).
- ``dequantize=True`` (``fold --dequantize-weights``): the DequantizeLinear is not written;
  its value is, as a float initializer computed while the model is saved.

What a node needs that the target cannot express is refused with the node named and the
lowest ai.onnx opset that would: int4 and blocks need opset 21, int2 opset 25.
Zero points in the scale type (HQQ; ONNX Runtime computes ``q * scale - scale * zp``, 4
bits and float32 only) become ``DequantizeLinear(q, scale) - scale * zp`` (the products
rounded as ORT rounds them; see :mod:`~qlrewrite.passes.nbits.plan`). Not converted
(bit-exactness could not hold): ``g_idx``, prepacked B, FP8 / FP4 data.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.errors import Refusal
from qlrewrite.io.ir_version import raise_ir_version
from qlrewrite.passes.blocks import Writer, repeat_blocks
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.tensor import (
    FLOAT16_MODES,
    ConstOperand,
    Float16Mode,
    FoldedTensor,
    FoldSpec,
    StreamedTensor,
    link_initializers,
)
from qlrewrite.passes.nbits.plan import (
    Plan,
    Weight,
    input_at,
    min_block,
    plan_gather,
    plan_matmul_nbits,
    weight_indices,
    where,
)
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import (
    MS_DOMAIN,
    WEIGHT_ONLY,
    WeightOnlyView,
    drop_unused_domain,
    iter_sites,
    site_view,
)
from qlrewrite.text import grouped
from qlrewrite.toolkit import FreshNames, add_constant, ensure_import, replace_value, tensor_shape
from qlrewrite.verify.bound import EXACT_BOUND, Bound, summation_order_bound

__all__ = ["HALF_BOUND", "NBITS_OPS", "ORDER_REASON", "NBitsResult", "NBitsToOnnxPass", "min_block"]


@dataclasses.dataclass
class NBitsResult(RewritePassResult):
    """:class:`~qlrewrite.passes.nbits.to_onnx.NBitsToOnnxPass`:
    ``matmul_nbits_converted``, ``gather_block_quantized_converted``, ``nbits_nodes_left``,
    ``initializers_removed``, ``opset_imports_dropped``;
    :class:`~qlrewrite.passes.nbits.from_onnx.NBitsFromOnnxPass`: ``matmul_nbits_made``,
    ``gather_block_quantized_made``, ``8bit_weights_left`` (0 with ``include_8bit``)."""


NBITS_OPS = opsets.WEIGHT_ONLY_OPS

#: What ``--verify`` says when a float16 / bfloat16 MatMulNBits was rewritten, and the
#: difference it accepts (a fraction of each output's largest magnitude; 8.4e-4 measured
#: at K = 4096, 2, 4 and 8 bits, accuracy levels 0 and 4).
HALF_BOUND = Bound(
    "float16/bfloat16 MatMulNBits: ONNX Runtime keeps its dequantized weight in float32 and "
    "rounds once at the end, DequantizeLinear -> MatMul rounds the weight to the scale type "
    "first (the ONNX formula), so outputs differ in the last bits; quantized weights, scales "
    "and zero points are carried over bit for bit (float32: bit-identical outputs)",
    relative=2e-3,
)

#: Why a rewrite between MatMulNBits and DequantizeLinear -> MatMul may change ONNX
#: Runtime's outputs in their last bits (its CPU kernels, weight prepacking off as
#: --verify runs them; measured with ORT 1.31.1 and 1.32.0).
ORDER_REASON = (
    "MatMulNBits and DequantizeLinear -> MatMul multiply the same float32 weights (bit for "
    "bit), but ONNX Runtime's CPU GEMM sums the products in another order when A has one "
    "row (MLAS's M = 1 kernels) or the weight one column (N = 1), and MatMulNBits adds its "
    "bias before the last K panel instead of after; bit-identical when every such node "
    "sees 2 or more rows of A, has N of 2 or more and no bias"
)


class NBitsToOnnxPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite MatMulNBits / GatherBlockQuantized as DequantizeLinear -> MatMul / Gather.

    ``strict`` (default): refuse (:class:`~qlrewrite.errors.Refusal`) if any node cannot
    be converted, before changing anything; ``strict=False`` converts what can be.
    ``dequantize``: write the dequantized weight as a float initializer instead of the
    DequantizeLinear (``fold --dequantize-weights``; no opset limit then). ``float16``
    (with ``dequantize``): "exact" writes a float16 MatMulNBits weight as ONNX Runtime's
    kernel holds it, in float32, then a Cast to float16; "compact" writes float16.
    ``.summary`` counts what changed; ``.warnings`` says what was left and why.
    """

    def __init__(
        self, *, strict: bool = True, dequantize: bool = False, float16: Float16Mode = "exact"
    ) -> None:
        super().__init__()
        if float16 not in FLOAT16_MODES:
            raise ValueError(f"float16 must be one of {FLOAT16_MODES}, got {float16!r}")
        self.strict = strict
        self.dequantize = dequantize
        self.float16 = float16

    def call(self, model: ir.Model) -> NBitsResult:
        plans = []
        for site in iter_sites(model, WEIGHT_ONLY):
            view = site_view(model, site)
            row = view.row if isinstance(view, WeightOnlyView) else None
            if not isinstance(view, WeightOnlyView) or row is None:
                continue  # no version the table knows at the imported com.microsoft opset
            planner = plan_matmul_nbits if site.node.op_type == "MatMulNBits" else plan_gather
            plans.append(planner(view, row, site.scope.opset(""), self.dequantize))
        failed = [p for p in plans if p.problems]
        if failed and self.strict:
            raise Refusal(_refusal(failed, self.dequantize))
        warnings = [
            f"{where(p.view.site)} left as it is: {'; '.join(dict.fromkeys(p.problems))}"
            for p in failed
        ]
        done = [p for p in plans if not p.problems]
        rewriter = _Rewriter(model, self.dequantize, widen=self.float16 == "exact")
        for plan in done:
            rewriter.apply(plan)
        if done:
            link_initializers(model)
        dropped = drop_unused_domain(model, MS_DOMAIN) if done else False
        if done and not self.dequantize:
            ensure_import(model, "", 21)
            raise_ir_version(model)
        count = {op: sum(p.view.op_type == op for p in done) for op in NBITS_OPS}
        # float16 weights written in float32 (fold, --float16 exact) keep ORT's outputs
        widened = self.dequantize and self.float16 == "exact"
        half = not widened and any(
            p.view.op_type == "MatMulNBits"
            and p.weight is not None
            and p.weight.out_type != ir.DataType.FLOAT
            for p in done
        )
        summary = {
            "matmul_nbits_converted": count["MatMulNBits"],
            "gather_block_quantized_converted": count["GatherBlockQuantized"],
            "nbits_nodes_left": len(failed),
            "initializers_removed": rewriter.removed,
            "opset_imports_dropped": int(dropped),
        }
        ks = [
            p.view.weight_attributes.get("K") or 0 for p in done if p.view.op_type == "MatMulNBits"
        ]
        bound = summation_order_bound(max(ks), ORDER_REASON) if ks else EXACT_BOUND
        bound = bound.join(HALF_BOUND) if half else bound
        return NBitsResult(model, bool(done), summary, warnings, verify_bound=bound)


def _refusal(failed: list[Plan], dequantize: bool) -> str:
    described = grouped((where(p.view.site), p.problems) for p in failed)
    lowest = [p.lowest_opset for p in failed]
    hint = ""
    if all(v is not None for v in lowest):
        opset = max(v for v in lowest if v is not None)
        hint = (
            f"; the lowest ai.onnx opset that expresses them is {opset}: "
            f"run `qlrewrite upgrade --opset {opset} --convert-weight-only`"
        )
    what = "dequantize" if dequantize else "convert"
    return f"cannot {what} {len(failed)} node(s){hint}; nothing written: {described}"


class _Rewriter:
    """Builds the replacement nodes and initializers, sharing converted weights."""

    def __init__(self, model: ir.Model, dequantize: bool, *, widen: bool = True) -> None:
        self.model = model
        self.dequantize = dequantize
        self.widen = widen
        self.removed = 0
        self._names = FreshNames(model)
        self._cache: dict[tuple[object, ...], ir.Value] = {}

    def _name(self, base: str) -> str:
        return self._names.fresh(base)

    def _constant(
        self, graph: ir.Graph | ir.Function, node: ir.Node, tensor: ir.TensorProtocol, base: str
    ) -> ir.Value:
        """``tensor`` as an initializer of ``graph``, or in a function a Constant node
        before ``node`` (its first reader: a function's nodes are in order)."""
        name = self._name(base)
        node_name = self._name(name) if isinstance(graph, ir.Function) else None
        return add_constant(graph, tensor, name, before=node, node_name=node_name)

    def _weight(self, plan: Plan) -> ir.Value:
        """The value standing for the float weight: a DQ output, or a folded initializer."""
        view, weight = plan.view, plan.weight
        site = view.site
        assert weight is not None
        graph, node = site.graph, site.node
        attrs = tuple(sorted((k, view.attr_or_default(k)) for k in plan.row.attributes))
        inputs = (input_at(node, i) for i in weight_indices(site))
        key = (id(graph), tuple(id(v) for v in inputs), attrs)
        if key in self._cache:
            return self._cache[key]
        base = (node.name or node.outputs[0].name or "w") + "_w"
        if self.dequantize and weight.folded is not None:
            value = self._constant(graph, node, weight.folded, base)
        elif self.dequantize:
            value = self._dequantized(graph, node, weight, base)
        else:
            value = self._dequantize_linear(graph, node, weight, base)
        self._cache[key] = value
        return value

    def _dequantized(
        self, graph: ir.Graph | ir.Function, node: ir.Node, weight: Weight, base: str
    ) -> ir.Value:
        """The weight folded to a float initializer (float32 then a Cast for a widened
        float16 / bfloat16 MatMulNBits weight), before ``node`` in ``graph``."""
        x = weight.x
        # ORT's MatMulNBits keeps a float16 weight in float32 (its GatherBlockQuantized
        # rounds each value to float16): float32, then a Cast, keeps that value
        widen = (
            self.widen and node.op_type == "MatMulNBits" and weight.out_type != ir.DataType.FLOAT
        )
        folded = FoldedTensor(
            FoldSpec(
                quantize=False,
                axis=weight.axis,
                block_size=weight.block_size,
                output_dtype=ir.DataType.FLOAT if widen else weight.out_type,
            ),
            x if isinstance(x, StreamedTensor) else ConstOperand(x),
            weight.scale,
            weight.zero_point,
        )
        value = self._constant(graph, node, folded, base + ("_float32" if widen else ""))
        if not widen:
            return value
        cast = ir.node(
            "Cast", [value], attributes={"to": weight.out_type}, name=self._name(base + "_cast")
        )
        cast.outputs[0].name = self._name(base)
        cast.outputs[0].dtype = weight.out_type
        cast.outputs[0].shape = value.shape
        graph.insert_before(node, cast)
        return cast.outputs[0]

    def _dequantize_linear(
        self, graph: ir.Graph | ir.Function, node: ir.Node, weight: Weight, base: str
    ) -> ir.Value:
        """The output of a DequantizeLinear of the weight, inserted before ``node`` in ``graph``."""
        inputs = [
            weight.reuse_x or self._constant(graph, node, weight.x, weight.x.name or base + "_q"),
            weight.reuse_scale
            or self._constant(graph, node, weight.scale, weight.scale.name or base + "_s"),
        ]
        if weight.zero_point is not None:
            inputs.append(
                weight.reuse_zero_point
                or self._constant(graph, node, weight.zero_point, weight.zero_point.name or base)
            )
        attributes = {"axis": weight.axis}
        if weight.block_size:
            attributes["block_size"] = weight.block_size
        dq = ir.node(
            "DequantizeLinear", inputs, attributes=attributes, name=self._name(base + "_dq")
        )
        dq.outputs[0].name = self._name(base)
        dq.outputs[0].dtype = weight.out_type
        dq.outputs[0].shape = ir.Shape(weight.x.shape.numpy())
        graph.insert_before(node, dq)
        if weight.offset is None:
            return dq.outputs[0]
        return self._minus_offset(graph, node, weight, dq.outputs[0], base)

    def _minus_offset(
        self,
        graph: ir.Graph | ir.Function,
        node: ir.Node,
        weight: Weight,
        dequantized: ir.Value,
        base: str,
    ) -> ir.Value:
        """``dequantized`` minus the weight's offset repeated over each block."""
        assert weight.offset is not None
        offset = self._constant(graph, node, weight.offset, base + "_offset")
        writer = Writer(node, self._names, base, graph=graph)
        shape = [int(d) for d in weight.offset.shape.numpy()]
        length = tensor_shape(weight.x).numpy()[0]
        per_element = repeat_blocks(
            writer, offset, shape, axis=0, block=weight.block_size, length=length
        )
        result = writer.node("Sub", [dequantized, per_element])
        result.dtype, result.shape = weight.out_type, dequantized.shape
        return result

    def apply(self, plan: Plan) -> None:
        node, graph = plan.view.node, plan.view.site.graph
        weight = self._weight(plan)
        old_inputs = list(node.inputs)
        output = node.outputs[0]
        new_nodes: list[ir.Node] = []
        if node.op_type == "MatMulNBits":
            bias = input_at(node, plan.row.input_index("bias"))
            matmul = ir.node("MatMul", [node.inputs[0], weight], name=node.name or None)
            new_nodes.append(matmul)
            result = matmul.outputs[0]
            if bias is not None:
                add = ir.node("Add", [result, bias], name=self._name((node.name or "") + "_bias"))
                result.name = self._name((output.name or "y") + "_matmul")
                new_nodes.append(add)
                result = add.outputs[0]
        else:
            gather = ir.node(
                "Gather",
                [weight, node.inputs[1]],
                attributes={"axis": plan.gather_axis},
                name=node.name or None,
            )
            new_nodes.append(gather)
            result = gather.outputs[0]
        graph.insert_after(node, new_nodes)
        replace_value(output, result)
        graph.remove(node, safe=True)
        for value in old_inputs:
            self._drop_if_unused(graph, value)

    def _drop_if_unused(self, graph: ir.Graph | ir.Function, value: ir.Value | None) -> None:
        if value is None or value.uses() or value.is_graph_output() or value.is_graph_input():
            return
        producer = value.producer()
        if producer is not None:
            unused = not any(o.uses() or o.is_graph_output() for o in producer.outputs)
            if producer.op_type in ("Constant", "Reshape") and producer.graph and unused:
                inputs = list(producer.inputs)
                producer.graph.remove(producer, safe=True)
                for source in inputs:  # a Reshape's data and shape
                    self._drop_if_unused(graph, source)
            return
        owner, name = value.graph, value.name
        if not value.is_initializer() or owner is None or name is None:
            return
        if name in owner.initializers:
            del owner.initializers[name]
            self.removed += 1
