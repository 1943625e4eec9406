"""pipeline.rewrite and the shared rewriting options, with trivial passes written here:
output naming, in-place rules, --dry-run, --report, refusals (nothing written)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import click
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner, Result
from model_io_fixtures import write_external_model

from qlrewrite import pipeline
from qlrewrite.cli._common import RewriteOptions, rewrite_options, run_command, run_rewrite
from qlrewrite.errors import InputError, Refusal
from qlrewrite.passes.results import RewritePassResult

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class RenamePass(ir.passes.InPlacePass):
    """Appends '_renamed' to every node name of the main graph."""

    def call(self, model: ir.Model) -> RewritePassResult:
        count = 0
        for node in model.graph:
            node.name = f"{node.name}_renamed"
            count += 1
        return RewritePassResult(model, count > 0, {"renamed_nodes": count})


class BreakPass(ir.passes.InPlacePass):
    """Turns the first MatMul into an op that does not exist: onnx.checker rejects it."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for node in model.graph:
            if node.op_type == "MatMul":
                node.op_type = "NoSuchOperator"
                break
        return ir.passes.PassResult(model, modified=True)


@click.command("rename")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--break", "break_it", is_flag=True)
@rewrite_options
@run_command
def rename_command(
    model: Path,
    break_it: bool,
    options: RewriteOptions,
) -> None:
    """A rewriting command for the tests."""
    run_rewrite(
        model,
        [BreakPass()] if break_it else [RenamePass()],
        command="rename",
        options=options,
    )


def run(*args: str) -> Result:
    return CliRunner().invoke(rename_command, list(args))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    shutil.copy(EXAMPLES / "blocked_int4_opset21.onnx", path)
    return path


def _names(path: Path) -> list[str]:
    return [n.name for n in onnx.load_model(str(path)).graph.node]


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_default_output_beside_the_input(model: Path) -> None:
    original = model.read_bytes()
    result = pipeline.rewrite(model, [RenamePass()], command="rename")
    out = model.with_name("model.rename.onnx")
    assert result.output == out and result.written
    assert all(name.endswith("_renamed") for name in _names(out))
    assert model.read_bytes() == original
    assert result.changes == {"RenamePass": {"renamed_nodes": 5}}
    assert pipeline.default_output(Path("a/b.c.onnx"), "fold") == Path("a/b.c.fold.onnx")


def test_dry_run_writes_nothing(model: Path) -> None:
    before = _listing(model.parent)
    result = pipeline.rewrite(model, [RenamePass()], command="rename", dry_run=True)
    assert not result.written and result.output is None
    assert result.changes["RenamePass"] == {"renamed_nodes": 5}
    assert _listing(model.parent) == before
    cli = run(str(model), "--dry-run")
    assert cli.exit_code == 0, cli.output
    assert "would write" in cli.stderr and "renamed nodes 5" in cli.stderr
    assert f"would write {model.with_name('model.rename.onnx')} in" in cli.stderr
    other = model.parent / "other.onnx"
    assert f"would write {other} in" in run(str(model), "-o", str(other), "--dry-run").stderr
    assert f"would write {model} in" in run(str(model), "--in-place", "--dry-run").stderr
    assert _listing(model.parent) == before


def test_report_json(model: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run(str(model), "-o", str(tmp_path / "out.onnx"), "--report", str(report), "-q")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # -q
    doc = json.loads(report.read_text())
    assert doc["command"] == "rename"
    assert doc["written"] is True and doc["dry_run"] is False
    assert doc["output"] == str(tmp_path / "out.onnx")
    assert doc["changes"] == {"RenamePass": {"renamed_nodes": 5}}
    assert doc["initializer_bytes"]["before"] == doc["initializer_bytes"]["after"] > 0


def test_dry_run_report_says_nothing_written(model: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run(str(model), "--dry-run", "--report", str(report))
    assert result.exit_code == 0, result.output
    doc = json.loads(report.read_text())
    assert doc["written"] is False and doc["dry_run"] is True and doc["output"] is None


# --------------------------------------------------------------------------- in-place rules


def test_output_equal_to_input_is_refused(model: Path) -> None:
    original = model.read_bytes()
    with pytest.raises(InputError, match="the output is the input"):
        pipeline.rewrite(model, [RenamePass()], command="rename", output=model)
    result = run(str(model), "-o", str(model))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--in-place" in result.stderr
    assert model.read_bytes() == original


def test_links_to_the_input_count_as_the_input(model: Path) -> None:
    original = model.read_bytes()
    (model.parent / "link.onnx").symlink_to(model)
    (model.parent / "sub").mkdir()
    for alias in ("link.onnx", "sub/../model.onnx"):
        result = run(str(model), "-o", str(model.parent / alias))
        assert result.exit_code == 2, (alias, result.output)
    assert model.read_bytes() == original
    assert (model.parent / "link.onnx").is_symlink()


def test_in_place(model: Path) -> None:
    result = run(str(model), "--in-place")
    assert result.exit_code == 0, result.output
    assert all(name.endswith("_renamed") for name in _names(model))
    assert _listing(model.parent) == ["model.onnx"]


def test_in_place_with_another_output_is_refused(model: Path) -> None:
    original = model.read_bytes()
    result = run(str(model), "--in-place", "-o", str(model.parent / "other.onnx"))
    assert result.exit_code == 2
    assert "--in-place and -o" in result.stderr
    assert _listing(model.parent) == ["model.onnx"]
    assert model.read_bytes() == original
    assert run(str(model), "--in-place", "-o", str(model)).exit_code == 0


def test_output_beside_the_input_data_file_keeps_it(tmp_path: Path) -> None:
    """-o x.onnx while the input reads its weights from x.onnx.data: the output's data
    gets another name and the input's data file is neither replaced nor removed."""
    source, _ = write_external_model(tmp_path, "model.onnx")
    proto = onnx.load_model(str(source), load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = "other.onnx.data"
    source.write_bytes(proto.SerializeToString())
    (tmp_path / "model.onnx.data").rename(tmp_path / "other.onnx.data")
    data = (tmp_path / "other.onnx.data").read_bytes()
    result = run(str(source), "-o", str(tmp_path / "other.onnx"))
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "other.onnx.data").read_bytes() == data
    (new,) = set(_listing(tmp_path)) - {"model.onnx", "other.onnx", "other.onnx.data"}
    assert len(_listing(tmp_path)) == 4 and re.fullmatch(r"other\.onnx\.[0-9a-f]{8}\.data", new)
    saved = onnx.load_model(str(tmp_path / "other.onnx"), load_external_data=False)
    locations = {
        e.value for t in saved.graph.initializer for e in t.external_data if e.key == "location"
    }
    assert locations <= {new}


def test_output_onto_the_input_data_file_is_refused(tmp_path: Path) -> None:
    source, _ = write_external_model(tmp_path, "model.onnx")
    data = (tmp_path / "model.onnx.data").read_bytes()
    result = run(str(source), "-o", str(tmp_path / "model.onnx.data"))
    assert result.exit_code == 2
    assert "would overwrite the input's external data" in result.stderr
    assert (tmp_path / "model.onnx.data").read_bytes() == data
    assert _listing(tmp_path) == ["model.onnx", "model.onnx.data"]


def test_report_onto_the_input_is_refused(model: Path) -> None:
    original = model.read_bytes()
    result = run(str(model), "--report", str(model))
    assert result.exit_code == 2
    assert "the report would overwrite the input model" in result.stderr
    assert model.read_bytes() == original
    assert _listing(model.parent) == ["model.onnx"]


def test_external_input_keeps_external_data(tmp_path: Path) -> None:
    source, _ = write_external_model(tmp_path, "model.onnx")
    result = run(str(source))
    assert result.exit_code == 0, result.output
    assert _listing(tmp_path) == [
        "model.onnx",
        "model.onnx.data",
        "model.rename.onnx",
        "model.rename.onnx.data",
    ]
    forced = run(str(source), "-o", str(tmp_path / "inline.onnx"), "--no-external-data")
    assert forced.exit_code == 0, forced.output
    assert not (tmp_path / "inline.onnx.data").exists()


# --------------------------------------------------------------------------- refusals


def test_input_with_error_findings_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "bad.onnx"
    shutil.copy(EXAMPLES / "invalid_per_axis_scale.onnx", model)
    with pytest.raises(pipeline.FindingsRefusal) as caught:
        pipeline.rewrite(model, [RenamePass()], command="rename")
    assert [f.rule for f in caught.value.report.errors] == ["QL403"]
    result = run(str(model))
    assert result.exit_code == 1
    assert "QL403" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("qlrewrite: error: ")
    assert "nothing written" in result.stderr
    assert _listing(tmp_path) == ["bad.onnx"]


def test_invalid_output_is_refused(model: Path) -> None:
    with pytest.raises(Refusal, match=r"onnx\.checker"):
        pipeline.rewrite(model, [BreakPass()], command="rename")
    result = run(str(model), "--break")
    assert result.exit_code == 1
    assert "would be invalid" in result.stderr and "NoSuchOperator" in result.stderr
    assert _listing(model.parent) == ["model.onnx"]


def _without_output_shapes(model: Path) -> Path:
    """The model with its graph outputs' shapes removed: onnx.checker's full check rejects
    it, ONNX Runtime runs it (exporters write such models)."""
    proto = onnx.load_model(str(model))
    for output in proto.graph.output:
        output.type.tensor_type.ClearField("shape")
    path = model.with_name("no_output_shapes.onnx")
    onnx.save_model(proto, path)
    return path


def test_outputs_without_shape_are_checked_with_inferred_shapes(model: Path) -> None:
    source = _without_output_shapes(model)
    result = run(str(source), "-o", str(model.with_name("out.onnx")))
    assert result.exit_code == 0, result.stderr
    assert "declared without a shape" in result.stderr
    assert _names(model.with_name("out.onnx"))[0].endswith("_renamed")


def test_other_checker_failures_are_refused_when_outputs_have_no_shape(model: Path) -> None:
    source = _without_output_shapes(model)
    result = run(str(source), "--break", "-o", str(model.with_name("out.onnx")))
    assert result.exit_code == 1
    assert "would be invalid" in result.stderr
    assert not model.with_name("out.onnx").exists()


def test_attribute_without_type_is_refused_before_any_work(tmp_path: Path) -> None:
    """onnx_ir reads an attribute of type UNDEFINED but cannot write it: refused upfront
    with a clear line (not an exception from the serializer after the passes ran)."""
    proto = onnx.load_model(str(EXAMPLES / "msdomain_int16_opset13.onnx"))
    relu = next(n for n in proto.graph.node if n.op_type == "Relu")
    relu.attribute.add(name="extra", type=onnx.AttributeProto.UNDEFINED)
    model = tmp_path / "model.onnx"
    model.write_bytes(proto.SerializeToString())
    result = run(str(model))
    assert result.exit_code == 2
    assert "attribute 'extra' of node 'Relu' has no type" in result.stderr
    assert result.stderr.count("\n") == 1
    assert _listing(tmp_path) == ["model.onnx"]


def test_unreadable_input_writes_nothing(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x01\x02 not a model")
    result = run(str(model))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "not an ONNX model" in result.stderr
    assert _listing(tmp_path) == ["model.onnx"]


def test_run_passes_without_passes_returns_the_model(model: Path) -> None:
    from qlrewrite.io import model_io
    from qlrewrite.passes.context import RunContext

    loaded = model_io.load(model)
    model, results = pipeline.run_passes(loaded, [], RunContext.fresh(loaded))
    assert model is loaded and results == []


def test_an_input_the_checker_rejects_is_named_as_the_cause(tmp_path: Path) -> None:
    """A model onnx.checker already rejects (here: an attribute Relu does not have) is
    refused as an invalid input, not as an invalid rewrite."""
    proto = onnx.load_model(str(EXAMPLES / "msdomain_int16_opset13.onnx"))
    relu = next(n for n in proto.graph.node if n.op_type == "Relu")
    relu.attribute.append(onnx.helper.make_attribute("alpha", 0.5))
    source = tmp_path / "model.onnx"
    source.write_bytes(proto.SerializeToString())
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(proto, full_check=True)  # the premise
    result = run(str(source))
    assert result.exit_code == 1
    assert f"{source}: the input model is invalid (onnx.checker: " in result.stderr
    assert "alpha" in result.stderr and "would be invalid" not in result.stderr
    assert _listing(tmp_path) == ["model.onnx"]
