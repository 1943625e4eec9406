"""The measured tables as the target tests read them: every table's name and spec, what a
raw row says check must flag, and the cases whose check disagrees with their rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import onnx

from qlrewrite.checking.checker import check
from qlrewrite.targets.tables import ort_releases, table

__all__ = ["TABLES", "disagreements", "errors", "row_wrong", "spec_of"]

#: Every ONNX Runtime release's table, then OpenVINO's.
TABLES = [f"ort-{a}.{b}" for a, b in ort_releases()] + ["openvino"]
_WRONG = ("miscomputes", "fails at run")


def spec_of(name: str) -> str:
    """The ``--target`` of a table: ``ort==1.20``, ``openvino``."""
    return "openvino" if name == "openvino" else name.replace("ort-", "ort==")


def row_wrong(row: Any) -> bool:
    """A raw row: refused at load or at run (but for the IR version or an opset: QL701 /
    QL702's), or run and computed otherwise than ORT_DISABLE_ALL or the ONNX reference."""
    if not row.get("runs"):
        return row.get("reason") not in ("ir", "opset")
    return row.get("optimized") in _WRONG or row.get("reference") in _WRONG


def errors(path: Path, target: str, select: list[str]) -> list[Any]:
    """The error findings of ``check --target`` (rules ``select``) on the model at ``path``."""
    report = check(path, targets=[target], select=select)
    assert report.load_error is None, report.load_error
    return report.errors


def disagreements(
    cases: Iterable[Any], folder: Path, select: list[str], wrong: Callable[[Any], bool] = row_wrong
) -> list[tuple[str, str, bool]]:
    """(table, key, what its row says) of each case and table where ``check --target`` errs
    otherwise than ``wrong`` of its row says."""
    found = []
    for index, case in enumerate(cases):
        path = folder / f"c{index}.onnx"
        onnx.save(case.model, path)
        for name in TABLES:
            expected = wrong(table(name).forms[case.key])
            if bool(errors(path, spec_of(name), select)) != expected:
                found.append((name, case.key, expected))
    return found
