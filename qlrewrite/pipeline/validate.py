"""Output validation: a rewritten model is refused when ONNX's checker or our check
rejects it (:func:`validate_output`); and the checks both ends of a rewrite share
(:func:`check_rules`, :func:`checker_problem`)."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir

from qlrewrite.errors import Refusal
from qlrewrite.findings import Report
from qlrewrite.pipeline.refusals import FindingsRefusal
from qlrewrite.qdq.inference import Inference
from qlrewrite.qdq.untouched import Checked, untouched
from qlrewrite.toolkit import MAIN, normalize_domain, onnx_opset

__all__ = ["check_rules", "checker_problem", "runtime_only_ops", "validate_output"]


def check_rules(
    model: ir.Model,
    path: Path | None,
    inference: Inference,
    unchanged: frozenset[str] = frozenset(),
) -> Report:
    """Every rule on ``model`` (``unchanged``: nodes not checked again)."""
    from qlrewrite.checking.checker import check_model  # imports every rule: only when rewriting

    where = str(path) if path else None
    return check_model(model, path=where, inference=inference, unchanged=unchanged)


def validate_output(
    model: ir.Model,
    source: Path | None = None,
    original: onnx.ModelProto | None = None,
    *,
    weightless: onnx.ModelProto,
    runtime_ops: frozenset[str] = frozenset(),
    checked: Checked | None = None,
) -> list[str]:
    """Refuse a rewritten model that ONNX's checker or our check rejects; return warnings.

    Graph inputs and outputs declared without a shape (as some exporters write them, and
    as ONNX Runtime runs them) do not refuse it: see :func:`_full_check` (a warning).
    ``original``: a weight-free proto of the input; when onnx.checker rejects the output,
    it is checked too, and an input the checker rejects as well is named as the cause.
    ``runtime_ops``: ops of the ONNX domain that ONNX does not define and the input already
    had (:func:`runtime_only_ops`), checked as custom ops. ``weightless``: the
    :func:`~qlrewrite.io.weightless.weightless_proto` of ``model`` as it is now, made once by
    the caller (the save reuses it); it is left as it came. ``checked``: what the input
    check judged of each node (:mod:`qlrewrite.qdq.untouched`); the node rules are not run
    again on the nodes the passes left exactly as that check saw them.
    """
    try:
        warnings, inferred = _full_check(weightless, runtime_ops)
    except _CHECKER_ERRORS as exc:
        problem = checker_problem(original, runtime_ops) if original is not None else None
        if problem is not None:
            where = f"{source}: " if source else ""
            raise Refusal(
                f"{where}the input model is invalid (onnx.checker: {problem}); nothing written"
            ) from exc
        raise Refusal(
            f"the rewritten model would be invalid (onnx.checker: {_first_line(exc)})"
        ) from exc
    inference = Inference(model, inferred=inferred)
    skip = frozenset()
    if checked is not None:
        skip = untouched(checked, weightless, inference.known(MAIN))  # inferred above
    report = check_rules(model, source, inference, skip)
    if report.errors:
        raise FindingsRefusal(
            f"the rewritten model would have {len(report.errors)} error finding(s); "
            "nothing written",
            report,
        )
    return warnings


#: What onnx.checker's full check raises on a model it rejects: ONNX's shape inference
#: raises a plain ValueError for some malformed models ("Invalid tensor data type 0.").
_CHECKER_ERRORS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def checker_problem(proto: onnx.ModelProto, runtime_ops: frozenset[str]) -> str | None:
    """onnx.checker's first complaint about ``proto`` (checked as the output is), or None."""
    try:
        _full_check(proto, runtime_ops)
    except _CHECKER_ERRORS as exc:
        return _first_line(exc)
    return None


def _full_check(
    proto: onnx.ModelProto, runtime_ops: frozenset[str] = frozenset()
) -> tuple[list[str], onnx.ModelProto]:
    """onnx.checker's full check. Main-graph inputs / outputs without a shape get an empty
    one for the structural check only, which requires the field; strict shape inference
    (the rest of the full check) runs without it, as ONNX Runtime does. Nodes of the ONNX
    domain that ONNX does not define and the input already had (``runtime_ops``: ONNX
    Runtime registers a few there, e.g. the SimplifiedLayerNormalization of ONNX Runtime
    GenAI's models) are checked as custom ops. Returns warnings naming both, and the
    inferred proto (the output check reads its types). ``proto`` is left as it came."""
    unknown = [
        n for n in proto.graph.node if n.domain in ("", "ai.onnx") and n.op_type in runtime_ops
    ]
    for node in unknown:
        node.domain = _UNCHECKED_DOMAIN
    if unknown:
        proto.opset_import.append(onnx.helper.make_opsetid(_UNCHECKED_DOMAIN, 1))
    try:
        warnings, inferred = _checked(proto)
    finally:
        for node in unknown:
            node.domain = ""
        if unknown:
            del proto.opset_import[-1]
    if unknown:
        ops = ", ".join(sorted({node.op_type for node in unknown}))
        warnings.append(
            f"{ops}: not ONNX operators (ONNX Runtime defines them in the ONNX domain); "
            "onnx.checker checked them as custom operators"
        )
    return warnings, inferred


_UNCHECKED_DOMAIN = "qlrewrite.unchecked"


def runtime_only_ops(model: ir.Model) -> frozenset[str]:
    """Ops of the model's main graph in the ONNX domain with no ONNX schema at its opset."""
    opset = onnx_opset(model)
    if opset is None:
        return frozenset()
    found = set()
    for node in model.graph:
        if normalize_domain(node.domain) != "" or node.op_type in found:
            continue
        try:
            onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            found.add(node.op_type)
    return frozenset(found)


def _checked(proto: onnx.ModelProto) -> tuple[list[str], onnx.ModelProto]:
    """onnx.checker's full check as it runs it (the structural check, then strict shape
    inference with type checks), keeping the inferred proto."""
    shapeless = _shapeless_io(proto.graph)
    for info in shapeless:
        info.type.tensor_type.shape.SetInParent()
    onnx.checker.check_model(proto)
    for info in shapeless:
        info.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    if not shapeless:
        return [], inferred
    names = ", ".join(info.name for info in shapeless)
    return [
        f"graph input/output {names} declared without a shape (as in the input); "
        "onnx.checker's full check ran without it"
    ], inferred


def _shapeless_io(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The graph's tensor inputs and outputs declared without a shape."""
    return [
        info
        for info in (*graph.input, *graph.output)
        if info.type.HasField("tensor_type") and not info.type.tensor_type.HasField("shape")
    ]
