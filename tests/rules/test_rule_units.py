"""Every rule is one unit (qlrewrite/rules/qlNxx_*.py): its own examples run here.

For each rule in the registry and each of its :class:`~qlrewrite.rules.Example` models:
the bad model gives exactly the rule's code (with every default rule and this one
enabled); the good one does not, and has no error; both good and fixed models pass
onnx.checker and run in ONNX Runtime where the example says so. A rule with a fix
repairs its bad model into one without the code, and a safe fix leaves ONNX Runtime's
outputs bit-identical (``pytest -k QL406`` runs one rule).
The layout is tested too: a rule lives in the module named after its code, and
findings.py stays below rules and passes.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from model_specs import resolve_model

from qlrewrite.checking import render
from qlrewrite.checking.checker import check
from qlrewrite.cli import main
from qlrewrite.findings import Finding
from qlrewrite.passes.commands import fix_passes
from qlrewrite.rules import CHECKS, RULES, Example, RuleCheck
from qlrewrite.targets.spec import parse_targets

ROOT = Path(__file__).resolve().parents[2]
PARAMS = [
    pytest.param(unit, example, id=f"{code}-{example.label}")
    for code, unit in CHECKS.items()
    for example in unit.examples
]


def _save(proto: onnx.ModelProto, folder: Path, example: Example) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in example.files.items():
        (folder / name).write_bytes(data)
    path = folder / "model.onnx"
    path.write_bytes(proto.SerializeToString())  # external references kept as written
    return path


def _codes(path: Path, code: str, targets: tuple[str, ...] = ()) -> list[str]:
    report = check(path, select=["ALL", code], targets=targets)
    assert report.load_error is None, report.load_error
    return sorted({f.rule for f in report.findings})


def _ort_outputs(path: Path, *, optimized: bool = True) -> list[np.ndarray]:
    """The model's outputs in ONNX Runtime's CPU provider, on inputs of ones (``optimized``:
    the default session, else ORT_DISABLE_ALL: the graph as written)."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {}
    for value in onnx.load(path, load_external_data=False).graph.input:
        tensor_type = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        feeds[value.name] = np.ones(shape, dtype=dtype)
    return session.run(None, feeds)


def _valid(path: Path, example: Example) -> None:
    """The model at ``path`` passes onnx.checker and runs in ONNX Runtime (as asked)."""
    if example.checker:
        onnx.checker.check_model(str(path), full_check=True)
    if example.ort:
        _ort_outputs(path)


def test_every_rule_has_examples() -> None:
    missing = [code for code, unit in CHECKS.items() if not unit.examples]
    assert not missing, f"rules without a bad / good example: {missing}"


@pytest.mark.parametrize(("unit", "example"), PARAMS)
def test_bad_gives_exactly_the_code_and_good_does_not(
    unit: RuleCheck, example: Example, tmp_path: Path
) -> None:
    code = unit.rule.code
    bad = _save(resolve_model(example.bad), tmp_path / "bad", example)
    assert _codes(bad, code, example.targets) == [code]
    good = _save(resolve_model(example.good), tmp_path / "good", example)
    report = check(good, select=["ALL", code], targets=example.targets)
    assert code not in {f.rule for f in report.findings}, report.findings
    assert not report.errors, report.errors
    _valid(good, example)


FIX_PARAMS = [p for p in PARAMS if p.values[0].fix is not None and p.values[1].fixable]


def test_an_unfixable_example_is_of_a_rule_with_a_fix() -> None:
    """``fixable=False`` marks the findings a rule's fix does not cover: on a rule with no
    fix it would say nothing."""
    wrong = [p.id for p in PARAMS if not p.values[1].fixable and p.values[0].fix is None]
    assert not wrong, wrong


@pytest.mark.parametrize(("unit", "example"), FIX_PARAMS)
def test_fix_repairs_the_bad_example(unit: RuleCheck, example: Example, tmp_path: Path) -> None:
    code = unit.rule.code
    path = _save(resolve_model(example.bad), tmp_path, example)
    findings = check(path, select=["ALL", code], targets=example.targets).findings
    hits = [f for f in findings if f.rule == code]
    assert hits and all(f.fix == unit.rule.fix for f in hits)
    model = ir.serde.deserialize_model(onnx.load(path))
    runtimes = parse_targets(example.targets) if example.targets else ()
    for fix_pass in fix_passes(findings, unsafe=True, targets=runtimes):
        model = fix_pass(model).model
    out = _save(ir.serde.serialize_model(model), tmp_path / "fixed", example)
    assert code not in _codes(out, code, example.targets)
    _valid(out, example)
    # A target rule's bad model is one the runtime refuses: nothing to compare with, the
    # fixed model runs (above).
    if unit.rule.fix == "safe" and example.ort and not example.targets:
        _same_bits(path, out)


def _same_bits(bad: Path, fixed: Path) -> None:
    """A safe fix: ONNX Runtime computes the same bits, with and without its graph
    optimizations; where its default session miscomputes the bad model (QL505), the fixed
    model's default session computes what the bad graph means (ORT_DISABLE_ALL)."""
    meant = _ort_outputs(bad, optimized=False)
    default = _ort_outputs(bad)
    if all(a.tobytes() == b.tobytes() for a, b in zip(meant, default, strict=True)):
        meant = default
    for optimized in (True, False):
        for before, after in zip(meant, _ort_outputs(fixed, optimized=optimized), strict=True):
            assert before.dtype == after.dtype and before.shape == after.shape
            assert before.tobytes() == after.tobytes()


def test_a_fix_decides_from_the_findings_fields_not_its_text() -> None:
    """QL201's fix (the upgrade to opset 13) applies to ``axis`` below 13, whatever the
    message and hint say; not to an attribute the upgrade does not bring."""
    applies = CHECKS["QL201"].fix.applies  # type: ignore[union-attr]
    axis = Finding("QL201", "error", "", op_type="DequantizeLinear", opset=12, attribute="axis")
    assert applies(axis)
    assert not applies(dataclasses.replace(axis, attribute="saturate", hint="upgrade --opset 13"))
    assert not applies(dataclasses.replace(axis, opset=13))
    assert not applies(dataclasses.replace(axis, domain="com.microsoft"))


# --------------------------------------------------------------------------- layout

_CLAIM = re.compile(r"^QL(\d{3})(?:-QL(\d{3}))?$")
#: The node kinds a rule in each folder may read (``qdq/`` rules may also read the others).
_FOLDER_KINDS = {
    "weight_only": {"matmul-nbits", "gather-block-quantized"},
    "qoperator": {"qoperator"},
}


def _claimed_codes(module: str) -> set[str]:
    """The codes a rule module's docstring opens with (``QL401-QL412, QL420:``), expanded
    over the codes the registry holds."""
    doc = (importlib.import_module(module).__doc__ or "").split(":", 1)[0]
    claimed: set[str] = set()
    for part in doc.split(", "):
        match = _CLAIM.match(part.strip())
        assert match, f"{module}'s docstring does not open with its codes: {doc!r}"
        low, high = int(match[1]), int(match[2] or match[1])
        claimed |= {code for code in CHECKS if low <= int(code[2:]) <= high}
    return claimed


def test_each_rule_module_opens_with_its_codes_and_no_other_claims_them() -> None:
    """A rule is found from its code: the module whose docstring's codes include it (and
    ``qlrewrite rules CODE`` names it); no two modules claim one code."""
    modules = {unit.module for unit in CHECKS.values()}
    claims = {m: _claimed_codes(m) for m in modules}
    for code, unit in CHECKS.items():
        owners = [m for m, codes in claims.items() if code in codes]
        assert owners == [unit.module], (code, owners)
        assert unit.rule.source == unit.module.replace(".", "/") + ".py"
        assert (ROOT / unit.rule.source).is_file()


def test_each_rule_module_sits_in_the_folder_of_the_kinds_it_reads() -> None:
    for code, unit in CHECKS.items():
        folder = unit.module.split(".")[2]
        assert folder in ("qdq", "weight_only", "qoperator", "model", "targets"), unit.module
        if folder in _FOLDER_KINDS:
            assert {k.name for k in unit.kinds} <= _FOLDER_KINDS[folder], (code, unit.module)
        assert (folder == "targets") == unit.scope.startswith("target"), (code, unit.module)


def test_the_catalogue_says_where_each_unit_and_its_test_live() -> None:
    """One step from ``qlrewrite rules CODE`` or docs/rules.md to the rule's file."""
    markdown = render.rules_markdown()
    for code, entry in RULES.items():
        assert f"Declared in [`{entry.source}`](../{entry.source})" in markdown
        assert f"`pytest -k {code}`" in markdown
        assert f"Source: {entry.source} " in render.rule_text(entry)
    assert f"Source: {RULES['QL406'].source}" in _cli("rules", "QL406")


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_findings_and_rules_stay_below_the_fix_machinery() -> None:
    """findings.py imports neither rules nor passes; rules never import passes (a rule's
    fix lives with its rule, the machinery that applies fixes sits above)."""
    below = _imports(ROOT / "qlrewrite" / "findings.py")
    assert not {m for m in below if m.startswith(("qlrewrite.rules", "qlrewrite.passes"))}
    for path in (ROOT / "qlrewrite" / "rules").glob("*.py"):
        assert not {m for m in _imports(path) if m.startswith("qlrewrite.passes")}, path
