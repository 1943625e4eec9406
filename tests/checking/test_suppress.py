"""Per-node suppression: per-node-ignores (node or output name, globs), a node's
qlrewrite:ignore metadata, suppressed findings counted, stale suppressions as QL901."""

from __future__ import annotations

import onnx
from qdq_models import DQ, load_ir, qdq_model

from qlrewrite.checking.checker import check, check_model
from qlrewrite.checking.suppress import IGNORE_KEY, apply_suppressions, unused_entry_findings
from qlrewrite.rules.selection import select_rules

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


def test_an_entry_on_a_named_node_records_what_it_did_and_is_judged_by_the_run() -> None:
    result = _apply(_warn(), {"qdq": ["QL501", "QL601"]})
    assert result.findings == []  # judged over the run, not per model
    assert result.judged_suppressions == {("qdq", "QL501"), ("qdq", "QL601")}
    assert result.used_suppressions == {("qdq", "QL501")}
    (stale,) = unused_entry_findings({"qdq": ["QL501", "QL601"]}, [result], "q.toml")
    assert stale.rule == "QL901" and stale.severity == "warning" and stale.node == ""
    assert stale.message == (
        "per-node-ignores 'qdq' = ['QL501', 'QL601']: QL601 suppressed nothing in the model "
        "checked with q.toml"
    )


def test_an_entry_used_in_one_model_of_the_run_is_not_stale() -> None:
    ignores = {"qdq": ["QL5"]}
    used = _apply(_warn(), ignores)
    clean = _apply(qdq_model(DQ, 21), ignores)  # the same node, nothing to suppress
    assert clean.judged_suppressions == {("qdq", "QL5")} and not clean.used_suppressions
    assert unused_entry_findings(ignores, [clean, used, clean], "q.toml") == []
    (stale,) = unused_entry_findings(ignores, [clean, clean], "q.toml")
    assert "QL5 suppressed nothing in the 2 models checked with q.toml" in stale.message


def test_an_entry_naming_no_node_is_one_finding_unless_keys_are_not_judged() -> None:
    result = _apply(_warn(), {"gone": ["QL501"]})
    (stale,) = unused_entry_findings({"gone": ["QL501"]}, [result, result], "q.toml")
    assert "'gone' = ['QL501'] names no Q/DQ node of the 2 models checked with q.toml" in (
        stale.message
    )
    assert unused_entry_findings({"gone": ["QL501"]}, [result], judge_keys=False) == []


def test_stale_only_for_enabled_codes_and_only_when_ql901_is_enabled() -> None:
    ignores = {"qdq": ["QL501", "QL601"]}
    no_601 = _apply(_warn(), ignores, ALL - {"QL601"})
    assert no_601.judged_suppressions == {("qdq", "QL501")}
    assert unused_entry_findings(ignores, [no_601]) == []
    no_901 = _apply(_warn(), ignores, ALL - {"QL901"})
    assert no_901.judged_suppressions == frozenset()
    assert unused_entry_findings(ignores, [no_901]) == []


def test_the_api_judges_its_one_model_as_the_whole_run() -> None:
    report = check(_warn(), per_node_ignores={"qdq": ["QL501", "QL601"], "gone": ["QL5"]})
    stale = sorted(f.message for f in report.findings if f.rule == "QL901")
    assert stale == [
        "per-node-ignores 'gone' = ['QL5'] names no Q/DQ node of the model checked",
        "per-node-ignores 'qdq' = ['QL501', 'QL601']: QL601 suppressed nothing in the model "
        "checked",
    ]
    assert check(_warn(), per_node_ignores={"qdq": ["QL501"]}).findings == []


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
