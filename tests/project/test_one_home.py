"""One home per idea, enforced: outside the toolkit (qlrewrite/toolkit.py), the node
meaning (qlrewrite/qdq/) and the opset table (qlrewrite/opsets.py), no code walks a
model's graphs by hand, reads an opset import table, or reads a Q/DQ attribute from a
node instead of its NodeView (which applies the version in force and the defaults). A
rule never restates its code or severity; the output formats, float16 modes, convert
targets, accuracy levels, the default axis, the version and the ModelProto -> ir.Model
step are each written in one place (a second copy fails here)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "qlrewrite"
HOMES = ("toolkit.py", "opsets.py", "qdq/")
QDQ_ATTRIBUTES = {"axis", "block_size", "saturate", "output_dtype", "precision"}
#: Receivers whose ``.attributes`` are a NodeView's (version in force, defaults applied)
#: or an opset table row's (which attributes a version has).
VIEWS = {"ctx", "view", "context", "row", "version"}
#: Reads that look like a Q/DQ attribute but are not one, with the reason.
NOT_QDQ = {
    ("passes/nbits/from_onnx.py", "gather"): "Gather's axis (a float op), not a Q/DQ node's",
    ("verify/difference.py", "norm"): "LayerNormalization's axis (a float op), not a Q/DQ node's",
    (
        "passes/convert/qdq_to_qoperator.py",
        "softmax",
    ): "Softmax's axis (a float op), not a Q/DQ node's",
}


def _modules() -> list[Path]:
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not any(p.relative_to(PACKAGE).as_posix().startswith(h) for h in HOMES)
    ]


def _receiver(node: ast.expr) -> str:
    """The last name of the object whose ``.attributes`` are read: ``node`` for
    ``site.node.attributes``, ``view`` for ``fix.view.attributes``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ast.unparse(node)


def _attribute_reads(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, receiver, attribute) of every read of a constant-named attribute."""
    for node in ast.walk(tree):
        target = name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "get_int", "get_ints") and node.args:
                target, name = node.func.value, node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            target, name = node.value, node.slice
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            target, name = node.comparators[0], node.left
        if (
            isinstance(target, ast.Attribute)
            and target.attr == "attributes"
            and isinstance(name, ast.Constant)
            and isinstance(name.value, str)
        ):
            yield node.lineno, _receiver(target.value), name.value


def _violations() -> Iterator[str]:
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "opset_imports":
                yield f"{rel}:{node.lineno}: reads an opset import table (use qlrewrite.toolkit)"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "graphs" and not node.args:
                    yield f"{rel}:{node.lineno}: walks graphs by hand (use toolkit.iter_graphs)"
                if node.func.attr == "values" and ast.unparse(node.func.value).endswith(
                    "functions"
                ):
                    yield f"{rel}:{node.lineno}: walks functions by hand (use the toolkit)"
            if isinstance(node, ast.Attribute) and node.attr == "RecursiveGraphIterator":
                yield f"{rel}:{node.lineno}: walks graphs by hand (use toolkit.iter_graphs)"
        for line, receiver, name in _attribute_reads(tree):
            if name in QDQ_ATTRIBUTES and receiver not in VIEWS and (rel, receiver) not in NOT_QDQ:
                yield f"{rel}:{line}: reads Q/DQ attribute {name!r} of {receiver} (use NodeView)"


def test_no_second_home_for_graph_walks_imports_or_qdq_attributes() -> None:
    found = list(_violations())
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("for g in model.graphs(): pass", "walks graphs"),
        ("x = [*model.functions.values()]", "walks functions"),
        ("v = model.opset_imports.get('')", "opset import table"),
        ("a = node.attributes.get('axis')", "Q/DQ attribute 'axis'"),
        ("ok = 'block_size' in site.node.attributes", "Q/DQ attribute 'block_size'"),
        ("a = node.attributes['saturate']", "Q/DQ attribute 'saturate'"),
    ],
)
def test_the_checker_catches_each_kind(
    source: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "qlrewrite"
    package.mkdir()
    (package / "bad.py").write_text(source + "\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package, raising=False)
    monkeypatch.setitem(globals(), "PACKAGE", package)
    found = list(_violations())
    assert len(found) == 1 and expected in found[0], found


def test_views_may_read_their_attributes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "qlrewrite"
    package.mkdir()
    (package / "ok.py").write_text("a = ctx.attributes.get('axis')\nb = fix.view.attributes\n")
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert list(_violations()) == []


# ------------------------------------------------------------------ a rule's code and severity

RULES_DIR = PACKAGE / "rules"
SEVERITIES = {"ERROR", "WARNING", "INFO"}


def _restated(tree: ast.AST, rel: str) -> Iterator[str]:
    """A rule module that makes its own Finding or passes a code and a severity again."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
        if name in ("Finding", "finding"):
            yield f"{rel}:{node.lineno}: builds a Finding (yield ctx.report(message, hint))"
        args = [ast.unparse(a) for a in node.args]
        if name not in ("rule", "Finding", "finding") and any(a in SEVERITIES for a in args):
            yield f"{rel}:{node.lineno}: passes a severity again (the rule's declaration has it)"


def _rule_violations(rules_dir: Path) -> Iterator[str]:
    for path in sorted(rules_dir.glob("*/*.py")):  # the kind folders' rule modules
        yield from _restated(ast.parse(path.read_text(), str(path)), path.name)


def test_rules_report_without_restating_their_code_or_severity() -> None:
    found = list(_rule_violations(RULES_DIR))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("yield ctx.finding('QL201', ERROR, 'm')", "builds a Finding"),
        ("yield Finding(rule='QL602', severity=ERROR, message='m')", "builds a Finding"),
        ("yield from _shape(ctx, 'QL421', WARNING, 'B')", "passes a severity again"),
    ],
)
def test_the_rule_checker_catches_each_kind(source: str, expected: str, tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bad.py").write_text(source + "\n")
    (tmp_path / "model" / "ok.py").write_text(
        "@rule('QL801', 'n', ERROR)\ndef f(ctx): yield ctx.report('m')\n"
    )
    found = list(_rule_violations(tmp_path))
    assert len(found) == 1 and expected in found[0], found


# ------------------------------------------------------------------ facts with one home each

#: Each fact: the module that holds it, and what a second copy looks like (a literal
#: collection holding these strings together, or a call written like it).
FACT_HOMES = {
    "output formats": "formats/",
    "float16 modes": "passes/fold/tensor.py",
    "convert targets": "passes/convert/domain.py",
    "accuracy levels": "opsets.py",
    "default axis": "opsets.py",
    "ModelProto -> ir.Model": "io/model_io.py",
}
#: Two or more of one group in one literal collection is a second copy of the list.
LITERAL_GROUPS = {
    "output formats": ({"sarif", "github"}, {"text", "json", "sarif", "github"}),
    "float16 modes": ({"exact", "compact"}, {"exact", "compact"}),
    "convert targets": ({"com.microsoft"}, {"onnx", "ai.onnx", "com.microsoft"}),
}
#: Where a fact is read for another purpose, with the reason.
FACT_EXCEPTIONS = {
    ("passes/upgrade.py", "ModelProto -> ir.Model"): "the version converter's output",
}


def _literal_strings(node: ast.AST) -> set[str]:
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set()
    return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def _literal_copies(node: ast.AST) -> Iterator[str]:
    strings = _literal_strings(node)
    for fact, (needed, group) in LITERAL_GROUPS.items():
        if strings & needed and len(strings & group) >= 2:
            yield fact


def _call_copies(node: ast.Call) -> Iterator[str]:
    call = ast.unparse(node)
    if call in ("range(5)", "click.IntRange(0, 4)"):
        yield "accuracy levels"
    if isinstance(node.func, ast.Attribute) and node.func.attr == "deserialize_model":
        yield "ModelProto -> ir.Model"


def _axis_defaults(node: ast.arguments) -> Iterator[ast.expr]:
    """The default values of the parameters named ``axis``."""
    positional = [*node.posonlyargs, *node.args]
    named = positional[len(positional) - len(node.defaults) :]
    pairs = [*zip(named, node.defaults, strict=True)]
    pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d]
    return (default for arg, default in pairs if arg.arg == "axis")


def _fact_copies(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, fact) of everything in ``tree`` that restates a fact."""
    for node in ast.walk(tree):
        yield from ((node.lineno, fact) for fact in _literal_copies(node))
        if isinstance(node, ast.Call):
            yield from ((node.lineno, fact) for fact in _call_copies(node))
        if isinstance(node, ast.arguments):
            for default in _axis_defaults(node):
                if isinstance(default, ast.Constant):
                    yield default.lineno, "default axis"
        assigned = isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        if assigned and ast.unparse(node.targets[0]).endswith("_AXIS"):
            yield node.lineno, "default axis"


def _fact_violations(package: Path) -> Iterator[str]:
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for line, fact in _fact_copies(ast.parse(path.read_text(), str(path))):
            home = FACT_HOMES[fact]
            if not rel.startswith(home) and (rel, fact) not in FACT_EXCEPTIONS:
                yield f"{rel}:{line}: a second copy of the {fact} (their home: {home})"


def test_every_fact_has_one_home() -> None:
    found = list(_fact_violations(REPO / "qlrewrite"))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "fact"),
    [
        ("FORMATS = ('text', 'json', 'sarif', 'github')", "output formats"),
        ("ok = fmt in {'json', 'github'}", "output formats"),
        ("if mode not in ('exact', 'compact'): pass", "float16 modes"),
        ("TARGETS = ['onnx', 'com.microsoft']", "convert targets"),
        ("LEVELS = range(5)", "accuracy levels"),
        ("t = click.IntRange(0, 4)", "accuracy levels"),
        ("def q(x, *, axis: int = 1): pass", "default axis"),
        ("def q(x, axis=1): pass", "default axis"),
        ("_DEFAULT_AXIS = 1", "default axis"),
        ("m = ir.serde.deserialize_model(proto)", "ModelProto -> ir.Model"),
    ],
)
def test_the_fact_checker_catches_each_copy(source: str, fact: str, tmp_path: Path) -> None:
    (tmp_path / "copy.py").write_text(source + "\n")
    (tmp_path / "fine.py").write_text("a = ('text', 'json')\nb = range(n)\ndef f(x, y=1): pass\n")
    found = list(_fact_violations(tmp_path))
    assert len(found) == 1 and f"the {fact}" in found[0], found


def test_the_version_has_one_home() -> None:
    """``qlrewrite/_version.py`` holds the version; pyproject.toml reads it (dynamic)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.MULTILINE), "pyproject.toml has a version"
    assert 'version = { attr = "qlrewrite._version.__version__" }' in pyproject
    package = REPO / "qlrewrite"
    assigned = [p for p in package.rglob("*.py") if "__version__ =" in p.read_text()]
    assert assigned == [package / "_version.py"]
