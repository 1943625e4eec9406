"""`qlrewrite check --fix / --diff / --unsafe-fixes`: each safe fix proven with --verify
(ONNX Runtime's outputs bit-identical) on the models ORT's quantizer writes and on models
made for one rule; the same safety as the rewriting commands; the catalogue says which
rules are fixable."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import CONFIGS, INVALID_CONFIGS, quantized
from qdq_models import DQ, DT, qdq_model

from qlrewrite.checking import render
from qlrewrite.checking.checker import check_path
from qlrewrite.checking.formats import sarif
from qlrewrite.cli import main
from qlrewrite.passes.fix import FIXES, fixable
from qlrewrite.rules import RULES

pytest.importorskip("onnxruntime")


pytestmark = pytest.mark.usefixtures("in_tmp_folder")


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check", *(str(a) for a in args)])
    assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def _rules(path: Path) -> list[str]:
    report = check_path(path)
    assert report.load_error is None, report.load_error
    return [f.rule for f in report.findings]


def _fixable_configs() -> list[str]:
    return [c for c in CONFIGS if c not in INVALID_CONFIGS]


@pytest.mark.parametrize("name", _fixable_configs())
def test_every_safe_fix_of_ort_quantizer_models_verifies_exact(tmp_path: Path, name: str) -> None:
    model = tmp_path / f"{name}.onnx"
    onnx.save(quantized(name), model)
    before = check_path(model).findings
    safe = fixable(before)
    out = tmp_path / "fixed.onnx"
    code, _, err = _run(
        model,
        "--fix",
        "--verify",
        "--fix-output",
        out,
        "--verify-runs",
        "2",
        "--extend-select",
        "QL406",
    )
    if not safe:
        assert not out.exists() and "fixed " not in err
        return
    assert out.exists(), err
    assert "verify: exact" in err and f"fixed {model} -> {out}" in err
    remaining = _rules(out)
    assert not set(remaining) & {f.rule for f in safe}  # every fixable finding is gone
    assert remaining == [f.rule for f in before if f not in safe]
    assert _rules(model) == [f.rule for f in before]  # the input is untouched
    assert code == 0  # what remains of these models is warnings
    if not remaining:
        assert _run(out, "--strict")[0] == 0  # a clean check


def test_ort_quantizer_fixable_findings_are_the_ones_users_meet() -> None:
    """QL406 on every default-settings CNN bias, QL601 on the int4 models (the issue's)."""
    seen = {c: {f.rule for f in fixable(_findings(c))} for c in _fixable_configs()}
    assert seen["cnn-u8s8"] == {"QL406"} and seen["cnn-int4-per-channel-21"] == {"QL601"}
    assert seen["cnn-int4-per-channel-contrib"] == {"QL601"}


def _findings(name: str):
    import qlrewrite

    return qlrewrite.check(quantized(name), select=["ALL", "QL406"]).findings


def test_opset12_per_channel_needs_unsafe_fixes_and_cannot_be_verified(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(quantized("cnn-opset12-per-channel"), model)
    code, _, err = _run(model, "--fix")
    assert code == 1 and not (tmp_path / "m.fix.onnx").exists()
    assert "21 fixable with --fix --unsafe-fixes" in err
    code, out, _ = _run(model, "--diff", "--unsafe-fixes")
    assert code == 1 and "QL201 model: ai.onnx opset upgraded to 13" in out
    code, _, err = _run(model, "--fix", "--unsafe-fixes", "--verify")
    assert code == 1 and "unverifiable" in err and not (tmp_path / "m.fix.onnx").exists()
    code, out, err = _run(model, "--fix", "--unsafe-fixes", "--strict")
    assert code == 0, out + err
    fixed = onnx.load(tmp_path / "m.fix.onnx")
    assert {o.domain: o.version for o in fixed.opset_import}[""] == 13
    assert _rules(tmp_path / "m.fix.onnx") == []


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    onnx.save(proto, path)
    return path


def _verified(model: Path, *extra: str) -> Path:
    out = model.with_name("out.onnx")
    code, _, err = _run(
        model, "--fix", "--verify", "--fix-output", out, "--extend-select", "QL406", *extra
    )
    assert "verify: exact" in err, err
    assert code == 0 and out.exists(), err
    return out


def test_ql411_axis_made_explicit_verifies_exact(tmp_path: Path) -> None:
    proto = qdq_model(
        DQ,
        13,
        domain="com.microsoft",
        x_type=DT.INT8,
        x_shape=(2, 4),
        scale_shape=(4,),
        scale=[0.5, 0.25, 2.0, 1.0],
        zp=[1, -2, 3, 0],
    )
    model = _save(proto, tmp_path / "m.onnx")
    assert _rules(model) == ["QL411"]
    out = _verified(model)
    assert _rules(out) == []
    node = onnx.load(out).graph.node[0]
    assert [(a.name, a.i) for a in node.attribute] == [("axis", 1)]


def test_ql411_not_fixed_where_axis_1_does_not_exist(tmp_path: Path) -> None:
    proto = qdq_model(
        DQ,
        13,
        domain="com.microsoft",
        x_type=DT.INT8,
        x_shape=(4,),
        scale_shape=(4,),
        scale=[0.5, 0.25, 2.0, 1.0],
        zp=[1, -2, 3, 0],
    )
    model = _save(proto, tmp_path / "m.onnx")
    rules = _rules(model)
    assert "QL411" in rules and "QL401" in rules  # ONNX Runtime's axis 1 does not exist
    code, out, err = _run(model, "--diff")
    assert (code, out) == (1, "")
    assert "fix refused: 1 error finding(s) without a fix (QL401); nothing written" in err


def _shared_scale_model(zp_shape: tuple[int, ...] = (), scale_shape: tuple[int, ...] = (1,)):
    """DQ(int8 x, scale, zp) -> Mul(., scale): the scale is shared with a Mul."""
    scale = numpy_helper.from_array(np.full(scale_shape, 0.37, np.float32), "scale")
    zp = numpy_helper.from_array(np.full(zp_shape, 3, np.int8), "zp")
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "scale", "zp"], ["d"], name="dq"),
        helper.make_node("Mul", ["d", "scale"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[scale, zp],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_ql406_shared_scale_gets_its_own_scalar_and_verifies_exact(tmp_path: Path) -> None:
    model = _save(_shared_scale_model(), tmp_path / "m.onnx")
    assert _rules(model) == ["QL406"]
    out = _verified(model)
    fixed = onnx.load(out)
    inits = {t.name: list(t.dims) for t in fixed.graph.initializer}
    assert inits == {"scale": [1], "zp": [], "scale_scalar": []}
    assert list(fixed.graph.node[0].input) == ["x", "scale_scalar", "zp"]
    assert list(fixed.graph.node[1].input) == ["d", "scale"]  # the Mul still sees [1]
    assert _rules(out) == []


def test_ql406_zero_point_of_shape_1_becomes_a_scalar(tmp_path: Path) -> None:
    proto = qdq_model(DQ, 13, x_type=DT.INT8, scale_shape=(), scale=0.5, zp_shape=(1,), zp=[-3])
    model = _save(proto, tmp_path / "m.onnx")
    assert _rules(model) == ["QL406"]
    out = _verified(model)
    assert {t.name: list(t.dims) for t in onnx.load(out).graph.initializer} == {
        "scale": [],
        "zp": [],
    }


def test_ql103_missing_com_microsoft_import_is_a_safe_fix(tmp_path: Path) -> None:
    """ONNX Runtime runs a com.microsoft node without the import (as com.microsoft 1):
    adding the import is proven exact (this changed in round 3: it was unsafe)."""
    proto = qdq_model(DQ, 13, domain="com.microsoft", x_type=DT.INT8, imports={"": 13})
    model = _save(proto, tmp_path / "m.onnx")
    assert _rules(model) == ["QL103"]
    code, out, err = _run(model, "--fix", "--verify")
    assert code == 0 and "verify: exact" in err, out + err
    imports = {o.domain: o.version for o in onnx.load(tmp_path / "m.fix.onnx").opset_import}
    assert imports == {"": 13, "com.microsoft": 1}


def test_diff_shows_node_by_node_and_writes_nothing(tmp_path: Path) -> None:
    model = _save(quantized("cnn-u8s8"), tmp_path / "m.onnx")
    before = model.read_bytes()
    assert _run(model, "--diff")[:2] == (0, "")  # QL406 is opt-in: nothing to fix
    code, out, err = _run(model, "--diff", "--extend-select", "QL406")
    assert code == 1
    assert out.splitlines()[:3] == [
        f"--- {model}",
        f"+++ {model} (fixed)",
        "  QL406 main/b1_DequantizeLinear: scale 'b1_quantized_scale' FLOAT [1] -> FLOAT [] "
        "(scalar)",
    ]
    assert "3 change(s) would be made to 1 model(s)" in err
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    clean = _save(quantized("cnn-per-channel"), tmp_path / "clean.onnx")
    assert _run(clean, "--diff") == (0, "", "0 change(s) would be made to 0 model(s)\n")


def test_in_place_and_default_output(tmp_path: Path) -> None:
    model = _save(quantized("cnn-int4-per-channel-21"), tmp_path / "m.onnx")
    code, _, _ = _run(model, "--fix")
    assert code == 0 and onnx.load(tmp_path / "m.fix.onnx").ir_version == 10
    assert onnx.load(model).ir_version == 7
    code, _, err = _run(model, "--fix", "--in-place", "--verify")
    assert code == 0 and "verify: exact" in err and onnx.load(model).ir_version == 10


def test_suppressed_findings_are_not_fixed(tmp_path: Path) -> None:
    model = _save(quantized("cnn-u8s8"), tmp_path / "m.onnx")
    toml = '[per-node-ignores]\n"b1_DequantizeLinear" = ["QL406"]\n'
    (tmp_path / "qlrewrite.toml").write_text(toml)
    code, _, err = _run(model, "--fix", "--strict", "--extend-select", "QL406")
    assert code == 0 and "2 change(s)" in err
    shapes = {t.name: list(t.dims) for t in onnx.load(tmp_path / "m.fix.onnx").graph.initializer}
    assert shapes["b1_quantized_scale"] == [1] and shapes["b2_quantized_scale"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--in-place"], "--in-place needs --fix"),
        (["--verify"], "--verify needs --fix"),
        (["--fix", "--diff"], "--fix and --diff"),
        (["--fix", "--fix-output", "o.onnx", "b.onnx"], "--fix-output takes one model"),
        (["--fix", "--verify-runs", "3"], "--verify-runs needs --verify"),
    ],
)
def test_fix_usage_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    model = _save(quantized("cnn-u8s8"), tmp_path / "a.onnx")
    _save(quantized("cnn-u8s8"), tmp_path / "b.onnx")
    code, _, err = _run(model, *args)
    assert code == 2 and needle in err


def test_a_fix_that_would_overwrite_the_input_is_refused(tmp_path: Path) -> None:
    model = _save(quantized("cnn-int4-per-channel-21"), tmp_path / "m.onnx")
    code, _, err = _run(model, "--fix", "--fix-output", model)
    assert code == 2 and "--in-place" in err


def test_catalogue_and_fixes_agree() -> None:
    with_fix = {code for code, rule in RULES.items() if rule.fix}
    assert with_fix == set(FIXES)
    for code in with_fix:
        assert RULES[code].fix in ("safe", "unsafe") and len(RULES[code].fix_summary) > 40
    safe = {"QL103", "QL406", "QL411", "QL505", "QL601", "QL610"}
    safe |= {"QL701", "QL702", "QL711", "QL712", "QL706", "QL708", "QL750"}
    assert {c for c in with_fix if RULES[c].fix == "safe"} == safe
    document = json.loads(sarif.render_sarif([]))
    props = {
        r["id"]: r["properties"]["fix"] for r in document["runs"][0]["tool"]["driver"]["rules"]
    }
    assert props["QL406"] == "safe" and props["QL201"] == "unsafe" and props["QL101"] == "none"
    lines = render.rules_lines(RULES.values())
    assert any(re.match(r"QL406  warning \(opt-in\)  safe ", line) for line in lines)


def test_a_refused_rewrite_lists_its_findings_grouped(tmp_path: Path) -> None:
    model = _save(quantized("cnn-opset12-per-channel"), tmp_path / "m.onnx")
    result = CliRunner().invoke(main, ["fold", str(model), "--dry-run"])
    lines = [line for line in result.stderr.splitlines() if line.startswith("  QL")]
    assert result.exit_code == 1 and len(lines) == 6  # 21 findings, three patterns
    assert "6 more like the line above, on b2_DequantizeLinear" in lines[1]
    assert "(`qlrewrite check --show-all` prints each)" in lines[1]


def test_nothing_is_written_when_no_fix_applies(tmp_path: Path) -> None:
    """A [1] scale that is a graph input cannot become a scalar: no copy is written."""
    proto = qdq_model(
        DQ, 13, x_type=DT.INT8, scale_shape=(1,), scale=[0.5], zp_shape=(), scale_as="input"
    )
    model = _save(proto, tmp_path / "m.onnx")
    code, out, err = _run(model, "--fix", "--extend-select", "QL406")
    assert code == 0 and "QL406" in out and "fixed" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert _run(model, "--diff", "--extend-select", "QL406")[:2] == (0, "")


def test_each_finding_says_its_fix_in_json_and_sarif(tmp_path: Path) -> None:
    model = _save(quantized("cnn-opset12-per-channel"), tmp_path / "m.onnx")
    int4 = _save(quantized("cnn-int4-per-channel-21"), tmp_path / "int4.onnx")
    doc = json.loads(_run(model, int4, "--format", "json")[1])
    fixes = {(f["rule"], f["fix"]) for file in doc["files"] for f in file["findings"]}
    assert fixes == {("QL201", "unsafe"), ("QL402", "unsafe"), ("QL601", "safe")}
    sarif = json.loads(_run(model, "--format", "sarif")[1])
    assert {r["properties"]["fix"] for r in sarif["runs"][0]["results"]} == {"unsafe"}
    bad = _save(qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0}), tmp_path / "bad.onnx")
    doc = json.loads(_run(bad, "--format", "json")[1])
    assert [f["fix"] for f in doc["files"][0]["findings"]] == [None]


def test_the_opset12_upgrade_fix_computes_what_the_quantizer_writes_at_opset_13(
    tmp_path: Path,
) -> None:
    """ORT cannot load the opset-12 input, so --verify cannot compare; the fixed model is
    compared instead with ORT's quantizer's own output for the same float model at opset
    13 (same calibration): bit-identical outputs."""
    from ort_quantized import inputs_for, run_ort

    model = _save(quantized("cnn-opset12-per-channel"), tmp_path / "m.onnx")
    out = tmp_path / "fixed.onnx"
    assert _run(model, "--fix", "--unsafe-fixes", "--fix-output", out)[0] == 0
    for seed in (1, 2, 3):
        feeds = inputs_for("cnn", seed)
        fixed = run_ort(out, feeds)
        reference = run_ort(quantized("cnn-per-channel"), feeds)
        assert all(np.array_equal(a, b) for a, b in zip(fixed, reference, strict=True))


def test_ql406_scale_shared_with_a_consistent_q_is_copied_not_reshaped(tmp_path: Path) -> None:
    """Q(x, s[1], zp[1]) -> DQ(., s[1], zp2[]): reshaping s would give the Q a new
    scalar-vs-[1] pair; the DQ gets its own scalar instead and the check is clean."""
    inits = [
        numpy_helper.from_array(np.array([0.02], np.float32), "s"),
        numpy_helper.from_array(np.array([7], np.uint8), "zp"),
        numpy_helper.from_array(np.array(7, np.uint8), "zp2"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp2"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    model = _save(proto, tmp_path / "m.onnx")
    assert [f.rule for f in check_path(model).findings] == ["QL406"]
    out = _verified(model)
    fixed = onnx.load(out)
    assert [list(n.input) for n in fixed.graph.node] == [["x", "s", "zp"], ["q", "s_scalar", "zp2"]]
    assert _rules(out) == []


def test_unfixed_errors_are_found_in_time_linear_in_the_findings() -> None:
    """The errors no fix is for, among thousands that have one (every per-axis DQ of a
    large opset-12 model): one refusal naming the one left, in milliseconds (a list
    lookup per finding took seconds at 4000 findings)."""
    import time

    from qlrewrite.findings import Finding, Report
    from qlrewrite.pipeline import fix_files as check_fix

    def error(rule: str, i: int) -> Finding:
        return Finding(rule=rule, severity="error", message=f"m{i}", node=f"n{i}", output=f"o{i}")

    wanted = [error("QL201", i) for i in range(6000)]
    report = Report(findings=[*reversed(wanted), error("QL301", 0)])
    start = time.process_time()
    refused = check_fix._unfixed_refusal(report, wanted)
    assert time.process_time() - start < 2
    assert refused == "1 error finding(s) without a fix (QL301); nothing written"
    assert check_fix._unfixed_refusal(Report(findings=list(wanted)), wanted) is None
