"""`qlrewrite fold` on files: outputs, refusals, dry runs, reports, external data."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from ort_quantized import inputs_for, quantized, run_ort

from qlrewrite.cli import main
from qlrewrite.cli.fold import parse_size
from qlrewrite.io import model_io
from qlrewrite.passes.fold.tensor import FoldedTensor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = "mlp-qdq-pair-weights"  # DQ weights, Q -> DQ pairs, activations: every fold kind


def _hash(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _fold(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["fold", *args])
    return result.exit_code, result.stderr


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "model.onnx"
    path.parent.mkdir()
    onnx.save_model(quantized(CONFIG), path)
    return path


def test_default_output_is_beside_the_input_and_input_is_unchanged(model_file: Path) -> None:
    before = _hash(model_file.parent)
    code, err = _fold(str(model_file))
    assert code == 0, err
    output = model_file.with_name("model.fold.onnx")
    assert output.is_file()
    assert "dq folded 8" in err and "q folded 8" in err
    assert _hash(model_file.parent) == {
        **before,
        output.name: _hash(model_file.parent)[output.name],
    }
    feeds = inputs_for("mlp")
    folded = onnx.load_model(output)
    assert not [n for n in folded.graph.node if n.input[0].startswith("w")]
    for a, b in zip(run_ort(output, feeds), run_ort(model_file, feeds), strict=True):
        assert a.tobytes() == b.tobytes()


def test_keep_dq_keeps_every_dequantize(model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.onnx"
    code, err = _fold(str(model_file), "-o", str(out), "--keep-dq", "-q")
    assert code == 0 and err == ""
    ops = [n.op_type for n in onnx.load_model(out).graph.node]
    original = [n.op_type for n in quantized(CONFIG).graph.node]
    assert ops.count("DequantizeLinear") == original.count("DequantizeLinear")
    assert ops.count("QuantizeLinear") == original.count("QuantizeLinear") - 8


def test_dry_run_and_report_write_no_model(model_file: Path, tmp_path: Path) -> None:
    before = _hash(model_file.parent)
    report = tmp_path / "report.json"
    code, err = _fold(str(model_file), "--dry-run", "--report", str(report))
    assert code == 0, err
    assert "would write" in err
    assert _hash(model_file.parent) == before
    data = json.loads(report.read_text())
    summary = data["changes"]["FoldPass"]
    assert summary["dq_folded"] == 8 and summary["chains_folded"] == 8
    assert data["written"] is False and data["dry_run"] is True
    assert 0 < data["initializer_bytes"]["after"] < data["initializer_bytes"]["before"]


@pytest.mark.parametrize(("limit", "code"), [("1KB", 1), ("0.0001GiB", 1), ("1GB", 0)])
def test_max_size(
    model_file: Path, tmp_path: Path, limit: str, code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    computed: list[int] = []
    original = FoldedTensor._kernel
    monkeypatch.setattr(
        FoldedTensor, "_kernel", lambda self, *a: computed.append(self.nbytes) or original(self, *a)
    )
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    exit_code, err = _fold(str(model_file), "-o", str(out), "--max-size", limit)
    assert exit_code == code, err
    if code:
        assert "--max-size" in err and "nothing written" in err
        assert list(out.parent.iterdir()) == []
        assert all(size <= 1024 for size in computed)  # refused before computing weights
    else:
        assert out.is_file()


def test_bad_max_size_is_a_usage_error(model_file: Path) -> None:
    code, err = _fold(str(model_file), "--max-size", "lots")
    assert code == 2 and "not a size" in err


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4GB", 4 * 10**9),
        ("500MB", 500 * 10**6),
        ("1.5GiB", 3 * 2**29),
        ("1024", 1024),
        ("2 kib", 2048),
        ("7b", 7),
        ("3G", 3 * 10**9),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GB", "-1GB", "1XB", "1.2.3MB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_model_with_error_findings_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "bad.onnx"
    shutil.copy(EXAMPLES / "invalid_per_axis_scale.onnx", source)
    out = tmp_path / "out.onnx"
    code, err = _fold(str(source), "-o", str(out))
    assert code == 1
    assert "QL403" in err and "nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


def test_output_equal_to_input_needs_in_place(model_file: Path) -> None:
    before = _hash(model_file.parent)
    code, err = _fold(str(model_file), "-o", str(model_file))
    assert code == 2 and "--in-place" in err
    assert _hash(model_file.parent) == before
    code, err = _fold(str(model_file), "--in-place", "-q")
    assert code == 0, err
    assert _hash(model_file.parent) != before
    assert "DequantizeLinear" not in {
        n.op_type for n in onnx.load_model(model_file).graph.node if n.input[0].startswith("w")
    }


def test_external_data_is_kept(tmp_path: Path) -> None:
    source = tmp_path / "ext.onnx"
    model_io.save(ir.serde.deserialize_model(quantized(CONFIG)), source, external_data=True)
    assert (tmp_path / "ext.onnx.data").is_file()
    out = tmp_path / "out" / "folded.onnx"
    out.parent.mkdir()
    code, err = _fold(str(source), "-o", str(out), "-q")
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["folded.onnx", "folded.onnx.data"]
    proto = onnx.load_model(out, load_external_data=False)
    external = [t.name for t in proto.graph.initializer if t.data_location == 1]
    assert "w_up_DequantizeLinear_Output" in external
    feeds = inputs_for("mlp")
    for a, b in zip(run_ort(out, feeds), run_ort(source, feeds), strict=True):
        assert np.array_equal(a, b)


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "junk.onnx"
    bad.write_bytes(b"\x00not a model")
    code, err = _fold(str(bad))
    assert code == 2 and err.startswith("qlrewrite: error:") and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.onnx"]


def test_help_ends_with_examples() -> None:
    result = CliRunner().invoke(main, ["fold", "--help"])
    assert result.exit_code == 0
    assert "--keep-dq" in result.output and "--max-size" in result.output
    assert result.output.rstrip().splitlines()[-9].strip() == "Examples:"


def test_in_place_with_external_data(tmp_path: Path) -> None:
    source = tmp_path / "ext.onnx"
    proto = quantized(CONFIG)
    model_io.save(ir.serde.deserialize_model(proto), source, external_data=True)
    code, err = _fold(str(source), "--in-place", "-q")
    assert code == 0, err
    # The in-place output's data has a new name (the old file was in use by the input
    # while the new one was written) and the old data file is gone.
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and names[0] == "ext.onnx"
    assert re.fullmatch(r"ext\.onnx\.[0-9a-f]{8}\.data", names[1])
    feeds = inputs_for("mlp")
    for a, b in zip(run_ort(source, feeds), run_ort(proto, feeds), strict=True):
        assert a.tobytes() == b.tobytes()
