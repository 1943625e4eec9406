"""Passes as families, each with its own result type (issue 40): ``passes/results.py``
holds only what every pass shares (the base :class:`RewritePassResult` and the marks),
each family's result type lives beside its pass, and the old import path still gives
every name it gave."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from qlrewrite.passes import results

RESULTS = Path(results.__file__)

#: Every result type a pass returns, and its family (a folder of passes/, or the flat
#: module of a pass of its own).
FAMILIES = {
    "ConvertResult": "convert",
    "DowngradeResult": "downgrade",
    "FixResult": "fix",
    "FoldResult": "fold",
    "HalfResult": "half",
    "ImportsResult": "imports",
    "IntegerIOResult": "integer_io",
    "NBitsResult": "nbits",
    "QOperatorResult": "convert",
    "RetargetResult": "retarget",
    "UpgradeResult": "upgrade",
}


def test_the_framework_module_defines_only_the_base() -> None:
    tree = ast.parse(RESULTS.read_text())
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert classes == {"RewritePassResult", "ConvertsCustomOps", "RepairsFindings"}
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith("qlrewrite.passes")}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_result_type_lives_with_its_pass_and_keeps_its_old_path(name: str) -> None:
    kind = getattr(results, name)  # the old path: qlrewrite.passes.results.<name>
    family = f"qlrewrite.passes.{FAMILIES[name]}"
    assert kind.__module__ == family or kind.__module__.startswith(family + ".")
    assert issubclass(kind, results.RewritePassResult) and dataclasses.is_dataclass(kind)
    assert name in dir(results)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchResult"):
        results.NoSuchResult  # noqa: B018
