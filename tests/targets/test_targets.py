"""``check --target``: the runtime tables against the runtimes themselves, and the QL7xx rules
on models each runtime runs or refuses.

- The installed ONNX Runtime (1.31 in the test extras) loads and runs a sample of the
  probe's one-node models as its committed table says (the probe's own runner, in this
  process).
- The rules read the tables right: on the probe's models, ``check --target ort==X`` finds an
  error exactly when the table says release X refused the model (QL701 / QL702 for IR and
  opset refusals, QL703 for the node), for 1.16 (the issue's done-when), 1.31 and OpenVINO.
- ``check --target ort==1.31`` is clean on ONNX Runtime's own quantizer outputs.
- A slow opt-in test runs a sample in a real older release (``QLREWRITE_OLD_ORT_PYTHON``, or
  the venv /work/venvs/ort-1.16) and compares with the check.
- The CLI: the issue's reproduction (IR 14 passes check, ORT 1.31 refuses it), --fix, the
  configuration key, select / ignore, SARIF, the pre-commit hook, bad specs, start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from ort_quantized import CONFIGS, INVALID_CONFIGS, quantized
from qdq_models import DQ, DT, qdq_model

from qlrewrite.checking.checker import check
from qlrewrite.cli import main
from qlrewrite.errors import InputError
from qlrewrite.targets import spec as target_spec
from qlrewrite.targets.tables import DATA, table

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tools" / "probe"
sys.path.insert(0, str(PROBE))

import cases  # noqa: E402  (tools/probe: the probe's model builders)
import drive  # noqa: E402
import run_ort  # noqa: E402

#: Every case of the probe, built once (about 2 s).
_CASES: dict[str, cases.Case] = {}


def _cases() -> dict[str, cases.Case]:
    if not _CASES:
        for case in cases.all_cases():
            _CASES.setdefault(case.key, case)
    return _CASES


def _sample(step: int, offset: int = 0) -> list[cases.Case]:
    every = list(_cases().values())
    return every[offset::step]


def _refused(row: object) -> bool:
    return not (row == "runs" or (isinstance(row, dict) and row.get("runs")))


def _flagged(row: object) -> bool:
    """Refused, or computed otherwise than unoptimized or than the ONNX reference (QL706;
    OpenVINO's rows compare with the reference only): what check must flag."""
    wrong = ("miscomputes", "fails at run")
    diverged = isinstance(row, dict) and (
        row.get("optimized") in wrong or row.get("reference") in wrong
    )
    return _refused(row) or diverged


def _crashed(row: object) -> bool:
    """A form that ended the runtime's process (not run in this process)."""
    return isinstance(row, dict) and row.get("reason") == "crash"


def _save(case: cases.Case, folder: Path) -> dict:
    path = folder / f"{abs(hash(case.key))}.onnx"
    onnx.save(case.model, path)
    entry = {"key": case.key, "file": str(path), "feeds": case.feeds}
    if case.compare:
        entry["compare"] = case.compare
        references = drive._references(case.reference or case.model, case.compare, path)
        if references:  # the runners compare with the ONNX reference evaluator's output
            entry["reference"] = references
    return entry


def _computed_right(line: dict) -> bool:
    """A runner's result line: run, as ORT_DISABLE_ALL where compared, and as the ONNX
    reference where the driver saved it (ONNX Runtime's ``versus_unoptimized`` entries,
    OpenVINO's ``versus_reference``)."""
    if not line["run"]:
        return False
    versus = line.get("versus_unoptimized", [])
    against = [
        drive._against_reference(
            [v for v in versus if "reference_rel_diff" in v], "reference_rel_diff"
        ),
        drive._against_reference(line.get("versus_reference", []), "max_rel_diff"),
    ]
    return drive._optimized(versus) == "matches" and all(a in (None, "matches") for a in against)


# --------------------------------------------------------------------------- the tables


def test_the_installed_release_runs_what_its_table_says(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    minor = ".".join(ort.__version__.split(".")[:2])
    if not (DATA / f"ort-{minor}.json").exists():
        pytest.skip(f"no table for the installed onnxruntime {ort.__version__}")
    forms = table(f"ort-{minor}").forms
    sample = [c for c in _sample(9) if c.key in forms and not _crashed(forms[c.key])]
    assert len(sample) > 150
    differ = []
    for case in sample:
        result = run_ort.run_case(_save(case, tmp_path))
        if result["run"] == _refused(forms[case.key]):
            differ.append((case.key, result.get("error"), forms[case.key]))
    assert not differ, differ[:5]


def test_each_table_records_its_release_and_its_limits() -> None:
    releases = {(1, m) for m in range(15, 33)}
    assert releases <= set(target_spec.ort_releases())
    for major, minor in releases:
        t = table(f"ort-{major}.{minor}")
        assert t.release.startswith(f"{major}.{minor}.") and t.measured
        assert t.max_ir_version is not None and t.max_opset["ai.onnx"] is not None
    # the reproduction: ORT 1.31 loads IR 13 at most; 1.16 IR 9 and opset 19
    assert table("ort-1.31").max_ir_version == 13
    assert table("ort-1.16").max_ir_version == 9
    assert table("ort-1.16").max_opset["ai.onnx"] == 19


def _check_errors(path: Path, spec: str) -> list[str]:
    report = check(path, targets=[spec], select=["QL7"])
    assert report.load_error is None, report.load_error
    return sorted({f.rule for f in report.errors})


@pytest.mark.parametrize(
    ("spec", "name", "step"),
    [
        ("ort==1.16", "ort-1.16", 5),
        ("ort==1.31", "ort-1.31", 7),
        ("openvino", "openvino", 7),
    ],
)
def test_check_flags_what_the_table_refuses_and_nothing_it_runs(
    spec: str, name: str, step: int, tmp_path: Path
) -> None:
    """The done-when: on the probe's corpus, recorded against the release, `check --target`
    has an error exactly on the models the release refused."""
    if not (DATA / f"{name}.json").exists():
        pytest.skip(f"no {name} table")
    forms = table(name).forms
    wrong = []
    for case in _sample(step):
        if case.key not in forms:
            continue
        path = tmp_path / "m.onnx"
        onnx.save(case.model, path)
        errors = _check_errors(path, spec)
        if bool(errors) != _flagged(forms[case.key]):
            wrong.append((case.key, errors, forms[case.key]))
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("config", sorted(set(CONFIGS) - INVALID_CONFIGS))
def test_ort_quantizer_outputs_are_clean_for_the_release_that_wrote_them(
    config: str, tmp_path: Path
) -> None:
    ort = pytest.importorskip("onnxruntime")
    minor = ".".join(ort.__version__.split(".")[:2])
    path = tmp_path / "m.onnx"
    onnx.save(quantized(config), path)
    report = check(path, targets=[f"ort=={minor}", "ort"])
    assert [f for f in report.findings if f.rule.startswith("QL7")] == []


def _runtime_python(variable: str, default: str) -> Path | None:
    named = os.environ.get(variable)
    if named:
        return Path(named)
    return Path(default) if Path(default).exists() else None


def _real_verdicts(python: Path, runner: str, entries: list[dict], folder: Path) -> dict:
    """Each entry's verdict (ran, and computed as unoptimized and as the ONNX reference
    where compared: :func:`_computed_right`, or not) in the real
    runtime; a case that ends the runtime's process is a refusal (the runner starts again
    after it)."""
    manifest, results = folder / "manifest.json", folder / "results.jsonl"
    manifest.write_text(json.dumps({"cases": entries}))
    done = 0
    while done < len(entries):
        command = [str(python), str(PROBE / runner), str(manifest), str(results)]
        subprocess.run(
            [*command, "--skip", str(done)], check=False, timeout=1800, capture_output=True
        )
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        finished = [line for line in lines if "key" in line]
        if "start" in lines[-1]:
            crashed = {"key": lines[-1]["start"], "run": False}
            results.write_text(results.read_text() + json.dumps(crashed) + "\n")
            finished.append(crashed)
        assert len(finished) > done, f"{runner} made no progress"
        done = len(finished)
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    return {line["key"]: _computed_right(line) for line in lines if "key" in line}


def _release_spec(python: Path, runtime: str) -> str:
    if runtime == "openvino":
        return "openvino"
    version = subprocess.run(
        [str(python), "-c", "import onnxruntime as o; print(o.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    return "ort==" + ".".join(version.split(".")[:2])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "variable", "default", "runner"),
    [
        ("ort", "QLREWRITE_OLD_ORT_PYTHON", "/work/venvs/ort-1.16/bin/python", "run_ort.py"),
        (
            "openvino",
            "QLREWRITE_OPENVINO_PYTHON",
            "/work/venvs/openvino/bin/python",
            "run_openvino.py",
        ),
    ],
)
def test_a_real_runtime_refuses_exactly_what_check_flags(
    runtime: str, variable: str, default: str, runner: str, tmp_path: Path
) -> None:
    """Runs a sample of the probe's corpus in a real runtime (an older ONNX Runtime, or
    OpenVINO) and compares each verdict with ``check --target`` of that release."""
    python = _runtime_python(variable, default)
    if python is None:
        pytest.skip(f"set {variable} to a python with {runtime} installed")
    spec = _release_spec(python, runtime)
    entries = [_save(c, tmp_path) for c in _sample(11, 3)]
    verdicts = _real_verdicts(python, runner, entries, tmp_path)
    wrong = []
    for entry in entries:
        errors = _check_errors(Path(entry["file"]), spec)
        if bool(errors) == verdicts[entry["key"]]:
            wrong.append((entry["key"], errors, verdicts[entry["key"]]))
    assert len(verdicts) == len(entries) and not wrong, wrong[:5]


# --------------------------------------------------------------------------- specs


def test_specs_name_releases_and_ranges() -> None:
    assert target_spec.parse_target("ort==1.20").table_names == ("ort-1.20",)
    assert target_spec.parse_target("ort==1.20.1").table_names == ("ort-1.20",)
    ranged = target_spec.parse_target("ort>=1.17,<1.21").table_names
    assert ranged == ("ort-1.17", "ort-1.18", "ort-1.19", "ort-1.20")
    assert target_spec.parse_target("tensorrt").documented
    assert target_spec.parse_target("openvino").table_names == ("openvino",)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("foo", "unknown runtime"),
        ("ort==1.2", "no measured"),
        ("ort~1.2", "write ort"),
        ("tensorrt==10", "takes no version"),
    ],
)
def test_bad_specs_are_usage_errors(spec: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        target_spec.parse_target(spec)


# --------------------------------------------------------------------------- the CLI


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def ir14(tmp_path: Path) -> Path:
    """The issue's reproduction: a QDQ model saved with IR version 14."""
    path = tmp_path / "ir14.onnx"
    onnx.save(qdq_model(DQ, 21, ir_version=14), path)
    return path


def test_ir_14_passes_check_and_is_flagged_for_ort_1_31(ir14: Path) -> None:
    assert _run("check", ir14)[0] == 0
    code, out, _ = _run("check", ir14, "--target", "ort==1.31")
    assert code == 1 and "QL701" in out and "IR version 14 is newer than ORT 1.31.1" in out
    assert "set the model's ir_version to 10" in out
    code, out, _ = _run("check", ir14, "--target", "ort==1.32")
    assert code == 0 and "QL701" not in out
    code, out, _ = _run("check", ir14, "--target", "ort>=1.31")
    assert code == 1 and "ORT 1.31.1 (of ort>=1.31)" in out


def test_fix_lowers_the_ir_version_to_what_the_model_needs(ir14: Path, tmp_path: Path) -> None:
    out_path = tmp_path / "fixed.onnx"
    code, _, err = _run("check", ir14, "--target", "ort==1.31", "--fix", "--fix-output", out_path)
    assert code == 0, err
    assert onnx.load(out_path).ir_version == 10
    assert _run("check", out_path, "--target", "ort==1.31")[0] == 0


def test_target_in_configuration_select_ignore_and_sarif(ir14: Path) -> None:
    (ir14.parent / "qlrewrite.toml").write_text('target = ["ort==1.31"]\n')
    code, out, _ = _run("check", ir14)
    assert code == 1 and "QL701" in out
    assert _run("check", ir14, "--ignore", "QL701")[0] == 0
    assert _run("check", ir14, "--target", "ort==1.32")[0] == 0  # the command line wins
    code, out, _ = _run("check", ir14, "--format", "sarif")
    sarif = json.loads(out)
    results = sarif["runs"][0]["results"]
    assert code == 1 and [r["ruleId"] for r in results] == ["QL701"]
    rules = {r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert "QL701" in rules


def test_a_bad_target_in_configuration_names_the_file(ir14: Path) -> None:
    (ir14.parent / "qlrewrite.toml").write_text('target = ["ort==0.1"]\n')
    code, _, err = _run("check", ir14)
    assert code == 2 and "qlrewrite.toml: 'target'" in err and "no measured" in err


def test_a_bad_target_on_the_command_line_is_one_line(ir14: Path) -> None:
    code, _, err = _run("check", ir14, "--target", "tensorrt>=10")
    assert code == 2 and err.strip().count("\n") == 0 and "--target 'tensorrt>=10'" in err


def test_documented_targets_say_so_and_cite_their_source(tmp_path: Path) -> None:
    path = tmp_path / "zp.onnx"
    onnx.save(qdq_model(DQ, 21, x_type=DT.UINT8, zp=128), path)
    code, out, _ = _run("check", path, "--target", "tensorrt", "--format", "json")
    findings = json.loads(out)["files"][0]["findings"]
    rules = {f["rule"]: f for f in findings}
    assert code == 1 and set(rules) == {"QL711", "QL712"}
    assert "TensorRT (documented)" in rules["QL711"]["message"]
    assert "zero-point shift" in rules["QL711"]["hint"]
    # the finding names the row in a few words; `qlrewrite rules` cites the document
    assert rules["QL711"]["hint"].endswith("source: tensorrt docs, zero_point")
    assert "https://" not in rules["QL711"]["hint"]
    code, out, _ = _run("rules", "QL711")
    assert "Documented (tensorrt docs, zero_point): https://github.com/onnx/onnx-tensorrt" in out


def test_no_target_reads_no_table() -> None:
    """Start-up stays as before: a check without --target parses no table."""
    code = (
        "import sys; from qlrewrite.checking.checker import check;"
        "from qdq_models import DQ, DT, qdq_model;"
        "check(qdq_model(DQ, 21)); from qlrewrite.targets import tables;"
        "print(tables.table.cache_info().currsize, tables.documented.cache_info().currsize)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    assert done.stdout.split() == ["0", "0"]


def test_docs_targets_md_is_up_to_date() -> None:
    from qlrewrite.targets.docs import targets_markdown

    text = (ROOT / "docs" / "targets.md").read_text(encoding="utf-8")
    assert text == targets_markdown(), (
        "docs/targets.md is out of date: run `python -m qlrewrite.targets.docs docs/targets.md`"
    )


def test_info_lists_what_each_target_refuses(tmp_path: Path) -> None:
    path = tmp_path / "ms16.onnx"
    onnx.save(qdq_model(DQ, 1, domain="com.microsoft", x_type=DT.UINT16, ir_version=7), path)
    code, out, _ = _run("info", path, "--target", "ort==1.16", "--target", "ort==1.17")
    assert code == 0
    assert "ORT 1.16: 1 finding(s)" in out and "QL703" in out
    assert "ORT 1.17: nothing refused" in out
    code, out, _ = _run("info", path, "--target", "ort==1.16", "--format", "json")
    found = json.loads(out)["targets"]["ORT 1.16"]
    assert [f["rule"] for f in found] == ["QL703"] and found[0]["node"] == "qdq"


def test_per_tensor_and_per_channel_qoperator_weights_are_told_apart(tmp_path: Path) -> None:
    """OpenVINO refuses a QLinearMatMul with per-column B scales ("shape_size(node_shape) ==
    1") and runs a per-tensor one: the form keys them apart, so the per-tensor one is clean
    (it was flagged when the form held types only)."""
    from qoperator_models import build

    per_tensor = {"b_scale": np.array(0.01, np.float32), "b_zero_point": np.array(0, np.int8)}
    for model, flagged in (
        (build("QLinearMatMul"), True),
        (build("QLinearMatMul", **per_tensor), False),
    ):
        path = tmp_path / "m.onnx"
        onnx.save(model, path)
        assert ("QL703" in _check_errors(path, "openvino")) == flagged


def test_every_runtime_is_named_from_its_one_record() -> None:
    """--target, compare's runtimes, --verify-on's releases and the tables' labels read
    qlrewrite.targets.runtimes: a runtime's spellings, label and package live there."""
    from qlrewrite.targets import runtimes
    from qlrewrite.verify import release_env
    from qlrewrite.verify import runtimes as compared

    assert runtimes.TARGETS == ("ort", "openvino", "tensorrt", "qnn")
    assert runtimes.DOCUMENTED == ("tensorrt", "qnn")
    assert list(compared.RUNTIMES) == ["ort", "reference", "openvino"]
    assert target_spec.parse_target("onnxruntime==1.20").label == "ORT 1.20"
    assert target_spec.parse_target("qnn").label == "QNN (documented)"
    assert str(release_env.parse_release("onnxruntime==1.16.3")) == "ort==1.16.3"
    assert {r.key for r in runtimes.RELEASED} == {"ort", "openvino"}
    assert runtimes.named("onnxruntime") is runtimes.ORT and runtimes.named("trt") is None


def test_a_qoperator_node_after_a_contrib_node_gets_a_verdict(tmp_path: Path) -> None:
    """ORT's quantize_static QOperator CNN: the QGemm's input comes from a com.microsoft
    QLinearAdd, which ONNX shape inference does not know, so its type is not inferred. The
    form takes it from its zero point (the schema gives both one type parameter), and the
    QGemm, which OpenVINO has no conversion for (its table), is flagged: before, the form was
    unknown and check --target openvino stayed silent while OpenVINO refused the model."""
    from ort_quantized import quantized

    path = tmp_path / "m.onnx"
    onnx.save(quantized("cnn-qop-u8s8"), path)
    report = check(path, targets=["openvino"], select=["QL7"])
    flagged = {f.op_type for f in report.errors if f.rule == "QL703"}
    assert flagged == {"QGemm"}


def test_an_opset_21_model_is_fixed_for_a_release_that_loads_ir_9(tmp_path: Path) -> None:
    """ai.onnx 21 needs IR 10; ORT 1.16 loads opset 19 and IR 9. The IR version is
    lowerable once QL702's downgrade lowers the opset, so QL701 is fixable (it said "target
    a newer release" and `check --fix` refused the model)."""
    from click.testing import CliRunner
    from ort_quantized import quantized

    from qlrewrite.cli import main

    source = quantized("mlp-per-channel-21")
    source.ir_version = 10  # what onnx.helper.make_model writes at opset 21
    path, fixed = tmp_path / "m.onnx", tmp_path / "fixed.onnx"
    onnx.save(source, path)
    args = ["check", str(path), "--target", "ort==1.16", "--fix", "--fix-output", str(fixed)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    written = onnx.load(fixed)
    assert written.ir_version == 9
    assert [(o.domain, o.version) for o in written.opset_import] == [("", 19)]


def test_a_refusal_the_probe_model_caused_is_no_verdict() -> None:
    """OpenVINO's FQ stripping fails on a 16-bit Q/DQ pair between the graph's input and
    output, which the probe's one-group models are and a real graph's groups are not
    (ORT's 16-bit quantize_static CNNs with such MaxPool groups compile). Such a refusal
    holds for a group from a graph input to a graph output only: QL703 said OpenVINO refuses
    models it runs."""
    from qlrewrite.targets.tables import PROBE_BOUNDARY_ERRORS

    openvino = table("openvino")
    caused = [
        form
        for form, row in openvino.forms.items()
        if isinstance(row, dict) and any(m in row.get("error", "") for m in PROBE_BOUNDARY_ERRORS)
    ]
    assert caused, "the table no longer records the boundary failure: drop the exception"
    assert all(openvino.refusal(form) is not None for form in caused)  # the probe's own model
    assert all(openvino.refusal(form, between_graph_io=False) is None for form in caused)
    other = next(
        form
        for form, row in openvino.forms.items()
        if isinstance(row, dict) and row.get("refused") and form not in caused
    )
    assert openvino.refusal(other, between_graph_io=False) is not None


def test_a_16_bit_maxpool_group_inside_a_graph_is_not_refused_for_openvino(
    tmp_path: Path,
) -> None:
    """The family probe's model (graph input -> Q/DQ -> MaxPool -> Q/DQ -> graph output) is
    refused by OpenVINO: QL753 says so from the graph (its last pair reads the MaxPool and
    ends at the graph output), not QL703 from the probe's row; the same group between
    float ops is not flagged."""
    from family_models import DT, qdq_family

    alone = tmp_path / "alone.onnx"
    onnx.save(qdq_family("MaxPool", DT.UINT16, opset=21), alone)
    assert _check_errors(alone, "openvino") == ["QL753"]
    model = qdq_family("MaxPool", DT.UINT16, opset=21)
    graph = model.graph
    first, last = graph.input[0].name, graph.output[0].name
    for node in graph.node:
        node.input[:] = [f"{first}_in" if i == first else i for i in node.input]
        node.output[:] = [f"{last}_out" if o == last else o for o in node.output]
    graph.node.insert(0, onnx.helper.make_node("Relu", [first], [f"{first}_in"]))
    graph.node.append(onnx.helper.make_node("Relu", [f"{last}_out"], [last]))
    inside = tmp_path / "inside.onnx"
    onnx.save(model, inside)
    assert not {"QL703", "QL753"} & set(_check_errors(inside, "openvino"))


@pytest.mark.slow
def test_openvino_compiles_the_maxpool_group_inside_a_graph(tmp_path: Path) -> None:
    """The measurement behind the test above, in /work/venvs/openvino (when present)."""
    python = Path("/work/venvs/openvino/bin/python")
    if not python.exists():
        pytest.skip("no /work/venvs/openvino here")
    test_a_16_bit_maxpool_group_inside_a_graph_is_not_refused_for_openvino(tmp_path)
    script = (
        "import sys, openvino as ov\n"
        "core = ov.Core()\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        core.compile_model(core.read_model(path), 'CPU'); print('compiles')\n"
        "    except Exception:\n"
        "        print('refused')\n"
    )
    paths = [str(tmp_path / "alone.onnx"), str(tmp_path / "inside.onnx")]
    done = subprocess.run(
        [str(python), "-c", script, *paths], check=True, capture_output=True, text=True, timeout=300
    )
    assert done.stdout.split() == ["refused", "compiles"], done.stderr[-500:]


def test_openvino_weight_patterns_measured_wrong_are_flagged(tmp_path: Path) -> None:
    """OpenVINO's table records the QDQ ConvTranspose with per-axis weights on axis 0 (its
    input channels) and differing zero points 22% off the reference; QL706 read only the
    activation groups for OpenVINO and said nothing. The equal-zero-point form is clean."""
    sys.path.insert(0, str(ROOT / "tools" / "probe"))
    import cases

    flagged = {}
    for case in cases.weight_op_cases():
        if case.key.startswith("QDQ ConvTranspose") and " per-axis axis=0 " in case.key:
            path = tmp_path / "m.onnx"
            onnx.save(case.model, path)
            report = check(path, targets=["openvino"], select=["QL706"])
            zero_points = case.key.split("zero_points=")[1].split()[0]
            flagged[zero_points] = [f.message for f in report.errors]
    assert set(flagged) == {"differ", "equal"}
    assert flagged["equal"] == []
    (message,) = flagged["differ"]
    assert "in OpenVINO" in message and "ConvTranspose" in message
