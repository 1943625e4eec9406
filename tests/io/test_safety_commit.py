"""Issue 12, findings 5 and 6: the model + data commit under kills at every step and
concurrent writers and readers; staging leftovers of killed runs; SIGTERM and SIGINT."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_io_fixtures import matmul_model, weights, write_external_model

from qlrewrite.io import atomic, model_io

STEPS = ["staged", "locked", "data-in-place", "before-model-rename", "model-in-place", "cleaned"]

# Runs `qlrewrite ARGS` with the commit step hook set to act at one step.
_RUNNER = """
import os, signal, sys, time
from qlrewrite.io import atomic
import qlrewrite.io.model_io as model_io
step, action = sys.argv[1], sys.argv[2]
def hook(name):
    if name != step:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print("ready", flush=True)
    time.sleep(60)
atomic._step = hook
if step == "writing":  # killed while the data file is being written
    real = model_io.ir.save
    def save(*args, **kwargs):
        kwargs["callback"] = lambda tensor, info: hook("writing")
        return real(*args, **kwargs)
    model_io.ir.save = save
from qlrewrite.__main__ import run
sys.argv = ["qlrewrite", *sys.argv[3:]]
run()
"""


def _run(step: str, action: str, *args: str, wait: bool = True) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, step, action, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if wait:
        process.wait(timeout=120)
    return process


def _data_files(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if atomic.is_data_name(p.name, name, folder))


def _pair_weights(model: Path) -> np.ndarray:
    """W as onnx reads the model with its external data (the pair a reader sees)."""
    proto = onnx.load_model(str(model))
    return onnx.numpy_helper.to_array(proto.graph.initializer[0])


def _setup(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    source, new_w = write_external_model(tmp_path, "in.onnx", seed=1)
    out, old_w = write_external_model(tmp_path, "out.onnx", seed=2)
    return source, out, new_w, old_w


@pytest.mark.parametrize("step", ["writing", *STEPS])
def test_kill_at_every_step_leaves_a_matching_pair(tmp_path: Path, step: str) -> None:
    """SIGKILL at each step: out.onnx reads either all the old weights or all the new
    ones (never one's model with the other's data); the next run removes the leftovers."""
    source, out, new_w, old_w = _setup(tmp_path)
    process = _run(step, "kill", "convert", str(source), "--to", "onnx", "-o", str(out))
    assert process.returncode == -signal.SIGKILL
    committed = step in ("model-in-place", "cleaned")
    expected = new_w if committed else old_w
    np.testing.assert_array_equal(_pair_weights(out), expected)
    assert model_io.load(out) is not None  # and it passes our own validation

    # The next run into the folder: no staging folder, one data file, the new weights.
    done = _run("none", "none", "convert", str(source), "--to", "onnx", "-o", str(out))
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    hidden = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert hidden == []
    assert len(_data_files(tmp_path, "out.onnx")) == 1
    assert (tmp_path / "in.onnx.data").exists()
    np.testing.assert_array_equal(_pair_weights(out), new_w)


def test_live_staging_folder_is_never_removed(tmp_path: Path) -> None:
    """A run paused after staging: another run into the folder leaves its staging alone;
    after the first is killed, its leftover is removed by the next run."""
    source, out, _, _ = _setup(tmp_path)
    paused = _run(
        "staged", "pause", "convert", str(source), "--to", "onnx", "-o", str(out), wait=False
    )
    try:
        assert paused.stdout is not None and paused.stdout.readline().strip() == "ready"
        staging = [p for p in tmp_path.iterdir() if p.name.startswith(".qlrewrite-staging-")]
        assert len(staging) == 1
        assert atomic.remove_stale(tmp_path) == []
        other = tmp_path / "other.onnx"
        model_io.save(model_io.load(source), other)
        assert staging[0].exists()
    finally:
        paused.kill()
        paused.wait()
    assert staging[0].exists()  # SIGKILL: nothing cleaned up...
    assert atomic.remove_stale(tmp_path) == [staging[0].name]  # ...until the next run


def test_concurrent_writers_and_a_reader_never_see_a_mismatched_pair(tmp_path: Path) -> None:
    """Two writers save different models to one output, over and over, while a reader
    opens the model and then the data file its location names: every pair it reads is
    one writer's model with that writer's data (a missing data file is allowed: the
    reader then retries, as any reader of a replaced file must)."""
    sources = []
    for seed in (1, 2):
        source, _ = write_external_model(tmp_path, f"in{seed}.onnx", seed=seed)
        proto = onnx.load_model(str(source), load_external_data=False)
        proto.graph.name = f"writer{seed}"
        source.write_bytes(proto.SerializeToString())
        sources.append(source)
    expected = {f"writer{seed}": weights((64, 32), seed).tobytes() for seed in (1, 2)}
    models = [model_io.load(s) for s in sources]
    out = tmp_path / "out.onnx"
    model_io.save(models[0], out)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = {"pairs": 0, "missing": 0}

    def write(model: object) -> None:
        try:
            for _ in range(25):
                model_io.save(model, out)  # type: ignore[arg-type]
        except BaseException as exc:  # reported below
            errors.append(exc)

    def read() -> None:
        while not stop.is_set():
            proto = onnx.load_model(str(out), load_external_data=False)
            entries = {e.key: e.value for e in proto.graph.initializer[0].external_data}
            try:
                with open(tmp_path / entries["location"], "rb") as handle:
                    handle.seek(int(entries.get("offset", 0)))
                    data = handle.read(int(entries["length"]))
            except FileNotFoundError:
                seen["missing"] += 1
                continue
            assert data == expected[proto.graph.name], "a mismatched pair"
            seen["pairs"] += 1

    reader = threading.Thread(target=lambda: errors.extend(_catch(read)))
    writers = [threading.Thread(target=write, args=(m,)) for m in models]
    reader.start()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    stop.set()
    reader.join()
    assert not errors, errors
    assert seen["pairs"] > 0
    assert len(_data_files(tmp_path, "out.onnx")) == 1  # no orphan
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    final = onnx.load_model(str(out))
    assert (
        onnx.numpy_helper.to_array(final.graph.initializer[0]).tobytes()
        == expected[final.graph.name]
    )


def _catch(func: object) -> list[BaseException]:
    try:
        func()  # type: ignore[operator]
    except BaseException as exc:
        return [exc]
    return []


def test_data_file_names_are_never_reused(tmp_path: Path) -> None:
    """A new output gets <name>.data; each later write a fresh name (a reader holding
    the old model can never open a newer file under the name it remembers)."""
    source, _ = write_external_model(tmp_path, "in.onnx")
    model = model_io.load(source)
    out = tmp_path / "out.onnx"
    names = [model_io.save(model, out).name for _ in range(5)]  # type: ignore[union-attr]
    assert names[0] == "out.onnx.data"
    assert len(set(names)) == 5
    assert all(re.fullmatch(r"out\.onnx\.[0-9a-f]{8}\.data", n) for n in names[1:])
    assert _data_files(tmp_path, "out.onnx") == [names[-1]]


def test_commit_waits_for_another_and_refuses_after_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "in.onnx"
    source.write_bytes(matmul_model().SerializeToString())
    model = model_io.load(source)
    monkeypatch.setattr(atomic, "COMMIT_LOCK_SECONDS", 0.3)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)  # a stalled writer holding the folder
        started = time.monotonic()
        with pytest.raises(model_io.InputError, match="another qlrewrite"):
            model_io.save(model, tmp_path / "out.onnx")
        assert time.monotonic() - started < 5
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize(
    ("signum", "word"), [(signal.SIGTERM, "terminated"), (signal.SIGINT, "interrupted")]
)
def test_signal_during_a_write_cleans_up_and_exits_with_one_line(
    tmp_path: Path, signum: int, word: str
) -> None:
    source, out, _, old_w = _setup(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    process = _run(
        "staged", "pause", "convert", str(source), "--to", "onnx", "-o", str(out), wait=False
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signum
    assert stderr == f"qlrewrite: error: {word}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # staging removed
    np.testing.assert_array_equal(_pair_weights(out), old_w)


def _catches_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)  # type: ignore[union-attr]
    return bool(caught >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_ctrl_c_while_starting_is_one_line(tmp_path: Path) -> None:
    """SIGINT while the modules load (after the handlers are set, before any command)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(matmul_model().SerializeToString())
    process = subprocess.Popen(
        [sys.executable, "-m", "qlrewrite", "check", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not _catches_sigterm(process.pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr
    assert process.returncode == 130
    assert stderr == "qlrewrite: error: interrupted\n"


def test_data_name_taken_while_staging_is_relocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits out.onnx + out.onnx.data while this one stages (it chose
    out.onnx.data for a new output): the commit moves its data in under a fresh name,
    points the model at it, and replaces the other writer's pair whole."""
    source, w = write_external_model(tmp_path, "in.onnx", seed=3)
    model = model_io.load(source)
    out = tmp_path / "out.onnx"

    def other_writer(name: str) -> None:
        if name == "staged":
            write_external_model(tmp_path, "out.onnx", seed=4)

    steps: list[str] = []
    monkeypatch.setattr(atomic, "_step", lambda name: (steps.append(name), other_writer(name)))
    data = model_io.save(model, out)
    assert "relocated" in steps
    assert data is not None and re.fullmatch(r"out\.onnx\.[0-9a-f]{8}\.data", data.name)
    assert _data_files(tmp_path, "out.onnx") == [data.name]
    np.testing.assert_array_equal(_pair_weights(out), w)


def test_library_save_keeps_the_files_the_model_still_reads(tmp_path: Path) -> None:
    """qlrewrite.save(model, "b.onnx") where the loaded model reads b.onnx.data: that
    file is not removed with the replaced b.onnx, and the model stays usable."""
    source, w = write_external_model(tmp_path, "a.onnx")
    proto = onnx.load_model(str(source), load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = "b.onnx.data"
    source.write_bytes(proto.SerializeToString())
    (tmp_path / "a.onnx.data").rename(tmp_path / "b.onnx.data")
    (tmp_path / "b.onnx").write_bytes(proto.SerializeToString())  # an older b.onnx
    model = model_io.load(source)
    model_io.save(model, tmp_path / "b.onnx")
    assert (tmp_path / "b.onnx.data").exists()
    np.testing.assert_array_equal(model.graph.initializers["W"].const_value.numpy(), w)
    np.testing.assert_array_equal(_pair_weights(tmp_path / "b.onnx"), w)


# ------------------------------------------- issue 30, 1: recovery state is authenticated


def _planted(folder: Path, journal: bytes | None = None) -> Path:
    """A staging folder nobody holds, as a checkout or another user could leave it, with
    ``journal`` as its commit.json (None: the caller makes it)."""
    staging = folder / ".qlrewrite-staging-planted"
    staging.mkdir()
    if journal is not None:
        (staging / "commit.json").write_bytes(journal)
    return staging


def _other_models_data(folder: Path) -> tuple[Path, Path]:
    """b.onnx reading o.onnx.data (there is no o.onnx): a pair a planted journal names."""
    model, _ = write_external_model(folder, "o.onnx")
    model.rename(folder / "b.onnx")
    return folder / "b.onnx", folder / "o.onnx.data"


def _warnings(stderr: str) -> int:
    """The journal warnings in ``stderr`` (each one whole line)."""
    lines = stderr.splitlines()
    return sum(
        1 for line in lines if line.startswith("qlrewrite: warning: ") and "commit.json" in line
    )


def _fold_into(folder: Path) -> subprocess.CompletedProcess[str]:
    """``fold a.onnx -o folded.onnx`` in ``folder``, in a child (a hang fails, not blocks)."""
    source, _ = write_external_model(folder, "a.onnx", seed=5)
    command = ["fold", str(source), "-o", str(folder / "f.onnx")]
    return subprocess.run(
        [sys.executable, "-m", "qlrewrite", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "journal",
    [
        b'{"data": "o.onnx.data", "model": "o.onnx", "replaced": []}',  # the case
        b'{"data": "x.data", "model": "o.onnx", "replaced": ["o.onnx.data"]}',
    ],
)
def test_a_planted_journal_removes_no_file(tmp_path: Path, journal: bytes) -> None:
    """A journal this tool did not write (no identity of what it moved in) removes
    nothing; it is one warning line, and the run goes on."""
    other, data = _other_models_data(tmp_path)
    if b"x.data" in journal:  # a model o.onnx that reads x.data: o.onnx.data "replaced"
        (tmp_path / "o.onnx").write_bytes(other.read_bytes().replace(b"o.onnx.data", b"x.data"))
        (tmp_path / "x.data").write_bytes(data.read_bytes())
    _planted(tmp_path, journal)
    done = _fold_into(tmp_path)
    assert done.returncode == 0, done.stderr
    assert data.exists()
    np.testing.assert_array_equal(_pair_weights(other), weights((64, 32), 0))
    assert _warnings(done.stderr) == 1, done.stderr


@pytest.mark.parametrize("kind", ["fifo", "deep", "large", "link", "not-object", "foreign"])
def test_a_bad_journal_is_ignored_and_never_blocks(tmp_path: Path, kind: str) -> None:
    """A FIFO (which hung every write into the folder), an array nested 100,000 deep (an
    internal RecursionError), a huge file, a link, another shape, another user's file:
    each is one warning line; the write goes on, the staging folder is removed."""
    other, data = _other_models_data(tmp_path)
    staging = _planted(tmp_path)
    journal = staging / "commit.json"
    if kind == "fifo":
        os.mkfifo(journal)
    elif kind == "deep":
        journal.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif kind == "large":
        journal.write_bytes(b'{"data": "o.onnx.data", "pad": "' + b" " * (8 << 20) + b'"}')
    elif kind == "link":
        (tmp_path / "j.json").write_text('{"data": "o.onnx.data", "model": "o.onnx"}')
        journal.symlink_to(tmp_path / "j.json")
    elif kind == "not-object":
        journal.write_text('["o.onnx.data"]')
    else:  # another user's journal, even one naming the file's identity right
        info = data.stat()
        ident = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]
        data_entry = {"name": data.name, "id": ident}
        entry = {"version": 2, "model": "o.onnx", "replaced": [], "data": data_entry}
        journal.write_text(json.dumps(entry))
        if os.geteuid() != 0:
            pytest.skip("making another user's file needs root")
        os.chown(journal, 12345, 12345)
    done = _fold_into(tmp_path)
    assert done.returncode == 0, done.stderr
    assert data.exists() and other.exists()
    assert _warnings(done.stderr) == 1, done.stderr
    assert not staging.exists()


def test_a_data_file_replaced_after_a_kill_is_not_removed(tmp_path: Path) -> None:
    """A run killed with its data file moved in, then that file replaced by another one
    under the same name: the journal's identity no longer matches, the file stays."""
    source, out, _, old_w = _setup(tmp_path)
    process = _run("data-in-place", "kill", "convert", str(source), "--to=onnx", f"--output={out}")
    assert process.returncode == -signal.SIGKILL
    moved = [n for n in _data_files(tmp_path, "out.onnx") if n != "out.onnx.data"]
    assert len(moved) == 1
    (tmp_path / moved[0]).unlink()
    (tmp_path / moved[0]).write_bytes(b"another file under the name")
    assert atomic.remove_stale(tmp_path) != []
    assert (tmp_path / moved[0]).read_bytes() == b"another file under the name"
    np.testing.assert_array_equal(_pair_weights(out), old_w)


def test_a_killed_commit_is_still_undone(tmp_path: Path) -> None:
    """The journal this tool wrote is acted on: the data file of a model that never went
    in is removed by the next run (no warning)."""
    source, out, _, old_w = _setup(tmp_path)
    process = _run("data-in-place", "kill", "convert", str(source), "--to=onnx", f"--output={out}")
    assert process.returncode == -signal.SIGKILL
    assert len(_data_files(tmp_path, "out.onnx")) == 2
    assert len(atomic.remove_stale(tmp_path)) == 1
    assert _data_files(tmp_path, "out.onnx") == ["out.onnx.data"]
    np.testing.assert_array_equal(_pair_weights(out), old_w)


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's folder needs root")
def test_another_users_staging_folder_is_left_alone(tmp_path: Path) -> None:
    """In a shared folder, another user's leftover is theirs: not read, not removed."""
    _, data = _other_models_data(tmp_path)
    staging = _planted(tmp_path, b'{"data": "o.onnx.data", "model": "o.onnx", "replaced": []}')
    os.chown(staging, 12345, 12345)
    assert atomic.remove_stale(tmp_path) == []
    assert staging.exists() and data.exists()
