"""MatMulNBits / GatherBlockQuantized -> DequantizeLinear: bit-exact with ONNX Runtime.

Every dequantized weight is compared with the one ONNX Runtime's own kernel computes:
MatMulNBits run with A = identity (its output is the weight, with -0.0 turned into +0.0),
GatherBlockQuantized with every index.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nbits_weights import gather_block_quantized_model, matmul_nbits_model, session

import qlrewrite
from qlrewrite.errors import Refusal
from qlrewrite.kernels.nbits import MatMulNBitsLayout, pack, take_bits, unpack
from qlrewrite.passes.fold import tensor as fold_tensor
from qlrewrite.passes.fold.tensor import StreamedTensor
from qlrewrite.passes.nbits.to_onnx import NBitsToOnnxPass


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _weight_in_ort(model: onnx.ModelProto, k: int) -> np.ndarray:
    """ORT's MatMulNBits weight [K, N]: the node run on A = identity."""
    dtype = np.float16 if model.graph.input[0].type.tensor_type.elem_type == 10 else np.float32
    return session(model).run(None, {"A": np.eye(k, dtype=dtype)})[0]


def _converted(model: onnx.ModelProto, **kwargs) -> ir.Model:
    converted = ir.from_proto(model)
    NBitsToOnnxPass(**kwargs)(converted)
    return converted


def _run_with_weight(converted: ir.Model, k: int, dtype=np.float32) -> list[np.ndarray]:
    """Run the converted model with A = identity; the MatMul's weight is an extra output."""
    matmul = next(n for n in converted.graph if n.op_type == "MatMul")
    converted.graph.outputs.append(matmul.inputs[1])
    proto = ir.to_proto(converted)
    onnx.checker.check_model(proto, full_check=True)
    proto.ir_version = min(proto.ir_version, 10 if converted.opset_imports[""] < 25 else 11)
    return session(proto).run(None, {"A": np.eye(k, dtype=dtype)})


# ------------------------------------------------------------------ kernels


@given(st.sampled_from([2, 4, 8]), st.lists(st.integers(0, 255), min_size=1, max_size=40))
def test_unpack_then_pack_is_identity(bits, data):
    packed = np.array(data, np.uint8)
    assert np.array_equal(pack(unpack(packed, bits), bits), packed)


def test_packing_is_low_bits_first():
    assert unpack(np.array([0x21], np.uint8), 4).tolist() == [1, 2]
    assert unpack(np.array([0b11100100], np.uint8), 2).tolist() == [0, 1, 2, 3]
    assert pack(np.array([1, 2, 3], np.uint8), 4).tolist() == [0x21, 0x03]
    raw = np.array([0x21, 0x43], np.uint8)
    assert take_bits(raw, 4, np.array([3, 0, 2])).tolist() == [4, 1, 3]


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize(("n", "k"), [(8, 100), (12, 64), (7, 40), (4, 33)])
@pytest.mark.parametrize("flip", [False, True])
def test_packed_rows_equal_the_values_packed(bits, n, k, flip):
    """The byte-level path (streaming --to onnx) equals unpack -> transpose -> pack."""
    layout = MatMulNBitsLayout(K=k, N=n, bits=bits, block_size=16)
    b = np.random.default_rng(bits + n + k).integers(0, 256, layout.b_shape, dtype=np.uint8)
    for k0, k1 in ((0, k), (4, min(k, 36)), (k - (k % 4 or 4), k)):
        packed = layout.packed_rows(b, k0, k1, flip=flip)
        if (n * bits) % 8:
            assert packed is None
            continue
        q = layout.quantized_rows(b, k0, k1)
        if flip:
            q = q ^ np.uint8(1 << (bits - 1))
        expected = pack(q.reshape(1, -1), bits).reshape(k1 - k0, -1)
        assert np.array_equal(packed, expected), (k0, k1)


def test_layout_refuses_invalid_attributes():
    with pytest.raises(ValueError, match="power of 2"):
        MatMulNBitsLayout(K=32, N=4, bits=4, block_size=24)
    with pytest.raises(ValueError, match="bits"):
        MatMulNBitsLayout(K=32, N=4, bits=3, block_size=32)


# ------------------------------------------------------------------ MatMulNBits


@pytest.mark.parametrize(
    ("bits", "opset"), [(4, 21), (8, 21), (8, 13), (2, 25)], ids=["b4", "b8", "b8-op13", "b2"]
)
@pytest.mark.parametrize(("k", "block_size"), [(64, 16), (100, 32), (32, 32), (20, 128)], ids=str)
@pytest.mark.parametrize("zero_points", [False, True], ids=["sym", "zp"])
def test_matmul_nbits_weight_is_ort_s(bits, opset, k, block_size, zero_points):
    rng = np.random.default_rng(bits * 1000 + k)
    per_axis = -(-k // block_size) == 1
    if opset < 21 and not per_axis:
        pytest.skip("blocked: refused below opset 21 (tested below)")
    model = matmul_nbits_model(
        rng,
        n=5,
        k=k,
        bits=bits,
        block_size=block_size,
        zero_points=zero_points,
        opset=opset,
        flat_scales=k == 100,
    )
    expected = _weight_in_ort(model, k)
    converted = _converted(model)
    dq = next(n for n in converted.graph if n.op_type == "DequantizeLinear")
    x_type = dq.inputs[0].const_value.dtype
    assert x_type.bitwidth == bits and x_type.is_signed() == (not zero_points)
    # one block over K: per-axis, unless the block size is not the smallest (kept at 21+)
    blocked = not per_axis or (block_size != 32 and opset >= 21)
    assert ("block_size" in dq.attributes) == blocked
    weight = _run_with_weight(converted, k)[-1]
    assert _bits_equal(weight + np.float32(0), expected)  # +0: the identity's -0.0 -> +0.0

    folded = _converted(model, dequantize=True)
    matmul = next(n for n in folded.graph if n.op_type == "MatMul")
    value = matmul.inputs[1].const_value
    assert isinstance(value, StreamedTensor)
    assert _bits_equal(value.numpy() + np.float32(0), expected)


def test_matmul_nbits_with_bias_runs_as_matmul_add():
    """float32: identical with A = identity. (float16: ORT adds the bias to the float32
    product and rounds once; MatMul -> Add rounds twice, so they differ in the last bits.)"""
    scale_dtype = np.float32
    rng = np.random.default_rng(3)
    model = matmul_nbits_model(
        rng, n=6, k=48, bits=4, block_size=16, bias=True, scale_dtype=scale_dtype
    )
    expected = _weight_in_ort(model, 48)
    converted = _converted(model)
    assert [n.op_type for n in converted.graph] == ["DequantizeLinear", "MatMul", "Add"]
    assert converted.graph.outputs[0].name == "Y"
    outputs = _run_with_weight(converted, 48, scale_dtype)
    assert _bits_equal(outputs[0], expected)


def test_matmul_nbits_float16_weight_is_rounded_once():
    """float16: ORT's kernel keeps the weight in float32; the DQ rounds it once to float16
    (A = identity shows the same float16 values)."""
    rng = np.random.default_rng(4)
    model = matmul_nbits_model(rng, n=4, k=64, bits=4, block_size=32, scale_dtype=np.float16)
    expected = _weight_in_ort(model, 64)
    weight = _run_with_weight(_converted(model), 64, np.float16)[-1]
    assert _bits_equal(weight + np.float16(0), expected)


def test_refusal_names_the_node_and_the_lowest_opset():
    rng = np.random.default_rng(5)
    for bits, opset, lowest in ((4, 19, 21), (2, 21, 25), (8, 17, 21)):
        model = matmul_nbits_model(rng, n=4, k=64, bits=bits, block_size=16, opset=opset)
        with pytest.raises(Refusal, match=r"MatMulNBits 'mm'.*") as info:
            _converted(model)
        assert f"upgrade --opset {lowest}" in str(info.value)


def test_g_idx_is_refused():
    rng = np.random.default_rng(6)
    model = matmul_nbits_model(rng, n=4, k=64, bits=4, block_size=16, zero_points=False)
    g_idx = onnx.numpy_helper.from_array((np.arange(64) // 16).astype(np.int32), "g")
    model.graph.initializer.append(g_idx)
    model.graph.node[0].input.extend(["", "g"])
    with pytest.raises(Refusal, match="g_idx"):
        _converted(model)
    assert "MatMulNBits" in [n.op_type for n in _converted(model, strict=False).graph]


@pytest.mark.parametrize("k", [64, 100])
def test_float_zero_points_fold_as_ort_computes_them(k):
    """Zero points in the scale type: ORT computes q * scale - scale * zp (rounded twice);
    --dequantize-weights writes exactly that, convert its standard form."""
    rng = np.random.default_rng(9)
    model = matmul_nbits_model(rng, n=6, k=k, bits=4, block_size=32, zero_points=False)
    k_blocks = -(-k // 32)
    zp = (rng.integers(0, 16, (6, k_blocks)) + rng.random((6, k_blocks))).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(zp, "zpf"))
    model.graph.node[0].input.append("zpf")
    expected = _weight_in_ort(model, k)
    folded = _converted(model, dequantize=True)
    value = next(n for n in folded.graph if n.op_type == "MatMul").inputs[1].const_value
    assert _bits_equal(value.numpy() + np.float32(0), expected)
    # convert: DequantizeLinear(q, scale) - scale * zp per block (a partial last block at
    # k=100: Slice), the same float32 weight
    converted = _converted(model)
    ops = [n.op_type for n in converted.graph]
    assert "Sub" in ops and ("Slice" in ops) == (k % 32 != 0), ops
    assert _bits_equal(_run_with_weight(converted, k)[1], expected)


def test_shared_weight_is_converted_once():
    rng = np.random.default_rng(7)
    model = matmul_nbits_model(rng, n=4, k=32, bits=4, block_size=16)
    node = onnx.helper.make_node(
        "MatMulNBits",
        ["A", "B", "scales", "zp"],
        ["Y2"],
        domain="com.microsoft",
        K=32,
        N=4,
        bits=4,
        block_size=16,
    )
    model.graph.node.append(node)
    model.graph.output.append(onnx.helper.make_tensor_value_info("Y2", 1, ["M", 4]))
    converted = _converted(model)
    ops = [n.op_type for n in converted.graph]
    assert ops.count("DequantizeLinear") == 1 and ops.count("MatMul") == 2
    assert set(converted.graph.initializers) == {"B_q", "B_s", "B_zp"}
    assert "com.microsoft" not in converted.opset_imports


def test_weights_stream_in_chunks(tmp_path, monkeypatch):
    """Saved with external data in many small chunks, the weights are those computed whole."""
    monkeypatch.setattr(fold_tensor, "CHUNK_BYTES", 64)
    rng = np.random.default_rng(8)
    model = matmul_nbits_model(rng, n=12, k=100, bits=4, block_size=32)
    expected = _weight_in_ort(model, 100)
    for dequantize in (False, True):
        converted = _converted(model, dequantize=dequantize)
        path = tmp_path / f"m{dequantize}.onnx"
        ir.save(converted, path, external_data="m.data", size_threshold_bytes=0)
        loaded = onnx.load(path)
        matmul = next(n for n in loaded.graph.node if n.op_type == "MatMul")
        loaded.graph.output.append(onnx.helper.make_tensor_value_info(matmul.input[1], 1, None))
        loaded.ir_version = 10
        weight = session(loaded).run(None, {"A": np.eye(100, dtype=np.float32)})[-1]
        assert _bits_equal(weight + np.float32(0), expected)


# ------------------------------------------------------------------ GatherBlockQuantized

_GATHER_CASES = [
    ("uint8", (10, 24), 4, 16, 1, 0),
    ("uint8", (10, 24), 2, 32, 1, 0),
    ("uint8", (10, 40), 8, 16, 1, 0),
    ("uint8", (7, 9), 4, 16, 1, 0),
    ("int4", (10, 40), 4, 16, 1, 0),
    ("uint4", (10, 40), 4, 32, 1, 0),
    ("int4", (40, 10), 4, 16, 0, 1),
    ("uint4", (6, 40, 3), 4, 16, 1, 2),
]


@pytest.mark.parametrize("case", _GATHER_CASES, ids=str)
@pytest.mark.parametrize("zero_points", [False, True], ids=["nozp", "zp"])
@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
def test_gather_block_quantized_is_ort_s(case, zero_points, scale_dtype):
    dtype, shape, bits, block_size, quantize_axis, gather_axis = case
    rng = np.random.default_rng(sum(shape) + bits)
    model, indices = gather_block_quantized_model(
        rng,
        dtype=dtype,
        shape=shape,
        bits=bits,
        block_size=block_size,
        quantize_axis=quantize_axis,
        gather_axis=gather_axis,
        zero_points=zero_points,
        scale_dtype=scale_dtype,
    )
    expected = session(model).run(None, {"idx": indices})[0]
    for dequantize in (False, True):
        converted = _converted(model, dequantize=dequantize)
        ops = [n.op_type for n in converted.graph]
        assert ops == (["Gather"] if dequantize else ["DequantizeLinear", "Gather"])
        proto = ir.to_proto(converted)
        onnx.checker.check_model(proto, full_check=True)
        proto.ir_version = 10
        out = session(proto).run(None, {"idx": indices})[0]
        assert _bits_equal(out, expected)


# ------------------------------------------------------------------ typed refusals, functions


def _in_function(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s graph as the body of a model-local function (initializers become
    Constant nodes), called once from the main graph."""
    graph = model.graph
    body = [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in graph.initializer]
    body += list(graph.node)
    inputs = [i.name for i in graph.input]
    outputs = [o.name for o in graph.output]
    function = onnx.helper.make_function(
        "local", "F", inputs, outputs, body, list(model.opset_import)
    )
    call = onnx.helper.make_node("F", inputs, outputs, domain="local", name="call")
    main = onnx.helper.make_graph([call], "g", list(graph.input), list(graph.output))
    opsets = [*model.opset_import, onnx.helper.make_opsetid("local", 1)]
    wrapped = onnx.helper.make_model(main, opset_imports=opsets, functions=[function])
    wrapped.ir_version = model.ir_version
    onnx.checker.check_model(wrapped, full_check=True)
    return wrapped


@pytest.mark.parametrize("zero_points", ["uint8", "float"])
def test_matmul_nbits_inside_a_function_is_converted(zero_points):
    """The constants a converted node reads go before it in a function (a function's nodes
    are in order; they were appended after it: the output check refused the result), also
    the Reshape / Expand shapes of float zero points (they were initializers of the
    function's inner graph, which a function cannot hold)."""
    rng = np.random.default_rng(3)
    model = matmul_nbits_model(rng, n=6, k=64, bits=4, block_size=32, zero_points=False)
    if zero_points == "uint8":
        zp = rng.integers(0, 256, (6, 1), dtype=np.uint8)
    else:
        zp = (rng.integers(0, 16, (6, 2)) + rng.random((6, 2))).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(zp, "zp"))
    model.graph.node[0].input.append("zp")
    expected = _weight_in_ort(model, 64)
    wrapped = _in_function(model)
    converted = qlrewrite.convert(wrapped, "onnx")  # the output check passes it
    body = [n.op_type for n in converted.functions["local", "F", ""]]
    assert "MatMulNBits" not in body and body[-1] == "MatMul", body
    proto = ir.to_proto(converted)
    assert _bits_equal(session(proto).run(None, {"A": np.eye(64, dtype=np.float32)})[0], expected)


def _weight_only_model(op: str) -> onnx.ModelProto:
    """A small 4-bit MatMulNBits or uint8 GatherBlockQuantized model (``op``)."""
    rng = np.random.default_rng(4)
    if op == "MatMulNBits":
        return matmul_nbits_model(rng, n=4, k=32, bits=4, block_size=16)
    model, _ = gather_block_quantized_model(
        rng,
        dtype="uint8",
        shape=(4, 16),
        bits=4,
        block_size=16,
        quantize_axis=1,
        gather_axis=0,
        zero_points=False,
    )
    return model


@pytest.mark.parametrize(
    ("op", "index", "named"),
    [("MatMulNBits", 1, "B"), ("MatMulNBits", 2, "scales"), ("GatherBlockQuantized", 2, "scales")],
)
def test_an_omitted_weight_input_is_refused_by_the_pass(op, index, named):
    """The pass on its own (no input check before it): an omitted B or scales is a refusal
    naming it, not an AttributeError on None."""
    model = _weight_only_model(op)
    model.graph.node[0].input[index] = ""
    with pytest.raises(Refusal, match=f"{named} is omitted"):
        _converted(model)


@pytest.mark.parametrize(
    ("op", "index", "named"),
    [("MatMulNBits", 1, "B"), ("MatMulNBits", 2, "scales"), ("GatherBlockQuantized", 2, "scales")],
)
def test_a_weight_input_that_is_not_constant_is_not_called_omitted(op, index, named):
    """A B or scales given as a graph input is refused as not a constant, the one reason:
    the refusal said 'B is omitted' too (a non-constant input read as an omitted one)."""
    model = _weight_only_model(op)
    name = model.graph.node[0].input[index]
    (tensor,) = (t for t in model.graph.initializer if t.name == name)
    model.graph.initializer.remove(tensor)
    model.graph.input.append(onnx.helper.make_tensor_value_info(name, tensor.data_type, None))
    with pytest.raises(Refusal, match=f"input {index} \\('{name}'\\) is not a constant") as err:
        _converted(model)
    assert "omitted" not in str(err.value)
