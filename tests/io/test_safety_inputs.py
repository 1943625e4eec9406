"""Issue 12, findings 1, 4 and 8: every tensor reads its data from the model's folder
(or is refused), no command blocks on a FIFO, hostile fields give plain messages, hard
links and Hugging Face cache links are read as ONNX Runtime reads them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from model_io_fixtures import cli, external_tensor, matmul_model, weights
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.errors import InputError
from qlrewrite.io import model_io, tensors

GOOD = np.arange(4, dtype=np.float32)
DECOY = np.full(4, 666, dtype=np.float32)


def _nested_model(folder: Path) -> Path:
    """External tensors where only the top level used to get a folder: a Constant in an
    If branch inside a function, a TENSORS attribute, a Constant in a function body."""
    (folder / "w.bin").write_bytes(GOOD.tobytes())

    def ext(name: str) -> TensorProto:
        return external_tensor(name, [4], "w.bin")

    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=ext("c"))],
        "then",
        [],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])],
    )
    function = helper.make_function(
        "local",
        "f",
        ["a"],
        ["b"],
        [
            helper.make_node("Constant", [], ["k"], value=ext("k")),
            helper.make_node("If", ["a"], ["b"], then_branch=branch, else_branch=branch),
        ],
        opset_imports=[helper.make_opsetid("", 21)],
    )
    main = helper.make_graph(
        [
            helper.make_node("f", ["cond"], ["y"], domain="local"),
            helper.make_node(
                "Custom", ["y"], ["z"], domain="local", tensors_attr=[ext("t0"), ext("t1")]
            ),
        ],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
    )
    proto = helper.make_model(
        main,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        ir_version=10,
        functions=[function],
    )
    path = folder / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.fixture
def downloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The nested model in downloads/, run from home/ where a decoy w.bin lies."""
    model_dir, elsewhere = tmp_path / "downloads", tmp_path / "home"
    model_dir.mkdir()
    elsewhere.mkdir()
    (elsewhere / "w.bin").write_bytes(DECOY.tobytes())
    monkeypatch.chdir(elsewhere)
    return _nested_model(model_dir)


def test_every_tensor_reads_the_model_folder_not_the_working_folder(downloaded: Path) -> None:
    path = downloaded
    model = model_io.load(path)
    slots = list(tensors.ir_tensor_slots(model))
    assert len(slots) == 4  # k, the If branch's c (twice: then and else), the TENSORS attr
    for slot in slots:
        for tensor in slot.tensors:
            np.testing.assert_array_equal(tensor.numpy(), GOOD)


def test_fold_output_copies_the_model_folder_data(downloaded: Path) -> None:
    """cd ~ && qlrewrite convert /downloads/m.onnx: the decoy in ~ is never read."""
    path, elsewhere = downloaded, Path.cwd()
    result = cli("convert", str(path), "--to", "onnx", "-o", "o.onnx")
    assert result.exit_code == 0, result.stderr
    saved = onnx.load_model(str(elsewhere / "o.onnx"))
    values = [numpy_helper.to_array(t) for _, t in tensors.proto_tensors(saved)]
    assert len(values) == 5  # k, c in the then and else branches, the two TENSORS values
    for value in values:
        np.testing.assert_array_equal(value, GOOD)


def test_a_tensor_swapped_for_an_escaping_link_after_loading_is_refused(tmp_path: Path) -> None:
    """The folder check runs each time data is opened, not only when the model loads."""
    (tmp_path / "m").mkdir()
    path = _nested_model(tmp_path / "m")
    model = model_io.load(path)
    outside = tmp_path / "secret.bin"
    outside.write_bytes(DECOY.tobytes())
    (path.parent / "w.bin").unlink()
    (path.parent / "w.bin").symlink_to(outside)
    slot = next(iter(tensors.ir_tensor_slots(model)))
    with pytest.raises(ValueError, match="leads out of the model folder"):
        slot.tensors[0].numpy()


# --------------------------------------------------------------------------- finding 4


def _fifo_scale_model(folder: Path) -> Path:
    os.mkfifo(folder / "scale.bin")
    x = numpy_helper.from_array(np.zeros((4,), np.int8), "x")
    nodes = [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq")]
    graph = helper.make_graph(
        nodes,
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[x, external_tensor("s", [], "scale.bin")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = folder / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.parametrize("command", [["check"], ["info"], ["fold"], ["check", "--format", "json"]])
def test_no_command_blocks_on_a_fifo(tmp_path: Path, command: list[str]) -> None:
    path = _fifo_scale_model(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "qlrewrite", *command, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr
    if command[0] == "fold":
        assert "not a regular file" in done.stderr


def test_fifo_model_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.onnx")
    with pytest.raises(InputError, match="not a regular file"):
        model_io.load(tmp_path / "m.onnx")


# --------------------------------------------------------------------------- finding 8


def _with_offset(folder: Path, offset: str) -> Path:
    w = weights((64, 32))
    (folder / "w.bin").write_bytes(w.tobytes())
    tensor = external_tensor("W", w.shape, "w.bin", length=w.nbytes)
    entry = tensor.external_data.add()
    entry.key, entry.value = "offset", offset
    path = folder / "m.onnx"
    path.write_bytes(matmul_model([tensor]).SerializeToString())
    return path


@pytest.mark.parametrize("offset", ["-4", "0_0", "+0", " 0", "0x0"])
def test_offset_that_is_not_a_number_of_bytes_is_one_plain_line(
    tmp_path: Path, offset: str
) -> None:
    path = _with_offset(tmp_path, offset)
    for command in ("fold", "check"):
        result = cli(command, str(path))
        assert result.exit_code == 2, command
        assert f"external data offset {offset!r} in 'w.bin' is not a whole number" in (
            result.stderr + result.stdout
        )
        assert "lambda" not in result.stderr + result.stdout


def test_dims_that_overflow_are_one_plain_line(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"")
    proto = matmul_model()
    proto.graph.initializer.append(external_tensor("Z", [0, 2**62], "w.bin", length=0))
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    result = cli("fold", str(path))
    assert result.exit_code == 2
    assert "dims [0, 4611686018427387904] are too large for any tensor" in result.stderr


def test_full_disk_is_one_plain_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(matmul_model().SerializeToString())

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_io.ir, "save", full)
    monkeypatch.setattr(model_io, "save_inline", full)  # the save without external data
    result = cli("fold", str(path), "-o", str(tmp_path / "o.onnx"))
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(
        "cannot write the output: the disk is full; nothing written"
    )
    assert "--debug" not in result.stderr


def test_hard_linked_data_file_is_read(tmp_path: Path) -> None:
    """A data file with several links is a file of the folder (ONNX Runtime loads it)."""
    w = weights((64, 32))
    (tmp_path / "store.bin").write_bytes(w.tobytes())
    os.link(tmp_path / "store.bin", tmp_path / "w.bin")
    path = tmp_path / "m.onnx"
    path.write_bytes(matmul_model([external_tensor("W", w.shape, "w.bin")]).SerializeToString())
    model = model_io.load(path)
    np.testing.assert_array_equal(model.graph.initializers["W"].const_value.numpy(), w)
    assert cli("fold", str(path), "-o", str(tmp_path / "o.onnx")).exit_code == 0


def _hf_cache(root: Path) -> Path:
    """models--org--name/{blobs,refs,snapshots/<rev>} with the model and its data as
    relative links into blobs/, as huggingface_hub writes them."""
    repo = root / "models--org--name"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    w = weights((64, 32))
    (blobs / "1111").write_bytes(w.tobytes())
    proto = matmul_model([external_tensor("W", w.shape, "model.onnx.data")])
    (blobs / "2222").write_bytes(proto.SerializeToString())
    (snapshot / "model.onnx").symlink_to("../../blobs/2222")
    (snapshot / "model.onnx.data").symlink_to("../../blobs/1111")
    return snapshot / "model.onnx"


def test_hugging_face_cache_layout_is_read(tmp_path: Path) -> None:
    path = _hf_cache(tmp_path)
    model = model_io.load(path)
    np.testing.assert_array_equal(
        model.graph.initializers["W"].const_value.numpy(), weights((64, 32))
    )
    assert cli("check", str(path)).exit_code == 0


def test_hugging_face_cache_link_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    path = _hf_cache(tmp_path)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(weights((64, 32)).tobytes())
    data = path.parent / "model.onnx.data"
    data.unlink()
    data.symlink_to(secret)
    with pytest.raises(InputError, match="leads out of the model folder"):
        model_io.load(path)


def test_resolution_is_one_function(tmp_path: Path) -> None:
    """Validation and opening agree: what external_path refuses, a loaded tensor refuses."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "x.bin").write_bytes(b"\0" * 16)
    for location, kind in [
        ("../x.bin", "external-escapes"),
        ("/etc/passwd", "external-escapes"),
        ("nope.bin", "external-missing"),
        ("sub", "external-missing"),
    ]:
        with pytest.raises(tensors.ExternalDataError) as caught:
            tensors.external_path(
                location, tmp_path / "sub" if location == "../x.bin" else tmp_path
            )
        assert caught.value.kind == kind, location
    tensor = tensors._anchored(
        ir.ExternalTensor("nope.bin", 0, 16, ir.DataType.FLOAT, shape=ir.Shape([4]), name="t"),
        str(tmp_path),
    )
    with pytest.raises(tensors.ExternalDataError, match="not found"):
        tensor.numpy()
