"""`qlrewrite compare`: two models on the same inputs, per runtime; --tensors names the
first intermediate tensor that diverges. Models are built here and quantized by ONNX
Runtime's own quantizer."""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import float_model, quantized

from qlrewrite.cli import main

pytest.importorskip("onnxruntime")

LAYERS = 4
WIDTH = 32


def _four_layer_float() -> onnx.ModelProto:
    """x -> (MatMul w_i, Add b_i) x 4 -> y (no Relu: ORT's quantizer removes a Relu
    followed by Q/DQ and gives its output's name to the Add before it)."""
    rng = np.random.default_rng(5)
    nodes, inits, value = [], [], "x"
    for i in range(1, LAYERS + 1):
        inits += [
            numpy_helper.from_array(
                (rng.standard_normal((WIDTH, WIDTH)) * 0.3).astype(np.float32), f"w{i}"
            ),
            numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [value, f"w{i}"], [f"m{i}"], name=f"layer{i}"),
            helper.make_node(
                "Add", [f"m{i}", f"b{i}"], [f"h{i}" if i < LAYERS else "y"], name=f"bias{i}"
            ),
        ]
        value = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "four",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@functools.cache
def _four_layer_quantized() -> bytes:
    """The 4-layer model through quantize_static (QDQ, s8 per-channel weights)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(9)
            self._data = iter(
                [{"x": rng.standard_normal((1, WIDTH)).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self) -> dict | None:
            return next(self._data, None)

    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp, "f.onnx"), Path(tmp, "q.onnx")
        onnx.save(_four_layer_float(), source)
        quantize_static(
            str(source), str(target), Reader(), per_channel=True, weight_type=QuantType.QInt8
        )
        return target.read_bytes()


def _compare(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["compare", *(str(a) for a in args)])
    return result.exit_code, result.stdout, result.stderr


def _planted(tmp_path: Path, layer: int) -> tuple[Path, Path, str]:
    """The quantized model, and a copy whose layer ``layer`` weight scale is 1.5x;
    returns both paths and the name of the tensor that scale first changes (read from
    the file: the output of the DQ taking that scale)."""
    model = onnx.load_model_from_string(_four_layer_quantized())
    first = tmp_path / "q.onnx"
    onnx.save(model, first)
    weight = f"w{layer}_"
    (dq,) = [
        n
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0].startswith(weight)
    ]
    (scale,) = [i for i in model.graph.initializer if i.name == dq.input[1]]
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * 1.5, scale.name))
    second = tmp_path / "planted.onnx"
    onnx.save(model, second)
    return first, second, dq.output[0]


@pytest.mark.parametrize("layer", [2, 3])
def test_tensors_names_the_layer_whose_scale_was_changed(tmp_path: Path, layer: int) -> None:
    first, second, changed = _planted(tmp_path, layer)
    code, out, err = _compare(first, second, "--tensors", "--runtime", "ort", "--format", "json")
    assert code == 1, err
    report = json.loads(out)
    tensors = report["tensors"]
    assert tensors["tensor"]["name"] == changed
    assert f"w{layer}_" in tensors["node"] and "(DequantizeLinear)" in tensors["node"]
    assert tensors["tensor"]["max_abs"] > 0
    assert report["diverges"]


def test_tensors_of_a_quantized_model_against_its_float_original(tmp_path: Path) -> None:
    """The float model and its quantized form share 8 float tensors' names (m1-m4,
    h1-h3, y): with a loose tolerance none diverges, with a strict one the first is
    layer 1's MatMul output."""
    first, second = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_four_layer_float(), first)
    second.write_bytes(_four_layer_quantized())
    code, out, _ = _compare(
        first, second, "--tensors", "--runtime", "ort", "--rtol", "1e-6", "--format", "json"
    )
    report = json.loads(out)
    assert code == 1 and report["tensors"]["tensor"]["name"] == "m1"
    code, out, _ = _compare(first, second, "--tensors", "--runtime", "ort", "--rtol", "0.5")
    assert code == 0, out
    assert "8 shared tensors, none diverges" in out and "within tolerance" in out


def test_identical_models_are_exact_in_every_runtime(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(quantized("cnn-s8s8"), path)
    code, out, _ = _compare(path, path, "--format", "json")
    assert code == 0
    report = json.loads(out)
    ran = {r["runtime"]: r for r in report["runtimes"]}
    assert set(ran) == {"ort", "reference", "openvino"}
    assert all(o["exact"] for o in ran["ort"]["outputs"])
    assert all(o["exact"] for o in ran["reference"]["outputs"])  # opset 13 Q/DQ: newest kernels
    if ran["openvino"]["reason"] and "not installed" in ran["openvino"]["reason"]:
        assert ran["openvino"]["outputs"] == []


def test_fold_in_the_default_session_diverges_with_steps(tmp_path: Path) -> None:
    """ORT's per-channel u8 CNN against its fold: ORT's default session differs (the
    folded MatMul is not fused), the reference evaluator computes both alike."""
    first, second = tmp_path / "q.onnx", tmp_path / "f.onnx"
    onnx.save(quantized("cnn-per-channel"), first)
    fold = CliRunner().invoke(main, ["fold", str(first), "-o", str(second), "-q"])
    assert fold.exit_code == 0, fold.stderr
    code, out, _ = _compare(
        first, second, "--runtime", "ort", "--runtime", "reference", "--format", "json"
    )
    assert code == 1
    ort_run, reference = json.loads(out)["runtimes"]
    (y,) = ort_run["outputs"]
    assert not y["within"] and y["steps"] is not None and y["steps"] >= 1
    assert all(o["exact"] for o in reference["outputs"])


def test_dynamic_quantization_against_the_float_model(tmp_path: Path) -> None:
    first, second = tmp_path / "f.onnx", tmp_path / "d.onnx"
    onnx.save(float_model("mlp"), first)
    onnx.save(quantized("mlp-dynamic"), second)
    code, out, _ = _compare(first, second, "--runtime", "ort", "--rtol", "0.2")
    assert code == 0, out
    code, out, _ = _compare(first, second, "--runtime", "ort")
    assert code == 1 and "DIVERGES" in out


def test_given_inputs_from_npz(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(quantized("mlp-u8s8"), path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((1, 16, 64), np.float32))
    code, out, _ = _compare(path, path, "--inputs", inputs, "--runtime", "ort")
    assert code == 0 and "given inputs" in out
    np.savez(inputs, other=np.ones(3, np.float32))
    code, _, err = _compare(path, path, "--inputs", inputs)
    assert code == 2 and "no array for input(s) x" in err


def test_unreadable_model_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    path = tmp_path / "m.onnx"
    onnx.save(quantized("mlp-u8s8"), path)
    code, out, err = _compare(path, bad)
    assert code == 2 and err.startswith("qlrewrite: error:") and "Traceback" not in err
    assert out == ""


def test_plot_of_per_output_error(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "m.onnx"
    onnx.save(quantized("mlp-u8s8"), path)
    image = tmp_path / "errors.png"
    code, _, err = _compare(path, path, "--runtime", "ort", "--plot", image)
    assert code == 0, err
    assert image.read_bytes().startswith(b"\x89PNG")


def test_plot_draws_every_tensor_with_tensors(tmp_path: Path) -> None:
    """--plot --tensors draws each intermediate tensor (a second panel), not only the
    outputs; the JSON lists them in the first model's order."""
    pytest.importorskip("matplotlib")
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(quantized("mlp-u8s8"), first)
    import qlrewrite

    qlrewrite.save(qlrewrite.retarget(first, zero_point="signed"), second)
    image = tmp_path / "errors.png"
    code, out, err = _compare(
        first, second, "--runtime", "ort", "--tensors", "--plot", image, "--output-format", "json"
    )
    assert code in (0, 1), err
    assert image.read_bytes().startswith(b"\x89PNG"), err
    by_tensor = json.loads(out)["tensors"]["by_tensor"]
    model = onnx.load(first)
    produced = [o for n in model.graph.node for o in n.output]
    assert [t["name"] for t in by_tensor] == [
        n for n in produced if n in {t["name"] for t in by_tensor}
    ]
    assert len(by_tensor) > 10


def test_ulp_and_latency_read_as_words() -> None:
    """A value crossing zero gives about 2e9 ulp: said in words, not as a count; a latency
    ratio says which way."""
    from qlrewrite.verify.deployed import latency_words
    from qlrewrite.verify.verify import ulp_words

    assert ulp_words(12) == "12 ulp"
    assert ulp_words(2_000_000_000) == "2^23 ulp or more (sign or power of two differs)"
    assert ulp_words(1 << 23) == ulp_words(2_000_000_000)
    assert latency_words(0.82) == "0.82x the original's time, faster"
    assert latency_words(1.3) == "1.30x the original's time, slower"
    assert latency_words(1.0) == "1.00x the original's time, the same"


@pytest.mark.parametrize("target", ["first", "second", "link to first", "inputs"])
def test_plot_never_replaces_a_file_compared(tmp_path: Path, target: str) -> None:
    """``--plot a.onnx`` replaced the model compared with the image (its own staged
    rename, no guard): refused before anything runs, exit 2, every file as it was."""
    first, second, inputs = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "in.npz"
    onnx.save(quantized("mlp-u8s8"), first)
    onnx.save(quantized("mlp-u8s8"), second)
    np.savez(inputs, x=np.ones((1, 16, 64), np.float32))
    (tmp_path / "link.onnx").symlink_to(first)
    plot = {
        "first": first,
        "second": second,
        "link to first": tmp_path / "link.onnx",
        "inputs": inputs,
    }[target]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, _, err = _compare(first, second, "--inputs", inputs, "--plot", plot)
    assert code == 2 and "--plot" in err and "choose another file" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_the_plot_is_written_as_reports_are(tmp_path: Path) -> None:
    """The image goes through the report writer: through a link of the user's to a file,
    the file is replaced and the link stays (it was renamed over the link)."""
    from qlrewrite.cli.compare import save_image

    target = tmp_path / "real.png"
    target.write_bytes(b"old")
    link = tmp_path / "plot.png"
    link.symlink_to(target)
    save_image(link, b"\x89PNG image")
    assert link.is_symlink() and target.read_bytes() == b"\x89PNG image"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png", "real.png"]


@pytest.mark.parametrize("option", ["--rtol", "--atol"])
def test_tolerances_must_be_finite(tmp_path: Path, option: str) -> None:
    """``--rtol nan`` made every comparison false: two different models were 'within
    tolerance', exit 0. A usage error now."""
    path = tmp_path / "m.onnx"
    onnx.save(quantized("mlp-u8s8"), path)
    code, _, err = _compare(path, path, "--runtime", "ort", option, "nan")
    assert code == 2 and f"Invalid value for '{option}'" in err


def test_nothing_compared_is_not_within_tolerance(tmp_path: Path) -> None:
    """A model every runtime fails on (a Reshape to a shape its input cannot take) was
    'within tolerance', exit 0: nothing was compared. Now said, exit 1."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([3, 3], np.int64), "s")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path
    )
    code, out, _ = _compare(path, path, "--runtime", "ort")
    assert code == 1 and out.splitlines()[-1] == "not compared: no runtime ran both models"
    code, out, _ = _compare(path, path, "--runtime", "ort", "--format", "json")
    assert code == 1 and json.loads(out)["compared"] is False


def _npz_member(path: Path, header: dict, payload: bytes) -> None:
    import io
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, header)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", head.getvalue() + payload)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": np.ones((1, 16, 64), np.int64)}, "array x is int64, the model takes float32"),
        ({"x": np.ones((2, 3), np.float32)}, "has shape [2, 3], the model takes [1, 16, 64]"),
        ({"x": np.array(["a"])}, "array x is <U1"),
        ("liar", "array x is larger than the bytes it holds"),
        ("bomb", "has shape [1, 4194304], the model takes"),
    ],
)
def test_inputs_are_checked_before_they_are_read(tmp_path: Path, arrays, message: str) -> None:
    """--inputs: an array of the wrong type or shape went to the runtime, which failed on
    it, and the comparison said 'within tolerance', exit 0; a header claiming 2^60
    elements over 16 bytes was an internal MemoryError; 1 MB of compressed zeros was
    decompressed (1 GiB from 1 MB). Each array's header is judged first: one line, exit 2."""
    path = tmp_path / "m.onnx"
    onnx.save(quantized("mlp-u8s8"), path)
    inputs = tmp_path / "in.npz"
    if arrays == "liar":
        _npz_member(
            inputs, {"descr": "<f4", "fortran_order": False, "shape": (2**40, 2**20)}, b"\0" * 16
        )
    elif arrays == "bomb":
        _npz_member(
            inputs, {"descr": "<f4", "fortran_order": False, "shape": (1, 2**22)}, bytes(2**24)
        )
    else:
        np.savez(inputs, **arrays)
    code, _, err = _compare(path, path, "--inputs", inputs, "--runtime", "ort")
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
