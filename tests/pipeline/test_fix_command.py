"""`fix` as a library command (issue 31): `passes.commands.fix_passes` and `api.fix`; one
rewrite per model for `check --fix` / `--diff`; what an upgrade or a fix repairs read
from the rules' own declarations (no second list, no guessed label); passes composed in
`passes/commands.py`, not inside each other."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from qdq_models import DQ, DT, qdq_model

import qlrewrite
from qlrewrite import pipeline
from qlrewrite.cli import main
from qlrewrite.errors import InputError
from qlrewrite.passes.commands import fix_passes, upgrade_passes
from qlrewrite.passes.convert.domain import ConvertDomainPass
from qlrewrite.passes.fix import FixPass
from qlrewrite.passes.imports import ImpliedImportsPass
from qlrewrite.passes.upgrade import UpgradePass
from qlrewrite.pipeline import fix_files
from qlrewrite.rules import CHECKS
from qlrewrite.toolkit import implied_imports

MS = "com.microsoft"


pytestmark = pytest.mark.usefixtures("in_tmp_folder")


def _ms_not_imported() -> onnx.ModelProto:
    """QL103 (a warning with a safe fix): a com.microsoft DQ, no com.microsoft import."""
    return qdq_model(DQ, 13, domain=MS, x_type=DT.INT8, imports={"": 13})


def _opset12_per_axis() -> onnx.ModelProto:
    """QL402 alone (no axis attribute, so no QL201): its fix is an upgrade to 13."""
    return qdq_model(DQ, 12, x_shape=(3, 4), scale_shape=(4,))


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *(str(a) for a in args)])
    assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def rewrites(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The ``dry_run`` of every :func:`pipeline.rewrite` call made."""
    calls: list[bool] = []
    real = pipeline.rewrite

    def counted(*args, **kwargs):
        calls.append(kwargs.get("dry_run", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(fix_files, "rewrite", counted)  # the one check --fix calls
    return calls


def test_fix_runs_the_rewrite_once(tmp_path: Path, rewrites: list[bool]) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_ms_not_imported(), model)
    code, out, err = _run(model, "--fix")
    assert code == 0, out + err
    assert rewrites == [False]  # one real run (it was a dry run, then the real one)
    imports = {o.domain: o.version for o in onnx.load(tmp_path / "m.fix.onnx").opset_import}
    assert imports == {"": 13, MS: 1}
    assert "fixed" in err and "[QL103 x1]" in err


def test_diff_is_the_one_run_without_writing(tmp_path: Path, rewrites: list[bool]) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_ms_not_imported(), model)
    code, out, _ = _run(model, "--diff")
    assert code == 1 and "QL103" in out and "opset import added: com.microsoft 1" in out
    assert rewrites == [True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_fix_that_changes_nothing_writes_nothing_in_its_one_run(
    tmp_path: Path, rewrites: list[bool]
) -> None:
    """A [1] scale that is a graph input cannot become a scalar: the run writes nothing."""
    proto = qdq_model(
        DQ, 13, x_type=DT.INT8, scale_shape=(1,), scale=[0.5], zp_shape=(), scale_as="input"
    )
    model = tmp_path / "m.onnx"
    onnx.save(proto, model)
    code, _, err = _run(model, "--fix", "--extend-select", "QL406")
    assert code == 0 and "fixed" not in err
    assert rewrites == [False]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_an_upgrade_fix_is_labelled_with_the_codes_that_asked_for_it(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_opset12_per_axis(), model)
    code, out, _ = _run(model, "--diff", "--unsafe-fixes")
    assert code == 1
    assert "QL402 model: ai.onnx opset upgraded to 13" in out
    assert "QL201" not in out  # the model has no QL201 finding (it was the label of every upgrade)


def test_fix_passes_compose_the_upgrade_for_the_codes_that_declare_it() -> None:
    findings = qlrewrite.check(_opset12_per_axis()).findings
    assert fix_passes(findings) == []  # the upgrade is unsafe
    passes = fix_passes(findings, unsafe=True)
    assert [type(p) for p in passes] == [UpgradePass, ConvertDomainPass, FixPass]
    assert passes[0].opset == 13 and passes[0].fixing == ("QL402",)


def test_what_an_upgrade_repairs_is_read_from_the_rules() -> None:
    declared = {code for code, unit in CHECKS.items() if unit.upgrade_repairs}
    by_fix = {c for c, u in CHECKS.items() if u.fix is not None and u.fix.upgrade_opset}
    assert by_fix == {"QL201", "QL402"} and by_fix <= declared
    # the codes the upgrade repaired when they were listed by hand (none lost)
    assert declared == {"QL104", "QL201", "QL301", "QL302", "QL303", "QL305", "QL402", "QL405"}
    assert set(UpgradePass(21).repairs_rules) == declared


def test_the_implied_import_is_added_once_whoever_repairs_it() -> None:
    model = ir.serde.deserialize_model(_ms_not_imported())
    fixes = fix_passes(qlrewrite.check(model).findings)
    assert [type(p) for p in pipeline.with_implied_imports(fixes, implied_imports(model))] == [
        FixPass
    ]
    others = fix_passes([])  # nothing to fix, e.g. QL103 ignored: the import still comes
    assert [type(p) for p in pipeline.with_implied_imports(others, implied_imports(model))] == [
        ImpliedImportsPass
    ]


def test_upgrade_pass_alone_changes_the_opset_only_and_the_command_composes() -> None:
    proto = qdq_model(DQ, 13, domain=MS, x_type=DT.INT8)
    alone = UpgradePass(21)(ir.serde.deserialize_model(proto)).model
    assert {n.domain for n in alone.graph} == {MS}
    model = ir.serde.deserialize_model(proto)
    for rewrite_pass in upgrade_passes(21):
        model = rewrite_pass(model).model
    assert {n.domain for n in model.graph} == {""} and model.opset_imports == {"": 21}


def test_api_fix_repairs_what_check_fix_repairs() -> None:
    model = ir.serde.deserialize_model(_ms_not_imported())
    assert [f.rule for f in qlrewrite.check(model).findings] == ["QL103"]
    assert qlrewrite.fix(model) is model  # in place
    assert model.opset_imports == {"": 13, MS: 1}
    assert not qlrewrite.check(model).findings
    ignored = qlrewrite.fix(_ms_not_imported(), ignore="QL103")  # not reported: not fixed
    assert ignored.opset_imports == {"": 13}


def test_api_fix_upgrade_only_with_unsafe() -> None:
    """Without ``unsafe`` no fix repairs the per-axis errors below opset 13: refused, as
    ``check --fix`` writes nothing for them."""
    with pytest.raises(pipeline.FindingsRefusal, match="no fix repairs") as refused:
        qlrewrite.fix(_opset12_per_axis())
    assert refused.value.findings and all(f.fix == "unsafe" for f in refused.value.findings)
    fixed = qlrewrite.fix(_opset12_per_axis(), unsafe=True)
    assert fixed.opset_imports == {"": 13} and not qlrewrite.check(fixed).errors


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        ({"unsafe": "yes"}, TypeError, "unsafe must be a bool"),
        ({"select": 4}, TypeError, "select must be a rule code"),
        ({"ignore": "QL77"}, InputError, "QL77"),
    ],
)
def test_api_fix_arguments(kwargs: dict, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle):
        qlrewrite.fix(_ms_not_imported(), **kwargs)


def test_api_fix_refuses_errors_no_fix_repairs_and_keeps_warnings() -> None:
    """A cycle (QL611, no fix) is refused with its finding, as the CLI exits 1 on it; a
    model whose only findings are warnings without a fix comes back as it was."""
    s = onnx.helper.make_tensor("s", onnx.TensorProto.FLOAT, [], [0.1])
    z = onnx.helper.make_tensor("z", onnx.TensorProto.INT8, [], [0])
    nodes = [
        onnx.helper.make_node("QuantizeLinear", ["a", "s", "z"], ["q"], name="q"),
        onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="d"),
        onnx.helper.make_node("Add", ["x", "d"], ["a"], name="add"),
    ]
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        nodes,
        "g",
        [value("x", onnx.TensorProto.FLOAT, [4])],
        [value("d", onnx.TensorProto.FLOAT, [4])],
        [s, z],
    )
    cyclic = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 21)], ir_version=10
    )
    with pytest.raises(pipeline.FindingsRefusal) as refused:
        qlrewrite.fix(cyclic)
    assert [f.rule for f in refused.value.findings] == ["QL611"]
    float_only = qdq_model(DQ, 21)
    del float_only.graph.node[:]  # QL607 (a warning, no fix): nothing to refuse
    float_only.graph.node.append(onnx.helper.make_node("Relu", ["x"], ["y"], name="r"))
    model = ir.serde.deserialize_model(float_only)
    assert qlrewrite.fix(model) is model


def test_api_fix_of_what_is_not_a_model() -> None:
    with pytest.raises(TypeError, match="model must be"):
        qlrewrite.fix(3)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no such file"):
        qlrewrite.fix("missing.onnx")
