"""The QOperator / dynamic rows of the opset table against the schemas: onnx.defs for
ai.onnx, ONNX Runtime's contrib schemas (get_all_operator_schema) for com.microsoft."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest

from qlrewrite import opsets

ROWS = [(row.domain, row.op_type, row.since) for row in opsets.QOPERATOR_ROWS]


def _type_names(type_params: dict, param: str) -> set[str]:
    types = type_params[param]
    return {f"tensor({t.name.lower()})" for t in types}


def _ort_schema(op: str, since: int):
    ort_c = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")
    found = [
        s
        for s in ort_c.get_all_operator_schema()
        if s.domain == "com.microsoft" and s.name == op and s.since_version == since
    ]
    assert found, f"ONNX Runtime has no com.microsoft {op}-{since}"
    return found[0]


def _schema(domain: str, op: str, since: int):
    if domain == "":
        return onnx.defs.get_schema(op, since, "")
    return _ort_schema(op, since)


def _optional(param) -> bool:
    return "Optional" in str(param.option)


def _type_str(param) -> str:
    return param.type_str if hasattr(param, "type_str") else param.typeStr


@pytest.mark.parametrize(("domain", "op", "since"), ROWS)
def test_row_matches_schema(domain: str, op: str, since: int) -> None:
    row = opsets.lookup(domain, op, since)
    schema = _schema(domain, op, since)
    assert row.since == schema.since_version
    for ours, theirs in ((row.inputs, schema.inputs), (row.outputs, schema.outputs)):
        assert [o.name for o in ours] == [p.name for p in theirs]
        assert [o.optional for o in ours] == [_optional(p) for p in theirs]
        assert [o.type_param for o in ours] == [_type_str(p) for p in theirs]
    assert row.variadic == any("Variadic" in str(p.option) for p in schema.inputs)
    for constraint in schema.type_constraints:
        param = constraint.type_param_str
        assert _type_names(row.type_params, param) == set(constraint.allowed_type_strs), param
    assert {n: int(t) for n, (t, _) in row.attributes.items()} == {
        n: int(a.type) for n, a in schema.attributes.items()
    }
    assert row.required == {n for n, a in schema.attributes.items() if a.required}
    # Every named triple points at the schema's inputs and outputs.
    names = {p.name for p in (*schema.inputs, *schema.outputs)}
    for triple in row.triples:
        assert {triple.data, triple.scale or triple.data, triple.zero_point or triple.data} <= names


@pytest.mark.parametrize(
    ("op", "opset"),
    [
        ("QLinearMatMul", 13),
        ("QLinearMatMul", 21),
        ("QLinearConv", 25),
        ("DynamicQuantizeLinear", 11),
    ],
)
def test_version_in_force(op: str, opset: int) -> None:
    expected = onnx.defs.get_schema(op, opset, "").since_version
    assert opsets.qoperator("ai.onnx", op, opset).since == expected


def test_left_alone_ops_are_ort_quantized_ops() -> None:
    ort_c = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")
    known = {s.name for s in ort_c.get_all_operator_schema() if s.domain == "com.microsoft"}
    for (domain, op), reason in opsets.QUANTIZED_LEFT_ALONE.items():
        assert domain == "com.microsoft" and reason
        assert op in known or op in {"DequantizeWithOrder", "DequantizeBFP"}, op
    assert not {row.op_type for row in opsets.QOPERATOR_ROWS} & {
        op for _, op in opsets.QUANTIZED_LEFT_ALONE
    }


def test_float_op_or_refusal() -> None:
    for row in opsets.QOPERATOR_ROWS:
        assert bool(row.float_op) or bool(row.refusal), row.label
        if row.float_op:
            assert onnx.defs.has(row.float_op)
    assert opsets.qoperator("", "QuantizeLinear", 13) is None
    assert ir.DataType.FLOAT8E4M3FN in opsets.qoperator("", "QLinearMatMul", 21).types_of("a")
