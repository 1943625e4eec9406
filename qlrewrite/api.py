"""The Python API: ``qlrewrite.load``, ``save``, ``check``, ``fix``, ``fold``, ``convert``,
``upgrade``, ``downgrade``, ``retarget``, ``info``, ``compare``, ``verify_rewrite``.

Every function takes a model as a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``
(anything else is a ``TypeError`` saying so), runs what the command of the same name runs
(:mod:`qlrewrite.passes.commands`) and raises instead of printing: ``InputError`` for a
model that cannot be read or a bad argument (its message names the parameter), ``Refusal``
for a rewrite the target cannot express; what a rewrite warns of is issued through the
``warnings`` module (categories in :mod:`qlrewrite.errors`: ``FusionLostWarning``,
``PrecisionWarning``, ...) and its summary is :func:`summary_of` the model it returns.
Every option of every command has its spelling here (docs/python-api.md lists them side by side;
tests/pipeline/test_api_parity.py holds them to it). The rewrites refuse and check as the commands
do, through the same code (:func:`qlrewrite.pipeline.rewrite_model`): an input with error
findings, or a rewrite whose output ONNX's checker or ``check`` would reject, raises
:class:`~qlrewrite.pipeline.FindingsRefusal` (``.findings``) or ``Refusal``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from qlrewrite import opsets, pipeline, reports
from qlrewrite.checking import checker
from qlrewrite.errors import (
    CheckWarning,
    DeploymentWarning,
    FusionLostWarning,
    ImportAddedWarning,
    InputError,
    LeftAsIsWarning,
    Note,
    PrecisionWarning,
    QlrewriteWarning,
)
from qlrewrite.findings import Report
from qlrewrite.io import model_io
from qlrewrite.passes.commands import (
    IO_FORMS,
    convert_passes,
    downgrade_passes,
    fix_passes,
    fold_fusions,
    fold_passes,
    half_passes,
    integer_io_passes,
    qoperator_passes,
    retarget_passes,
    upgrade_passes,
)
from qlrewrite.passes.context import RunContext
from qlrewrite.passes.convert.domain import TARGETS
from qlrewrite.passes.convert.domain import target as domain_target
from qlrewrite.passes.fold.tensor import FLOAT16_MODES
from qlrewrite.passes.half import HALF_TYPES
from qlrewrite.passes.imports import ImportsResult
from qlrewrite.toolkit import implied_imports
from qlrewrite.verify.compare import Comparison, parse_runtime
from qlrewrite.verify.verify import VERIFY_TIMEOUT, Verification, VerifyOptions

__all__ = [
    "ModelLike",
    "RewriteSummary",
    "check",
    "compare",
    "convert",
    "downgrade",
    "fix",
    "fold",
    "half",
    "info",
    "integer_io",
    "load",
    "retarget",
    "save",
    "summary_of",
    "upgrade",
    "verify_rewrite",
]

#: What every function of the API takes as a model.
ModelLike = ir.Model | onnx.ModelProto | str | os.PathLike

_TAKES = "a path, an onnx.ModelProto or an onnx_ir.Model"


def _one_of(values: Sequence[str]) -> str:
    """``'a' or 'b'``, ``'a', 'b' or 'c'`` for messages."""
    quoted = [f"'{v}'" for v in values]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 2 else quoted)


def load(model: ModelLike, *, check_data: bool = True) -> ir.Model:
    """An ``onnx_ir.Model`` of ``model``: a file read lazily (external data stays on disk,
    memory-mapped), a ``ModelProto`` wrapped without copying its tensors, or the model
    itself. A file that cannot be read raises ``InputError`` (one line: why)."""
    if isinstance(model, ir.Model):
        return model
    if isinstance(model, onnx.ModelProto):
        return model_io.from_proto(model)
    if isinstance(model, str | os.PathLike):
        return model_io.load(model, check_data=check_data)
    raise TypeError(f"model must be {_TAKES}, not {type(model).__name__}")


def save(
    model: ModelLike, path: str | os.PathLike, *, external_data: bool | None = None
) -> Path | None:
    """Write ``model`` to ``path`` atomically (see docs/safety.md); return the external
    data file, if any. ``external_data``: None keeps the input's choice (external when
    the initializers exceed 1.8 GB)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    return model_io.save(load(model), path, external_data=external_data)


def _codes(value: str | Iterable[str], parameter: str) -> tuple[str, ...]:
    """A code, a comma-separated string of codes or an iterable of them (never a string
    split into characters)."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Iterable):
        raise TypeError(
            f"{parameter} must be a rule code or a list of codes, not {type(value).__name__}"
        )
    return tuple(value)


def _targets(target: str | Iterable[str]) -> tuple[str, ...]:
    """Runtime specs as ``--target`` takes them; a wrong one is ``InputError``."""
    from qlrewrite.targets.spec import parse_targets

    specs = _codes(target, "target")
    parse_targets(specs)
    return specs


def check(
    model: ModelLike,
    *,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
    target: str | Iterable[str] = (),
    config: str | os.PathLike | bool = False,
) -> Report:
    """The findings of ``qlrewrite check`` on ``model``, as a :class:`~qlrewrite.findings.Report`
    (``.findings``, ``.errors``, ``.warnings``, ``.suppressed``, ``.to_json()``).

    ``select`` / ``ignore``: a rule code or prefix (``"QL4"``) or a list of them, as
    ``--select`` / ``--ignore``; ``target``: a runtime spec (``"ort==1.16"``,
    ``"tensorrt"``) or a list of them, as ``--target``. ``config``: ``False`` reads no
    configuration (``--isolated``, the default here), ``True`` the one the command finds
    from the model's folder upwards, a path that file (``--config``); the arguments
    override it as the command line does. A model that cannot be read raises
    ``InputError``, so ``not report.errors`` never passes a missing model.
    """
    select, ignore = _codes(select, "select"), _codes(ignore, "ignore")
    targets = _targets(target)
    if config is not False:
        return _check_configured(model, config, select, ignore, targets, per_node_ignores)
    if isinstance(model, str | os.PathLike | ir.Model | onnx.ModelProto):
        report = checker.check(
            model,
            select=select,
            ignore=ignore,
            per_node_ignores=per_node_ignores,
            targets=targets,
        )
    else:
        raise TypeError(f"model must be {_TAKES}, not {type(model).__name__}")
    if report.load_error is not None:
        where = report.path if report.path is not None else "model"
        raise InputError(f"{where}: {report.load_error}")
    return report


def _check_configured(  # noqa: PLR0917 (check's arguments, as given)
    model: ModelLike,
    config: str | os.PathLike | bool,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    targets: tuple[str, ...],
    per_node_ignores: Mapping[str, Sequence[str]] | None,
) -> Report:
    """:func:`check` under a configuration, as ``qlrewrite check MODEL`` runs it (the same
    :func:`qlrewrite.checking.project.check_one`)."""
    from qlrewrite.checking import project
    from qlrewrite.checking.config import settings_for

    if not isinstance(model, str | os.PathLike):
        raise InputError("config: applies to a model path (its folder finds the file)")
    if per_node_ignores is not None:
        raise InputError("per_node_ignores: give it in the configuration, or config=False")
    path = Path(model)
    given = None if config is True else Path(config)  # type: ignore[arg-type]
    settings = settings_for(path, config=given)
    selection = project.Selection(select, ignore, (), None, targets)
    report = project.check_one(project.Target(path, settings), selection)
    if report.load_error is not None:
        raise InputError(f"{report.path}: {report.load_error}")
    return report


def fix(
    model: ModelLike,
    *,
    unsafe: bool = False,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
    target: str | Iterable[str] = (),
) -> ir.Model:
    """``model`` with the findings of :func:`check` (same ``select``, ``ignore``,
    ``per_node_ignores``) repaired as ``qlrewrite check --fix`` repairs them; with
    ``unsafe``, as ``--fix --unsafe-fixes``. The fixes are the rules' own
    (:func:`qlrewrite.passes.commands.fix_passes`). An ``onnx_ir.Model`` is fixed in
    place and returned, unless a fix makes a new model (an upgrade, QL201 / QL402 below
    opset 13, unsafe; a downgrade for ``target``). Warnings without a fix stay: call
    :func:`check` on the result to see them. As ``check --fix`` (which then writes
    nothing and exits 1), it refuses an input with error findings no fix repairs, whether
    or not other findings had a fix, and an output ONNX's checker or our check would
    reject (``FindingsRefusal`` / ``Refusal``).

    ``target``: the runtimes deployed to, as ``check --target`` (``"ort==1.16"``,
    ``"tensorrt"``): their findings' rewrites run too (IR and opset lowering, unused
    imports dropped, zero points retargeted, int32 biases folded), each exact or refused
    naming the nodes, and the result is checked against them again (``FindingsRefusal``
    when an error remains)."""
    if not isinstance(unsafe, bool):
        raise TypeError(f"unsafe must be a bool, not {type(unsafe).__name__}")
    specs = _codes(target, "target")
    loaded = load(model)
    report = _checked(loaded, select, ignore, per_node_ignores, specs)
    passes = fix_passes(report.findings, unsafe=unsafe, targets=_runtimes(specs))
    if not passes:
        pipeline.refuse_errors(report, "model", "error finding(s) no fix repairs")
        return loaded
    fixed = _rewrite(loaded, passes, "fix")
    if specs:
        after = _checked(fixed, select, ignore, per_node_ignores, specs)
        pipeline.refuse_errors(after, "the fixed model", "error finding(s) left for the target")
    return fixed


def _checked(
    model: ir.Model,
    select: str | Iterable[str],
    ignore: str | Iterable[str],
    per_node_ignores: Mapping[str, Sequence[str]] | None,
    targets: tuple[str, ...],
) -> Report:
    """:func:`check` of ``model`` with the runtimes of ``targets`` too."""
    if not targets:
        return check(model, select=select, ignore=ignore, per_node_ignores=per_node_ignores)
    return checker.check(
        model,
        select=_codes(select, "select"),
        ignore=_codes(ignore, "ignore"),
        per_node_ignores=per_node_ignores,
        targets=targets,
    )


def _runtimes(specs: tuple[str, ...]) -> tuple[Any, ...]:
    if not specs:
        return ()
    from qlrewrite.targets.spec import parse_targets

    return parse_targets(specs)


def _run(model: ir.Model, passes: Sequence[ir.passes.PassBase]) -> ir.Model:
    """``passes`` on ``model`` without the checks (the imports ONNX Runtime implies added
    first); a refusal raised inside a pass reaches the caller as itself."""
    passes = pipeline.with_implied_imports(passes, implied_imports(model))
    rewritten, _ = pipeline.run_passes(model, passes, RunContext.fresh(model))
    return rewritten


@dataclasses.dataclass(frozen=True)
class RewriteSummary:
    """What a rewrite did, as the command's summary line and ``--report`` say it:
    ``changes`` per pass (counts), ``warnings`` (their texts, in the command's order;
    also issued through the ``warnings`` module), ``pass_results`` (typed: see
    :mod:`qlrewrite.passes.results`)."""

    command: str
    changes: dict[str, dict[str, int]]
    warnings: list[str]
    pass_results: list[ir.passes.PassResult] = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class _Kept:
    """A summary as :data:`_SUMMARIES` keeps it: each pass result by its type and its
    fields but its model (a result holds its model, and an entry must not keep alive the
    model it is kept for)."""

    command: str
    changes: dict[str, dict[str, int]]
    warnings: list[str]
    results: list[tuple[type[ir.passes.PassResult], dict[str, Any]]]


#: The summary of each model a rewrite of this API returned, gone with the model.
_SUMMARIES: weakref.WeakKeyDictionary[ir.Model, _Kept] = weakref.WeakKeyDictionary()


def _keep_summary(model: ir.Model, summary: RewriteSummary) -> None:
    results = [
        (type(r), {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "model"})
        for r in summary.pass_results
    ]
    _SUMMARIES[model] = _Kept(summary.command, summary.changes, summary.warnings, results)


def summary_of(model: ir.Model) -> RewriteSummary | None:
    """The :class:`RewriteSummary` of the rewrite that returned ``model`` (None for a
    model no rewrite of this API returned); its pass results name ``model``."""
    kept = _SUMMARIES.get(model)
    if kept is None:
        return None
    results = [kind(model=model, **fields) for kind, fields in kept.results]
    return RewriteSummary(kept.command, kept.changes, kept.warnings, results)


#: What a warning's words say of its kind, for warnings that do not carry their category.
_KINDS: tuple[tuple[tuple[str, ...], type[QlrewriteWarning]], ...] = (
    (("fuse", "integer kernel"), FusionLostWarning),
    (("float16", "outputs may change", "outputs in onnx runtime", "rounded"), PrecisionWarning),
    (("left as", "not folded", "not converted", "not checked"), LeftAsIsWarning),
)


def warning_category(warning: Any, result: Any = None) -> type[QlrewriteWarning]:
    """The category a rewrite's warning is issued with: its own (:class:`~qlrewrite.errors.
    Note`), that of its pass, else the one its words name."""
    if isinstance(warning, Note):
        return warning.category
    if isinstance(result, ImportsResult):
        return ImportAddedWarning
    text = str(getattr(warning, "message", warning)).lower()
    for words, category in _KINDS:
        if any(word in text for word in words):
            return category
    return QlrewriteWarning


def _issue(rewritten: pipeline.Rewritten) -> list[str]:
    """Issue every warning of ``rewritten`` (in the command's order); their texts."""
    kinds: list[tuple[Any, type[QlrewriteWarning]]] = [
        (w, CheckWarning) for w in rewritten.warnings
    ]
    kinds += [
        (w, warning_category(w, r)) for r in rewritten.results for w in getattr(r, "warnings", [])
    ]
    kinds += [(w, LeftAsIsWarning) for w in rewritten.notes]
    texts = []
    for warning, category in kinds:
        text = str(getattr(warning, "message", warning))
        warnings.warn(text, category, stacklevel=4)
        texts.append(text)
    return texts


def _rewrite(model: ir.Model, passes: Sequence[ir.passes.PassBase], command: str) -> ir.Model:
    """``passes`` on ``model`` as the command ``command`` runs them: the input refused
    when it has error findings no pass repairs, the output when ONNX's checker or our
    check rejects it (:func:`qlrewrite.pipeline.rewrite_model`); its warnings issued, its
    summary kept for :func:`summary_of`."""
    rewritten = pipeline.rewrite_model(model, passes, command=command)
    texts = _issue(rewritten)
    summary = RewriteSummary(command, rewritten.changes(), texts, rewritten.results)
    _keep_summary(rewritten.model, summary)
    return rewritten.model


def fold(
    model: ModelLike,
    *,
    keep_dq: bool = False,
    float16: str = "exact",
    dequantize_weights: bool = False,
    bias_only: bool = False,
    keep_fused: bool = False,
    target: str | None = None,
) -> ir.Model:
    """``model`` with its constant Q/DQ folded, as ``qlrewrite fold``: an ``onnx_ir.Model``
    is folded in place and returned. Values are computed lazily, when saved or read.
    ``bias_only``: only the int32 bias DequantizeLinear (``fold --bias-only``);
    ``keep_fused``: leave the DequantizeLinear the runtime ``target`` (spelled as ``check
    --target``; default the installed ONNX Runtime release) fuses, read from its measured
    table (``fold --keep-fused``); ``Refusal`` when no table answers."""
    if float16 not in FLOAT16_MODES:
        raise InputError(f"float16 must be {_one_of(FLOAT16_MODES)}, not {float16!r}")
    if keep_dq and bias_only:
        raise InputError("keep_dq and bias_only fold disjoint sets: give one")
    fusions = fold_fusions(target, keep_dq=keep_dq, bias_only=bias_only)
    passes = fold_passes(
        keep_dq=keep_dq,
        float16=float16,
        dequantize_weights=dequantize_weights,
        bias_only=bias_only,
        fusions=fusions,
        keep_fused=keep_fused,
    )
    return _rewrite(load(model), passes, "fold")


def convert(
    model: ModelLike,
    to: str,
    *,
    allow_float16: bool = False,
    accuracy_level: int = 0,
    include_8bit: bool = False,
    ops: Iterable[str] | None = None,
    target: str | None = None,
) -> ir.Model:
    """``model`` converted as ``qlrewrite convert --to TO`` (``"onnx"``,
    ``"com.microsoft"`` or ``"qoperator"``; ``include_8bit`` as ``--include-8bit``;
    ``ops`` and ``target`` as ``--ops`` and ``--target`` of ``--to qoperator``): in place
    for an ``onnx_ir.Model``. Raises ``Refusal`` when a node
    cannot be expressed in the target: a path or ``ModelProto`` is left as it is, an
    ``onnx_ir.Model`` keeps what the steps before the refusal changed (pass a copy)."""
    if to == "qoperator":
        if include_8bit or accuracy_level or allow_float16:
            raise InputError(
                "include_8bit, accuracy_level and allow_float16 do not apply to qoperator"
            )
        # the bound: what verify_rewrite accepts of the result (summary_of)
        passes = qoperator_passes(ops=ops, target=target, bound=True)
        return _rewrite(load(model), passes, "convert")
    if ops is not None or target is not None:
        raise InputError("ops and target apply to to='qoperator'")
    if domain_target(to) is None:
        raise InputError(f"to must be {_one_of((*TARGETS, 'qoperator'))}, not {to!r}")
    levels = opsets.ACCURACY_LEVELS
    if accuracy_level not in levels:
        raise InputError(
            f"accuracy_level must be {levels[0]} to {levels[-1]}, not {accuracy_level!r}"
        )
    if not isinstance(include_8bit, bool):
        raise TypeError(f"include_8bit must be a bool, not {type(include_8bit).__name__}")
    if domain_target(to) == "onnx" and (include_8bit or accuracy_level):
        raise InputError("include_8bit and accuracy_level apply to com.microsoft, not onnx")
    passes = convert_passes(
        to, allow_float16=allow_float16, accuracy_level=accuracy_level, include_8bit=include_8bit
    )
    return _rewrite(load(model), passes, "convert")


def upgrade(model: ModelLike, opset: int, *, convert_weight_only: bool = False) -> ir.Model:
    """``model`` at ai.onnx ``opset``, as ``qlrewrite upgrade --opset N``: a new model (the
    input is not modified). A downgrade raises ``InputError``; a model ONNX's converter
    cannot convert raises ``Refusal``."""
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise TypeError(f"opset must be an int, not {type(opset).__name__}")
    passes = upgrade_passes(opset, convert_weight_only=convert_weight_only)
    loaded = load(model)
    for upgrade_pass in passes:  # a downgrade is InputError, not onnx_ir's PreconditionError
        upgrade_pass.requires(loaded)
    return _rewrite(loaded, passes, "upgrade")


def downgrade(model: ModelLike, opset: int) -> ir.Model:
    """``model`` at the lower ai.onnx ``opset``, as ``qlrewrite downgrade --opset N``: a new
    model (the input is not modified). An opset not below the model's raises
    ``InputError``; a node the opset cannot hold exactly raises ``Refusal`` naming it and
    the lowest opset that holds it."""
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise TypeError(f"opset must be an int, not {type(opset).__name__}")
    passes = downgrade_passes(opset)
    loaded = load(model)
    for downgrade_pass in passes:  # InputError, not onnx_ir's PreconditionError
        downgrade_pass.requires(loaded)
    return _rewrite(loaded, passes, "downgrade")


def retarget(
    model: ModelLike,
    *,
    zero_point: str | None = None,
    symmetric: bool = False,
    narrow: bool = False,
    drop_redundant: bool = False,
    split_shared: bool = False,
) -> ir.Model:
    """``model`` retargeted as ``qlrewrite retarget`` (``zero_point``: ``"signed"`` or
    ``"unsigned"``): in place for an ``onnx_ir.Model``. Raises ``Refusal`` naming the
    tensors that cannot be retargeted exactly: a path or ``ModelProto`` is left as it is,
    an ``onnx_ir.Model`` keeps what the steps before the refusal changed (``split_shared``
    runs first; pass a copy)."""
    if zero_point not in (None, "signed", "unsigned"):
        raise InputError(f"zero_point must be 'signed' or 'unsigned', not {zero_point!r}")
    passes = retarget_passes(
        zero_point=zero_point,  # type: ignore[arg-type]
        symmetric=symmetric,
        narrow=narrow,
        drop_redundant=drop_redundant,
        split_shared=split_shared,
    )
    if not passes:
        raise InputError("nothing to do: ask for at least one retarget")
    return _rewrite(load(model), passes, "retarget")


def half(
    model: ModelLike,
    *,
    to: str = "float16",
    block: Iterable[str] = (),
    convert_io: bool = False,
) -> ir.Model:
    """``model`` in float16 (``to="bfloat16"``: bfloat16) with valid Q/DQ, as ``qlrewrite
    half``: Q/DQ scales retyped from opset 19, float32 Q/DQ with Casts below it;
    ``block``: op types kept in float32; inputs and outputs stay float32 unless
    ``convert_io``. In place for an ``onnx_ir.Model``. Raises ``Refusal`` naming a scale
    that rounds to zero, an initializer that overflows."""
    if to not in HALF_TYPES:
        raise InputError(f"to must be one of {', '.join(HALF_TYPES)}, not {to!r}")
    if isinstance(block, str):
        raise TypeError("block must be an iterable of op types, not a string")
    passes = half_passes(to, block=tuple(block), convert_io=convert_io)
    return _rewrite(load(model), passes, "half")


def integer_io(model: ModelLike, *, to: str = "integer") -> ir.Model:
    """``model`` with integer inputs and outputs (``to="integer"``), as ``qlrewrite
    integer-io``: each float input read only by equal per-tensor QuantizeLinear nodes
    and each float output written by a per-tensor DequantizeLinear takes the quantized
    type, its scale and zero point recorded in ``metadata_props``; ``to="float"`` gives
    back the float inputs and outputs recorded there. In place for an
    ``onnx_ir.Model``. Raises ``Refusal`` naming every input or output that cannot be
    rewritten, or metadata this tool did not write or that does not match."""
    if to not in IO_FORMS:
        raise InputError(f"to must be one of {', '.join(IO_FORMS)}, not {to!r}")
    return _rewrite(load(model), integer_io_passes(to), "integer-io")


def info(model: ModelLike, *, target: str | Iterable[str] = ()) -> dict[str, Any]:
    """``qlrewrite info``'s report, the dict ``info --output-format json`` prints: opsets,
    initializers, the Q/DQ, weight-only and QOperator nodes by kind; with ``target``
    (as ``--target``), the QL7xx findings per runtime. Reads no weights."""
    if not isinstance(model, str | os.PathLike | ir.Model | onnx.ModelProto):
        raise TypeError(f"model must be {_TAKES}, not {type(model).__name__}")
    return reports.info_report(model, targets=_targets(target))


def compare(
    first: ModelLike,
    second: ModelLike,
    *,
    runtime: str | Iterable[str] = (),
    inputs: str | os.PathLike | Mapping[str, Any] | None = None,
    input_shape: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 0.0,
    tensors: bool = False,
    timeout: float = VERIFY_TIMEOUT,
    memory: int | None = None,
) -> Comparison:
    """``qlrewrite compare``: both models on the same inputs per runtime (``runtime``:
    ``"ort"``, ``"reference"``, ``"openvino"``, default every one), a
    :class:`~qlrewrite.verify.compare.Comparison` (``.diverges``, ``.runtimes``,
    ``.to_json()``: what ``--output-format json`` prints). ``inputs``: arrays by input
    name, or an .npz file (``--inputs``); else generated with ``seed`` (``input_shape``
    for unknown dimensions); ``tensors``: also the first diverging intermediate tensor;
    ``timeout`` / ``memory`` (bytes): each runtime's child bounded (``--timeout``,
    ``--memory``); a release (``"ort==1.16.3"``) runs in its own environment."""
    shapes = {name: tuple(shape) for name, shape in (input_shape or {}).items()}
    return reports.compare_report(
        first,
        second,
        runtimes=[parse_runtime(r) for r in _codes(runtime, "runtime")],
        inputs=inputs,
        input_shapes=shapes,
        seed=seed,
        rtol=rtol,
        atol=atol,
        tensors=tensors,
        timeout=timeout,
        memory=memory,
    )


def verify_rewrite(
    original: ModelLike,
    rewritten: ModelLike,
    *,
    runs: int = 1,
    seed: int = 0,
    input_shape: Mapping[str, Sequence[int]] | None = None,
    tolerance: float | None = None,
    timeout: float = VERIFY_TIMEOUT,
    semantics_only: bool = False,
    memory: int | None = None,
    releases: Iterable[str] = (),
) -> Verification:
    """``--verify``: ``rewritten`` run against ``original`` in ONNX Runtime on generated
    inputs, as the rewriting commands verify before writing (``runs`` as
    ``--verify-runs``, ``tolerance`` as ``--verify-tolerance``, ``timeout`` as
    ``--verify-timeout``, ``semantics_only`` as ``--verify=semantics``, ``memory`` (bytes)
    as ``--verify-memory``, ``releases`` as ``--verify-on``: runtime releases such as
    ``ort==1.16.3``); the stated bound of the rewrite that returned ``rewritten``
    (:func:`summary_of`) is accepted. Raises
    :class:`~qlrewrite.verify.verify.VerificationFailed` when they differ; differences
    as deployed are a :class:`~qlrewrite.errors.DeploymentWarning`."""
    shapes = {name: tuple(shape) for name, shape in (input_shape or {}).items()}
    options = VerifyOptions(
        runs=runs,
        seed=seed,
        input_shapes=shapes,
        tolerance=tolerance,
        timeout=timeout,
        deployed=not semantics_only,
        memory=memory,
        releases=tuple(releases),
    )
    summary = summary_of(rewritten) if isinstance(rewritten, ir.Model) else None
    results = summary.pass_results if summary is not None else ()
    verification = reports.verify_report(original, rewritten, options, results)
    deployment = verification.deployment
    if deployment is not None and deployment.differs:
        warnings.warn("verify " + "; ".join(deployment.lines()), DeploymentWarning, stacklevel=2)
    return verification
