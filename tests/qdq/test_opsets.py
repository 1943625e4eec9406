"""The opset table against onnx.defs (ai.onnx) and the facts about com.microsoft."""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir
import pytest

from qlrewrite import opsets

DT = ir.DataType
CASES = [(op, v) for op in ("QuantizeLinear", "DequantizeLinear") for v in opsets.ONNX_OPSETS]


def _types(schema: onnx.defs.OpSchema, type_str: str) -> set[ir.DataType]:
    if type_str.startswith("tensor("):
        strs = [type_str]
    else:
        strs = next(
            c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == type_str
        )
    out = set()
    for s in strs:
        name = s[len("tensor(") : -1]
        out.add(DT[name.upper()])
    return out


@pytest.mark.parametrize(("op", "version"), CASES)
def test_row_matches_onnx_schema(op: str, version: int) -> None:
    schema = onnx.defs.get_schema(op, version, "")
    row = opsets.lookup("", op, version)
    assert row is not None and row.since == schema.since_version == version
    attrs = {
        name: (ir.AttributeType(int(a.type)), a.default_value.i)
        for name, a in schema.attributes.items()
    }
    assert dict(row.attributes) == attrs
    x, scale, zp = schema.inputs
    assert row.x_types == _types(schema, x.type_str)
    assert row.scale_types == _types(schema, scale.type_str)
    assert row.zero_point_types == _types(schema, zp.type_str)
    assert row.output_types == _types(schema, schema.outputs[0].type_str)
    assert row.scale_matches_x == (op == "QuantizeLinear" and scale.type_str == x.type_str)
    if op == "DequantizeLinear":
        assert zp.type_str == x.type_str


@pytest.mark.parametrize(("op", "version"), CASES)
def test_lookup_version_in_force(op: str, version: int) -> None:
    for imported in range(version, version + 3):
        expected = onnx.defs.get_schema(op, imported, "").since_version
        assert opsets.lookup("ai.onnx", op, imported).since == expected


def test_lookup_none_below_10_and_unimported() -> None:
    assert opsets.lookup("", "QuantizeLinear", 9) is None
    assert opsets.lookup("", "DequantizeLinear", None) is None
    assert opsets.lookup("com.microsoft", "DequantizeLinear", 0) is None
    assert opsets.lookup("com.microsoft", "DequantizeLinear", 1).domain == "com.microsoft"
    assert opsets.lookup("", "Relu", 13) is None
    assert [r.since for r in opsets.versions("", "QuantizeLinear")] == list(opsets.ONNX_OPSETS)


def test_com_microsoft_rows() -> None:
    dq = opsets.lookup("com.microsoft", "DequantizeLinear", 1)
    q = opsets.lookup("com.microsoft", "QuantizeLinear", 1)
    assert set(dq.attributes) == set(q.attributes) == {"axis"}
    assert DT.FLOAT8E4M3FN not in dq.x_types and DT.BFLOAT16 not in dq.scale_types
    assert {DT.INT16, DT.UINT16, DT.INT4, DT.UINT4} <= q.output_types
    assert opsets.BLOCKED not in dq.granularities


@pytest.mark.parametrize(
    ("dtype", "ir_version"),
    [
        (DT.UINT8, 3),
        (DT.FLOAT8E4M3FN, 9),
        (DT.INT4, 10),
        (DT.FLOAT4E2M1, 11),
        (DT.FLOAT8E8M0, 12),
        (DT.UINT2, 13),
        (DT.FLOAT6E3M2, 14),
    ],
)
def test_min_ir_version(dtype: ir.DataType, ir_version: int) -> None:
    assert opsets.min_ir_version(dtype) == ir_version


def test_lowest_onnx_opset() -> None:
    def low(op_type: str, **form: Any) -> int | None:
        return opsets.lowest_onnx_opset(op_type, opsets.NodeForm(**form))

    assert low("DequantizeLinear", x_type=DT.UINT8, scale_type=DT.FLOAT) == 10
    assert low("DequantizeLinear", x_type=DT.UINT8, scale_type=DT.FLOAT, per_axis=True) == 13
    assert low("DequantizeLinear", x_type=DT.UINT8, scale_type=DT.FLOAT, attributes=("axis",)) == 13
    assert low("DequantizeLinear", x_type=DT.UINT8, scale_type=DT.FLOAT16) == 19
    assert low("DequantizeLinear", x_type=DT.INT16, scale_type=DT.FLOAT) == 21
    assert low("DequantizeLinear", x_type=DT.INT4, scale_type=DT.FLOAT, blocked=True) == 21
    assert low("DequantizeLinear", x_type=DT.FLOAT4E2M1, scale_type=DT.FLOAT) == 23
    assert (
        low("DequantizeLinear", x_type=DT.UINT8, scale_type=DT.FLOAT16, output_type=DT.FLOAT) == 23
    )
    assert low("DequantizeLinear", x_type=DT.UINT8, scale_type=DT.FLOAT8E8M0) == 24
    assert low("DequantizeLinear", x_type=DT.INT2, scale_type=DT.FLOAT) == 25
    assert low("DequantizeLinear", x_type=DT.FLOAT6E2M3, scale_type=DT.FLOAT) == 28
    assert (
        low("QuantizeLinear", x_type=DT.FLOAT, scale_type=DT.FLOAT, zero_point_type=DT.INT8) == 10
    )
    assert low("QuantizeLinear", x_type=DT.FLOAT16, scale_type=DT.FLOAT) == 23
    assert low("QuantizeLinear", x_type=DT.FLOAT16, scale_type=DT.FLOAT16) == 19
    assert low("QuantizeLinear", x_type=DT.FLOAT, scale_type=DT.FLOAT, output_type=DT.INT4) == 21
    assert (
        low(
            "QuantizeLinear",
            x_type=DT.FLOAT,
            scale_type=DT.FLOAT,
            zero_point_type=DT.INT8,
            output_type=DT.UINT8,
        )
        is None
    )
    assert low("DequantizeLinear", x_type=DT.INT64, scale_type=DT.FLOAT) is None


def test_com_microsoft_problems() -> None:
    def can(op_type: str, **form: Any) -> list[str]:
        return opsets.com_microsoft_problems(op_type, opsets.NodeForm(**form))

    assert can("DequantizeLinear", x_type=DT.INT16, scale_type=DT.FLOAT, attributes=("axis",)) == []
    assert (
        can("QuantizeLinear", x_type=DT.FLOAT16, scale_type=DT.FLOAT16, zero_point_type=DT.UINT4)
        == []
    )
    assert can("DequantizeLinear", x_type=DT.FLOAT8E4M3FN, scale_type=DT.FLOAT)
    assert can("DequantizeLinear", x_type=DT.INT8, scale_type=DT.BFLOAT16)
    assert can("DequantizeLinear", x_type=DT.INT4, scale_type=DT.FLOAT, blocked=True)
    assert can("DequantizeLinear", x_type=DT.INT4, scale_type=DT.FLOAT, attributes=("block_size",))
    assert can("QuantizeLinear", x_type=DT.FLOAT, scale_type=DT.FLOAT16)


def test_output_type() -> None:
    q21 = opsets.lookup("", "QuantizeLinear", 21)
    assert opsets.output_type(q21, scale_type=DT.FLOAT) == DT.UINT8
    assert opsets.output_type(q21, scale_type=DT.FLOAT, output_dtype=int(DT.INT4)) == DT.INT4
    assert opsets.output_type(q21, scale_type=DT.FLOAT, zero_point_type=DT.INT8) == DT.INT8
    dq23 = opsets.lookup("", "DequantizeLinear", 23)
    assert opsets.output_type(dq23, scale_type=DT.FLOAT16) == DT.FLOAT16
    assert opsets.output_type(dq23, scale_type=DT.FLOAT16, output_dtype=1) == DT.FLOAT
    dq13 = opsets.lookup("", "DequantizeLinear", 13)
    assert opsets.output_type(dq13, scale_type=DT.FLOAT) == DT.FLOAT


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_com_microsoft_rows_match_onnxruntime_schema(op: str) -> None:
    pytest.importorskip("onnxruntime")
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    if not hasattr(ort_c, "get_all_operator_schema"):
        pytest.skip("this onnxruntime build does not expose its schemas")
    (schema,) = [
        s for s in ort_c.get_all_operator_schema() if s.domain == "com.microsoft" and s.name == op
    ]
    row = opsets.lookup("com.microsoft", op, schema.since_version)
    assert row.since == schema.since_version
    assert set(row.attributes) == set(schema.attributes)
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}

    def types(type_str: str) -> set[ir.DataType]:
        return {DT[s[len("tensor(") : -1].upper()] for s in constraints[type_str]}

    x, scale, zp = schema.inputs
    assert row.x_types == types(x.typeStr)
    assert row.scale_types == types(scale.typeStr)
    assert row.zero_point_types == types(zp.typeStr)
    assert row.output_types == types(schema.outputs[0].typeStr)
    assert row.scale_matches_x == (scale.typeStr == x.typeStr)


def _ort_schema(op: str) -> Any:
    pytest.importorskip("onnxruntime")
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    if not hasattr(ort_c, "get_all_operator_schema"):
        pytest.skip("this onnxruntime build does not expose its schemas")
    (schema,) = [
        s for s in ort_c.get_all_operator_schema() if s.domain == "com.microsoft" and s.name == op
    ]
    return schema


@pytest.mark.parametrize("op", opsets.WEIGHT_ONLY_OPS)
def test_weight_only_rows_match_onnxruntime_schema(op: str) -> None:
    schema = _ort_schema(op)
    row = opsets.weight_only("com.microsoft", op, schema.since_version)
    assert row is not None and row.since == schema.since_version
    optional = schema.inputs[0].option.__class__.Optional
    assert [(o.name, o.type_param, o.optional) for o in row.inputs] == [
        (i.name, i.typeStr, i.option == optional) for i in schema.inputs
    ]
    (output,) = schema.outputs
    assert (row.output.name, row.output.type_param) == (output.name, output.typeStr)
    constraints = {
        c.type_param_str: {DT[s[len("tensor(") : -1].upper()] for s in c.allowed_type_strs}
        for c in schema.type_constraints
    }
    assert {k: set(v) for k, v in row.type_params.items()} == constraints
    defaults = {}
    for name, attr in schema.attributes.items():
        raw = attr._default_value
        proto = onnx.AttributeProto()
        if raw:
            proto.ParseFromString(raw)
        defaults[name] = (ir.AttributeType(int(attr.type.value)), proto.i if raw else None)
        assert (name in row.required) == attr.required, name
    assert dict(row.attributes) == defaults
    assert set(row.storage) == constraints[row.inputs[row.input_index(row.weight)].type_param]


def test_weight_only_storage_facts() -> None:
    mm = opsets.weight_only("com.microsoft", "MatMulNBits", 1)
    gbq = opsets.weight_only("com.microsoft", "GatherBlockQuantized", 1)
    assert opsets.weight_only("com.microsoft", "MatMulNBits", 0) is None
    assert opsets.weight_only("com.microsoft", "DequantizeLinear", 1) is None
    assert mm.input_range == (3, 6) and gbq.input_range == (3, 4)
    b = mm.storage[DT.UINT8]
    assert b.packed and b.bits == {2, 4, 8}
    assert [b.default_zero_point(bits) for bits in (2, 4, 8)] == [2, 8, 128]
    assert gbq.storage[DT.INT4].default_zero_point(4) == 0
    assert gbq.storage[DT.FLOAT8E4M3FN].default_zero_point(4) is None
    assert gbq.storage[DT.UINT8].gather_axis_zero and gbq.storage[DT.UINT8].quantize_axis_last
    assert mm.types_of("zero_points") == {DT.UINT8, DT.FLOAT, DT.FLOAT16, DT.BFLOAT16}
    assert gbq.types_of("output") == {DT.FLOAT, DT.FLOAT16, DT.BFLOAT16}
