"""End to end with external data, as tools write it, run from another folder: every
rewrite gives a self-contained output (model and its data file) that ONNX Runtime runs
bit-identically (``--verify``), whatever the current folder.

Layouts, as ORT's quantizer saves with ``use_external_data_format`` (tensors of 1 KiB and
more in ``<model>.data``, Constant node values included: ``convert_attribute=True``): the
quantized model as it is, and with its largest quantized weight held by a Constant node
(as exporters write weights).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import external_data_helper, helper
from ort_quantized import inputs_for, quantized, run_ort

from qlrewrite.cli import main

pytest.importorskip("onnxruntime")

COMMANDS = {
    "fold": ["fold"],
    "fold-keep-dq": ["fold", "--keep-dq"],
    "convert-ms": ["convert", "--to", "com.microsoft"],
    "upgrade-21": ["upgrade", "--opset", "21"],
}


def _constant_weight(model: onnx.ModelProto) -> onnx.ModelProto:
    """The largest quantized weight becomes a Constant node (as exporters do)."""
    graph = model.graph
    dq_inputs = {n.input[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    index, tensor = max(
        ((i, t) for i, t in enumerate(graph.initializer) if t.name in dq_inputs),
        key=lambda item: len(item[1].raw_data),
    )
    assert len(tensor.raw_data) >= 1024
    del graph.initializer[index]
    value = onnx.TensorProto()
    value.CopyFrom(tensor)
    value.name = tensor.name + "_value"
    graph.node.insert(
        0, helper.make_node("Constant", [], [tensor.name], value=value, name=tensor.name + "_const")
    )
    return model


def _layout(name: str, folder: Path) -> Path:
    model = quantized("cnn-per-channel")
    if name == "constant-attribute":
        model = _constant_weight(model)
    external_data_helper.convert_model_to_external_data(
        model,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=1024,
        convert_attribute=True,
    )
    folder.mkdir(parents=True)
    path = folder / "model.onnx"
    onnx.save_model(model, path)
    assert (folder / "model.onnx.data").exists()
    return path


def _cases() -> list:
    cases = []
    for layout in ("ort-quantizer", "constant-attribute"):
        for command in COMMANDS:
            for cwd in ("elsewhere", "input-folder"):
                cases.append(pytest.param(layout, command, cwd, id=f"{layout}-{command}-{cwd}"))
    return cases


@pytest.mark.parametrize(("layout", "command", "cwd"), _cases())
def test_external_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, command: str, cwd: str
) -> None:
    source = _layout(layout, tmp_path / "in")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd" if cwd == "elsewhere" else source.parent)
    out = tmp_path / "out" / "result.onnx"
    out.parent.mkdir()
    result = CliRunner().invoke(
        main,
        [*COMMANDS[command][:1], str(source), *COMMANDS[command][1:], "-o", str(out), "--verify"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    # Self-contained: the output folder moved elsewhere still runs, with the same outputs.
    moved = shutil.copytree(out.parent, tmp_path / "moved")
    feeds = inputs_for("cnn")
    for before, after in zip(
        run_ort(source, feeds), run_ort(moved / "result.onnx", feeds), strict=True
    ):
        assert before.tobytes() == after.tobytes()
    assert sorted(os.listdir(tmp_path / "in")) == ["model.onnx", "model.onnx.data"]
