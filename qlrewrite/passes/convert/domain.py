"""Convert QuantizeLinear / DequantizeLinear between the com.microsoft and ai.onnx domains.

ONNX Runtime computes both domains with the same kernels, so only the node's domain and
attributes change: ``--to onnx`` writes each com.microsoft Q/DQ as the ai.onnx version in
force at the model's opset, ``--to com.microsoft`` the reverse. What the target cannot
express (:mod:`qlrewrite.opsets` decides) is collected over every graph, subgraph and
function first; then the pass refuses with all of it, or (``strict=False``, used by the
upgrade) leaves those nodes as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import NamedTuple

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.errors import Refusal
from qlrewrite.io.ir_version import raise_ir_version
from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import MS_DOMAIN, NodeView, QuantizedSite, drop_unused_domains, node_views
from qlrewrite.targets.ort_float16 import domain_changes_result
from qlrewrite.text import grouped
from qlrewrite.toolkit import ensure_import_at

__all__ = [
    "TARGETS",
    "ConvertDomainPass",
    "ConvertResult",
    "ConvertWarning",
    "convert",
    "divides_in_scale_type",
    "keep_float32_division",
    "target",
]


@dataclasses.dataclass
class ConvertResult(RewritePassResult):
    """:class:`~qlrewrite.passes.convert.domain.ConvertDomainPass`: ``nodes_converted``,
    ``nodes_left``, ``opset_imports_dropped``, ``ir_version_raised``."""


#: Values of ``--to``.
TARGETS = ("onnx", "com.microsoft")
#: Other spellings of a target (the ai.onnx domain's own names).
_ALIASES = {"ai.onnx": "onnx", "": "onnx"}


def target(to: str) -> str | None:
    """The target ``to`` names (one of :data:`TARGETS`), or None when it names none."""
    to = _ALIASES.get(to, to)
    return to if to in TARGETS else None


_DT = ir.DataType


@dataclasses.dataclass(frozen=True)
class ConvertWarning:
    """Something a conversion did that changes how a reader may see the node."""

    message: str
    node: str
    graph: str

    def to_json(self) -> dict[str, str]:
        """A JSON-ready form for ``--report``."""
        return {"message": self.message, "node": self.node, "graph": self.graph}


@dataclasses.dataclass
class _Plan:
    """What to do with one node: the new domain, attributes to set and drop, or problems."""

    site: QuantizedSite
    where: str
    problems: list[str] = dataclasses.field(default_factory=list)
    set_axis: bool = False
    drop: set[str] = dataclasses.field(default_factory=set)
    lowest_opset: int | None = None  # --to onnx: the lowest ai.onnx opset expressing it
    float16: bool = False  # float16: ONNX Runtime computes it differently in the other domain
    float16_scale: bool = False  # the scale is float16 (in some call site)
    precision: int | None = None  # QuantizeLinear's precision as written (NodeView.int_attr)


class _Types(NamedTuple):
    """A Q/DQ node's element types (x and scale known)."""

    x: ir.DataType
    scale: ir.DataType
    zero_point: ir.DataType | None
    output: ir.DataType | None


def _types(ctx: NodeView) -> _Types | None:
    """(x, scale, zero point, output) element types; None when x or scale is unknown."""
    scale, zero_point = ctx.scale, ctx.zero_point
    if ctx.x is None or scale is None or scale.dtype is None or ctx.x_type is None:
        return None
    zp_type = zero_point.dtype if zero_point is not None else None
    if zero_point is not None and zp_type is None:
        return None
    out_type = ctx.output.dtype if ctx.output is not None else None
    return _Types(ctx.x_type, scale.dtype, zp_type, out_type)


def divides_in_scale_type(opset: int | None) -> bool:
    """True if ai.onnx QuantizeLinear at ``opset`` has ``precision`` (version 23 on): it
    divides in the scale's type unless ``precision`` says otherwise."""
    row = opsets.qdq_version("", "QuantizeLinear", opset) if opset is not None else None
    return row is not None and "precision" in row.attributes


def keep_float32_division(
    node: ir.Node, scale_type: ir.DataType | None, precision: int | None
) -> bool:
    """Give an ai.onnx QuantizeLinear-23+ with a float16 scale (``scale_type``)
    ``precision=FLOAT`` unless it has a precision; True if set. For a node that was
    QuantizeLinear-19/21 or com.microsoft: ONNX Runtime divided float16 in float32 there,
    while from version 23 the division is in the scale's type (the spec; ORT from 1.32),
    which rounds the quotient to float16 first and changes some quantized values.
    ``precision``: the node's as written (its NodeView's ``int_attr``)."""
    if node.op_type != "QuantizeLinear" or precision is not None:
        return False
    if scale_type != _DT.FLOAT16:
        return False
    node.attributes["precision"] = ir.AttrInt64("precision", int(_DT.FLOAT))
    return True


def _typed(plan: _Plan, contexts: list[NodeView]) -> Iterator[tuple[NodeView, _Types]]:
    """Each view with its (x, scale, zero point, output) types; a view whose types are
    unknown is a problem of ``plan`` instead. Notes a float16 scale in ``plan``."""
    for ctx in contexts:
        types = _types(ctx)
        if types is None:
            plan.problems.append("the element types of x, scale or zero point are unknown")
            continue
        plan.float16 |= types[1] == _DT.FLOAT16
        yield ctx, types


def _plan_to_onnx(site: QuantizedSite, contexts: list[NodeView]) -> _Plan:
    plan = _Plan(site, contexts[0].where, precision=contexts[0].int_attr("precision"))
    opset = site.scope.opset("")
    op = site.node.op_type
    row = opsets.qdq_version("", op, opset)
    for ctx, (x_type, scale_type, zp_type, _) in _typed(plan, contexts):
        per_axis, blocked = ctx.granularity.per_axis, ctx.granularity.blocked
        attributes = list(ctx.attributes)
        if "axis" not in ctx.attributes and per_axis and ctx.scale and ctx.scale.rank == 1:
            plan.set_axis = True
            if "axis" not in attributes:
                attributes.append("axis")
        form = opsets.NodeForm(
            x_type=x_type,
            scale_type=scale_type,
            zero_point_type=zp_type,
            # com.microsoft derives the output from the scale (DQ) or zero point (Q)
            output_type=None if ctx.is_quantize else scale_type,
            attributes=tuple(attributes),
            blocked=blocked,
            per_axis=per_axis,
        )
        if row is None:
            plan.problems.append(f"ai.onnx opset {opset} has no {op}")
        else:
            plan.problems.extend(opsets.expression_problems(row, form))
        if plan.problems:
            lowest = opsets.lowest_onnx_opset(op, form)
            if lowest is not None and (plan.lowest_opset is None or lowest > plan.lowest_opset):
                plan.lowest_opset = lowest
    return plan


def _plan_to_microsoft(site: QuantizedSite, contexts: list[NodeView]) -> _Plan:
    plan = _Plan(site, contexts[0].where, precision=contexts[0].int_attr("precision"))
    op = site.node.op_type
    for ctx, (x_type, scale_type, zp_type, out_type) in _typed(plan, contexts):
        per_axis, blocked = ctx.granularity.per_axis, ctx.granularity.blocked
        kept = []
        for name in ctx.attributes:
            value = ctx.int_attr(name)
            if name == "axis":
                kept.append(name)
            elif ctx.row is not None and value is not None and value == ctx.row.default(name):
                plan.drop.add(name)  # equal to its default: com.microsoft means the same
            elif (
                name == "output_dtype"
                and value == int(out_type or 0)
                and _derives(ctx, scale_type, zp_type, out_type)
            ):
                plan.drop.add(name)  # redundant: com.microsoft derives the same type
            else:
                kept.append(name)
        plan.problems.extend(
            opsets.com_microsoft_problems(
                op,
                opsets.NodeForm(
                    x_type=x_type,
                    scale_type=scale_type,
                    zero_point_type=zp_type,
                    output_type=out_type,
                    attributes=tuple(kept),
                    blocked=blocked,
                    per_axis=per_axis,
                ),
            )
        )
    return plan


def _derives(
    ctx: NodeView,
    scale_type: ir.DataType,
    zp_type: ir.DataType | None,
    out_type: ir.DataType | None,
) -> bool:
    """True if com.microsoft derives ``out_type`` without an output_dtype attribute."""
    row = opsets.qdq_version(MS_DOMAIN, ctx.op_type, 1)
    if row is None or out_type is None:
        return False
    derived = opsets.output_type(row, scale_type=scale_type, zero_point_type=zp_type)
    return derived == out_type


#: Why a float16 Q/DQ does not change domain unless allowed (measured with ORT 1.31/1.32).
_FLOAT16_PROBLEM = (
    "float16 scale: ONNX Runtime's CPU provider has float16 kernels for ai.onnx Q/DQ but "
    "not for com.microsoft ones, which it runs in float32, removing the model's Casts to "
    "float16 next to them, so the model's outputs in ONNX Runtime would change"
)


def _describe(plans: list[_Plan]) -> str:
    """The refused nodes grouped by their reasons (:func:`qlrewrite.text.grouped`)."""
    return grouped((plan.where, plan.problems) for plan in plans)


class ConvertDomainPass(ContextPass, ir.passes.InPlacePass):
    """Rewrite Q/DQ nodes into the ``to`` domain ("onnx" or "com.microsoft").

    ``strict`` (default): refuse (:class:`~qlrewrite.errors.Refusal`) if any node cannot
    be expressed, before changing anything. ``strict=False``: convert what can be, leave
    the rest. The :class:`~qlrewrite.passes.convert.domain.ConvertResult` counts what changed
    and lists :class:`ConvertWarning`.
    """

    needs = frozenset({"inference"})  # the types of x and the scale when undeclared

    def __init__(self, to: str, *, strict: bool = True, allow_float16: bool = False) -> None:
        super().__init__()
        found = target(to)
        if found is None:
            raise ValueError(f"unknown target domain {to!r}; expected one of {TARGETS}")
        self.to = found
        self.strict = strict
        self.allow_float16 = allow_float16

    @property
    def source_domain(self) -> str:
        """The domain nodes are converted from ('' for ai.onnx)."""
        return MS_DOMAIN if self.to == "onnx" else ""

    @property
    def target_domain(self) -> str:
        """The domain nodes are converted to ('' for ai.onnx)."""
        return "" if self.to == "onnx" else MS_DOMAIN

    def call(self, model: ir.Model) -> ConvertResult:
        plans = [
            _plan_to_onnx(site, ctxs) if self.to == "onnx" else _plan_to_microsoft(site, ctxs)
            for site, ctxs in node_views(model, inference=self.context(model).inference)
            if site.domain == self.source_domain
        ]
        for plan in plans:
            plan.float16_scale = plan.float16
            plan.float16 = plan.float16 and self._float16_changes(plan)
            if plan.float16 and not self.allow_float16:
                plan.problems.append(_FLOAT16_PROBLEM)
        failed = [p for p in plans if p.problems]
        if failed and self.strict:
            raise Refusal(self._refusal(failed))
        warnings: list[ConvertWarning] = []
        if failed:
            warnings.append(
                ConvertWarning(
                    f"{len(failed)} {self.source_domain or 'ai.onnx'} node(s) left as they "
                    f"are: {_describe(failed)}",
                    "",
                    "",
                )
            )
        done = [p for p in plans if not p.problems]
        pinned = 0
        for plan in done:
            pinned += self._apply(model, plan, warnings)
        dropped = drop_unused_domains(model) if done else 0
        raised = raise_ir_version(model) if done else False
        summary = {
            "nodes_converted": len(done),
            "nodes_left": len(failed),
            "precision_set": pinned,
            "opset_imports_dropped": int(dropped),
            "ir_version_raised": int(raised),
        }
        return ConvertResult(model, bool(done), summary, warnings)

    def _apply(self, model: ir.Model, plan: _Plan, warnings: list[ConvertWarning]) -> bool:
        """Rewrite the node of ``plan``, adding the warnings it deserves; True if it got
        ``precision`` (see :func:`keep_float32_division`)."""
        node = plan.site.node
        node.domain = self.target_domain
        for name in plan.drop:
            node.attributes.pop(name, None)
        pinned = False
        if self.to == "onnx" and divides_in_scale_type(plan.site.scope.opset("")):
            pinned = keep_float32_division(
                node, _DT.FLOAT16 if plan.float16_scale else None, plan.precision
            )
        if plan.set_axis:
            node.attributes["axis"] = ir.AttrInt64("axis", 1)
            warnings.append(
                ConvertWarning(
                    f"{plan.where}: com.microsoft without axis and a 1-D scale; ONNX Runtime "
                    "applies it on axis 1, so the ai.onnx node gets axis=1",
                    node.name or "",
                    str(plan.site.ref),
                )
            )
        if plan.float16:
            warnings.append(
                ConvertWarning(
                    f"{plan.where}: converted with --allow-float16; ONNX Runtime's CPU provider "
                    "has no float16 kernel for com.microsoft Q/DQ (it has for ai.onnx): it runs "
                    "them in float32 between inserted Casts and removes Cast pairs, the model's "
                    "own Casts to float16 included, so the model's outputs in ONNX Runtime "
                    "change (by 0.09 on a ModelOpt float16 model); --verify measures it",
                    node.name or "",
                    str(plan.site.ref),
                )
            )
        if self.to == "com.microsoft":
            ensure_import_at(model, plan.site.ref, MS_DOMAIN, 1)
        return pinned

    def _float16_changes(self, plan: _Plan) -> bool:
        """True if ORT computes this float16 node differently after the conversion."""
        site = plan.site
        node = site.node
        if (
            self.to == "com.microsoft"
            and node.op_type == "QuantizeLinear"
            and divides_in_scale_type(site.scope.opset(""))
            and plan.precision != int(_DT.FLOAT)
        ):
            return True  # ai.onnx divides in float16 there, com.microsoft in float32
        return domain_changes_result(node, dict(site.scope.imports))

    def _refusal(self, failed: list[_Plan]) -> str:
        count = f"{len(failed)} node(s)"
        if all(p.problems == [_FLOAT16_PROBLEM] for p in failed):
            return (
                f"cannot convert {count} exactly; nothing written (--allow-float16 converts "
                f"them anyway): {_describe(failed)}"
            )
        if self.to == "com.microsoft":
            return f"cannot convert {count} to com.microsoft; nothing written: {_describe(failed)}"
        lowest = [p.lowest_opset for p in failed if p.problems != [_FLOAT16_PROBLEM]]
        if all(v is not None for v in lowest):
            opset = max(v for v in lowest if v is not None)
            hint = (
                f"; the lowest ai.onnx opset that expresses them is {opset}: "
                f"run `qlrewrite upgrade --opset {opset}`"
            )
        else:
            hint = "; some of them no ai.onnx opset expresses, or their element types are unknown"
        return (
            f"cannot convert {count} to ai.onnx at the model's opset{hint}; nothing written: "
            f"{_describe(failed)}"
        )


def convert(model: ir.Model, to: str) -> ir.Model:
    """Convert every Q/DQ node of ``model`` (in place) to ``to`` ("onnx" or "com.microsoft").

    Raises :class:`~qlrewrite.errors.Refusal` (model unchanged) if some node cannot be
    expressed in the target domain. Returns the model.
    """
    return ConvertDomainPass(to)(model).model
