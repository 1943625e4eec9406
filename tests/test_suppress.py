"""Per-node suppression: per-node-ignores (node or output name, globs), a node's
qlrewrite:ignore metadata, suppressed findings counted, stale suppressions as QL901."""

from __future__ import annotations

import onnx
from qdq_models import DQ, DT, load_ir, qdq_model

from qlrewrite.passes.check import check_model, select_rules
from qlrewrite.suppress import IGNORE_KEY, apply_suppressions

ALL = select_rules()


def _ql406(metadata: str | None = None) -> onnx.ModelProto:
    """One DQ 'qdq' (output 'y') with a [1] scale and a scalar zero point: QL406 only."""
    proto = qdq_model(DQ, 13, x_type=DT.INT8, scale_shape=(1,), scale=[0.5], zp_shape=())
    if metadata is not None:
        entry = proto.graph.node[0].metadata_props.add()
        entry.key, entry.value = IGNORE_KEY, metadata
    return proto


def _apply(proto: onnx.ModelProto, per_node: dict, enabled=ALL):
    model = load_ir(proto)
    return apply_suppressions(check_model(model), model, per_node, enabled)


def test_the_model_has_one_ql406() -> None:
    assert [f.rule for f in check_model(load_ir(_ql406())).findings] == ["QL406"]


def test_per_node_ignores_by_node_name_output_name_and_glob() -> None:
    for key in ("qdq", "y", "q*", "qd?"):
        result = _apply(_ql406(), {key: ["QL406"]})
        assert result.findings == [] and [f.rule for f in result.suppressed] == ["QL406"]
        assert result.matched_suppressions == {key}


def test_prefix_and_all_suppress_too() -> None:
    assert _apply(_ql406(), {"qdq": ["QL4"]}).findings == []
    assert _apply(_ql406(), {"qdq": ["ALL"]}).findings == []


def test_an_entry_for_another_node_suppresses_nothing_and_is_not_judged_here() -> None:
    result = _apply(_ql406(), {"other_node": ["QL406"]})
    assert [f.rule for f in result.findings] == ["QL406"]
    assert result.suppressed == [] and result.matched_suppressions == set()


def test_stale_entry_on_a_named_node_is_ql901() -> None:
    result = _apply(_ql406(), {"qdq": ["QL406", "QL501"]})
    rules = [f.rule for f in result.findings]
    assert rules == ["QL901"]
    stale = result.findings[0]
    assert "per-node-ignores 'qdq': QL501 suppresses nothing" in stale.message
    assert stale.node == "qdq" and stale.severity == "warning"


def test_stale_only_for_enabled_codes_and_only_when_ql901_is_enabled() -> None:
    no_501 = ALL - {"QL501"}
    assert _apply(_ql406(), {"qdq": ["QL406", "QL501"]}, no_501).findings == []
    no_901 = ALL - {"QL901"}
    assert _apply(_ql406(), {"qdq": ["QL406", "QL501"]}, no_901).findings == []


def test_metadata_props_ignore() -> None:
    result = _apply(_ql406("QL406"), {})
    assert result.findings == [] and len(result.suppressed) == 1
    assert _apply(_ql406(""), {}).findings == []  # empty: every rule
    assert _apply(_ql406("QL4, QL501"), {}).findings[0].rule == "QL901"


def test_metadata_with_an_unknown_code_is_reported() -> None:
    findings = _apply(_ql406("QL406 QL77"), {}).findings
    assert [f.rule for f in findings] == ["QL901"]
    assert "unknown rule code 'QL77'" in findings[0].message


def test_no_suppressions_returns_the_report_unchanged() -> None:
    model = load_ir(_ql406())
    report = check_model(model)
    assert apply_suppressions(report, model, {}, ALL) is report
