"""Nothing lost: the third audit's data-loss classes (items 1-5, 15, 18), in general.

Cleanup removes only what the replaced model named; special files are streamed into or
refused, never replaced; two inputs never share an output; nothing a run reads is
overwritten; a model changed under an in-place run is refused; data names fit the file
system; a huge block is not padded to its size."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from example_models import DQ, MS, qdq_model
from model_io_fixtures import cli, write_external_model
from onnx import TensorProto, helper, numpy_helper

from qlrewrite import pipeline
from qlrewrite.io import atomic, model_io
from qlrewrite.pipeline import in_memory


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _run(model: Path, feeds: dict | None = None) -> list[np.ndarray]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    if feeds is None:
        feeds = {"x": np.ones((1, 64), np.float32)}
    return session.run(None, feeds)


# ------------------------------------------------------------------ 1: cleanup


def test_a_data_file_found_by_its_name_alone_is_never_removed(tmp_path: Path) -> None:
    """o.onnx does not exist, o.onnx.data does and b.onnx reads it: writing o.onnx keeps it."""
    other, _ = write_external_model(tmp_path, "o.onnx")  # o.onnx + o.onnx.data
    b = tmp_path / "b.onnx"
    other.rename(b)  # b.onnx reads o.onnx.data; no o.onnx any more
    expected = _run(b)[0]
    (tmp_path / "src").mkdir()
    src, _ = write_external_model(tmp_path / "src")
    result = cli("fold", str(src), "-o", str(tmp_path / "o.onnx"), "--external-data")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "o.onnx.data").exists()
    np.testing.assert_array_equal(_run(b)[0], expected)
    np.testing.assert_array_equal(_run(tmp_path / "o.onnx")[0], _run(src)[0])


def test_replacing_a_model_removes_the_data_it_named_and_only_that(tmp_path: Path) -> None:
    src, _ = write_external_model(tmp_path, "m.onnx")
    out = tmp_path / "out.onnx"
    stray = tmp_path / "out.onnx.0123abcd.data"  # someone else's file, same name pattern
    stray.write_bytes(b"mine")
    for _ in range(3):
        assert cli("fold", str(src), "-o", str(out), "--external-data").exit_code == 0
    data = [n for n in _listing(tmp_path) if n.startswith("out.onnx") and n.endswith(".data")]
    assert stray.read_bytes() == b"mine"
    assert len(data) == 2  # the stray file and the one the output reads
    locations = {
        e.value
        for t in onnx.load(out, load_external_data=False).graph.initializer
        for e in t.external_data
        if e.key == "location"
    }
    assert locations <= set(data) and stray.name not in locations


def _dq_with_data(folder: Path, name: str, location: str) -> Path:
    """``name``: one int8 DequantizeLinear at opset 13 whose weight is in ``location``."""
    weight = numpy_helper.from_array(
        np.arange(4096, dtype=np.int64).astype(np.int8).reshape(64, 64), "w"
    )
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    node = helper.make_node("DequantizeLinear", ["w", "s"], ["y"], name="dq")
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    graph = helper.make_graph([node], "g", [], [out], initializer=[weight, scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = folder / name
    onnx.save(model, path, save_as_external_data=True, location=location, size_threshold=1024)
    return path


@pytest.mark.parametrize("other", ["alone", "another-model-names-it", "hard-linked"])
def test_in_place_removes_the_replaced_models_data_of_another_name(
    tmp_path: Path, other: str
) -> None:
    """upgrade --in-place of a model whose data file is weights.bin (not a name qlrewrite
    gives): the new model reads m.onnx.<hex>.data and weights.bin was left behind (56 MiB
    in the report), though docs/safety.md says the replaced model's data is removed. It is
    removed now, unless another model of the folder names it or another name links to it."""
    model = _dq_with_data(tmp_path, "m.onnx", "weights.bin")
    expected = _run(model, {})[0]
    if other == "another-model-names-it":
        _dq_with_data(tmp_path, "b.onnx", "weights.bin")
    elif other == "hard-linked":
        os.link(tmp_path / "weights.bin", tmp_path / "copy.bin")
    result = cli("upgrade", "--opset", "21", "--in-place", str(model))
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(_run(model, {})[0], expected)
    assert (tmp_path / "weights.bin").exists() == (other != "alone"), _listing(tmp_path)
    if other == "another-model-names-it":
        np.testing.assert_array_equal(_run(tmp_path / "b.onnx", {})[0], expected)


# ------------------------------------------------------------------ 2: special files


def _null_device(folder: Path) -> Path:
    """A character device like /dev/null made in ``folder`` (the real one is never
    risked: a regression would replace it); skips where devices cannot be made."""
    device = folder / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device here ({exc})")
    return device


def test_reports_stream_into_a_device(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(qdq_model(DQ, 21), model)
    device = _null_device(tmp_path)
    for fmt in ("json", "text", "sarif"):
        result = cli("check", str(model), "-o", str(device), "--format", fmt)
        assert result.exit_code == 0, result.output
        assert stat.S_ISCHR(os.stat(device).st_mode)  # still the device


def test_reports_stream_into_a_fifo(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(qdq_model(DQ, 21), model)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the writer opens
    try:
        result = cli("check", str(model), "-o", str(fifo), "--format", "json")
        assert result.exit_code == 0, result.output
        text = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert text.lstrip().startswith("{")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO


def test_a_model_is_never_written_over_a_special_file(tmp_path: Path) -> None:
    src, _ = write_external_model(tmp_path, "m.onnx")
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    result = cli("fold", str(src), "-o", str(fifo))
    assert result.exit_code == 2
    assert "not a regular file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert fifo.exists() and not fifo.is_file()


def _checked_model(folder: Path) -> Path:
    model = folder / "m.onnx"
    onnx.save(qdq_model(DQ, 21), model)
    return model


def test_a_link_to_stdout_is_written_as_a_stream(tmp_path: Path) -> None:
    """``check m.onnx --format json -o LINK > report.json``, LINK -> /dev/stdout (a link of
    the test's own: the real /dev/stdout is never risked): the report reaches report.json
    through the descriptor, the link stays (it was staged beside and renamed over the
    link; report.json stayed empty)."""
    model = _checked_model(tmp_path)
    link = tmp_path / "stdout"
    link.symlink_to("/dev/stdout")
    report = tmp_path / "report.json"
    with report.open("w") as out:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "qlrewrite",
                "check",
                str(model),
                "--format",
                "json",
                "-o",
                str(link),
            ],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == "/dev/stdout"
    assert json.loads(report.read_text())["files"] is not None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".qlrewrite")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("option", ["-o", "--report"])
def test_a_link_into_proc_self_fd_is_written_as_a_stream(tmp_path: Path, option: str) -> None:
    """A link to /proc/self/fd/N (N: a descriptor of this process, open on a regular
    file), for a report of check (-o) or of a rewrite (--report): written through N."""
    model = _checked_model(tmp_path)
    target = tmp_path / "target.json"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    link = tmp_path / "out.json"
    link.symlink_to(f"/proc/self/fd/{fd}")
    try:
        if option == "-o":
            result = cli("check", str(model), "--format", "json", "-o", str(link))
        else:
            result = cli("fold", str(model), "-o", str(tmp_path / "f.onnx"), "--report", str(link))
    finally:
        os.close(fd)
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert json.loads(target.read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".qlrewrite")]


def test_a_link_to_a_fifo_is_written_as_a_stream(tmp_path: Path) -> None:
    model = _checked_model(tmp_path)
    fifo, link = tmp_path / "pipe", tmp_path / "out.json"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = cli("check", str(model), "-o", str(link), "--format", "json")
        text = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert result.exit_code == 0, result.output
    assert json.loads(text) and link.is_symlink() and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_report_through_a_link_to_a_file_replaces_the_file(tmp_path: Path) -> None:
    """A link (of this user's) to a regular file: the report replaces the file it points
    to, atomically; the link stays a link to it."""
    model = _checked_model(tmp_path)
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    result = cli("check", str(model), "-o", str(link), "--format", "json")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name != "r.json"]


@pytest.mark.parametrize("case", ["dangling", "other-users"])
def test_a_report_through_a_doubtful_link_is_refused(tmp_path: Path, case: str) -> None:
    """A link to nothing (a report would create a file where the link says), or another
    user's link (as the kernel's protected_symlinks): one line, exit 2, nothing written."""
    model = _checked_model(tmp_path)
    target, link = tmp_path / "elsewhere.json", tmp_path / "out.json"
    link.symlink_to(target)
    if case == "other-users":
        if os.geteuid() != 0:
            pytest.skip("making another user's link needs root")
        target.write_text("theirs")
        os.lchown(link, 12345, 12345)
    result = cli("check", str(model), "-o", str(link), "--format", "json")
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "link" in result.stderr
    assert link.is_symlink()
    assert (not target.exists()) if case == "dangling" else target.read_text() == "theirs"


@pytest.mark.parametrize("to", ["file", "fd"])
@pytest.mark.parametrize("option", ["-o", "--fix-output"])
def test_a_model_is_never_written_through_a_link(tmp_path: Path, to: str, option: str) -> None:
    """A model output that is a link (to a regular file, or into /proc/self/fd) is
    refused in one line: a model and its data file are written as regular files only."""
    src, _ = write_external_model(tmp_path, "m.onnx")
    if option == "--fix-output":
        src = _fixable(tmp_path / "fx.onnx")
    target = tmp_path / "target.onnx"
    target.write_bytes(b"mine")
    link = tmp_path / "link.onnx"
    fd = os.open(target, os.O_WRONLY)
    link.symlink_to(target if to == "file" else f"/proc/self/fd/{fd}")
    try:
        if option == "-o":
            result = cli("fold", str(src), "-o", str(link))
        else:
            result = cli("check", str(src), "--fix", "--fix-output", str(link))
    finally:
        os.close(fd)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "link" in result.stderr
    assert link.is_symlink() and target.read_bytes() == b"mine"


# ------------------------------------------------------------------ 3: shared outputs


def _fixable(path: Path) -> Path:
    onnx.save(qdq_model(DQ, 13, domain=MS, imports={"": 13}), path)  # QL103: safe fix
    return path


def test_two_inputs_fixed_into_one_file_are_refused_before_writing(tmp_path: Path) -> None:
    _fixable(tmp_path / "m.onnx")
    _fixable(tmp_path / "m.ONNX")
    before = _listing(tmp_path)
    result = cli("check", str(tmp_path), "--fix")
    assert result.exit_code == 1, result.output
    assert "m.fix.onnx" in result.stderr and "both" in result.stderr
    assert _listing(tmp_path) == before  # nothing written


def test_a_fix_never_overwrites_another_input(tmp_path: Path) -> None:
    _fixable(tmp_path / "m.onnx")
    other = _fixable(tmp_path / "m.fix.onnx")  # an input named like m's fix
    content = other.read_bytes()
    result = cli("check", str(tmp_path / "m.onnx"), str(other), "--fix")
    assert result.exit_code in (1, 2), result.output
    assert other.read_bytes() == content


# ------------------------------------------------------------------ 4: files read


@pytest.mark.parametrize("name", ["pyproject.toml", "qlrewrite.toml"])
def test_outputs_never_replace_the_configuration_read(tmp_path: Path, name: str) -> None:
    models = tmp_path / "models"
    models.mkdir()
    onnx.save(qdq_model(DQ, 21), models / "m.onnx")
    config = tmp_path / name
    text = (
        '[tool.qlrewrite]\nignore = ["QL6"]\n' if name == "pyproject.toml" else 'ignore = ["QL6"]\n'
    )
    config.write_text(text)
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = cli("check", "models", "-o", name)
    finally:
        os.chdir(before)
    assert result.exit_code == 2, result.output
    assert config.read_text() == text


def test_fix_output_never_replaces_another_models_data(tmp_path: Path) -> None:
    _fixable(tmp_path / "a.onnx")
    other, _ = write_external_model(tmp_path, "b.onnx")
    data = tmp_path / "b.onnx.data"
    content = data.read_bytes()
    result = cli("check", str(tmp_path / "a.onnx"), str(other), "--fix", "--fix-output", str(data))
    assert result.exit_code != 0
    assert data.read_bytes() == content


# ------------------------------------------------------------------ 5: races


def test_a_model_replaced_under_an_in_place_run_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, _ = write_external_model(tmp_path, "m.onnx")
    expected = _run(src)[0]
    original = pipeline.validate_output
    done: list[bool] = []

    def another_run_commits(*args, **kwargs):  # between this run's load and its write
        if not done:
            done.append(True)
            model_io.save(model_io.load(src), src, keep=[])
        return original(*args, **kwargs)

    monkeypatch.setattr(in_memory, "validate_output", another_run_commits)
    result = cli("fold", str(src), "--in-place")
    assert result.exit_code == 1, result.output
    assert "changed under us" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    np.testing.assert_array_equal(_run(src)[0], expected)


def test_a_commit_landing_just_before_ours_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, _ = write_external_model(tmp_path, "m.onnx")
    expected = _run(src)[0]
    done: list[bool] = []

    def step(name: str) -> None:
        if name == "staged" and not done:  # ours is staged; the other commits first
            done.append(True)
            model_io.save(model_io.load(src), src, keep=[])

    monkeypatch.setattr(atomic, "_step", step)
    result = cli("fold", str(src), "--in-place")
    assert result.exit_code == 1, result.output
    assert "changed under us" in result.stderr
    np.testing.assert_array_equal(_run(src)[0], expected)
    assert not [n for n in _listing(tmp_path) if n.startswith(".qlrewrite")]


# ------------------------------------------------------------------ 15 and 18


@pytest.mark.parametrize(
    ("k", "block"), [(32, 2**20), (32, 2**40), (512, 512), (1024, 4096), (512, 0)]
)
def test_blocks_beyond_what_ort_takes_convert_exactly(tmp_path: Path, k: int, block: int) -> None:
    """A block that covers K (2^40 once announced 16 TiB), a block above ONNX Runtime's
    256, per-channel scales over K > 256: MatMulNBits with blocks ORT runs, bit-exact."""
    n = 16
    values = (np.arange(k * n) % 7 - 3).tolist()
    x = helper.make_tensor("w", TensorProto.INT4, [k, n], values)
    scale_shape = (n,) if block == 0 else (-(-k // block), n)
    scale = np.linspace(0.1, 0.9, int(np.prod(scale_shape)), dtype=np.float32)
    s = numpy_helper.from_array(scale.reshape(scale_shape), "s")
    attrs = {"axis": 1} if block == 0 else {"axis": 0, "block_size": block}
    dq = helper.make_node("DequantizeLinear", ["w", "s"], ["wd"], **attrs)
    mm = helper.make_node("MatMul", ["a", "wd"], ["y"])
    graph = helper.make_graph(
        [dq, mm],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        initializer=[x, s],
    )
    src = tmp_path / "m.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, src)
    out = tmp_path / "o.onnx"
    result = cli("convert", str(src), "--to", "com.microsoft", "-o", str(out), "--verify")
    assert result.exit_code == 0, result.output + result.stderr
    assert "verify: exact" in result.stderr
    assert out.stat().st_size < src.stat().st_size + 2048
    nodes = onnx.load(out).graph.node
    (nbits,) = [n for n in nodes if n.op_type == "MatMulNBits"]
    made = {a.name: a.i for a in nbits.attribute}["block_size"]
    assert 16 <= made <= 256


@pytest.mark.parametrize("length", [227, 240, 250])
def test_long_output_names_can_be_written_again_and_again(tmp_path: Path, length: int) -> None:
    src, _ = write_external_model(tmp_path, "m.onnx")
    out = tmp_path / ("a" * length + ".onnx")
    for _ in range(3):
        result = cli("fold", str(src), "-o", str(out), "--external-data")
        assert result.exit_code == 0, result.stderr
    assert cli("fold", str(out), "--in-place").exit_code == 0
    data = [n for n in _listing(tmp_path) if n.startswith("a" * 100) and n.endswith(".data")]
    assert len(data) == 1 and len(data[0].encode()) <= 255
    np.testing.assert_array_equal(_run(out)[0], _run(src)[0])
