"""model_io.save: atomic (a failure leaves nothing, an existing output intact), the
external data policy, and one real > 2 GB round trip (marked slow)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from model_io_fixtures import matmul_model, weights, write_external_model
from test_model_io import _sparse_external_model

from qlrewrite.errors import InputError
from qlrewrite.io import atomic, model_io, tensors


def _inline_model(folder: Path, name: str = "in.onnx", k: int = 64, n: int = 32) -> Path:
    path = folder / name
    path.write_bytes(matmul_model(k=k, n=n).SerializeToString())
    return path


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _locations(path: Path) -> set[str]:
    """The external data locations the saved model names (read with onnx, not model_io)."""
    proto = onnx.load_model(str(path), load_external_data=False)
    return {
        entry.value
        for tensor in proto.graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data
        if entry.key == "location"
    }


def _weights_of(path: Path) -> np.ndarray:
    """W as onnx itself reads it (external data resolved beside ``path``)."""
    proto = onnx.load_model(str(path))
    (tensor,) = [t for t in proto.graph.initializer if t.name == "W"]
    return onnx.numpy_helper.to_array(tensor)


# --------------------------------------------------------------------------- atomic


def _failing_save(fail_after_bytes: int = 10):
    """An ir.save that writes part of the model (and of a data file), then fails."""

    def save(model: ir.Model, path: Any, **kwargs: Any) -> None:
        path = Path(path)
        path.write_bytes(b"\x08\x0a" + b"\0" * fail_after_bytes)
        if kwargs.get("external_data"):
            (path.parent / kwargs["external_data"]).write_bytes(b"\1" * fail_after_bytes)
        raise OSError(28, "No space left on device")

    return save


@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("existing", [False, True])
def test_failure_mid_write_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, external: bool, existing: bool
) -> None:
    source = _inline_model(tmp_path)
    model = model_io.load(source)
    out = tmp_path / "out.onnx"
    old = {}
    if existing:
        model_io.save(model, out, external_data=external)
        old = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != source.name}
    before = _listing(tmp_path)
    monkeypatch.setattr(model_io.ir, "save", _failing_save())
    monkeypatch.setattr(model_io, "save_inline", _failing_save())  # without external data
    with pytest.raises(InputError, match="cannot write the output: the disk is full"):
        model_io.save(model, out, external_data=external)
    assert _listing(tmp_path) == before  # no partial output, no stray temporary
    for name, data in old.items():
        assert (tmp_path / name).read_bytes() == data


def _fail_at(step: str) -> Any:
    """A commit step hook that raises at ``step`` (an I/O error there)."""

    def hook(name: str) -> None:
        if name == step:
            raise OSError(5, "Input/output error")

    return hook


def _old_output(folder: Path) -> tuple[Path, np.ndarray]:
    """An existing output (model + data) that a new save is about to replace."""
    out, w = write_external_model(folder, "out.onnx", seed=7)
    return out, w


@pytest.mark.parametrize("step", ["locked", "data-in-place", "before-model-rename"])
def test_failure_before_the_model_rename_leaves_the_old_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The model's rename fails after the new data file went into place (and earlier
    steps): the old output and its data are exactly as they were, nothing else left."""
    source, _ = write_external_model(tmp_path, "in.onnx")
    out, old_w = _old_output(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    model = model_io.load(source)
    monkeypatch.setattr(atomic, "_step", _fail_at(step))
    with pytest.raises(InputError, match="Input/output error"):
        model_io.save(model, out)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    np.testing.assert_array_equal(_weights_of(out), old_w)


def test_real_model_rename_failure_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.replace of the model itself fails (only the commit's call is made to fail:
    onnx_ir's own writes go through untouched)."""
    source, _ = write_external_model(tmp_path, "in.onnx")
    out, old_w = _old_output(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    model = model_io.load(source)
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst) == out:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(InputError, match="Input/output error"):
        model_io.save(model, out)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    np.testing.assert_array_equal(_weights_of(out), old_w)


def test_interrupted_data_write_leaves_the_old_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data file's write stops half way (an interrupt while a tensor is written):
    the old output and its data are as they were, no temporary left."""
    source, _ = write_external_model(tmp_path, "in.onnx")
    out, old_w = _old_output(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    model = model_io.load(source)

    def interrupt(tensor: Any, info: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model_io.save(model, out, callback=interrupt)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    np.testing.assert_array_equal(_weights_of(out), old_w)


def test_failed_commit_removes_a_new_data_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, _ = write_external_model(tmp_path, "in.onnx")
    model = model_io.load(source)
    before = _listing(tmp_path)
    monkeypatch.setattr(atomic, "_step", _fail_at("before-model-rename"))
    with pytest.raises(InputError):
        model_io.save(model, tmp_path / "out.onnx")
    assert _listing(tmp_path) == before


def test_successful_save_leaves_only_the_output(tmp_path: Path) -> None:
    source = _inline_model(tmp_path)
    model = model_io.load(source)
    assert model_io.save(model, tmp_path / "out.onnx") is None
    assert _listing(tmp_path) == ["in.onnx", "out.onnx"]
    np.testing.assert_array_equal(_weights_of(tmp_path / "out.onnx"), weights((64, 32)))


def test_overwritten_files_keep_their_permissions(tmp_path: Path) -> None:
    source, _ = write_external_model(tmp_path, "model.onnx")
    os.chmod(source, 0o640)
    os.chmod(tmp_path / "model.onnx.data", 0o600)
    data = model_io.save(model_io.load(source), source)
    assert source.stat().st_mode & 0o777 == 0o640
    assert data is not None and data.stat().st_mode & 0o777 == 0o600  # the data it replaced


def test_save_refuses_missing_folder_and_directory_target(tmp_path: Path) -> None:
    model = model_io.load(_inline_model(tmp_path))
    with pytest.raises(InputError, match="output folder does not exist"):
        model_io.save(model, tmp_path / "nope" / "out.onnx")
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        model_io.save(model, tmp_path / "dir.onnx")
    assert _listing(tmp_path) == ["dir.onnx", "in.onnx"]


# --------------------------------------------------------------------------- external data


def test_external_input_gives_external_output_in_another_folder(tmp_path: Path) -> None:
    """Re-saving into another folder copies the data: nothing points back at the source."""
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir()
    out_dir.mkdir()
    source, w = write_external_model(src_dir, "model.onnx")
    model = model_io.load(source)
    data = model_io.save(model, out_dir / "copy.onnx")
    assert data == out_dir / "copy.onnx.data"
    assert _listing(out_dir) == ["copy.onnx", "copy.onnx.data"]
    assert _locations(out_dir / "copy.onnx") == {"copy.onnx.data"}
    shutil.rmtree(src_dir)
    np.testing.assert_array_equal(_weights_of(out_dir / "copy.onnx"), w)
    reloaded = model_io.load(out_dir / "copy.onnx")
    np.testing.assert_array_equal(reloaded.graph.initializers["W"].const_value.numpy(), w)


def test_external_model_saved_over_itself(tmp_path: Path) -> None:
    """In place: the new data file is written while the old one is still being read."""
    source, w = write_external_model(tmp_path, "model.onnx")
    model = model_io.load(source)
    data = model_io.save(model, source)
    assert data is not None and data.name != "model.onnx.data"  # the old one was in use
    # The in-memory model still reads the old data file: it is kept (the default)...
    assert sorted(_listing(tmp_path)) == sorted(["model.onnx", "model.onnx.data", data.name])
    assert _locations(source) == {data.name}
    np.testing.assert_array_equal(_weights_of(source), w)
    np.testing.assert_array_equal(model.graph.initializers["W"].const_value.numpy(), w)
    # ...and the next save in place removes the data file the model it replaces named,
    # not model.onnx.data, which no model being replaced names (third audit: a file is
    # never removed for its name alone; another model may read it).
    again = model_io.save(model_io.load(source), source, keep=[])
    assert again is not None
    assert sorted(_listing(tmp_path)) == sorted(["model.onnx", "model.onnx.data", again.name])
    np.testing.assert_array_equal(_weights_of(source), w)


def test_threshold_decides_external_data(tmp_path: Path) -> None:
    model = model_io.load(_inline_model(tmp_path))  # 8 KiB of weights
    assert model_io.save(model, tmp_path / "small.onnx", threshold=1 << 20) is None
    assert _locations(tmp_path / "small.onnx") == set()
    data = model_io.save(model, tmp_path / "big.onnx", threshold=1000)
    assert data == tmp_path / "big.onnx.data"
    assert _locations(tmp_path / "big.onnx") == {"big.onnx.data"}
    np.testing.assert_array_equal(_weights_of(tmp_path / "big.onnx"), weights((64, 32)))


def test_forced_external_data_on_and_off(tmp_path: Path) -> None:
    inline = model_io.load(_inline_model(tmp_path))
    model_io.save(inline, tmp_path / "forced.onnx", external_data=True)
    assert _locations(tmp_path / "forced.onnx") == {"forced.onnx.data"}
    source, w = write_external_model(tmp_path, "ext.onnx")
    external = model_io.load(source)
    assert model_io.save(external, tmp_path / "inlined.onnx", external_data=False) is None
    assert _locations(tmp_path / "inlined.onnx") == set()
    assert not (tmp_path / "inlined.onnx.data").exists()
    # The in-memory model still points at its external data afterwards.
    assert isinstance(external.graph.initializers["W"].const_value, ir.ExternalTensor)
    source.unlink()
    (tmp_path / "ext.onnx.data").unlink()
    np.testing.assert_array_equal(_weights_of(tmp_path / "inlined.onnx"), w)


def test_no_empty_data_file(tmp_path: Path) -> None:
    """External data asked for, but every tensor is too small to go out: no 0-byte file."""
    proto = matmul_model(k=4, n=2)
    (tmp_path / "in.onnx").write_bytes(proto.SerializeToString())
    model = model_io.load(tmp_path / "in.onnx")
    assert model_io.save(model, tmp_path / "out.onnx", external_data=True) is None
    assert _listing(tmp_path) == ["in.onnx", "out.onnx"]


def test_no_external_data_above_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_io.load(_inline_model(tmp_path))
    monkeypatch.setattr(model_io, "EXTERNAL_DATA_THRESHOLD", 1000)
    before = _listing(tmp_path)
    with pytest.raises(InputError, match="drop --no-external-data"):
        model_io.save(model, tmp_path / "out.onnx", external_data=False)
    assert _listing(tmp_path) == before


def test_small_tensors_stay_inline_with_external_data(tmp_path: Path) -> None:
    proto = matmul_model()
    proto.graph.initializer.append(onnx.helper.make_tensor("tiny", 1, [2], [1.0, 2.0]))
    (tmp_path / "in.onnx").write_bytes(proto.SerializeToString())
    model = model_io.load(tmp_path / "in.onnx")
    model_io.save(model, tmp_path / "out.onnx", external_data=True)
    saved = onnx.load_model(str(tmp_path / "out.onnx"), load_external_data=False)
    where = {t.name: t.data_location for t in saved.graph.initializer}
    assert where == {"W": onnx.TensorProto.EXTERNAL, "tiny": onnx.TensorProto.DEFAULT}


# --------------------------------------------------------------------------- > 2 GB


@pytest.mark.slow
def test_round_trip_above_2gb(tmp_path: Path) -> None:
    """2.25 GiB of external weights re-saved into another folder, and 2.25 GiB of
    in-memory weights saved with the default policy (which must pick external data)."""
    side, count = 4096, 36  # 36 tensors of 64 MiB
    tensor_bytes = side * side * 4
    src = tmp_path / "src"
    src.mkdir()
    path = _sparse_external_model(src, n_tensors=count, tensor_bytes=tensor_bytes)
    with open(src / "big.onnx.data", "r+b") as handle:
        for i in range(count):  # a marker at the start and end of every tensor
            handle.seek(i * tensor_bytes)
            handle.write(np.float32(i + 1).tobytes())
            handle.seek((i + 1) * tensor_bytes - 4)
            handle.write(np.float32(-(i + 1)).tobytes())
    model = model_io.load(path)
    assert tensors.initializer_bytes(model) > 2**31
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(InputError):
        model_io.save(model, out_dir / "inline.onnx", external_data=False)
    model_io.save(model, out_dir / "big.onnx")
    shutil.rmtree(src)
    assert _locations(out_dir / "big.onnx") == {"big.onnx.data"}
    copy = model_io.load(out_dir / "big.onnx")
    for i in (0, count // 2, count - 1):
        values = copy.graph.initializers[f"W{i}"].const_value.numpy().ravel()
        assert values[0] == i + 1 and values[-1] == -(i + 1) and not values[1:-1].any()
    del copy
    shutil.rmtree(out_dir)

    # In-memory weights above the threshold: external data chosen without being asked.
    in_memory = ir.Model(
        ir.Graph([], [], nodes=[], initializers=[], name="g", opset_imports={"": 21}),
        ir_version=10,
    )
    for i in range(count):
        array = np.zeros((side, side), np.float32)  # untouched pages: no real memory
        array[0, 0] = i
        value = ir.Value(name=f"W{i}", const_value=ir.Tensor(array, name=f"W{i}"))
        in_memory.graph.register_initializer(value)
        in_memory.graph.outputs.append(value)
    out_dir.mkdir()
    assert model_io.save(in_memory, out_dir / "mem.onnx") == out_dir / "mem.onnx.data"
    reloaded = model_io.load(out_dir / "mem.onnx")
    assert reloaded.graph.initializers["W35"].const_value.numpy()[0, 0] == 35


def test_the_data_file_is_handed_to_the_disk_tensor_by_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each tensor's bytes are handed to the system as the next one starts (so the fsync
    before the commit does not do all the writing): the hint covers the data file from 0
    to the last tensor's offset, in order, and the bytes written are unchanged."""
    ranges: list[tuple[int, int]] = []
    advise = os.posix_fadvise

    def recorded(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED:
            ranges.append((offset, length))
        advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recorded)
    arrays = [weights((64, 32), seed) for seed in range(3)]
    inits = [onnx.numpy_helper.from_array(a, f"W{i}") for i, a in enumerate(arrays)]
    nodes = [onnx.helper.make_node("Add", ["W0", "W1"], ["s"])]
    nodes.append(onnx.helper.make_node("Add", ["s", "W2"], ["y"]))
    graph = onnx.helper.make_graph(
        nodes, "g", [], [onnx.helper.make_tensor_value_info("y", 1, [64, 32])], inits
    )
    model = ir.serde.deserialize_model(onnx.helper.make_model(graph))
    out = tmp_path / "out.onnx"
    model_io.save(model, out, external_data=True)
    size = arrays[0].nbytes
    assert ranges == [(0, size), (size, size)]  # the last one: the fsync's
    for i, array in enumerate(arrays):
        got = onnx.load_model(str(out)).graph.initializer[i]
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(got), array)
