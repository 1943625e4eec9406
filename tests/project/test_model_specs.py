"""The rules' examples are data (:class:`~qlrewrite.rules.model_spec.ModelSpec`), built by
the tests' builders (tests/model_specs.py): every spec names a builder that exists, with
arguments that fit it; a name nobody defined fails clearly; and the package itself builds
no test models (the builders live in tests/, not in the wheel)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_specs import BUILDERS, UnknownBuilderError, bind, resolve, resolve_model

from qlrewrite.rules import CHECKS, Example
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "qlrewrite"
EXAMPLES = [
    pytest.param(spec, id=f"{code}-{example.label}-{which}")
    for code, unit in CHECKS.items()
    for example in unit.examples
    for which, spec in (("bad", example.bad), ("good", example.good))
]


@pytest.mark.parametrize("spec", EXAMPLES)
def test_every_example_spec_names_a_known_builder_with_fitting_arguments(spec: object) -> None:
    assert isinstance(spec, ModelSpec), f"an Example's models are ModelSpec data: {spec!r}"
    bind(spec)  # raises on an unknown builder (nested ones too) or arguments that do not fit
    assert spec.builder in BUILDERS


def test_an_example_takes_only_specs() -> None:
    with pytest.raises(TypeError, match="'callable': bad and good are ModelSpec data"):
        Example("callable", lambda: None, ModelSpec("qdq"))  # type: ignore[arg-type]


def test_an_unknown_builder_fails_clearly() -> None:
    spec = ModelSpec("edited", ModelSpec("qdq", DQ, 21), ModelSpec("no_such_edit", 2))
    with pytest.raises(UnknownBuilderError, match="no builder named 'no_such_edit'"):
        bind(spec)
    with pytest.raises(UnknownBuilderError, match=r"tests/model_specs.py BUILDERS \(known: "):
        resolve(ModelSpec("no_such_model"))


def test_arguments_that_do_not_fit_the_builder_fail_before_building() -> None:
    with pytest.raises(TypeError, match="does not fit qdq"):
        bind(ModelSpec("qdq", DQ, 21, no_such_argument=1))
    with pytest.raises(TypeError, match="gives a function, not a model"):
        resolve_model(ModelSpec("cut_inputs", 2))


@pytest.mark.parametrize("value", [np.zeros(3), lambda: None, {1: 2}, object()])
def test_a_spec_holds_only_plain_values(value: object) -> None:
    with pytest.raises(TypeError, match="plain values and nested specs"):
        ModelSpec("qdq", DQ, 21, attrs=value)


def test_a_spec_is_frozen_and_reads_as_written() -> None:
    attrs = {"axis": 0}
    shape = [4, 3]
    spec = ModelSpec("qdq", DQ, 12, x_type=DT.INT8, x_shape=shape, attrs=attrs)
    attrs["axis"] = 1
    shape.append(2)  # the caller's dict and list are not the spec's
    assert spec == ModelSpec("qdq", DQ, 12, x_type=DT.INT8, x_shape=(4, 3), attrs={"axis": 0})
    assert repr(spec) == (
        "ModelSpec('qdq', 'DequantizeLinear', 12, x_type=DT.INT8, x_shape=(4, 3), "
        "attrs={'axis': 0})"
    )
    with pytest.raises(AttributeError):
        spec.builder = "matmul_nbits"  # type: ignore[misc]


def test_resolving_builds_the_nested_specs_first() -> None:
    spec = ModelSpec("edited", ModelSpec("qoperator", "QLinearMatMul"), ModelSpec("cut_inputs", 7))
    proto = resolve_model(spec)
    assert isinstance(proto, onnx.ModelProto)
    assert len(proto.graph.node[0].input) == 7  # QLinearMatMul has 8 inputs
    array = resolve(ModelSpec("array", 0, DT.INT8, shape=(0, 2)))
    assert array.dtype == np.int8 and array.shape == (0, 2)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, and ``onnx.helper`` when it reads that attribute."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "onnx":
            found.add(f"onnx.{node.attr}")
    return found


def test_the_package_builds_no_test_models() -> None:
    """The builders (onnx.helper code) live in tests/: no module of the package is one or
    imports one, and no rule module writes models with onnx.helper."""
    for gone in ("qlrewrite.rules.example_models", "qlrewrite.rules.qoperator_models"):
        assert importlib.util.find_spec(gone) is None, gone
    builders = {"example_models", "qoperator_models", "model_specs", "qdq_models", "nbits_models"}
    for path in sorted(PACKAGE.rglob("*.py")):
        imported = _imports(path)
        assert not {name.split(".")[0] for name in imported} & builders, path
        if path.parent.name == "rules":
            writes = {"onnx.helper", "onnx.numpy_helper"} & imported
            assert not writes, f"{path.relative_to(ROOT)} builds models with {writes}"
