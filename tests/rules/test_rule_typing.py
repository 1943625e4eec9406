"""The rules' contexts are typed by kind (issue 31 item 3): a node rule's ``ctx`` is the
view class of its ``kinds`` (``QDQView``, ``WeightOnlyView``, ``QOperatorView``, or
``NodeView`` for a mix), and a rule that needs a version reads ``ctx.version``, which the
registry guarantees. mypy checks the annotations (tests/project/test_typecheck.py); these tests
check what it cannot: that the registry hands each rule the view it declares, and that
rules run on nodes without a version in force do not crash."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.checking.checker import check_model
from qlrewrite.findings import WARNING, Finding, Rule
from qlrewrite.qdq import QDQ, QOPERATOR, WEIGHT_ONLY, NodeView, QDQView, node_views
from qlrewrite.qdq.kinds import view_class
from qlrewrite.qdq.sites import SiteKind
from qlrewrite.qdq.view import QOperatorView, WeightOnlyView
from qlrewrite.rules import CHECKS
from qlrewrite.rules.registry import ModelContext, RuleCheck, TargetModel, TargetNode
from qlrewrite.targets.spec import parse_targets

ROOT = Path(__file__).resolve().parents[2]

#: The view class the registry builds for each kind (read from view_class, not restated).
_KINDS: list[SiteKind] = [QDQ, *WEIGHT_ONLY, QOPERATOR]


def _view_of_kind(kind: SiteKind) -> type[NodeView]:
    """view_class of a site of ``kind`` (view_class reads only the site's kind)."""
    return view_class(SimpleNamespace(kind=kind))


def _ctx_type(func: typing.Callable[..., object]) -> object:
    """The resolved annotation of the rule function's one parameter."""
    func = inspect.unwrap(func)
    (name,) = inspect.signature(func).parameters
    return typing.get_type_hints(func)[name]


@pytest.mark.parametrize("code", [c for c, u in CHECKS.items() if u.scope == "node"])
def test_a_node_rule_is_given_the_view_it_declares(code: str) -> None:
    """Every view class of the rule's kinds is (a subclass of) its ctx annotation."""
    unit = CHECKS[code]
    annotation = _ctx_type(unit.func)
    assert isinstance(annotation, type) and issubclass(annotation, NodeView), annotation
    for kind in unit.kinds:
        assert issubclass(_view_of_kind(kind), annotation), (code, kind.name, annotation)


@pytest.mark.parametrize("code", [c for c, u in CHECKS.items() if u.scope == "target-node"])
def test_a_target_node_rule_is_given_a_target_node_of_its_view(code: str) -> None:
    unit = CHECKS[code]
    annotation = _ctx_type(unit.func)
    assert typing.get_origin(annotation) is TargetNode or annotation is TargetNode
    (view,) = typing.get_args(annotation) or (NodeView,)
    for kind in unit.kinds:
        assert issubclass(_view_of_kind(kind), view), (code, kind.name, view)


@pytest.mark.parametrize(
    ("scope", "context"), [("model", ModelContext), ("target-model", TargetModel)]
)
def test_model_rules_take_their_context(scope: str, context: type) -> None:
    units = [u for u in CHECKS.values() if u.scope == scope]
    assert units
    for unit in units:
        assert _ctx_type(unit.func) is context, unit.rule.code


def test_each_kind_declares_the_view_the_registry_builds() -> None:
    """SiteKind's type parameter (what mypy checks a rule against) is the class
    view_class builds for that kind."""
    assert _view_of_kind(QDQ) is QDQView
    assert all(_view_of_kind(kind) is WeightOnlyView for kind in WEIGHT_ONLY)
    assert _view_of_kind(QOPERATOR) is QOperatorView


_MISMATCH = """
from collections.abc import Iterator

from qlrewrite.findings import ERROR, Finding
from qlrewrite.qdq import WEIGHT_ONLY, QDQView, WeightOnlyView
from qlrewrite.rules.registry import TargetNode, rule


@rule("QL000", "good", ERROR, summary="", explanation="", example="", kinds=WEIGHT_ONLY)
def good(ctx: WeightOnlyView) -> Iterator[Finding]:
    yield ctx.report(str(ctx.version.weight))


@rule("QL000", "default-kinds", ERROR, summary="", explanation="", example="")
def default_kinds(ctx: QDQView) -> Iterator[Finding]:
    yield ctx.report(str(ctx.axis))


@rule("QL000", "bad", ERROR, summary="", explanation="", example="", kinds=WEIGHT_ONLY)  # refused
def bad(ctx: QDQView) -> Iterator[Finding]:  # a QDQView on weight-only kinds
    yield ctx.report(str(ctx.axis))


@rule("QL000", "bad-default", ERROR, summary="", explanation="", example="")  # refused
def bad_default(ctx: WeightOnlyView) -> Iterator[Finding]:  # kinds default to (QDQ,)
    yield ctx.report("")


@rule(  # refused
    "QL000", "bad-target", ERROR, summary="", explanation="", example="",
    scope="target-node", kinds=WEIGHT_ONLY,
)
def bad_target(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    yield ctx.report("")
"""


def test_mypy_refuses_a_ctx_that_does_not_match_the_kinds(tmp_path: Path) -> None:
    """The registry's typing catches a rule whose ctx annotation is not its kinds' view
    (the check mypy runs on every rule module), and accepts one that is."""
    pytest.importorskip("mypy")
    source = tmp_path / "toy_rule.py"
    text = textwrap.dedent(_MISMATCH)
    source.write_text(text)
    refused = [i for i, line in enumerate(text.splitlines(), 1) if line.endswith("# refused")]
    assert len(refused) == 3
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert sorted(int(line.split(":")[1]) for line in lines) == refused, result.stdout


def _opset9_model() -> onnx.ModelProto:
    """A DequantizeLinear, a QLinearConv and com.microsoft nodes at opsets that have no
    version of them (ai.onnx 9, com.microsoft imported as 0): no row in force."""
    f32, u8 = TensorProto.FLOAT, TensorProto.UINT8
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["y"], name="dq"),
        helper.make_node(
            "QLinearConv",
            ["xq4", "s", "z", "wq", "s", "z", "s", "z"],
            ["c"],
            name="conv",
        ),
        helper.make_node(
            "MatMulNBits",
            ["a", "b", "s"],
            ["m"],
            name="nbits",
            domain="com.microsoft",
            K=16,
            N=1,
            bits=4,
            block_size=16,
        ),
        helper.make_node(
            "GatherBlockQuantized", ["d", "i", "s"], ["g"], name="gbq", domain="com.microsoft"
        ),
        helper.make_node(
            "QuantizeLinear", ["y", "s", "z"], ["q"], name="q", domain="com.microsoft"
        ),
    ]
    inits = [
        helper.make_tensor("s", f32, [], [0.5]),
        helper.make_tensor("z", u8, [], [0]),
        helper.make_tensor("wq", u8, [1, 1, 1, 1], [1]),
        helper.make_tensor("b", u8, [1, 1, 8], [0] * 8),
        helper.make_tensor("d", u8, [2, 8], [0] * 16),
        helper.make_tensor("i", TensorProto.INT64, [1], [0]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("xq", u8, [2, 2]),
            helper.make_tensor_value_info("xq4", u8, [1, 1, 2, 2]),
            helper.make_tensor_value_info("a", f32, [1, 16]),
        ],
        [helper.make_tensor_value_info(n, f32, None) for n in ("y", "m", "g")]
        + [helper.make_tensor_value_info(n, u8, None) for n in ("c", "q")],
        initializer=inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 9), helper.make_opsetid("com.microsoft", 0)]
    )


def test_rules_run_on_nodes_without_a_version_in_force() -> None:
    """Hostile input: nodes of every kind at an opset with no version of their op. The
    rules that need a version are skipped, the others (QL101-QL106, the target rules)
    run and do not crash; QL104 names every node."""
    model = ir.serde.deserialize_model(_opset9_model())
    views = [v for _, vs in node_views(model, kinds=(QDQ, *WEIGHT_ONLY, QOPERATOR)) for v in vs]
    assert len(views) == 5 and all(v.row is None for v in views)
    targets = parse_targets(["ort==1.31", "tensorrt", "qnn", "openvino"])
    report = check_model(model, targets=targets)
    ql104 = {f.node for f in report.findings if f.rule == "QL104"}
    assert ql104 == {"dq", "conv", "nbits", "gbq", "q"}


def test_version_is_refused_where_no_version_is_in_force() -> None:
    """ctx.version never answers None: a rule declared needs_version=False that read it
    would fail loudly, not read a wrong version."""
    model = ir.serde.deserialize_model(_opset9_model())
    (_, (view,)), *_ = node_views(model)
    assert view.row is None
    with pytest.raises(LookupError, match="needs_version=False"):
        _ = view.version


def _gather_block_in_a_function() -> onnx.ModelProto:
    """A valid GatherBlockQuantized inside a model-local function, its data made there by
    a QuantizeLinear: no inference runs inside functions, so data's shape is unknown (its
    rank only comes from the producer's x) while the scales' is known."""
    const = [
        helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
        for name, value in (
            ("sq", np.array(0.5, np.float32)),
            ("zq", np.array(0, np.uint8)),
            ("sc", np.ones((8, 2), np.float32)),
        )
    ]
    body = [
        *const,
        helper.make_node("QuantizeLinear", ["x", "sq", "zq"], ["data"]),
        helper.make_node(
            "GatherBlockQuantized",
            ["data", "idx", "sc"],
            ["y"],
            domain="com.microsoft",
            gather_axis=0,
            quantize_axis=1,
            block_size=16,
            bits=4,
        ),
    ]
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    function = helper.make_function("local", "f", ["x", "idx"], ["y"], body, imports)
    graph = helper.make_graph(
        [helper.make_node("f", ["X", "I"], ["Y"], domain="local", name="call")],
        "g",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [8, 16]),
            helper.make_tensor_value_info("I", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32])],
    )
    return helper.make_model(
        graph,
        functions=[function],
        opset_imports=[*imports, helper.make_opsetid("local", 1)],
        ir_version=10,
    )


def test_ql432_says_nothing_when_data_shape_is_unknown() -> None:
    """Found by typing the rules: QL432 compared the scales' rank with data's when data's
    shape was unknown, and reported an error on a valid model ("data 'data' (? ?) has rank
    None"). ONNX Runtime 1.31.1 runs this model (a [1, 32] output)."""
    proto = _gather_block_in_a_function()
    onnx.checker.check_model(proto, full_check=True)
    report = check_model(ir.serde.deserialize_model(proto))
    assert [f.message for f in report.findings if f.rule == "QL432"] == []
    assert not [f for f in report.findings if f.severity == "error"]


def test_a_target_rule_that_needs_a_version_runs_only_where_there_is_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """needs_version holds for target-node rules as for node rules, so ctx.view.version
    never fails in one: a toy target rule reading it runs on the opset-21 node, and is
    skipped on the opset-9 one (before, target rules ran on every node of their kinds)."""
    seen: list[int] = []

    def toy(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
        seen.append(ctx.view.version.since)
        return iter(())

    entry = Rule("QL799", "toy", WARNING, "", "", "", source="")
    unit = RuleCheck(entry, toy, "target-node", True, (QDQ,))
    monkeypatch.setitem(CHECKS, "QL799", unit)
    targets = parse_targets(["ort==1.31"])
    check_model(ir.serde.deserialize_model(_opset9_model()), targets=targets)
    assert seen == []
    check_model(ir.serde.deserialize_model(_gather_block_in_a_function()), targets=targets)
    assert seen == [21]
