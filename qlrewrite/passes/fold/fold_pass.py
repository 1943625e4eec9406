"""The fold pass: QuantizeLinear / DequantizeLinear of constants become constants.

Every Q/DQ node (ai.onnx and com.microsoft) whose inputs are all constant (initializers
that no graph input overrides, or Constant nodes) is replaced by a lazily computed
:class:`~qlrewrite.passes.fold.tensor.FoldedTensor` named like the node's output, so
consumers and graph outputs need no renaming. In graphs (main and subgraphs) it becomes
an initializer; in model-local functions, which have no initializers, a Constant node.
Q -> DQ chains fold into one float tensor computed without the intermediate. With
``keep_dq`` only Q nodes fold and the model stays in QDQ form. Nodes and initializers
that only fed folded nodes are removed, then opset imports nothing uses any more.
Attribute defaults and output types come from :mod:`qlrewrite.opsets`.

float16: where ONNX Runtime's CPU provider computes a float16 DQ in float32 (see
:mod:`qlrewrite.targets.ort_float16`), ``float16="exact"`` (the default) folds it to a float32
value followed by a Cast to float16: ORT removes that Cast before its float32 consumer
and computes what it computed before, and every other runtime gets the same float16
value as from the DQ. With ``keep_dq`` such a DQ, whose input was a folded Q, computes in
float32 (its scale as a float32 copy) followed by the Cast. ``float16="compact"`` writes
float16 values (half the size) and warns that ORT's outputs may change.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.errors import Refusal
from qlrewrite.kernels import check_granularity
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.fold.tensor import (
    FLOAT16_MODES,
    ConstOperand,
    Float16Mode,
    FoldedTensor,
    FoldSpec,
    Operand,
    StreamedTensor,
    link_initializers,
)
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import (
    QDQView,
    QuantizedSite,
    constant_tensor,
    drop_unused_domains,
    is_constant,
    iter_sites,
    site_view,
    value_dtype,
)
from qlrewrite.targets.fusions import (
    Fusion,
    FusionTable,
    NoFusionTable,
    consumer_of,
    kernels_only_in_original,
)
from qlrewrite.targets.ort_float16 import float32_in_ort, has_float16_kernel
from qlrewrite.toolkit import FreshNames, all_graphs

__all__ = ["FLOAT16_MODES", "FoldPass", "FoldResult", "fold"]


@dataclasses.dataclass
class FoldResult(RewritePassResult):
    """:class:`~qlrewrite.passes.fold.fold_pass.FoldPass`: ``dq_folded``, ``q_folded``,
    ``chains_folded``, ``nodes_removed``, ``initializers_removed``, ``opsets_removed``."""


def fold(model: ir.Model, *, keep_dq: bool = False, float16: Float16Mode = "exact") -> ir.Model:
    """Fold the model's constant Q/DQ nodes in place and return it.

    Values are computed lazily: when the model is saved or a tensor is read. ``float16``:
    see the module docstring.
    """
    return FoldPass(keep_dq=keep_dq, float16=float16)(model).model


class FoldPass(ContextPass, ir.passes.InPlacePass):
    """Constant-fold Q/DQ nodes; the :class:`~qlrewrite.passes.fold.fold_pass.FoldResult` counts
    what was folded and removed.

    ``summary``: ``dq_folded`` and ``q_folded`` (nodes folded), ``chains_folded`` (DQ
    nodes whose input was a folded Q), ``float32_with_cast`` (float16 DQ values written
    as float32 and a Cast, or with ``keep_dq`` DQ nodes made to compute in float32),
    ``nodes_removed`` (folded nodes plus Constant nodes nothing uses any more),
    ``initializers_removed``, ``opsets_removed``.
    """

    def __init__(
        self,
        *,
        keep_dq: bool = False,
        float16: Float16Mode = "exact",
        fusions: FusionTable | NoFusionTable | None = None,
        keep_fused: bool = False,
        bias_only: bool = False,
    ) -> None:
        super().__init__()
        if float16 not in FLOAT16_MODES:
            raise ValueError(f"float16 must be one of {FLOAT16_MODES}, got {float16!r}")
        self.keep_dq = keep_dq
        self.float16 = float16
        #: What the runtime a model ships to fuses, read from its measured table (None: not
        #: asked; :class:`NoFusionTable`: why no table answers): DQs it fuses into integer /
        #: weight-only kernels are counted and warned of, or kept with ``keep_fused``.
        self.fusions = fusions
        self.keep_fused = keep_fused
        #: Fold only DequantizeLinear of int32 constants (biases), for runtimes that refuse
        #: them (TensorRT: onnx/onnx-tensorrt#850); every other Q/DQ stays.
        self.bias_only = bias_only
        self._summary: dict[str, int] = {}
        self._fused: dict[int, Fusion] = {}  # id(consumer) -> its fusion, of folded DQs
        self._unmeasured: collections.Counter[str] = collections.Counter()

    def call(self, model: ir.Model) -> FoldResult:
        self._summary = summary = dict.fromkeys(
            (
                "dq_folded",
                "q_folded",
                "chains_folded",
                "float32_with_cast",
                "nodes_removed",
                "initializers_removed",
                "opsets_removed",
                "dq_kept_fused",
            ),
            0,
        )
        self._fused, self._unmeasured = {}, collections.Counter()
        if self.keep_fused and not isinstance(self.fusions, FusionTable):
            reason = self.fusions.reason if self.fusions is not None else "not asked"
            raise Refusal(
                f"--keep-fused needs the measured fusion table of the runtime: {reason}; "
                "nothing written"
            )
        rounded, overridable = self._fold_sites(model)
        warnings = _fold_warnings(rounded, overridable)
        warnings += self._fusion_warnings()
        if any(summary.values()):
            link_initializers(model)
            summary["opsets_removed"] = drop_unused_domains(model)
        return FoldResult(model, any(summary.values()), summary, warnings)

    def _fold_sites(self, model: ir.Model) -> tuple[int, int]:
        """Fold every Q/DQ node whose inputs are constant; returns how many float16 values
        were left rounded (``float16="compact"``) and how many nodes were not folded
        because an input is an overridable initializer."""
        # Every graph and function, listed once: folding adds and removes no subgraph.
        containers = all_graphs(model)
        self._names = FreshNames(containers)
        sites = list(iter_sites(model))
        # Decided on the graph as it is: folding removes the edges ORT's choice depends on.
        views = {id(s.node): _qdq_view(model, s) for s in sites}  # one view per node
        fused = {id(s.node): self._fusion(model, s, views[id(s.node)]) for s in sites}
        in_float32 = {id(s.node) for s in sites if _dq_in_float32(views[id(s.node)])}
        overridable = rounded = 0
        for site in sites:
            view, widen = views[id(site.node)], id(site.node) in in_float32
            if self.bias_only and not _int32_bias(view):
                continue
            if self.keep_dq and site.node.op_type == "DequantizeLinear":
                if widen and self._widen_kept_dq(view):
                    rounded += self.float16 == "compact"
                continue
            fusion = fused[id(site.node)]
            if fusion is not None and self.keep_fused:
                self._summary["dq_kept_fused"] += 1
                continue
            folded, kept_float16 = self._folded_value(view, widen)
            rounded += kept_float16
            if folded is not None:
                self._replace(containers, site, folded)
                if fusion is not None:
                    self._fused[id(fusion[0])] = fusion[1]
            elif _overridable(site.node):
                overridable += 1
        return rounded, overridable

    def _fusion(
        self, model: ir.Model, site: QuantizedSite, view: QDQView
    ) -> tuple[ir.Node, Fusion] | None:
        """The consumer and the fusion the runtime's table records for this DQ of constants
        (of the main graph) when the runtime fuses it into an integer / weight-only kernel;
        None otherwise (a pattern the table does not hold is counted by consumer op)."""
        node = site.node
        if not isinstance(self.fusions, FusionTable) or node.op_type != "DequantizeLinear":
            return None
        if site.graph is not model.graph or not all(is_constant(v) for v in node.inputs):
            return None
        consumer = consumer_of(view)
        if consumer is None:
            return None
        fusion = self.fusions.of(view)
        if fusion is None:
            self._unmeasured[consumer.op_type] += 1
            return None
        return (consumer, fusion) if fusion.kernel is not None else None

    def _fusion_warnings(self) -> list[str]:
        """What folding costs in the runtime, read from its table, or that it was not
        checked."""
        fusions = self.fusions
        if fusions is None:
            return []
        if isinstance(fusions, NoFusionTable):
            return [f"not checked which DequantizeLinear {fusions.runtime} fuses: {fusions.reason}"]
        warnings = []
        if self._fused and not self.keep_fused:  # kept: the summary counts them
            warnings.append(_fused_warning(fusions, list(self._fused.values())))
        if self._unmeasured:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(self._unmeasured.items()))
            warnings.append(
                f"not known whether {fusions.runtime} fuses {sum(self._unmeasured.values())} "
                f"folded DequantizeLinear: {fusions.label} holds no pattern of their "
                f"consumers ({ops})"
            )
        return warnings

    def _folded_value(self, view: QDQView, widen: bool) -> tuple[FoldedTensor | None, bool]:
        """The node's folded value (None: an input is not constant), in float32 when ONNX
        Runtime computes this float16 DQ in float32 (``widen``) and ``float16="exact"``;
        and whether such a value was left in float16 (``float16="compact"``)."""
        folded = _folded_tensor(view)
        if folded is None or not widen or folded.dtype != ir.DataType.FLOAT16:
            return folded, False
        if self.float16 == "exact":
            return _as_float32(folded), False
        return folded, True

    def _replace(
        self, containers: list[ir.Graph | ir.Function], site: QuantizedSite, folded: FoldedTensor
    ) -> None:
        node, graph = site.node, site.graph
        old = node.outputs[0]
        name = old.name
        quantize = node.op_type == "QuantizeLinear"
        self._summary["q_folded" if quantize else "dq_folded"] += 1
        if not quantize and isinstance(folded.x, FoldedTensor):
            self._summary["chains_folded"] += 1
        inputs = [v for v in node.inputs if v is not None]
        new = self._constant(graph, node, folded)
        result = new
        if folded.widened:  # float32 in place of float16: Cast back
            cast = ir.node("Cast", [new], attributes={"to": int(ir.DataType.FLOAT16)})
            graph.insert_before(node, cast)
            result = cast.outputs[0]
            result.dtype, result.shape = ir.DataType.FLOAT16, new.shape
            self._summary["float32_with_cast"] += 1
        _replace_outputs(containers, old, result)
        old.replace_all_uses_with(result)
        graph.remove(node, safe=True)
        self._summary["nodes_removed"] += 1
        old.name = None
        result.name = name
        if result is not new:
            new.name = self._fresh_name(f"{name}_float32")
        if isinstance(graph, ir.Graph):
            graph.register_initializer(new)
        for value in [new, *inputs]:
            self._drop_if_unused(value)

    def _constant(self, graph: ir.Graph | ir.Function, node: ir.Node, tensor: Any) -> ir.Value:
        """A value holding ``tensor``: a Constant node before ``node`` in a function, else
        an initializer-to-be (registered by the caller once named)."""
        if isinstance(graph, ir.Function):
            constant = ir.node("Constant", [], attributes={"value": tensor})
            graph.insert_before(node, constant)
            return constant.outputs[0]
        return ir.Value(
            type=ir.TensorType(tensor.dtype),
            shape=ir.Shape(tensor.shape.numpy()),
            const_value=tensor,
        )

    def _widen_kept_dq(self, view: QDQView) -> bool:
        """With ``keep_dq``: make a float16 DQ (ai.onnx, which has a float16 kernel in ORT)
        whose input is now a folded constant compute in float32, followed by a Cast.

        ORT ran it in float32 while its input came from a Q node; with a constant input it
        would run the float16 kernel and round. Returns True if it applies (in "compact"
        mode nothing is changed: the caller counts it for the warning)."""
        site = view.site
        node, graph = site.node, site.graph
        x, scale = node.inputs[0], node.inputs[1]
        if x is None or scale is None or not is_constant(x):
            return False
        if value_dtype(scale) != ir.DataType.FLOAT16:
            return False
        if not has_float16_kernel(site.domain, node.op_type, site.version):
            return False  # com.microsoft: ORT computes it in float32 wherever it is
        if self.float16 == "compact":
            return True
        tensor = constant_tensor(scale)
        if tensor is None:
            return False
        widened = ir.Tensor(np.asarray(tensor.numpy(), dtype=np.float32))
        new_scale = self._constant(graph, node, widened)
        new_scale.name = self._fresh_name(f"{scale.name or 'scale'}_float32")
        if isinstance(graph, ir.Graph):
            graph.register_initializer(new_scale)
        node.replace_input_with(1, new_scale)
        self._drop_if_unused(scale)
        if "output_dtype" in view.attributes:
            node.attributes["output_dtype"] = ir.AttrInt64("output_dtype", ir.DataType.FLOAT)
        out = node.outputs[0]
        cast = ir.node("Cast", [out], attributes={"to": int(ir.DataType.FLOAT16)})
        graph.insert_after(node, cast)
        casted = cast.outputs[0]
        casted.dtype, casted.shape = ir.DataType.FLOAT16, out.shape
        for consumer, index in list(out.uses()):
            if consumer is not cast:
                consumer.replace_input_with(index, casted)
        name = out.name
        out.name = self._fresh_name(f"{name}_float32")
        out.dtype = ir.DataType.FLOAT
        casted.name = name
        self._summary["float32_with_cast"] += 1
        return True

    def _fresh_name(self, base: str) -> str:
        """``base``, or ``base_N``, unused by any value of the model so far."""
        return self._names.fresh(base)

    def _drop_if_unused(self, value: ir.Value) -> None:
        """Remove ``value`` (Constant node or initializer) if nothing uses it any more."""
        if value.uses() or value.is_graph_output() or value.is_graph_input():
            return
        producer = value.producer()
        if producer is not None:
            unused = not any(o.uses() or o.is_graph_output() for o in producer.outputs)
            if producer.op_type == "Constant" and producer.graph is not None and unused:
                producer.graph.remove(producer, safe=True)
                self._summary["nodes_removed"] += 1
            return
        graph, name = value.graph, value.name
        if not value.is_initializer() or graph is None or name is None:
            return
        if name in graph.initializers:
            del graph.initializers[name]
            self._summary["initializers_removed"] += 1


def _fold_warnings(rounded: int, overridable: int) -> list[str]:
    """What the fold warns about: float16 values left rounded, nodes left unfolded."""
    warnings: list[str] = []
    if rounded:
        warnings.append(
            f"{rounded} float16 value(s) that ONNX Runtime's CPU provider computes in "
            "float32 were folded to float16 (--float16 compact): the model's outputs in "
            "ONNX Runtime may change; the default --float16 exact keeps them"
        )
    if overridable:
        warnings.append(
            f"{overridable} Q/DQ node(s) not folded: an input is a graph input (an "
            "initializer listed as a graph input can be overridden by the caller); "
            "export without keep_initializers_as_inputs to fold them"
        )
    return warnings


def _fused_warning(fusions: FusionTable, fused: list[Fusion]) -> str:
    """The warning for the folded DequantizeLinear the runtime fuses: the kernels it forms
    from the original only (the words of ``--verify``'s deployment check), what each
    computes against ORT_DISABLE_ALL, and what it runs once the weights are folded."""
    kernels = collections.Counter(f.kernel_op for f in fused)
    details = collections.Counter(f.describe() for f in fused)
    measured = "; ".join(f"{text} (x{n})" for text, n in sorted(details.items()))
    return (
        f"{kernels_only_in_original(dict(sorted(kernels.items())), fusions.runtime)} "
        f"(read from {fusions.label}, not run). Measured there: {measured}. "
        "--keep-fused leaves those DequantizeLinear and folds the rest"
    )


def _qdq_view(model: ir.Model, site: QuantizedSite) -> QDQView:
    """The view of a Q/DQ site (:func:`qlrewrite.qdq.site_view` builds a QDQView for one)."""
    view = site_view(model, site)
    if not isinstance(view, QDQView):
        raise TypeError(f"{view.where} is not a QuantizeLinear / DequantizeLinear")
    return view


def _int32_bias(view: QDQView) -> bool:
    """True for a DequantizeLinear of int32 (a bias: QLinearConv's and QGemm's form)."""
    return not view.is_quantize and view.x_type == ir.DataType.INT32


def _dq_in_float32(view: QDQView) -> bool:
    """True for a DequantizeLinear whose float16 output ORT's CPU provider computes in
    float32 (see :mod:`qlrewrite.targets.ort_float16`)."""
    site = view.site
    node = site.node
    if node.op_type != "DequantizeLinear" or len(node.inputs) < 2 or node.inputs[1] is None:
        return False
    out_type = view.output_type
    return out_type is not None and float32_in_ort(node, dict(site.scope.imports), out_type)


def _as_float32(folded: FoldedTensor) -> FoldedTensor:
    """The same folded DQ computed to float32 (the value before its rounding to float16)."""
    spec = dataclasses.replace(folded.spec, output_dtype=ir.DataType.FLOAT, widened=True)
    return FoldedTensor(spec, folded.x, folded.scale, folded.zero_point, name=folded.name)


def _overridable(node: ir.Node) -> bool:
    """True if the node would fold but for inputs that are initializers and graph inputs."""
    inputs = [v for v in node.inputs if v is not None]
    overridden = [v for v in inputs if v.is_initializer() and v.is_graph_input()]
    return bool(overridden) and all(v in overridden or is_constant(v) for v in inputs)


def _folded_tensor(view: QDQView) -> FoldedTensor | None:
    """The lazy value of a foldable node, None if it cannot fold."""
    node = view.node
    row = view.row
    if row is None or len(node.outputs) != 1 or len(node.inputs) < 2:
        return None
    if any(attr.is_ref() for attr in node.attributes.values()):
        return None  # an attribute of the enclosing function: unknown here
    x, scale = node.inputs[0], node.inputs[1]
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    if x is None or scale is None or not all(is_constant(v) for v in (x, scale, zero_point)):
        return None
    x_tensor, scale_tensor = constant_tensor(x), constant_tensor(scale)
    zp_tensor = constant_tensor(zero_point) if zero_point is not None else None
    if x_tensor is None or scale_tensor is None or (zero_point is not None and zp_tensor is None):
        return None
    if not _types_allowed(row, x_tensor, scale_tensor, zp_tensor):
        return None  # the input check refuses it (QL301-QL303) unless told to ignore them
    if not _granularity_allowed(view, x_tensor, scale_tensor, zp_tensor):
        return None  # likewise (QL401-QL410)
    out_type = view.output_type
    if out_type is None:
        return None
    saturate = view.attr_or_default("saturate")
    spec = FoldSpec(
        quantize=row.is_quantize,
        axis=view.axis,
        block_size=view.block_size,
        output_dtype=out_type,
        saturate=1 if saturate is None else saturate,
        precision=view.attr_or_default("precision") or _scale_precision(row, scale_tensor.dtype),
    )
    operand: Operand = x_tensor if isinstance(x_tensor, StreamedTensor) else ConstOperand(x_tensor)
    return FoldedTensor(spec, operand, scale_tensor, zp_tensor, name=node.outputs[0].name)


def _types_allowed(
    row: opsets.OpVersion,
    x: ir.TensorProtocol,
    scale: ir.TensorProtocol,
    zero_point: ir.TensorProtocol | None,
) -> bool:
    """The constant inputs have types the version in force takes, a DQ's zero point that
    of x (a kernel would refuse the others when the output is written, too late to leave
    the node)."""
    if x.dtype not in row.x_types or scale.dtype not in row.scale_types:
        return False
    if zero_point is None:
        return True
    return zero_point.dtype in row.zero_point_types and (
        row.is_quantize or zero_point.dtype == x.dtype
    )


def _granularity_allowed(
    view: QDQView,
    x: ir.TensorProtocol,
    scale: ir.TensorProtocol,
    zero_point: ir.TensorProtocol | None,
) -> bool:
    """The kernel takes these shapes with the node's axis and block size (decided now: a
    kernel raising when the output is written is too late to leave the node)."""
    try:
        check_granularity(
            x.shape.numpy(),
            scale.shape.numpy(),
            None if zero_point is None else zero_point.shape.numpy(),
            view.axis,
            view.block_size,
        )
    except ValueError:
        return False
    return True


def _scale_precision(row: opsets.OpVersion, scale_type: ir.DataType) -> int:
    """QuantizeLinear-23+ without ``precision`` divides in the scale's type (the spec; ORT
    from 1.32, ORT 1.31 divides float16 in float32); earlier versions leave it to the
    kernel (0)."""
    floats = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
    return int(scale_type) if "precision" in row.attributes and scale_type in floats else 0


def _replace_outputs(
    containers: list[ir.Graph | ir.Function], old: ir.Value, new: ir.Value
) -> None:
    """Point every graph or function output that is ``old`` at ``new``."""
    for graph in containers:
        outputs = graph.outputs
        for index, value in enumerate(outputs):
            if value is old:
                outputs[index] = new
