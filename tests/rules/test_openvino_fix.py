"""QL750's fix (``check --fix --target openvino``, ``qlrewrite.fix(target="openvino")``):
a Relu before a 16-bit QuantizeLinear whose zero point is its type's lowest value. Models
built here; the opt-in slow tests run every ONNX Runtime release venv present
(/work/venvs/ort-1.X: the fix is exact) and OpenVINO 2026.4.1 (/work/venvs/openvino: the
fixed model is close to the reference)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import ort_quantized
import pytest
from click.testing import CliRunner
from onnx.reference import ReferenceEvaluator
from openvino_models import sixteen_bit, sixteen_bit_in_branch
from release_venvs import release_outputs

import qlrewrite
from qlrewrite.cli import main

OPENVINO = Path("/work/venvs/openvino/bin/python")
ORT = Path("/work/venvs/ort-1.31/bin/python")

FIXABLE = {
    "u16": sixteen_bit,
    "i16": lambda: sixteen_bit("int16", -32768),
    "u16-com.microsoft": lambda: sixteen_bit(domain="com.microsoft"),
    "i16-com.microsoft": lambda: sixteen_bit("int16", -32768, domain="com.microsoft"),
    "u16-shared": lambda: sixteen_bit(shared=True),
}
#: Inputs giving the MatMul outputs of both signs (row 0 positive, row 1 negative; in
#: range: |m| < 1, where the 16-bit range reaches 65.5).
FEEDS = {"a": np.array([[-2, -1, 0, 1], [2, 1, 0, -1]], np.float32)}


def _fixed(model: onnx.ModelProto, target: str = "openvino") -> onnx.ModelProto:
    return ir.serde.serialize_model(qlrewrite.fix(model, target=target))


def _ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


@pytest.mark.parametrize("label", sorted(FIXABLE))
def test_fix_inserts_a_relu_and_leaves_no_finding(label: str) -> None:
    """Marked fixable, repaired by the fix with `--target openvino`; the re-check finds
    no QL750 and nothing new; a second fix changes nothing (idempotent)."""
    before = qlrewrite.check(FIXABLE[label](), target="openvino")
    flagged = [f for f in before.findings if f.rule == "QL750"]
    assert flagged and all(f.fix == "safe" and "check --fix" in f.hint for f in flagged)
    fixed = _fixed(FIXABLE[label]())
    after = qlrewrite.check(fixed, target="openvino")
    # nothing new ("u16-shared": its QL753 goes too, the Q no longer reads a graph output)
    assert {f.rule for f in after.findings} <= {f.rule for f in before.findings} - {"QL750"}
    assert _ops(fixed).count("Relu") == 1  # one per tensor, however many Q read it
    assert _ops(_fixed(fixed)) == _ops(fixed)


def test_fix_changes_only_the_quantize_edge() -> None:
    """The MatMul's output feeds two flagged Q and is a graph output: both Q read the
    one Relu, the graph output 'm' keeps its name and unclamped values."""
    fixed = _fixed(sixteen_bit(shared=True))
    relu = next(node for node in fixed.graph.node if node.op_type == "Relu")
    assert list(relu.input) == ["m"]
    readers = [node for node in fixed.graph.node if relu.output[0] in node.input]
    assert [node.op_type for node in readers] == ["QuantizeLinear", "QuantizeLinear"]
    assert [o.name for o in fixed.graph.output] == ["y", "y2", "m"]
    assert ReferenceEvaluator(fixed).run(["m"], FEEDS)[0].min() < 0


@pytest.mark.parametrize("target", [(), "ort==1.31", "tensorrt", ["tensorrt", "openvino"]])
def test_fix_only_for_openvino(target: str | list[str]) -> None:
    """The Relu goes in when OpenVINO is among the targets the fix is for, else not."""
    fixed = ir.serde.serialize_model(qlrewrite.fix(sixteen_bit(), select="QL750", target=target))
    assert ("Relu" in _ops(fixed)) == ("openvino" in target)


def test_check_fix_on_the_command_line(tmp_path: Path) -> None:
    source, out = tmp_path / "m.onnx", tmp_path / "fixed.onnx"
    onnx.save(sixteen_bit(), source)
    args = ["check", str(source), "--target", "openvino", "--fix", "--fix-output", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "Relu" in _ops(onnx.load(out)) and "Relu" not in _ops(onnx.load(source))
    plain = CliRunner().invoke(main, ["check", str(source), "--fix", "--diff"])
    assert "QL750" not in plain.output


def test_nothing_to_fix_after_a_relu_or_a_graph_input_or_in_a_branch() -> None:
    """A Relu already before the Q, a Q reading the graph input, a pair in an If branch
    (OpenVINO computes it clamped: the slow test): no QL750."""
    for model in (sixteen_bit(relu=True), sixteen_bit_in_branch(), _quantized_input()):
        assert "QL750" not in {f.rule for f in qlrewrite.check(model, target="openvino").errors}


def _quantized_input() -> onnx.ModelProto:
    model = sixteen_bit()
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] == "m":
            node.input[0] = "a"
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4
    del model.graph.node[:4]
    return model


def test_a_bfloat16_input_is_flagged_not_fixable() -> None:
    """ONNX Runtime has no bfloat16 Relu on CPU (1.15.1 to 1.32.0): the hint only."""
    model = sixteen_bit()
    nodes = list(model.graph.node)
    cast = onnx.helper.make_node("Cast", ["m"], ["m_bf16"], to=onnx.TensorProto.BFLOAT16)
    nodes.insert(4, cast)
    nodes[5].input[0] = "m_bf16"
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    found = [f for f in qlrewrite.check(model, target="openvino").errors if f.rule == "QL750"]
    assert found and found[0].fix is None and "check --fix" not in found[0].hint


def _ort(model: onnx.ModelProto, *, optimized: bool) -> list[np.ndarray]:
    """The installed ONNX Runtime's outputs on FEEDS: default session or ORT_DISABLE_ALL."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    cpu = ["CPUExecutionProvider"]
    return ort.InferenceSession(model.SerializeToString(), options, providers=cpu).run(None, FEEDS)


@pytest.mark.parametrize("label", sorted(FIXABLE))
def test_fix_is_exact_in_ort(label: str) -> None:
    """The installed ONNX Runtime (the dev venv's 1.31.1) computes the same bits before
    and after, default session and ORT_DISABLE_ALL (every release: the slow test)."""
    model, fixed = FIXABLE[label](), _fixed(FIXABLE[label]())
    for optimized in (True, False):
        before, after = (_ort(m, optimized=optimized) for m in (model, fixed))
        assert all(a.tobytes() == b.tobytes() for a, b in zip(before, after, strict=True))


#: ORT's own 16-bit quantize_static outputs that QL750 flags (tests/ort_quantized.py).
QUANTIZED = ("cnn-int16-contrib", "mlp-int16-contrib", "branchy-u16s8-21", "branchy-int16-contrib")

_OUTPUTS = """
import json, sys, numpy as np
asked = json.loads(sys.argv[1])

def run(path, level, feeds):
    if asked["kind"] == "ov":
        import openvino as ov
        config = {"INFERENCE_PRECISION_HINT": "f32"} if level == "f32" else {}
        compiled = ov.Core().compile_model(path, "CPU", config)
        return [compiled(feeds)[o] for o in compiled.outputs]
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if level == "disable":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    cpu = ["CPUExecutionProvider"]
    return ort.InferenceSession(path, options, providers=cpu).run(None, feeds)

levels = ("default", "f32") if asked["kind"] == "ov" else ("default", "disable")
out = {}
for feeds_path, paths in asked["runs"]:
    feeds = dict(np.load(feeds_path))
    for path in paths:
        for level in levels:
            try:
                out[path + "|" + level] = [np.asarray(g).tolist() for g in run(path, level, feeds)]
            except Exception as exc:
                out[path + "|" + level] = str(exc)[:300]
print(json.dumps(out))
"""


def _payload(kind: str, runs: list[tuple[Path, list[Path]]]) -> dict:
    return {"kind": kind, "runs": [[str(f), [str(p) for p in paths]] for f, paths in runs]}


def _outputs(python: Path, kind: str, feeds: Path, paths: list[Path]) -> dict:
    payload = json.dumps(_payload(kind, [(feeds, paths)]))
    done = subprocess.run(
        [str(python), "-c", _OUTPUTS, payload],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout)


def _saved(tmp_path: Path) -> dict[str, tuple[Path, Path, Path]]:
    """Each fixable model before and after the fix, with its in-range feeds (ORT's
    quantizer outputs: a calibration input; the MatMul models: FEEDS)."""
    models = {label: (make(), FEEDS) for label, make in FIXABLE.items()}
    for config in QUANTIZED:
        feeds = ort_quantized.inputs_for(ort_quantized.model_name_of(config), seed=10)
        models[config] = (ort_quantized.quantized(config), feeds)
    saved = {}
    for label, (model, feeds) in models.items():
        paths = tmp_path / f"{label}.onnx", tmp_path / f"{label}-fixed.onnx"
        onnx.save(model, paths[0])
        onnx.save(_fixed(model), paths[1])
        np.savez(tmp_path / f"{label}.npz", **feeds)
        saved[label] = (*paths, tmp_path / f"{label}.npz")
    return saved


@pytest.mark.slow
def test_fix_is_exact_in_every_ort_release(tmp_path: Path) -> None:
    """Before and after the fix, the same bits in each release's default session and
    ORT_DISABLE_ALL (measured: 1.18.1 to 1.32.0 run every one; 1.15 to 1.17 refuse these
    IR 10 models before and after alike)."""
    saved = _saved(tmp_path)
    runs = [(feeds, [before, after]) for before, after, feeds in saved.values()]
    ran = set()
    for release, got in release_outputs(_OUTPUTS, _payload("ort", runs)):
        for label, (before, after, _) in saved.items():
            for level in ("default", "disable"):
                old, new = got[f"{before}|{level}"], got[f"{after}|{level}"]
                assert isinstance(old, str) == isinstance(new, str), (release, label, old, new)
                assert old == new or isinstance(old, str), (release, label, level)
                ran.update([label] if not isinstance(old, str) else [])
    assert ran == set(saved)


@pytest.mark.slow
@pytest.mark.skipif(not (OPENVINO.exists() and ORT.exists()), reason="release venvs absent")
def test_openvino_computes_the_fixed_model_close_to_the_reference(tmp_path: Path) -> None:
    """OpenVINO at f32 against ORT 1.31.1 ORT_DISABLE_ALL, on in-range data, in units of
    the largest output: far off before the fix (measured: 1.0 for the MatMul models, 1.8
    for ORT's int16 CNN, 0.46 for its MLP, 0.006 for the branchy ones), within 1e-4
    after (0 for the MatMul models, 2.4e-5 to 8e-5 for ORT's)."""
    saved = _saved(tmp_path)
    saved.pop("u16-shared")  # OpenVINO refuses it before and after ('is_supported_fq')
    for label, (before, after, feeds) in saved.items():
        reference = _outputs(ORT, "ort", feeds, [before])[f"{before}|disable"]
        got = _outputs(OPENVINO, "ov", feeds, [before, after])
        off = [
            max(
                float(np.abs(np.asarray(g) - np.asarray(r)).max() / np.abs(np.asarray(r)).max())
                for g, r in zip(got[f"{path}|f32"], reference, strict=True)
            )
            for path in (before, after)
        ]
        assert off[1] <= 1e-4, (label, off)
        assert off[0] > 0.3 or label.startswith("branchy"), (label, off)


@pytest.mark.slow
@pytest.mark.skipif(not (OPENVINO.exists() and ORT.exists()), reason="release venvs absent")
def test_openvino_clamps_a_pair_inside_an_if(tmp_path: Path) -> None:
    """Why QL750 leaves subgraphs alone: OpenVINO computes the pair in either branch of an
    If as ORT does (the then branch negates the MatMul, the other reads it)."""
    path = tmp_path / "branch.onnx"
    onnx.save(sixteen_bit_in_branch(), path)
    for sign in (1.0, -1.0):  # the sum of a decides the branch
        feeds = tmp_path / "feeds.npz"
        np.savez(feeds, a=sign * np.linspace(-1.9, 2.1, 8, dtype=np.float32).reshape(2, 4))
        want = np.asarray(_outputs(ORT, "ort", feeds, [path])[f"{path}|disable"])
        got = np.asarray(_outputs(OPENVINO, "ov", feeds, [path])[f"{path}|f32"])
        assert want.min() == 0.0 and np.abs(got - want).max() <= 1e-6
