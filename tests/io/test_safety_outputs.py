"""Issue 12, findings 2 and 3: no output, report or data file ever replaces a file the
input reads (initializer, Constant-node and attribute data anywhere), reports are written
atomically and validated before anything is written, check -o follows the umask."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_io_fixtures import cli, external_tensor, write_external_model
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.io import atomic, model_io

WQ = (np.arange(64 * 32) % 251 - 125).astype(np.int8).reshape(64, 32)  # 8 KiB folded


def constant_model(folder: Path, location: str = "const.bin", name: str = "m.onnx") -> Path:
    """y = x @ DequantizeLinear(Wq) with Wq a Constant node whose value lives in
    ``location`` (external data of a node attribute, not an initializer)."""
    (folder / location).write_bytes(WQ.tobytes())
    value = external_tensor("Wq", WQ.shape, location, data_type=TensorProto.INT8)
    nodes = [
        helper.make_node("Constant", [], ["Wq"], name="const", value=value),
        helper.make_node("DequantizeLinear", ["Wq", "s", "zp"], ["W"], name="dq"),
        helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        initializer=[
            numpy_helper.from_array(np.float32(0.5), "s"),
            numpy_helper.from_array(np.int8(0), "zp"),
        ],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = folder / name
    path.write_bytes(proto.SerializeToString())
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# --------------------------------------------------------------------------- finding 3


def test_output_onto_constant_node_data_is_refused(tmp_path: Path) -> None:
    model = constant_model(tmp_path)
    before = _snapshot(tmp_path)
    result = cli("fold", str(model), "-o", str(tmp_path / "const.bin"))
    assert result.exit_code == 2
    assert "would overwrite the input's external data" in result.stderr
    assert _snapshot(tmp_path) == before


def test_output_whose_data_name_is_the_constant_data_keeps_it(tmp_path: Path) -> None:
    """The input's Constant reads o.onnx.data; fold -o o.onnx writes its data elsewhere
    and leaves o.onnx.data as it was."""
    model = constant_model(tmp_path, location="o.onnx.data")
    data = (tmp_path / "o.onnx.data").read_bytes()
    result = cli("fold", str(model), "-o", str(tmp_path / "o.onnx"), "--external-data")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "o.onnx.data").read_bytes() == data
    assert model_io.load(model) is not None  # the input still reads its data
    model_io.load(tmp_path / "o.onnx")


def test_files_read_lists_every_kind_of_tensor(tmp_path: Path) -> None:
    """Initializer, Constant value, TENSORS attribute, a function body and a subgraph of
    a function: one list, resolved."""
    model = constant_model(tmp_path)
    proto = onnx.load_model(str(model), load_external_data=False)
    for name in ("init.bin", "tensors.bin", "fn.bin", "branch.bin"):
        (tmp_path / name).write_bytes(b"\0" * 4)
    proto.graph.initializer.append(external_tensor("extra", [1], "init.bin"))
    proto.graph.node[0].attribute.append(
        helper.make_attribute("extras", [external_tensor("t", [1], "tensors.bin")])
    )
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=external_tensor("c", [1], "branch.bin"))],
        "then",
        [],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])],
    )
    function = helper.make_function(
        "local",
        "f",
        ["a"],
        ["b"],
        [
            helper.make_node("Constant", [], ["k"], value=external_tensor("k", [1], "fn.bin")),
            helper.make_node("If", ["a"], ["b"], then_branch=branch, else_branch=branch),
        ],
        opset_imports=[helper.make_opsetid("", 21)],
    )
    proto.functions.append(function)
    path = tmp_path / "all.onnx"
    path.write_bytes(proto.SerializeToString())
    names = [p.name for p in model_io.files_read_by(path)]
    assert names[0] == "all.onnx"
    assert sorted(names[1:]) == ["branch.bin", "const.bin", "fn.bin", "init.bin", "tensors.bin"]


# --------------------------------------------------------------------------- finding 2


@pytest.mark.parametrize("dry_run", [False, True])
def test_report_onto_input_data_is_refused(tmp_path: Path, dry_run: bool) -> None:
    model, _ = write_external_model(tmp_path, "m.onnx")
    before = _snapshot(tmp_path)
    args = ["fold", str(model), "-o", str(tmp_path / "o.onnx"), "--report"]
    result = cli(*args, str(tmp_path / "m.onnx.data"), *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 2
    assert "the report would overwrite the input's external data" in result.stderr
    assert _snapshot(tmp_path) == before


def test_report_onto_constant_data_is_refused(tmp_path: Path) -> None:
    model = constant_model(tmp_path)
    before = _snapshot(tmp_path)
    result = cli("fold", str(model), "--report", str(tmp_path / "const.bin"))
    assert result.exit_code == 2
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("report", ["o.onnx", "o.onnx.data", "o.onnx.0123abcd.data"])
def test_report_onto_the_output_or_its_data_is_refused(tmp_path: Path, report: str) -> None:
    model, _ = write_external_model(tmp_path, "m.onnx")
    out = tmp_path / "o.onnx"
    result = cli("fold", str(model), "-o", str(out), "--report", str(tmp_path / report))
    assert result.exit_code == 2
    assert "the report would overwrite" in result.stderr and "the output" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_report_that_cannot_be_written_writes_nothing(tmp_path: Path) -> None:
    """A report into a missing folder refuses before the model is written."""
    model, _ = write_external_model(tmp_path, "m.onnx")
    result = cli(
        "fold",
        str(model),
        "-o",
        str(tmp_path / "o.onnx"),
        "--report",
        str(tmp_path / "missing" / "r.json"),
    )
    assert result.exit_code == 2
    assert "output folder does not exist" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_report_write_failure_leaves_no_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's staged write fails (a full disk): the output is not moved into place
    and no temporary is left anywhere."""
    model, _ = write_external_model(tmp_path, "m.onnx")

    def full(path: Path, text: str) -> None:
        path.write_text(text[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "_write_synced", full)
    out = tmp_path / "o.onnx"
    result = cli("fold", str(model), "-o", str(out), "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 2
    assert "cannot write the report: the disk is full; nothing written" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_report_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing report is replaced by a rename (never truncated then written)."""
    model, _ = write_external_model(tmp_path, "m.onnx")
    report = tmp_path / "r.json"
    report.write_text("old")
    inode = report.stat().st_ino
    result = cli("fold", str(model), "-o", str(tmp_path / "o.onnx"), "--report", str(report))
    assert result.exit_code == 0, result.stderr
    assert report.stat().st_ino != inode and report.read_text().startswith("{")


def test_check_output_onto_input_data_is_refused(tmp_path: Path) -> None:
    model, _ = write_external_model(tmp_path, "m.onnx")
    constant = constant_model(tmp_path, name="c.onnx")
    before = _snapshot(tmp_path)
    for target in ("m.onnx.data", "const.bin"):
        result = cli("check", str(model), str(constant), "-o", str(tmp_path / target))
        assert result.exit_code == 2, target
        assert "names a model being checked or a file it reads" in result.stderr
    assert _snapshot(tmp_path) == before


def test_check_output_follows_the_umask(tmp_path: Path) -> None:
    model, _ = write_external_model(tmp_path, "m.onnx")
    old = os.umask(0o027)
    try:
        result = cli("check", str(model), "-o", str(tmp_path / "r.txt"))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "r.txt").stat().st_mode & 0o777 == 0o640
