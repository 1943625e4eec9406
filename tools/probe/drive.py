"""Measure the runtime tables of ``qlrewrite check --target``: build the probe's one-node
models (:mod:`cases`, with onnx and qlrewrite from this python), run them in each runtime's
own venv (:mod:`run_ort`, :mod:`run_openvino`), and write one table per release to
``qlrewrite/targets/data/``.

    python tools/probe/drive.py ort 1.16 1.31        # these ONNX Runtime releases
    python tools/probe/drive.py ort --all            # every release 1.15 .. the newest
    python tools/probe/drive.py openvino             # the newest OpenVINO
    python tools/probe/drive.py ort --all --only "QDQ MatMul: " --only "QDQ Conv: " \
        --note "..."                                 # re-probe these keys only, merged

Each release gets a venv ``$QLREWRITE_VENVS/ort-X.Y`` (default ``/work/venvs``; Python 3.11,
``onnxruntime==X.Y.*`` and a NumPy it accepts: ``numpy<2`` before 1.19), made when missing.
A case that ends the runner's process is recorded as a crash and the runner starts again
after it. See docs/targets.md for the table format and how to refresh it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from qlrewrite.targets.fusions import kernel_of_ops  # noqa: E402  (after the path)

DATA = HERE.parent.parent / "qlrewrite" / "targets" / "data"
VENVS = Path(os.environ.get("QLREWRITE_VENVS", "/work/venvs"))
PYTHON = os.environ.get("QLREWRITE_PROBE_PYTHON", "python3.11")
FIRST_MINOR = 15  # ONNX Runtime 1.15: the oldest release probed
#: Keys of the multi-node patterns whose optimized graph ONNX Runtime saves.
PATTERNS = ("weight ", "QDQ ")
#: Above this largest difference relative to the largest output, a pattern whose optimized
#: session is compared with ORT_DISABLE_ALL's "miscomputes" (a fused integer kernel
#: rounds otherwise than the float path by a step or two of the output's quantization:
#: about 0.02 of the probe's outputs; a misread scale is off by its whole magnitude).
MISCOMPUTES = 0.1


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *args], check=True)


def ensure_venv(name: str, packages: list[str]) -> Path:
    """The venv ``name`` under VENVS with ``packages`` installed (made when missing)."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
        _pip(venv, *packages)
    return python


def ort_releases() -> list[str]:
    """Every ONNX Runtime minor release from 1.15 on that pip can install here."""
    found = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "onnxruntime"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    versions = re.search(r"Available versions: (.*)", found)
    minors = {tuple(int(p) for p in v.split(".")[:2]) for v in versions.group(1).split(", ")}
    return [f"{a}.{b}" for a, b in sorted(minors) if (a, b) >= (1, FIRST_MINOR)]


def ort_python(release: str) -> Path:
    """The python of ONNX Runtime ``release`` (X.Y)."""
    numpy = "numpy<2" if int(release.split(".")[1]) < 19 else "numpy"
    return ensure_venv(f"ort-{release}", [f"onnxruntime=={release}.*", numpy])


def _folded_twin(model: object, path: Path) -> Path | None:
    """The pattern with its constant weight DequantizeLinear folded to float by qlrewrite's
    fold, saved beside ``path`` (None: nothing folds)."""
    import onnx
    import onnx_ir as ir

    from qlrewrite.passes.fold import fold

    before = sum(n.op_type == "DequantizeLinear" for n in model.graph.node)  # type: ignore[attr-defined]
    folded = fold(ir.serde.deserialize_model(model))  # type: ignore[arg-type]
    if sum(n.op_type == "DequantizeLinear" for n in folded.graph) == before:
        return None
    twin = path.with_suffix(".folded.onnx")
    onnx.save(ir.serde.serialize_model(folded), twin)
    return twin


def _pattern_entry(case: object, path: Path, entry: dict) -> None:
    """A pattern's extras: where ORT saves its optimized graph, the shapes compared with
    ORT_DISABLE_ALL (the one float input ``a`` at its declared shape unless the case names
    others), and its folded twin."""
    entry["optimized"] = str(path.with_suffix(".opt.onnx"))
    feeds = entry["feeds"]
    if not entry.get("compare") and [(n, t) for n, t, _ in feeds] == [("a", "float32")]:
        entry["compare"] = [feeds[0][2]]
    twin = None if " input=" in case.key else _folded_twin(case.model, path)  # type: ignore[attr-defined]
    if twin is not None:
        entry["folded"] = str(twin)
        entry["folded_optimized"] = str(twin.with_suffix(".opt.onnx"))


def build_cases(folder: Path, only: tuple[str, ...] = ("",)) -> Path:
    """Write every case's model (whose key starts with one of ``only``) under ``folder``;
    return the manifest's path."""
    import onnx
    from cases import all_cases

    entries, seen = [], set()
    for index, case in enumerate(all_cases()):
        if case is None or case.key in seen or not case.key.startswith(only):
            continue
        seen.add(case.key)
        path = folder / f"case{index:05d}.onnx"
        onnx.save(case.model, path)
        entry = {"key": case.key, "file": str(path), "feeds": case.feeds}
        if case.compare:
            entry["compare"] = case.compare
        if case.key.startswith(PATTERNS):
            _pattern_entry(case, path, entry)
        if entry.get("compare"):
            references = _references(case.reference or case.model, entry["compare"], path)
            if references:
                entry["reference"] = references
        entries.append(entry)
    manifest = folder / "manifest.json"
    manifest.write_text(json.dumps({"onnx": onnx.__version__, "cases": entries}))
    return manifest


def _references(model: Any, shapes: list[list[int]], path: Path) -> list[str]:
    """The ONNX reference evaluator's output of ``model`` on the seeded input at each shape,
    saved beside ``path`` (empty when the evaluator cannot run the model). A model below
    opset 19 is evaluated at 19 (the evaluator has no DequantizeLinear 13; the patterns'
    operators compute the same for their integer types at 13 and 19)."""
    import numpy as np
    import onnx
    from onnx.reference import ReferenceEvaluator
    from protocol import seeded_input

    saved = []
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for entry in copy.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version < 19:
            entry.version = 19
    try:
        evaluator = ReferenceEvaluator(copy)
        for index, shape in enumerate(shapes):
            output = evaluator.run(None, {"a": seeded_input(shape)})[0]
            target = path.with_suffix(f".ref{index}.npy")
            np.save(target, np.asarray(output, dtype=np.float32))
            saved.append(str(target))
    except Exception:  # a type or operator the evaluator lacks: no reference
        return []
    return saved


def run_probe(python: Path, runner: str, manifest: Path, results: Path) -> list[dict]:
    """Run ``runner`` over every case, again after each crash; the result lines."""
    count = len(json.loads(manifest.read_text())["cases"])
    done = 0
    while done < count:
        command = [
            str(python),
            str(HERE / runner),
            str(manifest),
            str(results),
            "--skip",
            str(done),
        ]
        subprocess.run(
            command, check=False, timeout=3600, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        lines = [json.loads(line) for line in results.read_text().splitlines() if line]
        finished = [r for r in lines if "key" in r]
        if len(finished) >= count:
            break
        last = lines[-1]
        if "start" in last:  # the case that ended the process
            crashed = {
                "key": last["start"],
                "load": False,
                "run": False,
                "reason": "crash",
                "error": "the runtime ended the process",
            }
            with results.open("a") as out:
                out.write(json.dumps(crashed) + "\n")
            finished.append(crashed)
        elif len(finished) == done:
            raise RuntimeError(f"{runner} made no progress: see {results}")
        done = len(finished)
    return [json.loads(line) for line in results.read_text().splitlines() if line]


def scrub(error: str) -> str:
    """ONNX Runtime's message without the probe's file names and C++ source locations."""
    error = re.sub(r"Load model from \S+ failed:", "", error)
    error = re.sub(r"/tmp/\S+?\.onnx", "model.onnx", error)
    error = re.sub(r"/onnxruntime_src/\S+:\d+ .*? was false\. ", "", error)
    error = re.sub(r"/onnxruntime_src/\S+:\d+ .*?\)( const)? (?=[A-Z])", "", error)
    error = re.sub(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ", "", error.strip())
    error = re.sub(r"Exception from \S+ Check 'false' failed at \S+ ", "", error)
    return error.replace("This is an invalid model. ", "")[:300]


def _highest(forms: dict, pattern: str) -> int | None:
    found = [
        int(m.group(1))
        for key, row in forms.items()
        if row == "runs" or (isinstance(row, dict) and row.get("runs"))
        for m in [re.fullmatch(pattern, key)]
        if m
    ]
    return max(found) if found else None


def short(error: str) -> str:
    """A run error of a compared pattern as ``<op>: <what>``: ONNX Runtime's message
    without the node's name, the C++ location and the failed check's text."""
    error = re.sub(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ", "", error.strip())
    error = re.sub(
        r"Non-zero status code returned while running (\w+) node\. Name:'[^']*' Status Message: ",
        r"\1: ",
        error,
    )
    error = re.sub(r"\S*/onnxruntime_src/\S+:\d+ ", "", error)
    error = re.sub(r"\S+\.(h|cc):\d+ ", "", error)
    error = re.sub(r"^(\w+: ).*? was false\. ", r"\1", error)
    return scrub(error)


def _optimized(versus: list[dict]) -> str:
    """What the optimized session did against the unoptimized one: "miscomputes" (a
    relative difference above MISCOMPUTES, or another shape), "fails at run" (where the
    unoptimized session ran), else "matches"."""
    if any("shape" in v or v.get("max_rel_diff", 0.0) > MISCOMPUTES for v in versus):
        return "miscomputes"
    if any("error" in v for v in versus):
        return "fails at run"
    return "matches"


def _against_reference(entries: list[dict], key: str) -> str | None:
    """What a runtime computed against the ONNX reference evaluator (``key``: the entries'
    relative difference): "miscomputes", "fails at run", "matches"; None: not compared."""
    if not any(key in v or "shape" in v or "error" in v for v in entries):
        return None
    if any("shape" in v or v.get(key, 0.0) > MISCOMPUTES for v in entries):
        return "miscomputes"
    return "fails at run" if any("error" in v for v in entries) else "matches"


def _compared(line: dict, row: dict) -> dict:
    if "versus_reference" in line:  # OpenVINO: its output against the ONNX reference
        row["reference"] = _against_reference(line["versus_reference"], "max_rel_diff")
        row["versus_reference"] = [
            {k: short(v) if isinstance(v, str) else v for k, v in entry.items()}
            for entry in line["versus_reference"]
        ]
    versus = line.get("versus_unoptimized")
    if versus is not None:
        reference = _against_reference(
            [v for v in versus if "reference_rel_diff" in v], "reference_rel_diff"
        )
        if reference is not None:
            row["reference"] = reference
        row["optimized"] = _optimized(versus)
        row["versus_unoptimized"] = [
            {k: short(v) if isinstance(v, str) else v for k, v in entry.items()} for entry in versus
        ]
        if row.get("reason") == "optimizer":
            row["error"] = short(line.get("error", ""))
    return row


def _folded_row(folded: dict, runtime: str) -> dict:
    """What the runtime made of a pattern's folded twin: the kernel formed, its ops, and
    its output against the unfolded model's ORT_DISABLE_ALL output (ONNX Runtime)."""
    if not folded.get("load"):
        return {"refused": "load", "error": scrub(folded.get("error", ""))}
    ops = folded.get("runtime_ops", [])
    row: dict = {"kernel": folded.get("kernel", kernel_of_ops(ops, runtime)), "runtime_ops": ops}
    if "versus_unoptimized" in folded:
        row["versus_unoptimized"] = [
            {k: short(v) if isinstance(v, str) else v for k, v in entry.items()}
            for entry in folded["versus_unoptimized"]
        ]
    return row


def _row(line: dict, runtime: str) -> str | dict:
    """A form's entry: "runs", or what the runtime made of it (a pattern: the kernel it
    formed, ``kernel``, and what it made of the folded twin, ``folded``), or how it
    refused it."""
    if line["run"]:
        compared = ("runtime_ops", "versus_unoptimized", "versus_reference")
        if not any(k in line for k in compared):
            return "runs"
        row: dict = {"runs": True}
        if "runtime_ops" in line:
            row["runtime_ops"] = line["runtime_ops"]
            if line["key"].startswith(PATTERNS):
                row["kernel"] = line.get("kernel", kernel_of_ops(line["runtime_ops"], runtime))
        row = _compared(line, row)
        if "folded" in line:
            row["folded"] = _folded_row(line["folded"], runtime)
        return row
    row = {
        "refused": "load" if not line["load"] else "run",
        "reason": line.get("reason", "other"),
        "error": scrub(line.get("error", "")),
    }
    if "runtime_ops" in line:
        row["runtime_ops"] = line["runtime_ops"]
    if "unoptimized" in line:  # a compared pattern refused at load: ORT_DISABLE_ALL's outcome
        unoptimized = line["unoptimized"]
        row["unoptimized"] = unoptimized if unoptimized == "runs" else scrub(short(unoptimized))
    return _compared(line, row)


#: The domains whose highest loaded opset a table records (keys ``<domain> opset=N``).
DOMAINS = (
    "ai.onnx",
    "com.microsoft",
    "ai.onnx.ml",
    "ai.onnx.training",
    "ai.onnx.preview.training",
)


def limits(forms: dict) -> dict:
    """The highest IR version and, per domain of :data:`DOMAINS`, opset that ran."""
    return {
        "max_ir_version": _highest(forms, r"ir_version=(\d+)"),
        "max_opset": {d: _highest(forms, re.escape(d) + r" opset=(\d+)") for d in DOMAINS},
    }


def table_of(lines: list[dict], onnx_version: str, extra: dict | None = None) -> dict:
    """The committed table: the release measured, its limits, and each form's result."""
    meta = next(line["meta"] for line in lines if "meta" in line)
    forms = {line["key"]: _row(line, meta["runtime"]) for line in lines if "key" in line}
    table = {
        "runtime": meta["runtime"],
        "release": meta["version"],
        "measured": datetime.date.today().isoformat(),
        "python": meta["python"],
        "numpy": meta["numpy"],
        "models_built_with": f"onnx {onnx_version}",
        **limits(forms),
        **(extra or {}),
        "forms": dict(sorted(forms.items())),
    }
    return table


def write_table(name: str, table: dict) -> Path:
    path = DATA / f"{name}.json"
    path.write_text(json.dumps(table, indent=0, sort_keys=False) + "\n")
    return path


def _graph_ops(path: Path) -> tuple[list[str], str | None]:
    """The operators of the optimized graph ONNX Runtime saved at ``path`` and the fused
    kernel among them, with the attribute that changes a MatMulNBits' arithmetic
    (``com.microsoft:MatMulNBits accuracy_level=4``)."""
    import onnx

    nodes = onnx.load(path, load_external_data=False).graph.node
    ops = sorted({f"{n.domain}:{n.op_type}" if n.domain else n.op_type for n in nodes})
    kernels = []
    for node in nodes:
        op = f"{node.domain}:{node.op_type}" if node.domain else node.op_type
        if kernel_of_ops([op]) is None:
            continue
        levels = [a.i for a in node.attribute if a.name == "accuracy_level"]
        if node.op_type == "MatMulNBits":
            op += f" accuracy_level={levels[0] if levels else 0}"
        kernels.append(op)
    return ops, ", ".join(sorted(set(kernels))) or None


def _kernels_formed(lines: list[dict], manifest: Path) -> None:
    """For the patterns, the operators of ONNX Runtime's optimized graph (``runtime_ops``)
    and the fused kernel (``kernel``), of the pattern and of its folded twin."""
    entries = {e["key"]: e for e in json.loads(manifest.read_text())["cases"] if "optimized" in e}
    for line in lines:
        entry = entries.get(line.get("key"), {})
        path = Path(entry.get("optimized", "/nonexistent"))
        if line.get("run") and path.exists():
            line["runtime_ops"], line["kernel"] = _graph_ops(path)
            path.unlink()
        twin = Path(entry.get("folded_optimized", "/nonexistent"))
        folded = line.get("folded")
        if isinstance(folded, dict) and folded.get("load") and twin.exists():
            folded["runtime_ops"], folded["kernel"] = _graph_ops(twin)
            twin.unlink()


def merged(old: dict, new: dict, only: tuple[str, ...], note: str) -> dict:
    """``old`` with its forms under ``only`` replaced by ``new``'s (the re-probed keys);
    everything else kept, the limits taken again from the merged forms, and the amendment
    recorded in ``amended``."""
    if old["release"] != new["release"]:
        raise RuntimeError(f"table of {old['release']} re-probed with {new['release']}")
    forms = {k: v for k, v in old["forms"].items() if not k.startswith(only)}
    forms.update(new["forms"])
    keys = ", ".join(f"{prefix}*" for prefix in only)
    amendment = {"date": new["measured"], "keys": keys, "note": note}
    amendment.update(
        python=new["python"], numpy=new["numpy"], models_built_with=new["models_built_with"]
    )
    table = {k: v for k, v in old.items() if k != "forms"}
    table.update(limits(forms))
    table["amended"] = [*old.get("amended", []), amendment]
    table["forms"] = dict(sorted(forms.items()))
    return table


def probe(
    name: str,
    python: Path,
    runner: str,
    manifest: Path,
    *,
    only: tuple[str, ...] = (),
    note: str = "",
) -> Path:
    """Probe one runtime and write its table ``name``.json (with ``only``: merged into
    the committed table, replacing the keys that start with it)."""
    onnx_version = json.loads(manifest.read_text())["onnx"]
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results.jsonl"
        lines = run_probe(python, runner, manifest, results)
    if runner == "run_ort.py":
        _kernels_formed(lines, manifest)
    table = table_of(lines, onnx_version)
    if only:
        table = merged(json.loads((DATA / f"{name}.json").read_text()), table, only, note)
    return write_table(name, table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runtime", choices=["ort", "openvino"])
    parser.add_argument("releases", nargs="*", help="ONNX Runtime releases X.Y")
    parser.add_argument("--all", action="store_true", help="every release 1.15 .. the newest")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="re-probe the keys starting with this (repeatable), merged into the tables",
    )
    parser.add_argument("--note", default="", help="with --only: what the amendment adds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        only = tuple(args.only)
        manifest = build_cases(Path(folder), only or ("",))
        if args.runtime == "openvino":
            python = ensure_venv("openvino", ["openvino", "numpy"])
            table = probe(
                "openvino", python, "run_openvino.py", manifest, only=only, note=args.note
            )
            print(table, flush=True)
            return 0
        for release in ort_releases() if args.all else args.releases:
            python = ort_python(release)
            print(
                probe(f"ort-{release}", python, "run_ort.py", manifest, only=only, note=args.note),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
