"""QL701-QL706: what the runtime a model is deployed to refuses, run only for ``--target``: the
IR version and opsets it loads (QL701, QL702) and the node forms it has no kernel for
(QL703) or computes wrongly when it optimizes the graph (QL706), read from the measured
tables of :mod:`qlrewrite.targets`."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import onnx_ir as ir

from qlrewrite.findings import ERROR, SAFE, WARNING, Finding
from qlrewrite.io.ir_version import needed_ir_version
from qlrewrite.qdq import QDQView
from qlrewrite.rules.model_spec import DQ, DT, MS, ModelSpec
from qlrewrite.rules.registry import (
    CHECKED_KINDS,
    Example,
    Fix,
    Rewrite,
    TargetModel,
    TargetNode,
    rule,
)
from qlrewrite.rules.targets.ort_groups import (
    group_findings,
    groups_of,
    measured_outcome,
    measured_right,
    named_releases,
)
from qlrewrite.targets.forms import (
    WEIGHT_OPS,
    WEIGHT_PATTERN,
    form_of,
    pattern_key,
)
from qlrewrite.targets.fusions import COMPUTE_LAYERS, kernel_of_ops
from qlrewrite.targets.spec import Target
from qlrewrite.targets.tables import Refusal, Table, ort_releases, table
from qlrewrite.toolkit import import_table, normalize_domain, uses_domain

__all__: list[str] = []

#: Refusals the model-level rules already say (QL701: IR version, QL702: opset).
_MODEL_LEVEL = ("ir", "opset")
#: Refusals QL703 leaves to others: those, and failures at run of the optimized session
#: only (QL706).
_NOT_QL703 = (*_MODEL_LEVEL, "optimizer")


def _lower_ir_version(model: ir.Model) -> str | None:
    """QL701's fix: the model's ir_version lowered to what its opsets and types need."""
    before, after = model.ir_version, needed_ir_version(model)
    if after >= before:
        return None
    model.ir_version = after
    return f"ir_version {before} -> {after}"


@rule(
    "QL701",
    "target-ir-version",
    ERROR,
    summary="The model's IR version is newer than the target runtime loads.",
    explanation="""
    Each runtime release loads models up to one IR version (measured: ONNX Runtime 1.15
    to 1.17 load IR 9, 1.18 to 1.22 IR 10, 1.23 IR 11, 1.24 to 1.31 IR 13, 1.32 IR 14)
    and refuses newer ones at load, whatever the model holds. A model saved by a newer
    onnx carries that onnx's IR version even when it needs an older one: when its opsets
    and element types need no more than the target loads, setting the IR version lower
    is exact (no computation depends on it).
    """,
    example="""
    bad:  ir_version 14, ai.onnx 21, DequantizeLinear(uint8)   (--target ort==1.31)
    good: ir_version 10
    """,
    versions="--target ort / openvino",
    scope="target-model",
    needs_version=False,
    fix=Fix(
        SAFE,
        """
        Lowers the model's ir_version to the lowest its opsets and element types need, when
        the target loads that (computation does not depend on it: outputs are
        bit-identical).
        """,
        applies=lambda finding: finding.attribute == "ir_version",
        model=_lower_ir_version,
    ),
    examples=[
        Example(
            "ir-14-on-ort-1.31",
            ModelSpec("qdq", DQ, 21, ir_version=14),
            ModelSpec("qdq", DQ, 21, ir_version=10),
            targets=("ort==1.31",),
        ),
    ],
)
def target_ir_version(ctx: TargetModel) -> Iterator[Finding]:
    model = ctx.context.model
    refusing = [t for t in ctx.target.tables if _too_new(model.ir_version, t.max_ir_version)]
    if not refusing:
        return
    newest = min(t.max_ir_version for t in refusing if t.max_ir_version is not None)
    loaded = _opset_limit("", [ctx.target])  # QL702 lowers ai.onnx to it first
    needed = needed_ir_version(model, opset_at_most=loaded)
    lowers = needed <= newest
    after = "" if needed == needed_ir_version(model) else f" once ai.onnx is at {loaded}"
    hint = (
        f"set the model's ir_version to {needed}: its opsets and types need no more{after} "
        "(exact; check --fix does it)"
        if lowers
        else f"its opsets and types need IR version {needed}: target a newer release"
    )
    yield ctx.report(
        f"IR version {model.ir_version} is newer than {named_releases(ctx.target, refusing)} "
        f"loads (IR {newest} at most)",
        hint,
        attribute="ir_version" if lowers else "",
    )


def _too_new(version: int | None, limit: int | None) -> bool:
    return version is not None and limit is not None and version > limit


def _opset_limit(domain: str, targets: Sequence[Target]) -> int | None:
    """The newest ``domain`` opset every release of ``targets`` loads (None: no limit)."""
    limits = [
        limit
        for target in targets
        for t in target.tables
        if (limit := t.max_opset.get(domain or "ai.onnx")) is not None
    ]
    return min(limits) if limits else None


def _lower_opset(finding: Finding, targets: Sequence[Target]) -> Rewrite | None:
    """QL702's fix: ai.onnx lowered to the newest opset the targets load (the downgrade:
    exact, or refused naming the nodes), another domain's import dropped when no node
    uses it (else refused naming them)."""
    limit = _opset_limit(finding.domain, targets)
    if limit is None or finding.opset is None or finding.opset <= limit:
        return None
    if finding.domain:
        return Rewrite("drop-import", f"unused {finding.domain} import dropped", finding.domain)
    return Rewrite("downgrade", f"ai.onnx opset {finding.opset} -> {limit}", limit)


@rule(
    "QL702",
    "target-opset",
    ERROR,
    summary="An opset the model imports is newer than the target runtime loads.",
    explanation="""
    Each runtime release knows the opsets of each domain (ai.onnx, com.microsoft,
    ai.onnx.ml, ai.onnx.training, ai.onnx.preview.training) up to its own (measured:
    ONNX Runtime 1.16 loads ai.onnx 19, 1.17 20, 1.18 to 1.20 21, 1.21 and 1.22 22, 1.23
    23, 1.24 25, 1.25 to 1.31 26, 1.32 28; ai.onnx.ml 3 up to 1.16, 4 in 1.17, 5 from
    1.18) and refuses a model importing a newer one at load ("Opset 20 is under
    development", "ai.onnx.ml is till opset 3"), even when no node uses the domain (ORT's
    quantizer keeps the float model's imports, and writes ai.onnx.ml 5 with onnx 1.16 and
    newer). `qlrewrite downgrade --opset N` lowers the ai.onnx opset exactly, or refuses
    naming what opset N cannot hold; an import of another domain that no node uses is
    dropped by the fix.
    """,
    example="""
    bad:  ai.onnx 19 and ai.onnx.ml 5 (no node uses it), DequantizeLinear(uint8)
          (--target ort==1.16; check --fix drops the import)
    good: ai.onnx 19
    """,
    versions="--target ort / openvino",
    scope="target-model",
    needs_version=False,
    fix=Fix(
        SAFE,
        """
        Lowers ai.onnx to the newest opset the target loads with `qlrewrite downgrade`
        (exact, or refused naming the nodes that opset cannot hold); drops another
        domain's import when no node uses it (refused naming the nodes that do).
        """,
        applies=lambda finding: finding.domain == "" or finding.attribute == "opset_import",
        rewrite=_lower_opset,
    ),
    examples=[
        Example(
            "unused-ml-5-on-ort-1.16",
            ModelSpec("qdq", DQ, 19, ir_version=9, imports={"": 19, "ai.onnx.ml": 5}),
            ModelSpec("qdq", DQ, 19, ir_version=9),
            targets=("ort==1.16",),
        ),
    ],
)
def target_opset(ctx: TargetModel) -> Iterator[Finding]:
    model = ctx.context.model
    imports = import_table(model)
    for domain, version in sorted(imports.items()):
        name = normalize_domain(domain) or "ai.onnx"
        limits = [(t, t.max_opset.get(name)) for t in ctx.target.tables]
        refused = [(t, limit) for t, limit in limits if limit is not None and version > limit]
        if not refused:
            continue
        refusing = [t for t, _ in refused]
        newest = min(limit for _, limit in refused)
        unused = name != "ai.onnx" and not uses_domain(model, domain)
        yield ctx.report(
            f"{name} opset {version} is newer than {named_releases(ctx.target, refusing)} "
            f"loads ({name} {newest} at most)",
            _opset_hint(name, newest, unused),
            domain="" if name == "ai.onnx" else name,
            opset=version,
            attribute="opset_import" if unused else "",
        )


def _opset_hint(name: str, newest: int, unused: bool) -> str:
    if name == "ai.onnx":
        return (
            f"qlrewrite downgrade MODEL --opset {newest} lowers it exactly (or names what "
            f"opset {newest} cannot hold; check --fix does it)"
        )
    if unused:
        return "no node uses the domain: check --fix drops the import (exact)"
    return f"export the model at {name} opset {newest} or older"


def _oldest_running(form: str) -> str | None:
    """The oldest ONNX Runtime release whose table ran ``form``."""
    for major, minor in ort_releases():
        row = table(f"ort-{major}.{minor}").forms.get(form)
        if row == "runs" or (isinstance(row, dict) and row.get("runs")):
            return f"ORT {major}.{minor}"
    return None


def _refusals(
    target: Target, form: str, *, between_graph_io: bool = True
) -> list[tuple[Table, Refusal]]:
    found = []
    for runtime in target.tables:
        refusal = runtime.refusal(form, between_graph_io=between_graph_io)
        if refusal is not None and refusal.reason not in _NOT_QL703:
            found.append((runtime, refusal))
    return found


@rule(
    "QL703",
    "target-refuses-node",
    ERROR,
    summary="The target runtime has no kernel for the node as it is typed (measured).",
    explanation="""
    The node's form (operator, domain, opset, element types, granularity; for
    MatMulNBits its bits, accuracy_level, zero points and g_idx) was loaded and run as a
    one-node model in each release the target covers, and this release refused it, at
    load (no kernel registered for those types) or at run (a kernel that rejects the
    form). ONNX Runtime 1.16, for instance, has no com.microsoft DequantizeLinear for
    uint16 or int16, which 1.17 added. A weight's DequantizeLinear is also looked up as part
    of the MatMul it feeds (the probe's QDQ MatMul patterns): ONNX Runtime 1.18 and 1.19
    fuse a uint8 x int8 per-axis QDQ MatMul at opset 21 into a QLinearMatMul(21) they have
    no kernel for, and refuse the model. An activation's DequantizeLinear is looked up as
    part of the activation-only QDQ node group it feeds (Add, Concat, MaxPool, ...) too,
    where ORT_DISABLE_ALL refuses it as well (a refusal only the default optimizations make
    is QL706's). The message quotes the runtime's own error and the oldest release that
    runs the form.
    """,
    example="""
    bad:  com.microsoft DequantizeLinear(x: uint16)   (--target ort==1.16)
    good: com.microsoft DequantizeLinear(x: uint8)
    """,
    versions="--target ort / openvino",
    scope="target-node",
    needs_version=False,
    kinds=CHECKED_KINDS,
    examples=[
        Example(
            "ms-uint16-on-ort-1.16",
            ModelSpec("qdq", DQ, 1, domain=MS, x_type=DT.UINT16, ir_version=7),
            ModelSpec("qdq", DQ, 1, domain=MS, x_type=DT.UINT8, ir_version=7),
            targets=("ort==1.16",),
        ),
    ],
)
def target_refuses_node(ctx: TargetNode) -> Iterator[Finding]:
    if not ctx.target.tables:
        return
    form = form_of(ctx.view)
    if form is None:
        return
    refused, what = _refusals(ctx.target, form), "it"
    if not refused and not ctx.view.is_quantize:  # the quantized operator it is part of
        op = _weight_op_of(ctx)
        key = _pattern_key(ctx, op) if op is not None else None
        if key is not None and op is not None:
            form, what = key, f"the quantized {op.op_type} it feeds (as its weight)"
            refused = _refusals(ctx.target, key)
    if not refused and not ctx.view.is_quantize:
        for op, key in groups_of(ctx):
            found = [  # the probe's group at the graph's edge: QL753 reads the graph itself
                (t, r)
                for t, r in _refusals(ctx.target, key, between_graph_io=False)
                if r.unoptimized != "runs"
            ]
            if found:
                form, what, refused = key, f"the quantized {op.op_type} it feeds", found
                break
    if not refused:
        return
    refusal = refused[-1][1]
    when = "when loaded" if refusal.stage == "load" else "when run"
    oldest = _oldest_running(form) if ctx.target.runtime == "ort" else None
    hint = (
        f"{oldest} is the oldest release that runs it" if oldest else "no measured release runs it"
    )
    who = named_releases(ctx.target, [t for t, _ in refused])
    verb = "refuses" if len(refused) == 1 else "refuse"
    yield ctx.report(f"{who} {verb} {what} {when}: {refusal.error}", hint)


def _folded(runtime_ops: list[str]) -> bool:
    """Whether an execution graph computes the weight's MatMul in float only (it holds a
    compute layer, none on the quantized precision: :func:`kernel_of_ops`)."""
    computes = any(op.startswith(COMPUTE_LAYERS) for op in runtime_ops)
    return computes and kernel_of_ops(runtime_ops, "openvino") is None


def _feeds_matmul(ctx: TargetNode) -> bool:
    outputs = ctx.view.node.outputs
    consumers = outputs[0].consumers() if outputs else ()
    return any(n.op_type in ("MatMul", "Gemm") and n.domain in ("", "ai.onnx") for n in consumers)


@rule(
    "QL704",
    "target-folds-to-float",
    WARNING,
    summary="The target runtime dequantizes the weight when it compiles the model and multiplies "
    "in float (measured).",
    explanation="""
    A DequantizeLinear of a constant weight feeding a MatMul was compiled by the runtime
    (OpenVINO's CPU plugin) and its execution graph inspected: the probe records the
    layer types and precisions it ran. When the MatMul's layer runs in float only, the
    weight was decompressed when the model was compiled: it runs, but neither the memory
    nor the integer arithmetic of the quantized form is kept. (OpenVINO 2026.4 keeps 8-,
    4-bit weights compressed: its FullyConnected runs on u8 / i8 / u4 / i4.) The finding
    names the layers measured.
    """,
    example="""
    warn: DequantizeLinear(w: <a type OpenVINO decompresses>) -> MatMul   (--target openvino)
    good: DequantizeLinear(w: int8) -> MatMul
    """,
    versions="--target openvino",
    scope="target-node",
    needs_version=False,
    examples=[
        Example(
            "folded-weight",
            ModelSpec("weight_dq_matmul", DT.FLOAT8E5M2),
            ModelSpec("weight_dq_matmul", DT.INT8),
            targets=("openvino",),
            ort=False,
        ),
    ],
)
def target_folds_to_float(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    view = ctx.view
    if ctx.target.runtime != "openvino" or view.is_quantize or not _feeds_matmul(ctx):
        return
    form = form_of(view)
    if form is None:
        return
    for runtime in ctx.target.tables:
        ops = runtime.runtime_ops(WEIGHT_PATTERN + form)
        if ops is not None and runtime.refusal(WEIGHT_PATTERN + form) is None and _folded(ops):
            yield ctx.report(
                f"{runtime.label} dequantizes this weight when compiling and multiplies in "
                f"float (measured layers: {', '.join(ops)})",
                "a weight type it keeps compressed (int8, uint8, int4, uint4) keeps the memory "
                "and integer math",
            )
            return


def _matmul_of(ctx: TargetNode) -> ir.Node | None:
    """The MatMul whose weight (second input) the DequantizeLinear gives."""
    outputs = ctx.view.node.outputs
    for node in outputs[0].consumers() if outputs else ():
        matmul = node.op_type == "MatMul" and node.domain in ("", "ai.onnx")
        if matmul and len(node.inputs) > 1 and node.inputs[1] is outputs[0]:
            return node
    return None


def _weight_op_of(ctx: TargetNode) -> ir.Node | None:
    """The MatMul, Conv, ConvTranspose or Gemm whose weight (second input) the
    DequantizeLinear gives."""
    outputs = ctx.view.node.outputs
    for node in outputs[0].consumers() if outputs else ():
        weight_op = node.op_type in WEIGHT_OPS and node.domain in ("", "ai.onnx")
        if weight_op and len(node.inputs) > 1 and node.inputs[1] is outputs[0]:
            return node
    return None


def _pattern_key(ctx: TargetNode, matmul: ir.Node) -> str | None:
    return pattern_key(ctx.view, matmul)


def _float_runs(target: Target, key: str) -> list[tuple[Table, list[str]]]:
    found = []
    for runtime in target.tables:
        ops = runtime.runtime_ops(key)
        if ops is not None and runtime.refusal(key) is None and kernel_of_ops(ops) is None:
            found.append((runtime, ops))
    return found


@rule(
    "QL705",
    "target-runs-in-float",
    WARNING,
    summary="ONNX Runtime runs this quantized MatMul as DequantizeLinear and a float MatMul "
    "(no integer kernel formed; measured).",
    explanation="""
    ONNX Runtime's graph optimizer fuses a quantized MatMul into an integer kernel only for
    some types: the probe saved the optimized graph of each pattern (a constant weight
    dequantized into a MatMul, its activation quantized and dequantized or not) in each
    release. Measured in 1.31: 8-bit activations with 8-bit weights become QLinearMatMul;
    16-bit activations, or 4-bit weights under Q/DQ activations, stay DequantizeLinear ->
    MatMul in float; a weight-only 4-bit DequantizeLinear into a MatMul becomes
    MatMulNBits from 1.20 on. The model runs and computes what the ONNX semantics say,
    at float speed, with the weight dequantized at each run. Opt-in (`--select QL705`): it
    is advice on speed, not a refusal.
    """,
    example="""
    warn: Q/DQ(a: int16) -> MatMul <- DequantizeLinear(w: int8)   (--target ort==1.31)
    good: Q/DQ(a: uint8) -> MatMul <- DequantizeLinear(w: int8)   (QLinearMatMul)
    """,
    versions="--target ort",
    scope="target-node",
    needs_version=False,
    opt_in=True,
    examples=[
        Example(
            "int16-activation",
            ModelSpec("qdq_matmul", DT.INT16),
            ModelSpec("qdq_matmul", DT.UINT8),
            targets=("ort==1.31",),
        ),
    ],
)
def target_runs_in_float(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    view = ctx.view
    if view.is_quantize or ctx.target.runtime != "ort":
        return
    matmul = _matmul_of(ctx)
    key = _pattern_key(ctx, matmul) if matmul is not None else None
    if key is None:
        return
    found = _float_runs(ctx.target, key)
    if found:
        who = named_releases(ctx.target, [t for t, _ in found])
        yield ctx.report(
            f"{who} runs its MatMul in float (optimized graph: {', '.join(found[-1][1])})",
            "8-bit activations and 8-bit weights fuse into QLinearMatMul (measured)",
        )


#: The session options that keep ONNX Runtime from fusing a QDQ MatMul (its
#: QDQSelectorActionTransformer; measured to compute the blocked patterns exactly in 1.19,
#: 1.25, 1.31 and 1.32).
_NO_FUSION = (
    "or create the session with disabled_optimizers=['QDQSelectorActionTransformer'] "
    "(Python; the other optimizations stay) or the session config entry "
    "session.disable_quant_qdq=1"
)


#: The axis of a Conv, ConvTranspose or Gemm weight that holds the output channels.
_OUTPUT_AXIS = {"Conv": 0, "ConvTranspose": 1, "Gemm transB=0": 1, "Gemm transB=1": 0}
_GRANULARITY = re.compile(r" (per-tensor|per-axis axis=\d+|blocked axis=\d+ blocks=\w+)")
_ZERO_POINTS = re.compile(r" zero_points=\w+")


def _weight_op_ways_out(target: Target, key: str, op: ir.Node) -> str:
    """The measured way out of a Conv, ConvTranspose or Gemm pattern: the same weight
    quantized per channel on its output axis with one zero point, or per tensor, when the
    tables measured that form to match ORT_DISABLE_ALL in every release of the target."""
    trans_b = re.search(r" transB=\d", key)
    axis = _OUTPUT_AXIS.get(op.op_type + (trans_b.group(0) if trans_b else ""), 0)
    forms = []
    for granularity, label in (
        (f" per-axis axis={axis}", f"per channel on axis {axis} with one zero point"),
        (" per-tensor", "per tensor"),
    ):
        other = _ZERO_POINTS.sub(" zero_points=equal", _GRANULARITY.sub(granularity, key, 1))
        if other != key and measured_right(target, other):
            forms.append(label)
    if target.runtime != "ort":  # measured against the ONNX reference; no session option
        if not forms:
            return "fold this weight to float (qlrewrite fold) or quantize it otherwise"
        return f"quantize this weight {' or '.join(forms)} (measured to match the reference there)"
    session = "create the session with graph_optimization_level=ORT_DISABLE_ALL"
    if not forms:
        return session
    return (
        f"quantize this weight {' or '.join(forms)} (measured to match ORT_DISABLE_ALL in "
        f"these releases); or {session}"
    )


def _ways_out(key: str) -> str:
    """convert (MatMulNBits: blocks along K; a blocked weight becomes one without
    --include-8bit, which would also convert the per-column 8-bit weights ORT fuses
    right), per-channel weights, or a session that does not fuse QDQ nodes."""
    convert = (
        "qlrewrite convert --to com.microsoft makes it MatMulNBits, which computes the "
        "blocks (measured equal to ORT_DISABLE_ALL with 1.31.1); or "
        if " along=K " in key
        else ""
    )
    return f"{convert}quantize this weight per channel; {_NO_FUSION}"


@rule(
    "QL706",
    "target-miscomputes",
    ERROR,
    summary="ONNX Runtime's default optimizations compute this quantized MatMul, Conv, "
    "ConvTranspose, Gemm or activation group wrongly, fail at run on it, or refuse it "
    "(measured against ORT_DISABLE_ALL).",
    explanation="""
    The probe (`tools/probe/drive.py`; `tests/targets/test_target_miscomputes.py` re-measures the
    installed release) runs each QDQ pattern (a constant weight's DequantizeLinear into a MatMul,
    Conv, ConvTranspose or Gemm whose activation is quantized and dequantized) in each release twice
    on the same inputs: with the default session options (ORT_ENABLE_ALL, as deployed) and with
    ORT_DISABLE_ALL, which computes the ONNX semantics node by node. Measured in 1.19.2 to 1.32.0:
    with an 8-bit (uint8 or int8) activation, a blocked int8 / uint8 weight
    (block_size smaller than the blocked axis, along K or N) is fused into
    MatMulIntegerToFloat or QLinearMatMul as if its scale were per column (ONNX Runtime's
    MatMulNodeGroupSelector::Check, onnxruntime/core/optimizer/qdq_transformer/
    selectors_actions/qdq_selectors.cc, checks the element types only, not block_size):
    depending on the shapes, the zero point and whether the output is quantized, the
    model fails at run ("Attempting to broadcast an axis by a dimension other than 1") or
    silently returns other values (up to about 60% of the largest output off in the
    probe, or another shape). 4-bit weights, 16-bit activations, float activations
    (MatMulNBits) and one block along K are computed right. Conv and Gemm, measured in
    1.15.1 to 1.32.0 (8-bit types): ORT fuses them into QLinearConv / QGemm reading a
    per-axis scale as per output channel whatever its axis, so a Conv weight quantized
    per channel on axis 1 (valid ONNX), or a Gemm weight on its input axis, computes
    other values (about 80% / 50% of the largest output off, where the patterns ORT
    computes right stay within 3%; the ONNX reference evaluator agrees with
    ORT_DISABLE_ALL on every one) when the channel counts are equal and fails at run
    otherwise; a Conv weight per channel on a kernel axis, or
    blocked (opset 21, 1.19 to 1.32), fails at run; per-channel Conv weights whose zero
    points differ fail at run in 1.15 to 1.26 ("zero point of per-channel filter must be
    same"), per-channel Gemm weights without zero point in 1.15 to 1.27. The finding names
    the releases and what was measured. The activation-only QDQ node groups ONNX Runtime
    fuses into QLinear kernels or whose Q/DQ pair it drops (unary, binary, Concat, Where,
    MaxPool, Resize, Reshape, ..., measured in 1.15.1 to 1.32.0: none computes other values)
    are refused at load by the default session where ORT_DISABLE_ALL runs them, or fail at
    run: an activation quantized per channel (the QLinear kernels read one scale: "Scale
    and Zero-point must be a scalar"; Add, Mul, Concat and Softmax up to 1.31, AveragePool,
    LeakyRelu, Sigmoid and Where up to 1.32, GlobalAveragePool failing at run), float8
    activations fused into QLinear kernels that have no float8 kernel (1.18 to 1.31), a
    Clip before a float8 (1.18 to 1.32) or int4 (1.19 to 1.32) QuantizeLinear, an int4
    MaxPool whose Q/DQ
    pair is dropped (1.19 to 1.32). A Concat whose inputs have different scales or zero
    points is computed right by every release (uint8: QLinearConcat requantizes each input;
    int8 stays a float Concat), and neither TensorRT's nor the QNN EP's documents, nor ORT's
    QNN EP Concat builder (qnn/builder/opbuilder/concat_op_builder.cc), require one scale:
    no rule flags it. With `--target openvino` the groups' outputs are
    compared with the ONNX reference evaluator's (OpenVINO 2026.4.1: an
    InstanceNormalization between 16-bit Q/DQ computed about 55% of the largest output
    off; an AveragePool that pads and counts its padding, count_include_pad=1, after a
    DequantizeLinear whose zero point is not 0, about 15% off: the way out pads the
    integers before the DequantizeLinear). Each group is probed with its output quantized
    again and with it float (Q/DQ on an op's inputs only, as NNCF writes); ORT 1.27 to
    1.32 refuse at load an int8 group at opset 21 whose output is float (the propagated
    QuantizeLinear gets a uint8 zero point). Ways out: for MatMul, MatMulNBits
    (`qlrewrite convert --to com.microsoft`, blocks along K: a blocked weight needs no
    `--include-8bit`), per-channel weights, or a session that does not fuse QDQ nodes; for
    Conv, ConvTranspose and Gemm, the same weight quantized per channel on its output axis
    with one zero point, or per tensor, offered only when the tables measured that form to
    match ORT_DISABLE_ALL in every release of the target, or an ORT_DISABLE_ALL session;
    for an activation group, the activation quantized per tensor or as uint8, offered on the
    same condition, or an ORT_DISABLE_ALL session. One finding per group (on its first
    quantized input).
    """,
    example="""
    bad:  Q/DQ(a: uint8) -> MatMul <- DQ(w: int8, blocked along K)   (--target ort==1.31)
    good: Q/DQ(a: uint8) -> MatMul <- DQ(w: int8, per-axis)
    bad:  Q/DQ(a: uint8) -> Conv <- DQ(w: int8, per-axis, axis=1)
    good: Q/DQ(a: uint8) -> Conv <- DQ(w: int8, per-axis, axis=0)
    bad:  Q/DQ(a: uint8, per-axis) -> Add -> Q/DQ   (--target ort==1.24: refused at load)
    good: Q/DQ(a: uint8, per-tensor) -> Add -> Q/DQ
    """,
    versions="--target ort / openvino",
    scope="target-node",
    needs_version=False,
    examples=[
        Example(
            "blocked-int8-weight",
            ModelSpec(
                "qdq_matmul_weight", DT.UINT8, DT.INT8, "blocked", zero_point=False, output="float"
            ),
            ModelSpec("qdq_matmul_weight", DT.UINT8, DT.INT8, "per-axis", output="float"),
            targets=("ort==1.31",),
        ),
        Example(
            "per-channel-activation-into-add",
            ModelSpec("qdq_family", "Add", DT.UINT8, "per-axis"),
            ModelSpec("qdq_family", "Add", DT.UINT8, "per-tensor"),
            targets=("ort==1.24",),
        ),
        Example(
            "conv-weight-per-channel-on-axis-1",
            ModelSpec("qdq_weight_op", "Conv", DT.UINT8, DT.INT8, "per-axis", axis=1),
            ModelSpec("qdq_weight_op", "Conv", DT.UINT8, DT.INT8, "per-axis", axis=0),
            targets=("ort==1.31",),
        ),
    ],
)
def target_miscomputes(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    if ctx.view.is_quantize or ctx.target.runtime not in ("ort", "openvino"):
        return
    op = _weight_op_of(ctx)
    key = _pattern_key(ctx, op) if op is not None else None
    if key is None or op is None:
        yield from group_findings(ctx)
        return
    found = [(t, d) for t in ctx.target.tables if (d := t.divergence(key)) is not None]
    if found:
        who = named_releases(ctx.target, [t for t, _ in found])
        by = f"with {who}'s default optimizations" if ctx.target.runtime == "ort" else f"in {who}"
        ways = (
            _ways_out(key) if op.op_type == "MatMul" else _weight_op_ways_out(ctx.target, key, op)
        )
        yield ctx.report(
            f"{by} the quantized {op.op_type} this weight feeds {measured_outcome(found)}",
            ways,
        )
