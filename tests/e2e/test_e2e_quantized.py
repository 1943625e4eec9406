"""End to end, through the CLI: models written by onnxruntime.quantization in every
configuration of tests/ort_quantized.py are checked, folded, converted and upgraded, alone
and in chains, each rewrite verified bit for bit in ONNX Runtime (``--verify``, no
tolerance). A refusal must be clean: exit 1 and nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from click.testing import CliRunner
from ort_quantized import CONFIGS, INVALID_CONFIGS, inputs_for, model_name_of, quantized, run_ort

from qlrewrite.cli import main

pytest.importorskip("onnxruntime")

VALID = [c for c in CONFIGS if c not in INVALID_CONFIGS]
MS = "com.microsoft"

#: (configuration, target domain) that convert must refuse, and why. (ORT's quantizer raises
#: the opset to 21 for int16 even with contrib ops, so those convert to ai.onnx.)
CONVERT_REFUSALS = {
    ("cnn-int4-per-channel-contrib", "onnx"): "int4 needs ai.onnx opset 21; the model has 13",
}
#: Configs whose blocked DQ -> MatMul become com.microsoft MatMulNBits (--to com.microsoft).
TO_MATMUL_NBITS = ("mlp-nbits-sym", "mlp-nbits-asym")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("quantized")
    paths = {}
    for config in CONFIGS:
        paths[config] = folder / f"{config}.onnx"
        onnx.save_model(quantized(config), paths[config])
    return paths


def _cli(*args: Any) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    text = result.output + result.stderr
    assert "Traceback" not in text, text
    return result.exit_code, result.stderr


def _rewrite(command: str, source: Path, out: Path, *args: Any) -> tuple[int, str, dict | None]:
    """Run a rewriting command with --verify; on exit 0 the verification must be exact."""
    report = out.with_suffix(".json")
    code, err = _cli(
        command, source, *args, "-o", out, "--verify", "--verify-runs", 2, "--report", report
    )
    document = json.loads(report.read_text()) if report.exists() else None
    if code == 0:
        assert out.exists(), err
        assert document is not None and document["verify"]["status"] == "exact", err
        onnx.checker.check_model(onnx.load(out), full_check=True)
    else:
        assert code == 1, err
        assert not out.exists(), err
    return code, err, document


def _count(graph: onnx.GraphProto, op_type: str) -> int:
    return sum(n.op_type == op_type for n in graph.node)


def _domains(path: Path) -> set[str]:
    return {
        n.domain or ""
        for n in onnx.load(path).graph.node
        if n.op_type in ("QuantizeLinear", "DequantizeLinear")
    }


def _opset(path: Path) -> int:
    return next(o.version for o in onnx.load(path).opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("config", VALID)
def test_check_has_no_errors(models: dict[str, Path], config: str) -> None:
    code, err = _cli("check", models[config])
    assert code == 0, err


@pytest.mark.parametrize("keep_dq", [False, True], ids=["fold", "fold-keep-dq"])
@pytest.mark.parametrize("config", VALID)
def test_fold(models: dict[str, Path], tmp_path: Path, config: str, keep_dq: bool) -> None:
    out = tmp_path / "folded.onnx"
    code, err, report = _rewrite("fold", models[config], out, *(["--keep-dq"] if keep_dq else []))
    assert code == 0, err
    changes = report["changes"]["FoldPass"]
    before, after = quantized(config).graph, onnx.load(out).graph
    constants = {t.name for t in after.initializer}
    if keep_dq:  # no Q of a constant is left; every DQ stays
        assert not [
            n for n in after.node if n.op_type == "QuantizeLinear" and n.input[0] in constants
        ]
        assert _count(after, "DequantizeLinear") == _count(before, "DequantizeLinear")
    else:
        assert changes["dq_folded"] + changes["chains_folded"] > 0, changes
        assert _count(after, "DequantizeLinear") < _count(before, "DequantizeLinear")
    code, err, again = _rewrite(
        "fold", out, tmp_path / "twice.onnx", *(["--keep-dq"] if keep_dq else [])
    )
    assert code == 0, err
    assert not any(v for v in again["changes"]["FoldPass"].values() if isinstance(v, int)), again


@pytest.mark.parametrize("to", ["onnx", MS])
@pytest.mark.parametrize("config", VALID)
def test_convert(models: dict[str, Path], tmp_path: Path, config: str, to: str) -> None:
    out = tmp_path / "converted.onnx"
    code, err, _ = _rewrite("convert", models[config], out, "--to", to)
    if (config, to) in CONVERT_REFUSALS:
        assert code == 1, CONVERT_REFUSALS[config, to]
        assert "nothing written" in err
        return
    assert code == 0, err
    if to == MS and config in TO_MATMUL_NBITS:
        ops = [n.op_type for n in onnx.load(out).graph.node]
        assert "MatMulNBits" in ops and "DequantizeLinear" not in ops
        return
    assert _domains(out) == {"" if to == "onnx" else MS}


@pytest.mark.parametrize("opset", [21, 23, 25])
@pytest.mark.parametrize("config", VALID)
def test_upgrade(models: dict[str, Path], tmp_path: Path, config: str, opset: int) -> None:
    out = tmp_path / f"up{opset}.onnx"
    code, err, _ = _rewrite("upgrade", models[config], out, "--opset", opset)
    assert code == 0, err
    assert _opset(out) == opset
    assert _domains(out) == {""}  # every com.microsoft Q/DQ is expressible from opset 21


@pytest.mark.parametrize("config", VALID)
def test_upgrade_then_fold(models: dict[str, Path], tmp_path: Path, config: str) -> None:
    up, folded = tmp_path / "up.onnx", tmp_path / "folded.onnx"
    assert _rewrite("upgrade", models[config], up, "--opset", 23)[0] == 0
    code, err, _ = _rewrite("fold", up, folded)
    assert code == 0, err
    _same_outputs(models[config], folded, config)
    assert _cli("check", folded)[0] == 0


@pytest.mark.parametrize("config", VALID)
def test_convert_then_fold_then_check(models: dict[str, Path], tmp_path: Path, config: str) -> None:
    to = "onnx" if MS in _domains(models[config]) else MS
    if (config, to) in CONVERT_REFUSALS:
        up = tmp_path / "up.onnx"
        assert _rewrite("upgrade", models[config], up, "--opset", 21)[0] == 0
        source, to = up, MS
    else:
        source = models[config]
    converted, folded = tmp_path / "converted.onnx", tmp_path / "folded.onnx"
    code, err, _ = _rewrite("convert", source, converted, "--to", to)
    if (config, to) in CONVERT_REFUSALS:
        assert code == 1
        return
    assert code == 0, err
    code, err, _ = _rewrite("fold", converted, folded, "--keep-dq")
    assert code == 0, err
    assert _cli("check", folded)[0] == 0
    _same_outputs(models[config], folded, config)


def _same_outputs(original: Path, rewritten: Path, config: str) -> None:
    """Over a chain: the realistic input of the float model gives bit-identical outputs."""
    feeds = inputs_for(model_name_of(config), seed=7)
    for before, after in zip(run_ort(original, feeds), run_ort(rewritten, feeds), strict=True):
        assert before.dtype == after.dtype and before.tobytes() == after.tobytes()


def test_invalid_opset12_per_channel_is_repaired_by_upgrade(
    models: dict[str, Path], tmp_path: Path
) -> None:
    source = models["cnn-opset12-per-channel"]
    result = CliRunner().invoke(main, ["check", "--format", "json", str(source)])
    assert result.exit_code == 1
    assert "QL201" in {f["rule"] for f in json.loads(result.stdout)["files"][0]["findings"]}
    for command, args in (("fold", []), ("convert", ["--to", MS])):
        out = tmp_path / f"{command}.onnx"
        code, err = _cli(command, source, *args, "-o", out)
        assert code == 1 and not out.exists(), err
    up = tmp_path / "up13.onnx"
    # ORT cannot load the input, so --verify says unverifiable and writes nothing ...
    code, err = _cli("upgrade", source, "--opset", 13, "-o", up, "--verify")
    assert code == 1 and "cannot verify" in err and not up.exists()
    # ... and without it the repaired model is written, loads in ORT and checks clean.
    code, err = _cli("upgrade", source, "--opset", 13, "-o", up)
    assert code == 0, err
    assert _cli("check", up)[0] == 0
    run_ort(up, inputs_for("cnn"))
    code, err, _ = _rewrite("fold", up, tmp_path / "folded.onnx")
    assert code == 0, err


def test_symbolic_dims_with_input_shape(tmp_path: Path) -> None:
    """The MLP block with symbolic batch and sequence dims: --verify needs --input-shape."""
    model = quantized("mlp-per-channel-21")
    for value in (*model.graph.input, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "sequence"
    source = tmp_path / "mlp.onnx"
    onnx.save_model(model, source)
    out = tmp_path / "folded.onnx"
    code, err = _cli("fold", source, "-o", out, "--verify")
    assert code == 2 and "input 'x' has unknown dimension 0 ('batch')" in err
    assert not out.exists()
    code, err, report = _rewrite("fold", source, out, "--input-shape", "x=3,5,64")
    assert code == 0, err
    assert [o["elements"] for o in report["verify"]["outputs"]] == [2 * 3 * 5 * 64]  # 2 runs
