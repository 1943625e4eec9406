"""QONNX ``Quant`` and QCDQ -> standard Q/DQ (``convert --to onnx``): every conversion run in
ONNX Runtime (installed release, graph optimizations off) against QONNX's own formula
(``tests/qonnx_models.quant_reference``, written out from qonnx's ``int_quant``), and
against qonnx's executor where qonnx is installed (not in CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import run_ort
from qonnx_models import quant_model, quant_reference

from qlrewrite import api
from qlrewrite.cli import main
from qlrewrite.errors import Refusal

_X = (np.random.default_rng(0).standard_normal((4, 8)) * 3).astype(np.float32)
#: Values next to every .5 tie of scale 0.05 in [-10, 10], and beyond the ranges.
_TIES = np.concatenate(
    [np.arange(-200, 200) * np.float32(0.05) + np.float32(0.025) * s for s in (-1, 1, 0)]
).astype(np.float32)


def _convert(model: onnx.ModelProto) -> onnx.ModelProto:
    return ir.serde.serialize_model(api.convert(model, "onnx"))


@pytest.mark.parametrize(
    ("bits", "signed", "narrow", "opset", "ops"),
    [
        (8, True, False, 13, ["QuantizeLinear", "DequantizeLinear"]),
        (8, False, False, 13, ["QuantizeLinear", "DequantizeLinear"]),
        (8, True, True, 13, ["QuantizeLinear", "Clip", "DequantizeLinear"]),
        (8, False, True, 13, ["QuantizeLinear", "Clip", "DequantizeLinear"]),
        (4, True, False, 21, ["QuantizeLinear", "DequantizeLinear"]),
        (4, False, False, 21, ["QuantizeLinear", "DequantizeLinear"]),
        (4, True, False, 13, ["QuantizeLinear", "Clip", "DequantizeLinear"]),
        (4, True, True, 21, ["QuantizeLinear", "Clip", "DequantizeLinear"]),
        (2, True, False, 13, ["QuantizeLinear", "Clip", "DequantizeLinear"]),
        (6, False, False, 13, ["QuantizeLinear", "Clip", "DequantizeLinear"]),
        (16, True, False, 21, ["QuantizeLinear", "DequantizeLinear"]),
    ],
)
def test_quant_becomes_qdq_exactly(
    bits: int, *, signed: bool, narrow: bool, opset: int, ops: list[str]
) -> None:
    model = quant_model(bits=bits, signed=signed, narrow=narrow, opset=opset)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = _TIES.size
    converted = _convert(model)
    assert [n.op_type for n in converted.graph.node] == [*ops, "Relu"]
    assert {o.domain for o in converted.opset_import} == {""}
    x = _TIES.reshape(1, -1)
    want = quant_reference(x, np.float32(0.05), 0.0, bits, signed=signed, narrow=narrow)
    np.testing.assert_array_equal(run_ort(converted, {"x": x})[0], np.maximum(want, 0))


def test_weights_and_per_axis_scales() -> None:
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((8, 5)).astype(np.float32)
    model = quant_model(bits=8, weight=weight, scale=np.array(0.03, np.float32))
    model.graph.output.append(helper.make_tensor_value_info("wq", TensorProto.FLOAT, None))
    converted = _convert(model)
    want = quant_reference(weight, np.float32(0.03), 0.0, 8, signed=True, narrow=False)
    np.testing.assert_array_equal(run_ort(converted, {"x": _X})[1], want)
    scale = (rng.random(8) * 0.1 + 0.01).astype(np.float32).reshape(1, 8)
    converted = _convert(quant_model(bits=5, scale=scale))
    (dq,) = [n for n in converted.graph.node if n.op_type == "DequantizeLinear"]
    assert helper.get_attribute_value(dq.attribute[0]) == 1  # axis 1 of x [4, 8]
    want = quant_reference(_X, scale, 0.0, 5, signed=True, narrow=False)
    np.testing.assert_array_equal(run_ort(converted, {"x": _X})[0], np.maximum(want, 0))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"zeropt": 3.0}, "a zero point other than 0"),
        ({"rounding": "FLOOR"}, "rounding mode FLOOR"),
        ({"bits": 1}, "bit width 1"),
        ({"bits": 24}, "bit width 24"),
        ({"bits": 12, "opset": 21}, "12 bits: a Clip on int16"),
        ({"bits": 16}, "16 bits need opset 21"),
        ({"scale": np.ones((2, 8), np.float32)}, "neither per-tensor nor per-axis"),
        # a hostile bit width was an internal ValueError (int(nan)) or OverflowError
        ({"bits": float("nan")}, "the bit width must be one integer"),
        ({"bits": float("inf")}, "the bit width must be one integer"),
        ({"bits": 4.5}, "the bit width must be one integer"),
        # converted before, not exactly: x = 0 gives NaN in QONNX (0 / 0), 0 in Q/DQ
        ({"scale": np.array(0, np.float32)}, "a scale that is 0, infinite or NaN"),
        ({"scale": np.array(-0.0, np.float32)}, "a scale that is 0, infinite or NaN"),
        ({"scale": np.array(np.inf, np.float32)}, "a scale that is 0, infinite or NaN"),
        ({"scale": np.array([[0.1] * 7 + [0.0]], np.float32)}, "a scale that is 0, infinite"),
    ],
)
def test_what_cannot_be_exact_is_refused(changes: dict, reason: str) -> None:
    options = {"bits": 8, **changes}
    with pytest.raises(Refusal, match=reason):
        api.convert(quant_model(**options), "onnx")


def test_a_zero_scale_is_not_exact_in_q_dq() -> None:
    """Why a zero scale is refused: QONNX's formula gives NaN at x = 0, where ONNX
    Runtime's QuantizeLinear -> DequantizeLinear of scale 0 gives 0."""
    x = np.zeros((1, 1), np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = quant_reference(x, np.float32(0), 0.0, 8, signed=True, narrow=False)
    assert np.isnan(want).all()
    scale, zero = (
        numpy_helper.from_array(np.array(0, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
    )
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        [scale, zero],
    )
    qdq = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    assert not np.isnan(run_ort(qdq, {"x": x})[0]).any()


def test_bipolar_quant_is_refused_by_the_pipeline(tmp_path: Path) -> None:
    model = quant_model(bits=8)
    model.graph.node[0].op_type = "BipolarQuant"
    del model.graph.node[0].input[2:]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(
        main, ["convert", "--to", "onnx", str(path), "-o", str(tmp_path / "o.onnx")]
    )
    assert result.exit_code == 1, result.output
    assert "BipolarQuant" in result.output and not (tmp_path / "o.onnx").exists()


def test_cli_converts_and_checks(tmp_path: Path) -> None:
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(quant_model(bits=4, narrow=True, opset=21, weight=np.ones((8, 3), np.float32)), path)
    result = CliRunner().invoke(main, ["convert", "--to", "onnx", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "quant to qcdq 2" in result.output
    assert CliRunner().invoke(main, ["check", str(out)]).exit_code == 0


def _qcdq_model(low: int, high: int, zero: int = 0) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "s"),
        numpy_helper.from_array(np.array(zero, np.int8), "z"),
        numpy_helper.from_array(np.array(low, np.int8), "lo"),
        numpy_helper.from_array(np.array(high, np.int8), "hi"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
        helper.make_node("Clip", ["q", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("DequantizeLinear", ["c", "s", "z"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [_TIES.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [_TIES.size])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_qcdq_to_int4_range_collapses_at_opset_21() -> None:
    for low, high, zero, collapsed in ((-8, 7, 0, True), (-8, 7, 2, True), (-7, 7, 0, False)):
        model = _qcdq_model(low, high, zero)
        converted = _convert(model)
        ops = [n.op_type for n in converted.graph.node]
        assert ("Clip" not in ops) is collapsed, (low, high, ops)
        feeds = {"x": _TIES}
        np.testing.assert_array_equal(run_ort(converted, feeds)[0], run_ort(model, feeds)[0])


_QONNX_EXEC = """
import sys, numpy as np, onnx, onnx.helper
onnx.helper.IR_VERSION = onnx.IR_VERSION = 10  # qonnx builds one-node models at the newest IR
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx
from qonnx.transformation.infer_shapes import InferShapes
model = ModelWrapper(sys.argv[1]).transform(InferShapes())
model.model.ir_version = 10
np.save(sys.argv[3], execute_onnx(model, {"x": np.load(sys.argv[2])})["y"])
"""


def test_against_qonnx_s_executor(tmp_path: Path) -> None:
    """When qonnx is importable here (it is not in CI), its executor gives the values the
    converted model gives in ORT, bit for bit."""
    pytest.importorskip("qonnx")

    for index, options in enumerate(
        [{"bits": 8}, {"bits": 4, "narrow": True}, {"bits": 3, "signed": False}]
    ):
        model = quant_model(**options)
        path, feeds, out = tmp_path / f"m{index}.onnx", tmp_path / "x.npy", tmp_path / "y.npy"
        onnx.save(model, path)
        np.save(feeds, _X)
        subprocess.run([sys.executable, "-c", _QONNX_EXEC, path, feeds, out], check=True)
        np.testing.assert_array_equal(run_ort(_convert(model), {"x": _X})[0], np.load(out))


def test_overridable_parameters_as_brevitas_exports_them(tmp_path: Path) -> None:
    """PyTorch's exporter lists Brevitas' scale / zero point / bit width initializers as
    graph inputs too: converted at the initializer's value, with a warning."""
    model = quant_model(bits=6, signed=False)
    model.graph.input.extend(
        helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims))
        for t in model.graph.initializer
    )
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(main, ["convert", "--to", "onnx", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 Quant node(s) read a scale, zero point or bit width" in result.output
    want = quant_reference(_X, np.float32(0.05), 0.0, 6, signed=False, narrow=False)
    np.testing.assert_array_equal(run_ort(onnx.load(out), {"x": _X})[0], np.maximum(want, 0))
