"""Per-node suppression: per-node-ignores (node or output name, globs), a node's
qlrewrite:ignore metadata, suppressed findings counted, stale suppressions as QL901."""

from __future__ import annotations

import onnx
from qdq_models import DQ, load_ir, qdq_model

from qlrewrite.checker import check_model
from qlrewrite.rules.selection import select_rules
from qlrewrite.suppress import IGNORE_KEY, apply_suppressions

ALL = select_rules()


def _warn(metadata: str | None = None) -> onnx.ModelProto:
    """One DQ 'qdq' (output 'y') with a zero scale: QL501 (a warning) only."""
    proto = qdq_model(DQ, 21, scale=0.0)
    if metadata is not None:
        entry = proto.graph.node[0].metadata_props.add()
        entry.key, entry.value = IGNORE_KEY, metadata
    return proto


def _apply(proto: onnx.ModelProto, per_node: dict, enabled=ALL):
    model = load_ir(proto)
    return apply_suppressions(check_model(model), model, per_node, enabled)


def test_the_model_has_one_warn() -> None:
    assert [f.rule for f in check_model(load_ir(_warn())).findings] == ["QL501"]


def test_per_node_ignores_by_node_name_output_name_and_glob() -> None:
    for key in ("qdq", "y", "q*", "qd?"):
        result = _apply(_warn(), {key: ["QL501"]})
        assert result.findings == [] and [f.rule for f in result.suppressed] == ["QL501"]
        assert result.matched_suppressions == {key}


def test_prefix_and_all_suppress_too() -> None:
    assert _apply(_warn(), {"qdq": ["QL5"]}).findings == []
    assert _apply(_warn(), {"qdq": ["ALL"]}).findings == []


def test_an_entry_for_another_node_suppresses_nothing_and_is_not_judged_here() -> None:
    result = _apply(_warn(), {"other_node": ["QL501"]})
    assert [f.rule for f in result.findings] == ["QL501"]
    assert result.suppressed == [] and result.matched_suppressions == set()


def test_stale_entry_on_a_named_node_is_ql901() -> None:
    result = _apply(_warn(), {"qdq": ["QL501", "QL601"]})
    rules = [f.rule for f in result.findings]
    assert rules == ["QL901"]
    stale = result.findings[0]
    assert "per-node-ignores 'qdq': QL601 suppresses nothing" in stale.message
    assert stale.node == "qdq" and stale.severity == "warning"


def test_stale_only_for_enabled_codes_and_only_when_ql901_is_enabled() -> None:
    no_601 = ALL - {"QL601"}
    assert _apply(_warn(), {"qdq": ["QL501", "QL601"]}, no_601).findings == []
    no_901 = ALL - {"QL901"}
    assert _apply(_warn(), {"qdq": ["QL501", "QL601"]}, no_901).findings == []


def test_metadata_props_ignore() -> None:
    result = _apply(_warn("QL501"), {})
    assert result.findings == [] and len(result.suppressed) == 1
    assert _apply(_warn(""), {}).findings == []  # empty: every rule
    assert _apply(_warn("QL5, QL601"), {}).findings[0].rule == "QL901"


def test_metadata_with_an_unknown_code_is_reported() -> None:
    findings = _apply(_warn("QL501 QL77"), {}).findings
    assert [f.rule for f in findings] == ["QL901"]
    assert "unknown rule code 'QL77'" in findings[0].message


def test_no_suppressions_returns_the_report_unchanged() -> None:
    model = load_ir(_warn())
    report = check_model(model)
    assert apply_suppressions(report, model, {}, ALL) is report
