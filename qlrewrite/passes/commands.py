"""The passes each rewriting command runs, in order: one home for the command line and the
Python API (:mod:`qlrewrite.api`), so ``qlrewrite.convert(model, "onnx")`` rewrites what
``qlrewrite convert --to onnx`` rewrites."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import onnx_ir as ir

from qlrewrite.errors import InputError
from qlrewrite.findings import Finding, fixable
from qlrewrite.passes.convert.domain import ConvertDomainPass
from qlrewrite.passes.convert.qdq_to_qoperator import QdqToQOperatorPass, target_refusal
from qlrewrite.passes.convert.qonnx_to_qdq import QonnxToQdqPass
from qlrewrite.passes.convert.qoperator_plan import CONVERTIBLE
from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorToQdqPass
from qlrewrite.passes.convert.tidy import QdqTidyPass
from qlrewrite.passes.downgrade.downgrade_pass import DowngradePass
from qlrewrite.passes.fix import FIXES, DropImportPass, FixingPass, FixPass, finding_key
from qlrewrite.passes.fold.fold_pass import FoldPass
from qlrewrite.passes.fold.tensor import Float16Mode
from qlrewrite.passes.half import HalfPass
from qlrewrite.passes.integer_io import FloatIOPass, IntegerIOPass
from qlrewrite.passes.nbits.from_onnx import NBitsFromOnnxPass
from qlrewrite.passes.nbits.to_onnx import NBitsToOnnxPass
from qlrewrite.passes.retarget.retarget_pass import RetargetPass, Signedness
from qlrewrite.passes.upgrade import UpgradePass
from qlrewrite.targets.fusions import FusionTable, NoFusionTable, fusions_for

if TYPE_CHECKING:
    from qlrewrite.targets.spec import Target

__all__ = [
    "convert_passes",
    "downgrade_passes",
    "fix_passes",
    "fold_passes",
    "half_passes",
    "integer_io_passes",
    "qoperator_passes",
    "retarget_passes",
    "target_fix_passes",
    "upgrade",
    "upgrade_passes",
]


def fold_passes(
    *,
    keep_dq: bool = False,
    float16: Float16Mode = "exact",
    dequantize_weights: bool = False,
    fusions: FusionTable | NoFusionTable | None = None,
    keep_fused: bool = False,
    bias_only: bool = False,
) -> list[ir.passes.PassBase]:
    """``qlrewrite fold``: weight-only nodes to MatMul / Gather of float weights (with
    ``dequantize_weights``), then every constant Q/DQ folded (``fusions``: the measured
    table of what the runtime fuses; ``keep_fused``: leave the DQs it fuses; ``bias_only``:
    fold only the int32 bias DQs)."""
    fold = FoldPass(
        keep_dq=keep_dq,
        float16=float16,
        fusions=fusions,
        keep_fused=keep_fused,
        bias_only=bias_only,
    )
    passes: list[ir.passes.PassBase] = [fold]
    if dequantize_weights:
        passes.insert(0, NBitsToOnnxPass(strict=False, dequantize=True, float16=float16))
    return passes


def fold_fusions(
    target: str | None, *, keep_dq: bool = False, bias_only: bool = False
) -> FusionTable | NoFusionTable | None:
    """The fusion table ``fold`` reads (:func:`~qlrewrite.targets.fusions.fusions_for`):
    ``target``'s, else the installed ONNX Runtime's; None when nothing a runtime fuses is
    folded (``keep_dq``, ``bias_only``) and no target was named."""
    if keep_dq or bias_only:
        return fusions_for(target) if target is not None else None
    return fusions_for(target)


def convert_passes(
    to: str, *, allow_float16: bool = False, accuracy_level: int = 0, include_8bit: bool = False
) -> list[ir.passes.PassBase]:
    """``qlrewrite convert --to TO``: to ai.onnx, the QOperator form and the weight-only
    nodes first become Q/DQ; to com.microsoft, exact Q/DQ weights become MatMulNBits /
    GatherBlockQuantized (8-bit ones only with ``include_8bit``); then the Q/DQ nodes
    change domain."""
    last = ConvertDomainPass(to, allow_float16=allow_float16)
    if last.to == "onnx":
        return [QonnxToQdqPass(), QOperatorToQdqPass(), NBitsToOnnxPass(), last]
    return [NBitsFromOnnxPass(accuracy_level=accuracy_level, include_8bit=include_8bit), last]


def qoperator_passes(
    *, ops: Iterable[str] | None = None, target: str | None = None, bound: bool = True
) -> list[ir.passes.PassBase]:
    """``qlrewrite convert --to qoperator``: Q/DQ groups to QLinear / integer operators
    (``ops``: the float op types to convert, InputError naming one it cannot; ``target``:
    a runtime whose measured tables decide which QLinear forms it refuses; those groups
    stay Q/DQ; ``bound``: state the bound ``--verify`` checks, which reads every weight)."""
    from qlrewrite.targets.spec import parse_target

    chosen = None
    if ops is not None:
        chosen = [ops] if isinstance(ops, str) else list(ops)
        unknown = [op for op in chosen if op not in CONVERTIBLE]
        if unknown:
            raise InputError(
                f"ops: {', '.join(map(repr, unknown))} cannot be converted "
                f"(known: {', '.join(CONVERTIBLE)})",
                parameter="ops",
            )
    spec = parse_target(target) if target is not None else None
    if spec is not None and not spec.tables:
        raise InputError(f"target '{target}' has no measured table to read", parameter="target")
    refused = target_refusal(spec) if spec is not None else None
    return [QdqToQOperatorPass(ops=chosen, refused=refused, bound=bound)]


def upgrade_passes(
    opset: int, *, convert_weight_only: bool = False, fixing: tuple[str, ...] = ()
) -> list[ir.passes.PassBase]:
    """``qlrewrite upgrade --opset N``: ONNX's converter, then com.microsoft Q/DQ to ai.onnx
    where the new opset expresses them (not strict: the others stay), then with
    ``convert_weight_only`` MatMulNBits / GatherBlockQuantized to DequantizeLinear ->
    MatMul / Gather (not strict). ``fixing``: the rule codes ``check --fix`` upgrades for."""
    passes: list[ir.passes.PassBase] = [
        UpgradePass(opset, fixing=fixing),
        ConvertDomainPass("onnx", strict=False),
    ]
    if convert_weight_only:
        passes.append(NBitsToOnnxPass(strict=False))
    return passes


def fix_passes(
    findings: Sequence[Finding], *, unsafe: bool = False, targets: Sequence[Target] = ()
) -> list[ir.passes.PassBase]:
    """``qlrewrite check --fix`` (``--unsafe-fixes``): the passes that repair ``findings``
    (those :func:`~qlrewrite.findings.fixable` allows); [] if none.

    Read from the rules' own :class:`~qlrewrite.rules.registry.Fix`: a fix that is an
    upgrade (``upgrade_opset``) puts ``qlrewrite upgrade --opset N`` first, for the codes
    that asked for it; the node and model fixes run in one
    :class:`~qlrewrite.passes.fix.FixPass`, on exactly the findings given (a target
    rule's node fix, for the findings its check gives on ``targets``); then the
    rewrites the target findings point to on ``targets`` (:func:`target_fix_passes`).
    """
    chosen = fixable(findings, unsafe=unsafe)
    if not chosen:
        return []
    keys = {finding_key(f) for f in chosen}
    codes = sorted({f.rule for f in chosen})
    by_opset: dict[int, tuple[str, ...]] = {}
    for code in codes:
        if (opset := FIXES[code].upgrade_opset) is not None:
            by_opset[opset] = (*by_opset.get(opset, ()), code)
    passes = [
        p for opset in sorted(by_opset) for p in upgrade_passes(opset, fixing=by_opset[opset])
    ]
    passes.append(FixPass(codes, lambda f: finding_key(f) in keys, targets))
    return passes + target_fix_passes(chosen, targets)


#: The order the target rewrites run in: the bias fold and the retarget on the model's
#: own opset, then the downgrade, then the imports left unused dropped.
_REWRITE_ORDER = ("fold-bias", "retarget", "downgrade", "drop-import")


def target_fix_passes(
    findings: Sequence[Finding], targets: Sequence[Target]
) -> list[ir.passes.PassBase]:
    """The rewrites the target findings among ``findings`` point to on ``targets``
    (:class:`~qlrewrite.rules.registry.Rewrite`), each once, every code that asked for
    it repaired by it: the fold of int32 biases, the retarget, the downgrade to the
    lowest opset asked for, the unused imports dropped."""
    asked: dict[tuple[str, int | str | None], tuple[list[str], str]] = {}
    for finding in findings:
        make = FIXES[finding.rule].rewrite if finding.rule in FIXES else None
        rewrite = make(finding, targets) if make is not None else None
        if rewrite is not None:
            codes, _ = asked.setdefault((rewrite.command, rewrite.value), ([], rewrite.what))
            codes.append(finding.rule)
    opsets = [int(v) for (c, v) in asked if c == "downgrade" and v is not None]
    passes: list[ir.passes.PassBase] = []
    for (command, value), (codes, what) in sorted(
        asked.items(), key=lambda item: (_REWRITE_ORDER.index(item[0][0]), str(item[0][1]))
    ):
        if command == "downgrade" and opsets and value != min(opsets):
            continue
        passes.append(FixingPass(_rewrite_pass(command, value), codes, what))
    return passes


def _rewrite_pass(command: str, value: int | str | None) -> ir.passes.PassBase:
    if command == "downgrade":
        return DowngradePass(int(value or 0))
    if command == "drop-import":
        return DropImportPass(str(value))
    if command == "retarget":
        return RetargetPass(signedness="signed", symmetric=True)
    return FoldPass(bias_only=True)


def downgrade_passes(opset: int) -> list[ir.passes.PassBase]:
    """``qlrewrite downgrade --opset N``."""
    return [DowngradePass(opset)]


def retarget_passes(
    *,
    zero_point: Signedness | None = None,
    symmetric: bool = False,
    narrow: bool = False,
    drop_redundant: bool = False,
    split_shared: bool = False,
) -> list[ir.passes.PassBase]:
    """``qlrewrite retarget``: tidy first (split shared inputs, drop redundant pairs), then
    the zero-point and width retargets, each exact or refused."""
    passes: list[ir.passes.PassBase] = []
    if drop_redundant or split_shared:
        passes.append(QdqTidyPass(drop_redundant=drop_redundant, split_shared=split_shared))
    if zero_point or symmetric or narrow:
        passes.append(RetargetPass(signedness=zero_point, symmetric=symmetric, narrow=narrow))
    return passes


def upgrade(model: ir.Model, opset: int, *, convert_weight_only: bool = False) -> ir.Model:
    """``model`` converted to ai.onnx ``opset`` (a new model; the input is not modified),
    as ``qlrewrite upgrade`` converts it (:func:`upgrade_passes`).

    com.microsoft Q/DQ become ai.onnx where the opset expresses them; the IR version
    follows. MatMulNBits / GatherBlockQuantized stay unless ``convert_weight_only``.
    Raises InputError for a downgrade, Refusal when the conversion fails.
    """
    passes = upgrade_passes(opset, convert_weight_only=convert_weight_only)
    passes[0].requires(model)  # a downgrade raises InputError itself, not PreconditionError
    for rewrite_pass in passes:
        model = rewrite_pass(model).model
    return model


#: Values of ``integer-io --to``.
IO_FORMS = ("integer", "float")


def integer_io_passes(to: str = "integer") -> list[ir.passes.PassBase]:
    """``qlrewrite integer-io --to TO``: integer inputs and outputs (the scales and zero
    points recorded in the metadata), or float again from that metadata."""
    return [IntegerIOPass() if to == "integer" else FloatIOPass()]


def half_passes(
    to: str = "float16", *, block: tuple[str, ...] = (), convert_io: bool = False
) -> list[ir.passes.PassBase]:
    """``qlrewrite half --to TO``: float32 values and scales to float16 / bfloat16, Q/DQ
    kept valid per opset, ``block`` ops kept float32, inputs and outputs float32 unless
    ``convert_io``."""
    return [HalfPass(to, block=block, convert_io=convert_io)]
