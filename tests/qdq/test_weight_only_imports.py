"""com.microsoft weight-only nodes without a com.microsoft opset import, as ONNX Runtime's
own weight-only quantizer writes them (MatMulNBitsQuantizer with GPTQ, k-quant, INC RTN:
the model imports only ai.onnx). ONNX Runtime runs them, reading the nodes as
com.microsoft 1: check warns (QL103, safe fix), info and the rules read them as version
1, every rewrite proceeds and adds the import. A model-local function has its own imports
and ONNX Runtime refuses one without com.microsoft: an error there (QL106).

Each producer pattern is built here: MatMulNBits and GatherBlockQuantized, in the main
graph and in a function. What ONNX Runtime does with each is asserted, not assumed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from nbits_weights import gather_block_quantized_model, matmul_nbits_model
from onnx import helper

from qlrewrite.checking.checker import check_path
from qlrewrite.cli import main

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"


def _without_ms_import(model: onnx.ModelProto, opset: int | None = None) -> onnx.ModelProto:
    """``model`` importing only ai.onnx (at ``opset``, else its own), as ORT's GPTQ writes."""
    onnx_opset = opset or next(o.version for o in model.opset_import if o.domain == "")
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", onnx_opset))
    return model


def _matmul(opset: int = 17) -> onnx.ModelProto:
    """ORT 1.32's GPTQ / k-quant output: MatMulNBits, 4 bits, block 32, ai.onnx 17 only."""
    model = matmul_nbits_model(np.random.default_rng(7), n=16, k=64, bits=4, block_size=32)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2  # A: [2, 64]
    return _without_ms_import(model, opset)


def _gather() -> onnx.ModelProto:
    model, _ = gather_block_quantized_model(
        np.random.default_rng(8),
        dtype="uint8",
        shape=(8, 16),
        bits=4,
        block_size=16,
        quantize_axis=1,
        gather_axis=0,
        zero_points=True,
    )
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 3  # indices: [3]
    return _without_ms_import(model)


BUILDERS = {"MatMulNBits": _matmul, "GatherBlockQuantized": _gather}


def _in_function(model: onnx.ModelProto, function_imports_ms: bool) -> onnx.ModelProto:
    """The model's one node moved into a model-local function ``local.f`` (its
    initializers become Constant nodes there); the model imports no com.microsoft."""
    graph = model.graph
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in graph.initializer]
    imports = [helper.make_opsetid("", 21)]
    if function_imports_ms:
        imports.append(helper.make_opsetid(MS, 1))
    inputs, outputs = [i.name for i in graph.input], [o.name for o in graph.output]
    function = helper.make_function(
        "local", "f", inputs, outputs, [*consts, graph.node[0]], opset_imports=imports
    )
    call = helper.make_node("f", inputs, outputs, domain="local", name="call")
    main_graph = helper.make_graph([call], "g", list(graph.input), list(graph.output))
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]
    return helper.make_model(main_graph, opset_imports=opsets, functions=[function], ir_version=10)


def _ort_runs(model: onnx.ModelProto | Path) -> bool:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def _cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def _imports(path: Path) -> dict[str, int]:
    return {o.domain: o.version for o in onnx.load(path).opset_import}


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("op", BUILDERS)
def test_ort_runs_it_and_check_warns_with_a_safe_fix(tmp_path: Path, op: str) -> None:
    model = BUILDERS[op]()
    assert _ort_runs(model)  # what makes it a warning
    with pytest.raises(onnx.checker.ValidationError, match="No opset import"):
        onnx.checker.check_model(model)  # what makes it worth one
    path = _save(model, tmp_path / "m.onnx")
    report = check_path(path)
    assert [(f.rule, f.severity) for f in report.findings] == [("QL103", "warning")]
    assert "not imported" in report.findings[0].message
    code, out = _cli("check", path)
    assert code == 0 and "1 fixable with --fix" in out
    assert _cli("check", path, "--strict")[0] == 1
    code, out = _cli("check", path, "--fix", "--verify")
    assert code == 0 and "verify: exact" in out, out
    assert _imports(tmp_path / "m.fix.onnx")[MS] == 1
    assert _cli("check", tmp_path / "m.fix.onnx", "--strict")[0] == 0


def test_the_other_rules_read_the_node_as_com_microsoft_1(tmp_path: Path) -> None:
    """Without the import the node's version was unknown and its rules were skipped."""
    model = _matmul()
    for attr in model.graph.node[0].attribute:
        if attr.name == "bits":
            attr.i = 3
    rules = {f.rule for f in check_path(_save(model, tmp_path / "m.onnx")).findings}
    assert {"QL103", "QL204"} <= rules


@pytest.mark.parametrize("op", BUILDERS)
def test_info_has_every_field_and_names_the_missing_import(tmp_path: Path, op: str) -> None:
    path = _save(BUILDERS[op](), tmp_path / "m.onnx")
    code, out = _cli("info", path, "--format", "json")
    assert code == 0
    summary = json.loads(out)
    assert summary["opset_imports"] == {"ai.onnx": 17 if op == "MatMulNBits" else 21}
    assert summary["implied_imports"] == {MS: 1}
    (row,) = summary["weight_only"]
    assert row["version"] == 1 and row["bits"] == 4 and row["block_size"] in (16, 32)
    if op == "MatMulNBits":
        assert (row["K"], row["N"], row["accuracy_level"]) == (64, 16, 0)
    else:
        assert (row["shape"], row["quantize_axis"]) == ([8, 32], 1)
    code, out = _cli("info", path)
    assert code == 0 and "com.microsoft not imported (ONNX Runtime reads it as 1)" in out


COMMANDS = {
    "fold": ["fold"],
    "fold-dequantize": ["fold", "--dequantize-weights"],
    "convert-onnx": ["convert", "--to", "onnx"],
    "convert-ms": ["convert", "--to", "com.microsoft"],
    "upgrade": ["upgrade", "--opset", "21"],
    "upgrade-convert": ["upgrade", "--opset", "21", "--convert-weight-only"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("op", BUILDERS)
def test_every_rewrite_proceeds_and_adds_the_import(tmp_path: Path, op: str, command: str) -> None:
    model = BUILDERS[op]()
    if command == "convert-onnx":
        model.opset_import[0].version = 21  # blocked DequantizeLinear needs 21
    source, out = _save(model, tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, text = _cli(*COMMANDS[command], source, "-o", out, "--verify")
    assert code == 0, text
    assert "verify: exact" in text and "opset imports added 1" in text
    assert "the output imports com.microsoft 1" in text
    onnx.checker.check_model(onnx.load(out), full_check=True)
    uses_ms = any(n.domain == MS for n in onnx.load(out).graph.node)
    assert _imports(out).get(MS) == (1 if uses_ms else None)
    dequantized = command == "fold-dequantize"  # a float model: QL607 says so
    assert _cli("check", out, "--strict", *(["--ignore", "QL607"] if dequantized else []))[0] == 0


@pytest.mark.parametrize("op", BUILDERS)
def test_a_function_with_its_own_import_is_clean(tmp_path: Path, op: str) -> None:
    model = _in_function(BUILDERS[op](), function_imports_ms=True)
    assert _ort_runs(model)
    onnx.checker.check_model(model, full_check=True)
    assert check_path(_save(model, tmp_path / "m.onnx")).findings == []


@pytest.mark.parametrize("op", BUILDERS)
def test_a_function_without_the_import_is_an_error(tmp_path: Path, op: str) -> None:
    """ORT refuses it ("No opset registered for domain com.microsoft in function f"),
    whatever the model imports: QL106, an error, and the fix is unsafe (unverifiable)."""
    model = _in_function(BUILDERS[op](), function_imports_ms=False)
    assert not _ort_runs(model)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    assert not _ort_runs(model)  # the model's import does not reach the function
    path = _save(model, tmp_path / "m.onnx")
    report = check_path(path)
    assert [(f.rule, f.severity, f.graph) for f in report.findings] == [
        ("QL106", "error", "function:local.f")
    ]
    assert _cli("fold", path, "-o", tmp_path / "f.onnx")[0] == 1
    assert _cli("check", path, "--fix")[0] == 1 and not (tmp_path / "m.fix.onnx").exists()
    code, out = _cli("check", path, "--fix", "--unsafe-fixes")
    assert code == 0, out
    fixed = onnx.load(tmp_path / "m.fix.onnx")
    assert {o.domain: o.version for o in fixed.functions[0].opset_import}[MS] == 1
    assert _ort_runs(fixed)


def _in_if_branch(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's one node moved into the then-branch of an If (its initializers become
    Constant nodes there); the model imports only ai.onnx."""
    graph = model.graph
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in graph.initializer]
    out = graph.output[0].name
    then = helper.make_graph(
        [*consts, graph.node[0]],
        "then",
        [],
        [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["z"], value_float=0.0)],
        "else",
        [],
        [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)],
    )
    cond = helper.make_tensor("c", onnx.TensorProto.BOOL, [], [True])
    nodes = [
        helper.make_node("Constant", [], ["cond"], value=cond),
        helper.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=other),
    ]
    outputs = [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)]
    main_graph = helper.make_graph(nodes, "g", list(graph.input), outputs)
    return helper.make_model(main_graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_a_subgraph_of_the_main_graph_reads_the_models_imports(tmp_path: Path) -> None:
    """ORT gives the model's implied import to its subgraphs too: a warning, and the
    rewrites add the import."""
    model = _in_if_branch(_matmul())
    assert _ort_runs(model)
    path = _save(model, tmp_path / "m.onnx")
    findings = check_path(path).findings
    assert [(f.rule, f.graph) for f in findings] == [("QL103", "main/If(out).then_branch")]
    code, out = _cli("fold", path, "--dequantize-weights", "-o", tmp_path / "f.onnx", "--verify")
    assert code == 0 and "verify: exact" in out and "opset imports added 1" in out, out
