"""MatMulNBitsQuantizer outputs round-trip --to onnx then --to com.microsoft (or the reverse
for its QDQ format) back to the same weights byte for byte; every model written by the
command pipeline (which runs onnx.checker and `qlrewrite check` on it) loads and runs in
ONNX Runtime."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from nbits_weights import session
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from qlrewrite import pipeline
from qlrewrite.passes.convert.domain import ConvertDomainPass
from qlrewrite.passes.nbits.from_onnx import NBitsFromOnnxPass
from qlrewrite.passes.nbits.to_onnx import NBitsToOnnxPass

K, N = 160, 24  # K not a multiple of 128: a ragged last block


def _float_model(bias: bool, opset: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["A", "W"], ["Y" if not bias else "mm"], name="fc")]
    inits = [w]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["mm", "b"], ["Y"], name="fc_bias"))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", N])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _quantized(config: tuple) -> onnx.ModelProto:
    bits, block_size, symmetric, accuracy_level, fmt, bias = config
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(
        _float_model(bias, 21),
        bits=bits,
        block_size=block_size,
        is_symmetric=symmetric,
        accuracy_level=accuracy_level,
        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
    )
    quantizer.process()
    model = quantizer.model.model
    if bits == 2:  # int2 DequantizeLinear needs opset 25
        model.opset_import[0].version = 25
    return model


def _weights(model: onnx.ModelProto, op: str) -> dict[str, bytes]:
    """The raw bytes of the weight inputs of the (only) ``op`` node, by input position."""
    node = next(n for n in model.graph.node if n.op_type == op)
    inits = {i.name: i for i in model.graph.initializer}
    roles = (1, 2, 3) if op == "MatMulNBits" else (0, 1, 2)
    out = {}
    for position in roles:
        if position < len(node.input) and node.input[position]:
            tensor = inits[node.input[position]]
            out[position] = (tuple(tensor.dims), tensor.data_type, _raw(tensor))
    return out


def _raw(tensor: onnx.TensorProto) -> bytes:
    if tensor.data_type in (
        TensorProto.INT4,
        TensorProto.UINT4,
        TensorProto.INT2,
        TensorProto.UINT2,
    ):
        return tensor.raw_data
    return numpy_helper.to_array(tensor).tobytes()


def _rewrite(path, out, passes):
    pipeline.rewrite(path, passes, command="convert", output=out)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    return model


def _runs(model: onnx.ModelProto) -> np.ndarray:
    if model.opset_import[0].version > 25:
        return np.zeros(0)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = min(copy.ir_version, 11)
    a = np.random.default_rng(1).standard_normal((3, K)).astype(np.float32)
    return session(copy).run(None, {"A": a})[0]


_CONFIGS = [
    (bits, block, sym, acc, "qoperator", bias)
    for bits in (4, 8, 2)
    for block in (32, 128)
    for sym in (True, False)
    for acc in (0, 4)
    for bias in (False, True)
    if not (acc == 4 and bias)  # accuracy level does not touch the weights: fewer cases
] + [
    (4, block, sym, 0, "qdq", bias)
    for block in (32, 128)
    for sym in (True, False)
    for bias in (False, True)
]


@pytest.mark.parametrize("config", _CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_quantizer_output_round_trips_byte_for_byte(config, tmp_path):
    acc, fmt = config[3], config[4]
    original = _quantized(config)
    source = tmp_path / "q.onnx"
    onnx.save(original, source)
    if fmt == "qoperator":
        first, second, op = "onnx", "com.microsoft", "MatMulNBits"
    else:
        first, second, op = "com.microsoft", "onnx", "DequantizeLinear"
    passes = {
        "onnx": lambda: [NBitsToOnnxPass(), ConvertDomainPass("onnx")],
        "com.microsoft": lambda: [
            NBitsFromOnnxPass(accuracy_level=acc, include_8bit=True),  # 8-bit: opt-in
            ConvertDomainPass("com.microsoft"),
        ],
    }
    middle = _rewrite(source, tmp_path / "a.onnx", passes[first]())
    ops = {n.op_type for n in middle.graph.node}
    assert ("MatMulNBits" in ops) == (first == "com.microsoft")
    back = _rewrite(tmp_path / "a.onnx", tmp_path / "b.onnx", passes[second]())
    assert _weights(back, op) == _weights(original, op)
    count = [n.op_type for n in back.graph.node].count
    assert count(op) == [n.op_type for n in original.graph.node].count(op) == 1
    # (--to com.microsoft fuses the quantizer's MatMul -> Add into MatMulNBits' bias)
    for model in (middle, back):
        assert _runs(model).shape in ((3, N), (0,))


def test_a_dequantize_linear_without_its_scale_is_left_by_the_pass():
    """The pass on its own (no input check before it): a DequantizeLinear -> MatMul whose
    scale input is omitted is not a weight to pack."""
    w = numpy_helper.from_array(np.zeros((32, 4), np.int8), "w")
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w", ""], ["wf"], name="dq"),
            helper.make_node("MatMul", ["A", "wf"], ["Y"], name="mm"),
        ],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])],
        [w],
    )
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    result = NBitsFromOnnxPass()(model)
    assert not result.modified
    assert [n.op_type for n in model.graph] == ["DequantizeLinear", "MatMul"]
