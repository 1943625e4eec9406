"""Lower a model's ai.onnx opset exactly, on models of any size.

1. Every ai.onnx QuantizeLinear / DequantizeLinear is planned on the input, read at its
   own opset (:mod:`qlrewrite.passes.downgrade.plan`): kept, lowered exactly (a blocked
   DequantizeLinear of a constant as Cast / Sub / Mul, int4 constants stored as int8,
   int16 nodes as com.microsoft), or refused with the reason and the lowest opset that
   holds it; one refused node and nothing is written.
2. An op with no version at the target is written as its formula in older ops (Gelu-20)
   or refused naming it (:mod:`qlrewrite.passes.downgrade.ops`); then ONNX's version
   converter lowers the rest of the graph on a weight-free copy
   (:func:`qlrewrite.passes.upgrade.convert_weightless`), with the quantized nodes and the
   ops whose newer versions only widened types (:mod:`qlrewrite.passes.downgrade.relabel`)
   held aside in a private domain: the converter has no down adapter for them.
3. The lowerings are written (:mod:`qlrewrite.passes.downgrade.lower`) and the IR version
   becomes the lowest that holds the opset, the element types and the functions.
"""

from __future__ import annotations

import collections
import dataclasses

import onnx
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.errors import InputError, Refusal
from qlrewrite.io.ir_version import needed_ir_version
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.downgrade import lower
from qlrewrite.passes.downgrade.ops import lower_new_ops
from qlrewrite.passes.downgrade.plan import BLOCKED, MICROSOFT, WIDEN, WIDER, Plan, plan_downgrade
from qlrewrite.passes.downgrade.relabel import ElementTypes, relabel_problem
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.passes.upgrade import convert_weightless
from qlrewrite.qdq import QDQ, QOPERATOR, normalize_domain, onnx_opset
from qlrewrite.text import grouped
from qlrewrite.toolkit import FreshNames, drop_unused_domain, iter_graphs, proto_graphs

__all__ = ["LOWEST_OPSET", "DowngradePass", "DowngradeResult"]


@dataclasses.dataclass
class DowngradeResult(RewritePassResult):
    """:class:`~qlrewrite.passes.downgrade.DowngradePass`: opsets and IR versions before and
    after, blocked nodes lowered, 4-bit initializers widened (and the bytes added), nodes
    written as com.microsoft, nodes relabelled at the older version."""


#: The lowest opset a downgrade writes: QuantizeLinear / DequantizeLinear appear in 10.
LOWEST_OPSET = 10
#: The private domain quantized and relabelled nodes wait in while the converter runs.
_HOLD = "qlrewrite.hold"
_QUANTIZED_OPS = frozenset(op for kind in (QDQ, QOPERATOR) for d, op in kind.ops if d == "")


class DowngradePass(ContextPass, ir.passes.FunctionalPass):
    """Convert the model to ai.onnx opset ``opset`` (below the current one); a new model.

    Raises InputError for an upgrade or an opset below 10, Refusal naming every node the
    target cannot hold (with the lowest opset that does) or what ONNX's converter refuses.
    """

    needs = frozenset({"inference", "weightless"})
    keeps_types = False  # a new model

    def __init__(self, opset: int) -> None:
        super().__init__()
        self.opset = int(opset)

    def requires(self, model: ir.Model) -> None:
        current = onnx_opset(model)
        if current is None:
            raise InputError("the model imports no ai.onnx opset; nothing to downgrade")
        if self.opset >= current:
            raise InputError(
                f"opset {self.opset} is not below the model's ai.onnx opset {current} "
                "(to raise it, use `qlrewrite upgrade`)",
                parameter="opset",
            )
        if self.opset < LOWEST_OPSET:
            raise InputError(
                f"opset {self.opset} is below {LOWEST_OPSET}, where QuantizeLinear and "
                "DequantizeLinear appear",
                parameter="opset",
            )

    def call(self, model: ir.Model) -> DowngradeResult:
        before = onnx_opset(model) or 0
        context = self.context(model)
        plans = plan_downgrade(model, self.opset, context.inference)
        _refuse(plans, self.opset)
        relabelled: list[str] = []
        formulas: list[int] = []
        types = ElementTypes(model, context.inference)  # the run's: no inference again

        def prepare(proto: onnx.ModelProto) -> None:
            formulas.append(lower_new_ops(proto, before, self.opset, types, hold=_HOLD))
            relabelled.extend(_hold(proto, before, self.opset, types))

        new = convert_weightless(model, self.opset, context, prepare=prepare, lower=True)
        _restore(new, self.opset)
        summary = _apply(new, plans)
        ir_before = model.ir_version
        new.ir_version = min(ir_before, needed_ir_version(new))
        summary = {
            "opset_before": before,
            "opset_after": self.opset,
            **summary,
            "nodes_relabelled": len(relabelled),
            "ops_written_as_formula": sum(formulas),
            "ir_version_before": ir_before,
            "ir_version_after": new.ir_version,
        }
        return DowngradeResult(new, True, summary, _warnings(summary))


def _refuse(plans: list[Plan], opset: int) -> None:
    """Raise Refusal naming each node the target cannot hold, grouped by reason."""
    refused = [(plan.where, [*plan.problems, *_lowest(plan)]) for plan in plans if plan.problems]
    if refused:
        reasons = grouped(refused)
        raise Refusal(f"cannot lower to opset {opset}: {reasons}; nothing written")


def _lowest(plan: Plan) -> list[str]:
    return [f"lowest opset that holds it: {plan.lowest_opset}"] if plan.lowest_opset else []


def _hold(proto: onnx.ModelProto, source: int, target: int, types: ElementTypes) -> list[str]:
    """Move the quantized nodes and the relabelled ones into the private domain, so the
    converter passes them by; the names of the relabelled ones (``types``: the element
    types of the model the proto was made from)."""
    relabelled = []
    for _, graph in proto_graphs(proto):
        for node in graph.node:
            if normalize_domain(node.domain) != "":
                continue
            if node.op_type in _QUANTIZED_OPS:
                node.domain = _HOLD
            elif relabel_problem(node, source, target, types) is None:
                node.domain = _HOLD
                relabelled.append(node.name or node.output[0])
    proto.opset_import.append(onnx.helper.make_opsetid(_HOLD, 1))
    for function in proto.functions:
        function.opset_import.append(onnx.helper.make_opsetid(_HOLD, 1))
    return relabelled


def _restore(model: ir.Model, opset: int) -> None:
    """Put the held nodes back in ai.onnx, without the attributes (verified at their
    default) that their version at ``opset`` lacks."""
    for scope in iter_graphs(model):
        for node in scope.graph:
            if node.domain != _HOLD:
                continue
            node.domain = ""
            if node.op_type in _QUANTIZED_OPS:
                continue
            schema = onnx.defs.get_schema(node.op_type, opset, "")
            for name in [n for n in node.attributes if n not in schema.attributes]:
                del node.attributes[name]
    drop_unused_domain(model, _HOLD)


def _apply(model: ir.Model, plans: list[Plan]) -> dict[str, int]:
    """Write each plan's lowering into the converted ``model``; counts of what changed."""
    by_key = {plan.key: plan for plan in plans}
    names = FreshNames(model, nodes=True)
    counts = collections.Counter({"blocked_lowered": 0, "to_com_microsoft": 0})
    widened: dict[int, ir.Value] = {}
    for scope in iter_graphs(model):
        for node in list(scope.graph):
            plan = by_key.get((str(scope.ref), node.outputs[0].name or ""))
            if plan is None or normalize_domain(node.domain) != "":
                continue
            _widen_inputs(node, plan, widened)
            if plan.how == BLOCKED:
                lower.lower_blocked(node, plan, names)
                counts["blocked_lowered"] += 1
            elif plan.how == MICROSOFT:
                row = opsets.lookup("com.microsoft", node.op_type, 1)
                drop = tuple(a for a in node.attributes if row and a not in row.attributes)
                lower.to_microsoft(model, node, scope.ref, drop)
                counts["to_com_microsoft"] += 1
            else:
                for name in plan.drop:
                    node.attributes.pop(name, None)
    counts["initializers_widened"] = len(widened)
    counts["bytes_added"] = sum(lower.widen(v) for v in widened.values())
    return dict(counts)


def _widen_inputs(node: ir.Node, plan: Plan, widened: dict[int, ir.Value]) -> None:
    """Note ``node``'s 4-bit x and zero point for widening (blocked or widen plans)."""
    if plan.how not in (BLOCKED, WIDEN):
        return
    for value in (node.inputs[0], node.inputs[2] if len(node.inputs) > 2 else None):
        tensor = value.const_value if value is not None else None
        if value is not None and tensor is not None and tensor.dtype in WIDER:
            widened[id(value)] = value


def _warnings(summary: dict[str, int]) -> list[str]:
    warnings = []
    if summary["initializers_widened"]:
        warnings.append(
            f"{summary['initializers_widened']} int4/uint4 initializer(s) stored as "
            f"int8/uint8 (opset {summary['opset_after']} has no 4-bit types): "
            f"{summary['bytes_added']} more bytes"
        )
    if summary["to_com_microsoft"]:
        warnings.append(
            f"{summary['to_com_microsoft']} int16/uint16 node(s) written as com.microsoft "
            "QuantizeLinear / DequantizeLinear: ONNX Runtime runs them, other runtimes may not"
        )
    return warnings
