"""Output on an 80-column terminal (a pseudo-terminal, as a person sees it): `info` tables
never squeeze a column to nothing nor cut a value, `rules` wraps under a header, a
rewrite shows a real progress bar (tensors of a known total) and is quiet in a pipe."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from qoperator_models import build

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def run_on_terminal(
    *args: str,
    columns: int = 80,
    cwd: Path | None = None,
    stderr: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """``qlrewrite ARGS`` with stdout (and ``stderr``, else nothing) on a pseudo-terminal
    ``columns`` wide, CI unset unless ``env`` sets it: the exit code and what the
    terminal received, colours and all."""
    main, child = pty.openpty()
    full_env = {**os.environ, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm"}
    full_env.pop("CI", None)
    full_env.pop("NO_COLOR", None)
    full_env.update(env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "qlrewrite", *args],
        stdout=child,
        stderr=child if stderr else subprocess.DEVNULL,
        env=full_env,
        cwd=cwd,
    )
    os.close(child)
    chunks = []
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    code = process.wait(timeout=60)
    return code, b"".join(chunks).decode("utf-8", "replace")


def _terminal(*args: str, columns: int = 80) -> tuple[int, str]:
    """``qlrewrite ARGS`` with stdout and stderr on a pseudo-terminal ``columns`` wide:
    the exit code and what the terminal received, colours and cursor moves removed."""
    code, raw = run_on_terminal(*args, columns=columns)
    return code, ANSI.sub("", raw)


def _lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


#: `qlrewrite info examples/msdomain_int16_opset13.onnx` on an 80-column terminal.
MSDOMAIN_AT_80 = """\
┏━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━┓
┃               ┃                  ┃        ┃ scale ┃                  ┃       ┃
┃ domain        ┃ op               ┃ x type ┃ type  ┃ granularity      ┃ nodes ┃
┡━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━┩
│ com.microsoft │ DequantizeLinear │ INT16  │ FLOAT │ per-tensor       │     2 │
│ com.microsoft │ DequantizeLinear │ INT8   │ FLOAT │ per-axis(axis=1) │     1 │
│ com.microsoft │ DequantizeLinear │ INT32  │ FLOAT │ per-axis(axis=0) │     1 │
│ com.microsoft │ QuantizeLinear   │ FLOAT  │ FLOAT │ per-tensor       │     2 │
└───────────────┴──────────────────┴────────┴───────┴──────────────────┴───────┘
(hidden at 80 columns: constant, version, const bytes: --output-format json)"""


def test_info_at_80_columns_snapshot() -> None:
    code, out = _terminal("info", str(EXAMPLES / "msdomain_int16_opset13.onnx"))
    assert code == 0, out
    lines = _lines(out)
    assert all(len(line) <= 80 for line in lines), out
    table = lines[lines.index("6 Q/DQ node(s):") + 1 :]
    assert "\n".join(table) == MSDOMAIN_AT_80


def _wide_model(tmp_path: Path) -> Path:
    """Long names (one with a newline, one with rich markup), float8 and int4 types."""
    weight = np.zeros((64, 32), np.uint8)
    inits = [
        numpy_helper.from_array(weight, "model.layers.0.self_attn.q_proj.weight_quantized"),
        numpy_helper.from_array(np.full((2, 32), 0.5, np.float32), "scale\nwith newline"),
    ]
    node = helper.make_node(
        "DequantizeLinear",
        ["model.layers.0.self_attn.q_proj.weight_quantized", "scale\nwith newline"],
        ["[bold]w"],
        name="dq",
        axis=0,
        block_size=32,
    )
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("[bold]w", onnx.TensorProto.FLOAT, None)]
    )
    graph.initializer.extend(inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "wide.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_info_tables_fit_and_cut_no_value(tmp_path: Path, columns: int) -> None:
    qoperator = tmp_path / "qlinearconv.onnx"
    onnx.save(build("ms-QLinearConv"), qoperator)
    for model in (qoperator, _wide_model(tmp_path), EXAMPLES / "blocked_int4_opset21.onnx"):
        code, out = _terminal("info", str(model), columns=columns)
        assert code == 0, out
        body = _lines(out)[1:]  # the first line is the model's path, never broken
        assert all(len(line) <= columns for line in body), out
        assert "…" not in out and "..." not in out  # nothing cut to an ellipsis
        words = {w for line in _lines(out) for w in re.split(r"[│┃\s]+", line) if w}
        assert {"DequantizeLinear", "QLinearConv-1"} & words, out  # the op, whole


def test_rules_on_a_narrow_terminal_has_a_header_and_wraps() -> None:
    code, out = _terminal("rules")
    assert code == 0
    lines = _lines(out)
    assert lines[0].startswith("qlrewrite check rules (")
    assert all(len(line) <= 80 for line in lines), out
    assert any(
        line.startswith("QL406  zero-point-scalar-vs-1  warning (opt-in), safe fix")
        for line in lines
    )
    piped = subprocess.run(
        [sys.executable, "-m", "qlrewrite", "rules"], capture_output=True, text=True, check=True
    )
    assert piped.stdout.splitlines()[0].startswith("QL101  error")  # a pipe: one line a rule


def _external_model(tmp_path: Path, external: bool = True) -> Path:
    """Five int8 weights of 4 KiB (in external data), each behind a DequantizeLinear."""
    nodes, inits, outputs = [], [], []
    for i in range(5):
        inits += [
            numpy_helper.from_array(np.full((64, 64), i, np.int8), f"w{i}"),
            numpy_helper.from_array(np.array(0.5, np.float32), f"s{i}"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", [f"w{i}", f"s{i}"], [f"y{i}"]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, [64, 64]))
    graph = helper.make_graph(nodes, "g", [], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "ext.onnx"
    onnx.save(
        model, path, save_as_external_data=external, location="ext.onnx.data", size_threshold=0
    )
    return path


@pytest.mark.parametrize("external", [True, False], ids=["external-data", "inline"])
def test_a_rewrite_shows_real_progress_on_a_terminal_only(tmp_path: Path, external: bool) -> None:
    model = _external_model(tmp_path, external)
    code, out = _terminal("fold", str(model), "-o", str(tmp_path / "a.onnx"))
    assert code == 0, out
    assert re.search(r"writing 5/5 tensors, 80\.0 KiB", out), out  # a known total, bytes
    assert "None" not in out
    done = subprocess.run(
        [sys.executable, "-m", "qlrewrite", "fold", str(model), "-o", str(tmp_path / "b.onnx")],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "CI"},
    )
    assert "writing" not in done.stderr and done.stderr.startswith("fold: dq folded 5")


def test_info_in_a_pipe_fits_columns_when_given() -> None:
    def info(env: dict[str, str]) -> list[str]:
        model = str(EXAMPLES / "msdomain_int16_opset13.onnx")
        done = subprocess.run(
            [sys.executable, "-m", "qlrewrite", "info", model],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return _lines(done.stdout)

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    whole = info(env)  # a pipe without COLUMNS: every column, one line per row
    assert max(map(len, whole)) > 80 and "const bytes" in "\n".join(whole)
    narrow = info({**env, "COLUMNS": "80"})
    assert all(len(line) <= 80 for line in narrow), narrow
    assert "(hidden at 80 columns: constant, version, const bytes" in "\n".join(narrow)
