"""Every file a rewrite writes, decided once before anything is written: the output
plan.

:func:`plan_outputs` takes what the run was asked (the input, ``-o`` / ``--in-place``,
``--report``) and the files the input reads, and returns an :class:`OutputPlan`: the
output model's path (``<stem>.<command>.onnx`` beside the input by default), the report's,
and the input's files the replaced output's cleanup must leave. It refuses, before any
weight is read or file written: an output that is the input without ``--in-place``, or
that would overwrite a file the input reads; a report that would replace the input, a
file it reads, the output or the output's data file; a name the file system cannot hold.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from qlrewrite.errors import InputError
from qlrewrite.io import atomic, model_io, output_guard

__all__ = ["OutputPlan", "default_output", "model_output", "plan_outputs", "resolve_output"]


@dataclasses.dataclass(frozen=True)
class OutputPlan:
    """The files one rewrite writes, and what it must leave."""

    input: Path
    target: Path  # the output model (the input itself with --in-place)
    report: Path | None  # --report
    keep: tuple[Path, ...]  # files the input reads that the output's cleanup leaves
    in_place: bool


def plan_outputs(
    input_path: Path,
    reads: Sequence[Path],
    *,
    command: str,
    output: Path | None = None,
    in_place: bool = False,
    report: Path | None = None,
) -> OutputPlan:
    """The run's :class:`OutputPlan`, each path checked (see the module); ``reads``: the
    files the input reads, the model file first (:func:`~qlrewrite.io.model_io.files_read`)."""
    target = resolve_output(input_path, output, in_place, command)
    _refuse_overwriting_input(reads, target, in_place)
    if report is not None:
        _refuse_report_path(report, reads, target)
    keep = () if in_place else tuple(reads)
    return OutputPlan(input_path, target, report, keep, in_place)


def default_output(input_path: Path, command: str) -> Path:
    """``<stem>.<command>.onnx`` beside the input; a stem too long for the file system's
    names is shortened as data file names are (:func:`~qlrewrite.io.atomic.fitted_stem`)."""
    suffix = f".{command}.onnx"
    folder = input_path.absolute().parent
    stem = atomic.fitted_stem(input_path.stem, folder, len(os.fsencode(suffix)))
    return input_path.with_name(stem + suffix)


def resolve_output(input_path: Path, output: Path | None, in_place: bool, command: str) -> Path:
    """Where to write: refuses to touch the input unless ``in_place``, and a name the
    file system cannot hold."""
    if in_place:
        if output is not None and not model_io.same_file(output, input_path):
            raise InputError("--in-place and -o name different files; give one of them")
        return input_path
    target = output if output is not None else default_output(input_path, command)
    atomic.refuse_long_name(target, "the output")
    if target.exists() and model_io.same_file(target, input_path):
        raise InputError(
            f"{target}: the output is the input; use --in-place to overwrite the input"
        )
    return target


def _refuse_overwriting_input(reads: Sequence[Path], target: Path, in_place: bool) -> None:
    """The output may not be a file the input reads (its external data, Constant-node
    data, attribute data, anywhere); in place, the input model itself is the output."""
    for read in reads[0 if not in_place else 1 :]:
        if model_io.same_file(target, read):
            raise InputError(
                f"{target}: the output would overwrite the input's external data "
                "(a file the input reads)"
            )


def _refuse_report_path(report: Path, reads: Sequence[Path], target: Path) -> None:
    """The report may not replace the input, a file it reads, the output or its data."""
    atomic.refuse_long_name(report, "the report")
    if model_io.same_file(report, reads[0]):
        raise InputError(f"{report}: the report would overwrite the input model")
    if any(model_io.same_file(report, read) for read in reads[1:]):
        raise InputError(
            f"{report}: the report would overwrite the input's external data "
            "(a file the input reads)"
        )
    output_guard.refuse_colliding(
        [model_output("the output", target), output_guard.Output("the report", report)]
    )


def model_output(label: str, path: Path) -> output_guard.Output:
    """A model a run writes, as :func:`~qlrewrite.io.output_guard.refuse_colliding` compares
    it: its file and the names its external data file may take."""
    folder = path.absolute().parent
    return output_guard.Output(
        label, path, data=lambda name: atomic.is_data_name(name, path.name, folder)
    )
