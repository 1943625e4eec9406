"""The Python API: ``qlrewrite.load``, ``save``, ``check``, ``fix``, ``fold``, ``convert``,
``upgrade``.

Every function takes a model as a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``
(anything else is a ``TypeError`` saying so), runs what the command of the same name runs
(:mod:`qlrewrite.passes.commands`) and raises instead of printing: ``InputError`` for a
model that cannot be read or a bad argument (its message names the parameter), ``Refusal``
for a rewrite the target cannot express. The rewrites refuse and check as the commands
do, through the same code (:func:`qlrewrite.pipeline.rewrite_model`): an input with error
findings, or a rewrite whose output ONNX's checker or ``check`` would reject, raises
:class:`~qlrewrite.pipeline.FindingsRefusal` (``.findings``) or ``Refusal``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import onnx
import onnx_ir as ir

from qlrewrite import opsets, pipeline
from qlrewrite.checking import checker
from qlrewrite.errors import InputError
from qlrewrite.findings import Report
from qlrewrite.io import model_io
from qlrewrite.passes.commands import (
    convert_passes,
    downgrade_passes,
    fix_passes,
    fold_passes,
    retarget_passes,
    upgrade_passes,
)
from qlrewrite.passes.convert.domain import TARGETS, target
from qlrewrite.passes.fold.tensor import FLOAT16_MODES

__all__ = [
    "ModelLike",
    "check",
    "convert",
    "downgrade",
    "fix",
    "fold",
    "load",
    "retarget",
    "save",
    "upgrade",
]

#: What every function of the API takes as a model.
ModelLike = ir.Model | onnx.ModelProto | str | os.PathLike

_TAKES = "a path, an onnx.ModelProto or an onnx_ir.Model"


def _one_of(values: Sequence[str]) -> str:
    """``'a' or 'b'`` for messages."""
    return " or ".join(f"'{v}'" for v in values)


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


def check(
    model: ModelLike,
    *,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
) -> Report:
    """The findings of ``qlrewrite check`` on ``model``, as a :class:`~qlrewrite.findings.Report`
    (``.findings``, ``.errors``, ``.warnings``, ``.suppressed``, ``.to_json()``).

    ``select`` / ``ignore``: a rule code or prefix (``"QL4"``) or a list of them, as
    ``--select`` / ``--ignore``. A model that cannot be read raises ``InputError``, so
    ``not report.errors`` never passes a missing model.
    """
    select, ignore = _codes(select, "select"), _codes(ignore, "ignore")
    if isinstance(model, str | os.PathLike | ir.Model | onnx.ModelProto):
        report = checker.check(
            model, select=select, ignore=ignore, per_node_ignores=per_node_ignores
        )
    else:
        raise TypeError(f"model must be {_TAKES}, not {type(model).__name__}")
    if report.load_error is not None:
        where = report.path if report.path is not None else "model"
        raise InputError(f"{where}: {report.load_error}")
    return report


def fix(
    model: ModelLike,
    *,
    unsafe: bool = False,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    per_node_ignores: Mapping[str, Sequence[str]] | None = None,
) -> ir.Model:
    """``model`` with the findings of :func:`check` (same ``select``, ``ignore``,
    ``per_node_ignores``) repaired as ``qlrewrite check --fix`` repairs them; with
    ``unsafe``, as ``--fix --unsafe-fixes``. The fixes are the rules' own
    (:func:`qlrewrite.passes.commands.fix_passes`). An ``onnx_ir.Model`` is fixed in
    place and returned, unless a fix is an upgrade (QL201 / QL402 below opset 13, unsafe):
    then the result is a new model. Warnings without a fix stay: call :func:`check` on the
    result to see them. As ``check --fix`` (which then writes nothing and exits 1), it
    refuses an input with error findings no fix repairs, whether or not other findings
    had a fix, and an output ONNX's checker or our check would reject
    (``FindingsRefusal`` / ``Refusal``)."""
    if not isinstance(unsafe, bool):
        raise TypeError(f"unsafe must be a bool, not {type(unsafe).__name__}")
    loaded = load(model)
    report = check(loaded, select=select, ignore=ignore, per_node_ignores=per_node_ignores)
    passes = fix_passes(report.findings, unsafe=unsafe)
    if passes:
        return _rewrite(loaded, passes, "fix")
    pipeline.refuse_errors(report, "model", "error finding(s) no fix repairs")
    return loaded


def _run(model: ir.Model, passes: Sequence[ir.passes.PassBase]) -> ir.Model:
    """``passes`` on ``model`` without the checks (the imports ONNX Runtime implies added
    first); a refusal raised inside a pass reaches the caller as itself."""
    rewritten, _ = pipeline.run_passes(model, pipeline.with_implied_imports(model, passes))
    return rewritten


def _rewrite(model: ir.Model, passes: Sequence[ir.passes.PassBase], command: str) -> ir.Model:
    """``passes`` on ``model`` as the command ``command`` runs them: the input refused
    when it has error findings no pass repairs, the output when ONNX's checker or our
    check rejects it (:func:`qlrewrite.pipeline.rewrite_model`)."""
    return pipeline.rewrite_model(model, passes, command=command).model


def fold(
    model: ModelLike,
    *,
    keep_dq: bool = False,
    float16: str = "exact",
    dequantize_weights: bool = False,
    bias_only: bool = False,
) -> ir.Model:
    """``model`` with its constant Q/DQ folded, as ``qlrewrite fold``: an ``onnx_ir.Model``
    is folded in place and returned. Values are computed lazily, when saved or read.
    ``bias_only``: only the int32 bias DequantizeLinear (``fold --bias-only``)."""
    if float16 not in FLOAT16_MODES:
        raise InputError(f"float16 must be {_one_of(FLOAT16_MODES)}, not {float16!r}")
    if keep_dq and bias_only:
        raise InputError("keep_dq and bias_only fold disjoint sets: give one")
    passes = fold_passes(
        keep_dq=keep_dq,
        float16=float16,
        dequantize_weights=dequantize_weights,
        bias_only=bias_only,
    )
    return _rewrite(load(model), passes, "fold")


def convert(
    model: ModelLike,
    to: str,
    *,
    allow_float16: bool = False,
    accuracy_level: int = 0,
    include_8bit: bool = False,
) -> ir.Model:
    """``model`` converted as ``qlrewrite convert --to TO`` (``"onnx"`` or
    ``"com.microsoft"``; ``include_8bit`` as ``--include-8bit``): in place for an
    ``onnx_ir.Model``. Raises ``Refusal`` when a node
    cannot be expressed in the target: a path or ``ModelProto`` is left as it is, an
    ``onnx_ir.Model`` keeps what the steps before the refusal changed (pass a copy)."""
    if target(to) is None:
        raise InputError(f"to must be {_one_of(TARGETS)}, not {to!r}")
    levels = opsets.ACCURACY_LEVELS
    if accuracy_level not in levels:
        raise InputError(
            f"accuracy_level must be {levels[0]} to {levels[-1]}, not {accuracy_level!r}"
        )
    if not isinstance(include_8bit, bool):
        raise TypeError(f"include_8bit must be a bool, not {type(include_8bit).__name__}")
    if target(to) == "onnx" and (include_8bit or accuracy_level):
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
