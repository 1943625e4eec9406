"""A newcomer's tasks, each done in a copy of the project and shown to work and to touch
only the files docs/architecture.md names (issue 40): a rule in 2 files (its module and the
generated docs/rules.md), a new ONNX Runtime release's table in 1 (plus the generated
docs), a runtime in at most 4 (plus the generated docs), a pass with its command in at
most 5 files of the package (plus its page and the generated module table). An output
format (2 files) is walked through in tests/checking/test_output_formats.py, a pass alone
in tests/project/test_architecture_guides.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from qdq_models import DQ, DT, qdq_model
from qoperator_models import build

ROOT = Path(__file__).resolve().parents[2]
#: What a copy of the project holds: the package, its docs and the tools that write them.
PARTS = ("qlrewrite", "docs", "tools", "README.md", "pyproject.toml")
GENERATED = {"docs/rules.md", "docs/targets.md", "docs/architecture.md"}


class Copy:
    """A copy of the project in which a task is done; ``changed()`` says which files the
    task touched, ``run()`` runs Python there on the copy's package."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for part in PARTS:
            source = ROOT / part
            if source.is_dir():
                shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, root / part)
        self._before = self._digests()

    def _digests(self) -> dict[str, str]:
        return {
            p.relative_to(self.root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in self.root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }

    def changed(self) -> set[str]:
        after = self._digests()
        return {
            p for p in after.keys() | self._before.keys() if after.get(p) != self._before.get(p)
        }

    def path(self, relative: str) -> Path:
        return self.root / relative

    def edit(self, relative: str, old: str, new: str) -> None:
        path = self.path(relative)
        text = path.read_text()
        assert text.count(old) == 1, f"{relative}: {old!r} is not there once"
        path.write_text(text.replace(old, new))

    def append(self, relative: str, text: str) -> None:
        path = self.path(relative)
        path.write_text(path.read_text() + textwrap.dedent(text))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(self.root)}
        return subprocess.run(
            [sys.executable, *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def regenerate_docs(self) -> None:
        for args in (
            ("-m", "qlrewrite.checking.render", "docs/rules.md"),
            ("-m", "qlrewrite.targets.docs", "docs/targets.md"),
            ("tools/module_table.py",),
        ):
            done = self.run(*args)
            assert done.returncode == 0, done.stderr


@pytest.fixture
def copy(tmp_path: Path) -> Copy:
    return Copy(tmp_path / "project")


def _saved(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


# --------------------------------------------------------------------------- a rule

TOY_RULE = '''

@rule(
    "QL512",
    "qoperator-scale-huge",
    WARNING,
    summary="A constant scale of a QOperator node is above 1e6.",
    explanation="""
    A scale above a million makes every step of the quantized tensor wider than float32
    keeps digits for; it is a unit mix-up more often than a range.
    """,
    example="""
    warn: QLinearMatMul(a, a_scale=1e7, ...)
    good: QLinearMatMul(a, a_scale=0.02, ...)
    """,
    versions=QOPERATOR_VERSIONS,
    kinds=QOPERATOR_KINDS,
)
def qoperator_scale_huge(ctx: QOperatorView) -> Iterator[Finding]:
    for t in triples(ctx):
        values = t.scale.array if t.scale is not None else None
        if values is not None and (values > 1e6).any():
            yield ctx.report(f"{t.label}'s scale is above 1e6", "check the scale's units")
'''


def test_a_rule_is_its_module_and_the_generated_catalogue(copy: Copy, tmp_path: Path) -> None:
    module = "qlrewrite/rules/qoperator/values.py"
    copy.edit(module, '"""QL511: values', '"""QL511-QL512: values')
    copy.append(module, TOY_RULE)
    copy.regenerate_docs()
    # its module, and the generated catalogue (the module table too: its docstring's codes)
    assert copy.changed() - GENERATED == {module} and "docs/rules.md" in copy.changed()
    huge = np.array(1e7, dtype=np.float32)
    model = _saved(build("QLinearMatMul", y_scale=huge), tmp_path / "huge.onnx")
    checked = copy.run("-m", "qlrewrite", "check", str(model), "--select", "QL512")
    assert checked.returncode == 0 and "QL512" in checked.stdout, checked.stderr
    explained = copy.run("-m", "qlrewrite", "rules", "QL512")
    assert "qlrewrite/rules/qoperator/values.py" in explained.stdout, explained.stderr
    assert "QL512" in copy.path("docs/rules.md").read_text()


# --------------------------------------------------------------------------- a release


def test_a_new_ort_release_is_its_table(copy: Copy, tmp_path: Path) -> None:
    """The probe writes ``targets/data/ort-X.Y.json``; ``--target ort==X.Y`` and the
    generated docs read it, with no other change."""
    data = "qlrewrite/targets/data"
    newest = max(
        (p for p in copy.path(data).glob("ort-*.json")),
        key=lambda p: tuple(int(v) for v in p.stem.removeprefix("ort-").split(".")),
    )
    major, minor = (int(v) for v in newest.stem.removeprefix("ort-").split("."))
    release = f"{major}.{minor + 1}"
    table = json.loads(newest.read_text())
    assert table["release"].startswith(f"{major}.{minor}")
    table["release"] = f"{release}.0"
    copy.path(f"{data}/ort-{release}.json").write_text(json.dumps(table, indent=1) + "\n")
    copy.regenerate_docs()
    assert copy.changed() - GENERATED == {f"{data}/ort-{release}.json"}
    assert f"{release}.0" in copy.path("docs/targets.md").read_text()
    model = _saved(qdq_model(DQ, 13, x_type=DT.INT8), tmp_path / "m.onnx")
    checked = copy.run("-m", "qlrewrite", "check", str(model), "--target", f"ort=={release}")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    unknown = copy.run(
        "-m", "qlrewrite", "check", str(model), "--target", f"ort=={major}.{minor + 2}"
    )
    assert unknown.returncode == 2


# --------------------------------------------------------------------------- a runtime

TOY_RUNTIME_RULES = '''
"""QL741: what the Toy NPU documents it does not run, for ``--target toynpu``."""

from __future__ import annotations

from collections.abc import Iterator

from qlrewrite.findings import WARNING, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.registry import TargetNode, rule
from qlrewrite.targets.tables import documented

__all__: list[str] = []


@rule(
    "QL741",
    "toynpu-type",
    WARNING,
    summary="Toy NPU: a Q/DQ type other than uint8.",
    explanation="""
    The Toy NPU documents uint8 Q/DQ only.
    """,
    cites=(("toynpu", "types"),),
    example="""
    warn: DequantizeLinear(int8 x)   (--target toynpu)
    good: DequantizeLinear(uint8 x)
    """,
    versions="--target toynpu (documented)",
    scope="target-node",
)
def toynpu_type(ctx: TargetNode[QDQView]) -> Iterator[Finding]:
    if ctx.target.runtime != "toynpu":
        return
    fact = documented("toynpu")["types"]
    x_type = ctx.view.x_type
    if x_type is not None and x_type.name not in fact.values["types"]:
        yield ctx.report(f"{ctx.target.label} takes uint8 only, not {x_type.name}", fact.named)
'''

TOY_RUNTIME_FACTS = {
    "runtime": "toynpu",
    "release": "Toy NPU SDK 1.0 documentation",
    "documented": True,
    "facts": {
        "types": {
            "rule": "Q/DQ run in uint8 only",
            "types": ["UINT8"],
            "source": "https://example.com/toynpu",
            "section": "Quantization",
        }
    },
}


def test_a_runtime_is_its_record_its_facts_and_its_rules(copy: Copy, tmp_path: Path) -> None:
    copy.edit(
        "qlrewrite/targets/runtimes.py",
        "\n#: Every runtime, by key.",
        '\nTOYNPU = Runtime("toynpu", "Toy NPU", measured=False, title="Toy NPU",'
        ' about="what the Toy NPU documents (not run)")\n\n#: Every runtime, by key.',
    )
    copy.edit("qlrewrite/targets/runtimes.py", "TENSORRT, QNN)}", "TENSORRT, QNN, TOYNPU)}")
    facts = "qlrewrite/targets/data/toynpu.json"
    copy.path(facts).write_text(json.dumps(TOY_RUNTIME_FACTS, indent=1) + "\n")
    copy.path("qlrewrite/rules/targets/toynpu.py").write_text(TOY_RUNTIME_RULES.lstrip())
    copy.append(  # its rules registered with the others
        "qlrewrite/rules/targets/__init__.py",
        "from qlrewrite.rules.targets import toynpu  # noqa: E402, F401\n",
    )
    copy.regenerate_docs()
    touched = copy.changed() - GENERATED
    assert touched == {
        "qlrewrite/targets/runtimes.py",
        facts,
        "qlrewrite/rules/targets/toynpu.py",
        "qlrewrite/rules/targets/__init__.py",
    }
    assert "Toy NPU" in copy.path("docs/targets.md").read_text()
    assert "QL741" in copy.path("docs/rules.md").read_text()
    int8 = _saved(qdq_model(DQ, 13, x_type=DT.INT8), tmp_path / "int8.onnx")
    uint8 = _saved(qdq_model(DQ, 13, x_type=DT.UINT8), tmp_path / "uint8.onnx")
    flagged = copy.run("-m", "qlrewrite", "check", str(int8), "--target", "toynpu")
    assert (
        "QL741" in flagged.stdout and "Toy NPU (documented) takes uint8 only" in flagged.stdout
    ), flagged.stdout + flagged.stderr
    assert (
        "QL741" not in copy.run("-m", "qlrewrite", "check", str(uint8), "--target", "toynpu").stdout
    )
    helped = copy.run("-m", "qlrewrite", "check", "--help")
    assert "toynpu" in helped.stdout


# --------------------------------------------------------------------------- a pass and its command

TOY_PASS = '''
"""Name every unnamed QuantizeLinear / DequantizeLinear after its op: the name pass."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from qlrewrite.passes.context import ContextPass
from qlrewrite.passes.results import RewritePassResult
from qlrewrite.qdq import iter_sites
from qlrewrite.toolkit import FreshNames

__all__ = ["NameNodesPass", "NameResult"]


@dataclasses.dataclass
class NameResult(RewritePassResult):
    """:class:`NameNodesPass`: ``nodes_named``."""


class NameNodesPass(ContextPass, ir.passes.InPlacePass):
    """Give unnamed Q/DQ nodes a name, e.g. ``DequantizeLinear_1``."""

    def call(self, model: ir.Model) -> NameResult:
        names = FreshNames(model, nodes=True)
        named = 0
        for site in iter_sites(model):
            if not site.node.name:
                site.node.name = names.fresh(site.node.op_type)
                named += 1
        return NameResult(model, bool(named), {"nodes_named": named})
'''

TOY_COMMAND = '''
"""`qlrewrite name`: name every unnamed QuantizeLinear / DequantizeLinear."""

from __future__ import annotations

from pathlib import Path

import click

from qlrewrite.cli._common import (
    RewriteCommand,
    RewriteOptions,
    rewrite_options,
    run_command,
    run_rewrite,
)
from qlrewrite.passes.commands import name_passes

__all__ = ["name_command"]


@click.command("name", cls=RewriteCommand)
@click.argument("model", type=click.Path(path_type=Path))
@rewrite_options
@run_command
def name_command(model: Path, options: RewriteOptions) -> None:
    """Name every unnamed QuantizeLinear / DequantizeLinear after its op."""
    run_rewrite(model, name_passes(), command="name", options=options)
'''


def test_a_pass_with_its_command_is_five_files(copy: Copy, tmp_path: Path) -> None:
    copy.path("qlrewrite/passes/name.py").write_text(TOY_PASS.lstrip())  # 1: the pass
    copy.append(  # 2: its list, read by the command line and the API
        "qlrewrite/passes/commands.py",
        '''

        def name_passes() -> list[ir.passes.PassBase]:
            """What ``qlrewrite name`` runs."""
            from qlrewrite.passes.name import NameNodesPass

            return [NameNodesPass()]
        ''',
    )
    copy.path("qlrewrite/cli/name.py").write_text(TOY_COMMAND.lstrip())  # 3: the command
    copy.edit(  # 4: its entry in the group
        "qlrewrite/cli/__init__.py",
        '    "compare": (\n',
        '    "name": ("name", "name_command", "Name every unnamed Q/DQ node."),\n'
        '    "compare": (\n',
    )
    copy.append(  # 5: the Python API
        "qlrewrite/api.py",
        '''

        def name(model: ModelLike) -> ir.Model:
            """``model`` with every Q/DQ node named, as ``qlrewrite name``."""
            from qlrewrite.passes.commands import name_passes

            return _rewrite(load(model), name_passes(), "name")
        ''',
    )
    copy.path("docs/commands/name.md").write_text("# `qlrewrite name`\n\nNames Q/DQ nodes.\n")
    copy.regenerate_docs()
    package = {p for p in copy.changed() if p.startswith("qlrewrite/")}
    assert package == {
        "qlrewrite/passes/name.py",
        "qlrewrite/passes/commands.py",
        "qlrewrite/cli/name.py",
        "qlrewrite/cli/__init__.py",
        "qlrewrite/api.py",
    }
    assert copy.changed() - package == {"docs/commands/name.md", "docs/architecture.md"}
    assert "qlrewrite/passes/name.py" in copy.path("docs/architecture.md").read_text()

    model = qdq_model(DQ, 13, x_type=DT.INT8)
    for node in model.graph.node:
        node.name = ""
    source, out = _saved(model, tmp_path / "m.onnx"), tmp_path / "named.onnx"
    ran = copy.run("-m", "qlrewrite", "name", str(source), "-o", str(out))
    assert ran.returncode == 0, ran.stderr
    assert "nodes named 1" in ran.stderr
    assert [n.name for n in onnx.load(out).graph.node] == ["DequantizeLinear"]
    assert "name" in copy.run("-m", "qlrewrite", "--help").stdout
    api = copy.run(
        "-c",
        "import qlrewrite.api as q, sys; m = q.name(sys.argv[1]); print(q.summary_of(m).changes)",
        str(source),
    )
    assert "'nodes_named': 1" in api.stdout, api.stderr
