"""Every rule, for every version where it applies: fires on a model that breaks it, stays
silent on one that keeps it. Good ai.onnx models must also pass onnx.checker (full_check),
an oracle independent of qlrewrite."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import onnx
import pytest
from qdq_models import DQ, DT, MS, ONNX_VERSIONS, Q, load_ir, qdq_model
from test_rules_qoperator import CODES as QOPERATOR_CODES
from test_rules_weight_only import CODES as WEIGHT_ONLY_CODES

from qlrewrite.checking.checker import check_model
from qlrewrite.rules import RULES

V13 = tuple(v for v in ONNX_VERSIONS if v >= 13)
V19 = tuple(v for v in ONNX_VERSIONS if v >= 19)
V21 = tuple(v for v in ONNX_VERSIONS if v >= 21)
V23 = tuple(v for v in ONNX_VERSIONS if v >= 23)
V24 = tuple(v for v in ONNX_VERSIONS if v >= 24)
ALL = (*ONNX_VERSIONS, "ms")


@dataclasses.dataclass(frozen=True)
class Case:
    code: str
    label: str
    versions: tuple
    bad: Callable[[Any], dict]  # version -> qdq_model kwargs
    good: Callable[[Any], dict]


def _kw(version: Any, **kw: Any) -> dict:
    if version == "ms":
        kw.setdefault("domain", MS)
        kw.setdefault("opset", 13)
    else:
        kw.setdefault("opset", version)
    return kw


def _unknown_attr(version: Any) -> dict:
    """An attribute the version does not define."""
    name = {10: "axis", 13: "block_size", 19: "block_size", 21: "output_dtype", "ms": "block_size"}
    attr = name.get(version, "saturate")
    return _kw(version, attrs={attr: 1})


def _known_attr(version: Any) -> dict:
    return _kw(version) if version == 10 else _kw(version, attrs={"axis": 1})


def _bad_scale_type(version: Any) -> DT:
    if version == "ms":
        return DT.BFLOAT16
    return DT.FLOAT16 if version in (10, 13) else DT.DOUBLE


CASES = [
    Case("QL101", "one-input", ALL, lambda v: _kw(v, drop_inputs=2), _kw),
    Case("QL101", "four-inputs", ALL, lambda v: _kw(v, extra_input=True), _kw),
    Case("QL102", "two-outputs", ALL, lambda v: _kw(v, n_outputs=2), _kw),
    Case("QL103", "ms-not-imported", ("ms",), lambda v: _kw(v, imports={"": 13}), _kw),
    Case("QL106", "onnx-not-imported", (13, 21), lambda v: _kw(v, imports={MS: 1}), _kw),
    Case("QL104", "opset-9", (10,), lambda v: _kw(9), _kw),
    Case("QL104", "ms-version-0", ("ms",), lambda v: _kw(v, imports={"": 13, MS: 0}), _kw),
    Case("QL201", "attribute-not-in-version", ALL, _unknown_attr, _known_attr),
    Case(
        "QL201",
        "q-attribute-not-in-version",
        ALL,
        lambda v: _kw(v, op=Q, attrs={"saturate" if v in (10, 13, "ms") else "foo": 1}),
        lambda v: _kw(v, op=Q),
    ),
    Case("QL202", "float-axis", (*V13, "ms"), lambda v: _kw(v, attrs={"axis": 1.0}), _known_attr),
    Case("QL301", "dq-x-float16", ALL, lambda v: _kw(v, x_type=DT.FLOAT16, out_type=None), _kw),
    Case(
        "QL301",
        "dq-int4-before-21",
        (10, 13, 19),
        lambda v: _kw(v, x_type=DT.INT4),
        lambda v: _kw(21, x_type=DT.INT4),
    ),
    Case("QL301", "q-x-int8", ALL, lambda v: _kw(v, op=Q, x_type=DT.INT8), lambda v: _kw(v, op=Q)),
    Case(
        "QL302",
        "scale-type",
        ALL,
        lambda v: _kw(v, scale_type=_bad_scale_type(v), out_type=None),
        _kw,
    ),
    Case(
        "QL303",
        "q-zero-point-int32",
        ALL,
        lambda v: _kw(v, op=Q, zp_type=DT.INT32),
        lambda v: _kw(v, op=Q),
    ),
    Case(
        "QL304",
        "dq-zero-point-other-type",
        ALL,
        lambda v: _kw(v, x_type=DT.INT8, zp_type=DT.UINT8),
        lambda v: _kw(v, x_type=DT.INT8),
    ),
    Case(
        "QL305",
        "q-scale-not-x-type",
        (19, 21, "ms"),
        lambda v: _kw(v, op=Q, x_type=DT.FLOAT16, scale_type=DT.FLOAT),
        lambda v: _kw(v, op=Q, x_type=DT.FLOAT16, scale_type=DT.FLOAT16),
    ),
    Case(
        "QL305",
        "q23-mixed-types-allowed",
        V23,
        lambda v: _kw(19, op=Q, x_type=DT.FLOAT16),
        lambda v: _kw(v, op=Q, x_type=DT.FLOAT16, scale_type=DT.FLOAT),
    ),
    Case(
        "QL306",
        "q-output-dtype-not-quantized",
        V21,
        lambda v: _kw(v, op=Q, zp_type=None, attrs={"output_dtype": int(DT.FLOAT)}, out_type=None),
        lambda v: _kw(v, op=Q, zp_type=None, attrs={"output_dtype": int(DT.INT8)}),
    ),
    Case(
        "QL306",
        "q-output-dtype-vs-zero-point",
        V21,
        lambda v: _kw(v, op=Q, attrs={"output_dtype": int(DT.INT8)}),
        lambda v: _kw(v, op=Q, attrs={"output_dtype": int(DT.UINT8)}),
    ),
    Case(
        "QL306",
        "dq-output-dtype-not-float",
        V23,
        lambda v: _kw(v, attrs={"output_dtype": int(DT.INT8)}),
        lambda v: _kw(v, attrs={"output_dtype": int(DT.FLOAT16)}),
    ),
    Case(
        "QL307",
        "e8m0-without-output-dtype",
        V24,
        lambda v: _kw(v, scale_type=DT.FLOAT8E8M0, out_type=None),
        lambda v: _kw(v, scale_type=DT.FLOAT8E8M0, attrs={"output_dtype": 1}),
    ),
    Case("QL308", "dq-output-declared-int8", ALL, lambda v: _kw(v, out_type=DT.INT8), _kw),
    Case(
        "QL308",
        "q-output-declared-float",
        ALL,
        lambda v: _kw(v, op=Q, out_type=DT.FLOAT),
        lambda v: _kw(v, op=Q),
    ),
    Case(
        "QL309",
        "precision-int8",
        V23,
        lambda v: _kw(v, op=Q, attrs={"precision": 3}),
        lambda v: _kw(v, op=Q, attrs={"precision": 1}),
    ),
    Case(
        "QL401",
        "default-axis-on-1d",
        (*V13, "ms"),
        lambda v: _kw(v, x_shape=(4,), scale_shape=(4,)),
        lambda v: _kw(v, x_shape=(4,), scale_shape=(4,), attrs={"axis": 0}),
    ),
    Case(
        "QL401",
        "axis-2-on-rank-2",
        (*V13, "ms"),
        lambda v: _kw(v, scale_shape=(3,), attrs={"axis": 2}),
        lambda v: _kw(v, scale_shape=(3,), attrs={"axis": -1}),
    ),
    Case(
        "QL401",
        "blocked-axis",
        V21,
        lambda v: _kw(v, scale_shape=(4, 2), attrs={"axis": 2, "block_size": 2}),
        lambda v: _kw(v, scale_shape=(4, 2), attrs={"axis": 1, "block_size": 2}),
    ),
    Case(
        "QL402",
        "opset10-per-axis",
        (10,),
        lambda v: _kw(12, scale_shape=(4,)),
        lambda v: _kw(12, scale_shape=(1,)),
    ),
    Case(
        "QL403",
        "scale-length",
        (*V13, "ms"),
        lambda v: _kw(v, scale_shape=(5,), attrs={"axis": 0}),
        lambda v: _kw(v, scale_shape=(4,), attrs={"axis": 0}),
    ),
    Case(
        "QL404",
        "zero-point-shape",
        (*V13, "ms"),
        lambda v: _kw(v, scale_shape=(4,), zp_shape=(2,), attrs={"axis": 0}),
        lambda v: _kw(v, scale_shape=(4,), zp_shape=(4,), attrs={"axis": 0}),
    ),
    Case(
        "QL405",
        "rank-2-scale",
        (*V13, "ms"),
        lambda v: _kw(v, scale_shape=(4, 3), attrs={"axis": 0}),
        lambda v: _kw(v, scale_shape=(4,), attrs={"axis": 0}),
    ),
    Case(
        "QL406",
        "scale-1-zero-point-scalar",
        ALL,
        lambda v: _kw(v, scale_shape=(1,), zp_shape=()),
        _kw,
    ),
    Case(
        "QL407",
        "negative-block-size",
        V21,
        lambda v: _kw(v, scale_shape=(4, 2), attrs={"axis": 1, "block_size": -2}),
        lambda v: _kw(v, scale_shape=(4, 2), attrs={"axis": 1, "block_size": 2}),
    ),
    Case(
        "QL408",
        "blocked-rank",
        V21,
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(6,), attrs={"axis": 1, "block_size": 2}),
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(4, 3), attrs={"axis": 1, "block_size": 2}),
    ),
    Case(
        "QL409",
        "blocked-dims",
        V21,
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(2, 3), attrs={"axis": 1, "block_size": 2}),
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(4, 3), attrs={"axis": 1, "block_size": 2}),
    ),
    Case(
        "QL410",
        "block-too-small",
        V21,
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(4, 3), attrs={"axis": 1, "block_size": 1}),
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(4, 3), attrs={"axis": 1, "block_size": 2}),
    ),
    Case(
        "QL410",
        "block-too-large",
        V21,
        lambda v: _kw(v, x_shape=(4, 6), scale_shape=(4, 3), attrs={"axis": 1, "block_size": 3}),
        lambda v: _kw(v, x_shape=(4, 7), scale_shape=(4, 3), attrs={"axis": 1, "block_size": 3}),
    ),
    Case(
        "QL411",
        "ms-1d-without-axis",
        ("ms",),
        lambda v: _kw(v, scale_shape=(3,)),
        lambda v: _kw(v, scale_shape=(3,), attrs={"axis": 1}),
    ),
    Case("QL501", "scale-zero", ALL, lambda v: _kw(v, scale=0.0), _kw),
    Case(
        "QL501",
        "scale-zero-constant-node",
        ALL,
        lambda v: _kw(v, scale=0.0, scale_as="constant"),
        lambda v: _kw(v, scale=-1.0, scale_as="constant"),
    ),
    Case(
        "QL501",
        "scale-nan-inf",
        (*V13, "ms"),
        lambda v: _kw(
            v, scale=[float("nan"), float("inf"), 1, 1], scale_shape=(4,), attrs={"axis": 0}
        ),
        lambda v: _kw(v, scale=[1, 2, 3, 4], scale_shape=(4,), attrs={"axis": 0}),
    ),
    Case(
        "QL504",
        "scale-negative-constant-node",
        ALL,
        lambda v: _kw(v, scale=-1.0, scale_as="constant"),
        lambda v: _kw(v, scale_as="constant"),
    ),
    Case(
        "QL502",
        "int32-zero-point",
        ALL,
        lambda v: _kw(v, x_type=DT.INT32, zp=5),
        lambda v: _kw(v, x_type=DT.INT32),
    ),
    Case(
        "QL503",
        "float8-zero-point",
        V19,
        lambda v: _kw(v, x_type=DT.FLOAT8E4M3FN, zp=1.0),
        lambda v: _kw(v, x_type=DT.FLOAT8E4M3FN),
    ),
    Case(
        "QL503",
        "float4-zero-point",
        V23,
        lambda v: _kw(v, x_type=DT.FLOAT4E2M1, zp=-2.0),
        lambda v: _kw(v, x_type=DT.FLOAT4E2M1),
    ),
    Case(
        "QL506",
        "float16-subnormal-scale",
        V19,
        lambda v: _kw(v, scale_type=DT.FLOAT16, scale=1e-6),
        lambda v: _kw(v, scale_type=DT.FLOAT16, scale=0.01),
    ),
    Case(
        "QL506",
        "bfloat16-subnormal-scale",
        V19,
        lambda v: _kw(v, scale_type=DT.BFLOAT16, scale=1e-39),
        lambda v: _kw(v, scale_type=DT.BFLOAT16, scale=0.01),
    ),
    Case(
        "QL601",
        "int4-ir-9",
        (*V21, "ms"),
        lambda v: _kw(v, x_type=DT.INT4, ir_version=9),
        lambda v: _kw(v, x_type=DT.INT4, ir_version=10 if v == "ms" else None),
    ),
    Case(
        "QL601",
        "float8-ir-8",
        V19,
        lambda v: _kw(v, x_type=DT.FLOAT8E5M2, ir_version=8),
        lambda v: _kw(v, x_type=DT.FLOAT8E5M2),
    ),
]

PARAMS = [
    pytest.param(case, version, id=f"{case.code}-{case.label}-{version}")
    for case in CASES
    for version in case.versions
]


def _codes(proto: onnx.ModelProto) -> list[str]:
    return [f.rule for f in check_model(load_ir(proto)).findings]


@pytest.mark.parametrize(("case", "version"), PARAMS)
def test_rule_fires_on_bad_and_not_on_good(case: Case, version: Any) -> None:
    bad = qdq_model(**case.bad(version))
    good = qdq_model(**case.good(version))
    report = check_model(load_ir(bad))
    hits = [f for f in report.findings if f.rule == case.code]
    assert hits, f"{case.code} silent on bad model: {report.findings}"
    assert all(f.severity == RULES[case.code].severity for f in hits)
    assert all(f.node == "qdq" and f.graph == "main" and "'qdq'" in f.message for f in hits)
    assert all(f.hint for f in hits)
    good_report = check_model(load_ir(good))
    assert case.code not in [f.rule for f in good_report.findings], good_report.findings
    assert not good_report.errors, good_report.errors
    if version != "ms" and good.ir_version <= onnx.IR_VERSION:
        onnx.checker.check_model(good, full_check=True)


def test_every_rule_has_a_case() -> None:
    # QL7xx (the target rules, only with --target) are tried in tests/targets/test_targets.py
    # QL607 (nothing quantized) in tests/rules/test_rules_check.py and
    # tests/cli/test_cli_ruff_habits.py
    # QL412, QL426, QL434, QL443 (degenerate shapes; ONNX Runtime dies on two of them, so
    # it runs in a child process there) are tried in tests/qdq/test_degenerate_shapes.py
    # QL610, QL611 (node order, cycles: about the graph) in tests/rules/test_graph_order.py
    # QL505, QL507, QL508 (several nodes) in tests/rules/test_bias_scale.py, test_requantize.py
    degenerate = ("QL412", "QL426", "QL434", "QL443")
    several = ("QL505", "QL507", "QL508")
    elsewhere = ("QL602", "QL603", "QL604", "QL605", "QL607", "QL61", "QL7", "QL9", *several)
    elsewhere = (*elsewhere, *degenerate)
    node_rules = {code for code in RULES if not code.startswith(elsewhere)}
    assert node_rules == {case.code for case in CASES} | WEIGHT_ONLY_CODES | QOPERATOR_CODES


def test_catalogue_entries_are_complete() -> None:
    codes = list(RULES)
    assert codes == sorted(codes)
    names = [r.name for r in RULES.values()]
    assert len(set(names)) == len(names)
    for code, entry in RULES.items():
        assert entry.code == code and entry.severity in ("error", "warning")
        assert entry.summary and len(entry.explanation) > 80 and entry.example and entry.versions
        assert code[:3] in {"QL1", "QL2", "QL3", "QL4", "QL5", "QL6", "QL7", "QL9"}


def test_opset12_per_channel_hint_says_upgrade_13() -> None:
    """ORT's quantizer on an opset-12 model with per_channel=True writes DQ(axis) at 12."""
    proto = qdq_model(DQ, 12, x_type=DT.INT8, scale_shape=(4,), attrs={"axis": 0})
    errors = check_model(load_ir(proto)).errors
    axis = [f for f in errors if f.rule == "QL201"]
    assert axis and "qlrewrite upgrade --opset 13" in axis[0].hint
    assert "axis" in axis[0].message and "opset 12" in axis[0].message


def test_message_names_offending_values() -> None:
    proto = qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})
    (finding,) = check_model(load_ir(proto)).findings
    assert "[5]" in finding.message and "[4, 3]" in finding.message and "main" in finding.message
    assert finding.opset == 13 and finding.op_type == DQ and finding.domain == ""


def test_a_negative_block_size_is_one_finding() -> None:
    """Not "block_size is not set" (QL405) beside "block_size is negative" (QL407)."""
    proto = qdq_model(
        DQ,
        21,
        x_type=DT.INT8,
        x_shape=(4, 4),
        scale_shape=(4, 2),
        zp_shape=(4, 2),
        attrs={"axis": 1, "block_size": -2},
    )
    assert [f.rule for f in check_model(load_ir(proto)).findings] == ["QL407"]
