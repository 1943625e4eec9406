"""qlrewrite.qdq.weight_only (and MatMulNBitsLayout's input shapes): what MatMulNBits /
GatherBlockQuantized attributes mean. Shapes are checked against hand-computed values and
against ONNX Runtime (a model built from the form's shapes runs there)."""

from __future__ import annotations

import itertools

import onnx_ir as ir
import pytest
from nbits_models import gather_block_quantized_model, matmul_nbits_model, ort_runs

from qlrewrite import opsets
from qlrewrite.kernels.nbits import MatMulNBitsLayout
from qlrewrite.qdq.weight_only import (
    GatherBlockForm,
    gather_block_form,
    int_attributes,
    matmul_nbits_layout,
)

DT = ir.DataType
MM = opsets.weight_only("com.microsoft", "MatMulNBits", 1)
GBQ = opsets.weight_only("com.microsoft", "GatherBlockQuantized", 1)


def test_matmul_nbits_shapes_by_hand() -> None:
    form = MatMulNBitsLayout(K=40, N=8, bits=4, block_size=16)
    assert (form.k_blocks, form.blob, form.zero_point_row) == (3, 8, 2)
    assert form.b_shape == (8, 3, 8)
    assert form.scales_shapes == ((8, 3), (24,))
    assert form.zero_point_shapes(packed=True) == ((8, 2), (16,))
    assert form.zero_point_shapes(packed=False) == ((8, 3), (24,))
    assert form.g_idx_shapes == ((40,), (48,))
    assert form.bias_shape == (8,)
    two = MatMulNBitsLayout(K=40, N=8, bits=2, block_size=16)
    assert (two.blob, two.zero_point_row, two.default_zero_point) == (4, 1, 2)
    assert MatMulNBitsLayout(K=32, N=1, bits=8, block_size=32).g_idx_shapes == ((32,),)


def test_int_attributes_defaults_and_bad_types() -> None:
    attrs = {
        "K": ir.AttrInt64("K", 64),
        "N": ir.AttrInt64("N", 8),
        "block_size": ir.AttrInt64("block_size", 32),
        "bits": ir.AttrFloat32("bits", 4.0),
    }
    values = int_attributes(attrs, MM)
    assert values == {
        "K": 64,
        "N": 8,
        "bits": None,
        "block_size": 32,
        "accuracy_level": 0,
        "weight_prepacked": 0,
    }
    assert matmul_nbits_layout(values, MM) is None  # bits unusable
    values["bits"] = 4
    assert matmul_nbits_layout(values, MM) == MatMulNBitsLayout(64, 8, 4, 32)
    for bad in ({"K": None}, {"K": 0}, {"block_size": 0}, {"block_size": 48}, {"bits": 3}):
        assert matmul_nbits_layout({**values, **bad}, MM) is None
    assert int_attributes({}, GBQ) == {
        "bits": 4,
        "block_size": 128,
        "gather_axis": 0,
        "quantize_axis": 1,
    }


def _gbq(data_type: DT, shape: tuple, **values: int) -> GatherBlockForm:
    merged = {**int_attributes({}, GBQ), **values}
    form = gather_block_form(merged, GBQ, data_type, len(shape))
    assert form is not None
    return form


def test_gather_block_shapes_by_hand() -> None:
    u8 = _gbq(DT.UINT8, (8, 16), block_size=16)  # 32 4-bit values per row
    assert (u8.values_per_element, u8.blocks((8, 16))) == (2, 2)
    assert u8.scales_shape((8, 16)) == (8, 2) and u8.zero_point_shape((8, 2)) == (8, 1)
    assert u8.default_zero_point == 8
    two = _gbq(DT.UINT8, (8, 8), bits=2, block_size=16)
    assert two.blocks((8, 8)) == 2 and two.zero_point_shape((8, 2)) == (8, 1)
    int4 = _gbq(DT.INT4, (40, 8), block_size=16, quantize_axis=0, gather_axis=-1)
    assert (int4.quantize_axis, int4.gather_axis, int4.default_zero_point) == (0, 1, 0)
    assert int4.scales_shape((40, 8)) == (3, 8) and int4.zero_point_shape((3, 8)) == (3, 8)
    fp8 = _gbq(DT.FLOAT8E4M3FN, (8, 40), block_size=0)
    assert fp8.blocks((8, 40)) == 1 and fp8.default_zero_point is None
    assert gather_block_form(int_attributes({}, GBQ), GBQ, DT.INT8, 2) is None
    assert gather_block_form(int_attributes({}, GBQ), GBQ, DT.UINT8, None) is None
    assert (
        gather_block_form({**int_attributes({}, GBQ), "gather_axis": 2}, GBQ, DT.UINT8, 2) is None
    )


pytest.importorskip("onnxruntime")


@pytest.mark.parametrize(
    ("k", "bits", "block", "zp"),
    list(itertools.product([17, 64], [2, 4, 8], [16, 64], [None, "packed", "float"])),
)
def test_matmul_nbits_form_shapes_run_in_ort(k: int, bits: int, block: int, zp: str) -> None:
    form = MatMulNBitsLayout(K=k, N=3, bits=bits, block_size=block)
    if bits == 8 and zp == "float":
        pytest.skip("no CPU kernel (QL606)")
    zp_shape = None if zp is None else form.zero_point_shapes(zp == "packed")[0]
    proto = matmul_nbits_model(
        k=k,
        n=3,
        bits=bits,
        block_size=block,
        b_shape=form.b_shape,
        scale_shape=form.scales_shapes[1],
        zp=zp,
        zp_shape=zp_shape,
        bias=True,
        bias_shape=form.bias_shape,
        a_shape=[1, k],
    )
    assert ort_runs(proto)


@pytest.mark.parametrize(
    ("data_type", "shape", "bits", "block", "quantize_axis"),
    [
        (DT.UINT8, (5, 24), 4, 16, 1),
        (DT.UINT8, (5, 6), 2, 16, -1),
        (DT.UINT8, (5, 40), 8, 32, 1),
        (DT.INT4, (40, 6), 4, 16, 0),
        (DT.UINT4, (3, 5, 33), 4, 32, 2),
        (DT.FLOAT8E4M3FN, (6, 40), 4, 0, 1),
    ],
)
def test_gather_block_form_shapes_run_in_ort(data_type, shape, bits, block, quantize_axis):
    form = _gbq(
        data_type,
        shape,
        bits=bits,
        block_size=block,
        quantize_axis=quantize_axis,
        gather_axis=0 if quantize_axis else 1,
    )
    scales = form.scales_shape(shape)
    zp = form.default_zero_point is not None
    proto = gather_block_quantized_model(
        data_type=data_type,
        data_shape=shape,
        bits=bits,
        block_size=block,
        quantize_axis=quantize_axis,
        gather_axis=form.gather_axis,
        scale_shape=scales,
        zp=zp,
        zp_shape=form.zero_point_shape(scales) if zp else None,
    )
    assert ort_runs(proto)
