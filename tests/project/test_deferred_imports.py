"""sympy is imported only when something needs it (onnx_ir imports it at start-up)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.strip()


def test_cli_start_and_check_do_not_import_sympy() -> None:
    out = _run("""
        import sys
        import qlrewrite.cli
        import onnx_ir as ir
        model = ir.Model(ir.Graph([], [], nodes=[], opset_imports={"": 21}), ir_version=10)
        qlrewrite.check(model)
        print("sympy.core" in sys.modules)
    """)
    assert out == "False"


def test_symbolic_dimensions_and_sympy_still_work() -> None:
    out = _run("""
        import qlrewrite
        import onnx_ir as ir
        print(ir.SymbolicDim("N") + 1)
        import sympy
        from sympy import Symbol
        print(sympy.Max(2, 3), Symbol("x") + 1)
    """)
    assert out.splitlines() == ["N + 1", "3 x + 1"]


def test_nothing_is_deferred_when_onnx_ir_came_first() -> None:
    out = _run("""
        import sys
        import onnx_ir
        import qlrewrite.cli
        print(type(sys.modules["sympy"]).__name__)
    """)
    assert out == "module"


def test_a_library_import_puts_no_placeholder_modules() -> None:
    """Only the command line defers sympy; ``import qlrewrite`` and its modules leave
    ``sys.modules`` as Python's import system makes it."""
    out = _run("""
        import sys
        import qlrewrite, qlrewrite.api, qlrewrite.passes, qlrewrite.checking.checker
        qlrewrite.load  # the lazy public API, once read
        from qlrewrite.cli._deferred_imports import _Placeholder
        print([n for n, m in sys.modules.items() if isinstance(m, _Placeholder)])
        print(type(sys.modules["sympy"]).__name__)
    """)
    assert out.splitlines() == ["[]", "module"]


def test_the_package_names_its_lazy_api_for_type_checkers() -> None:
    """What ``qlrewrite.<name>`` gives at run time is what the ``TYPE_CHECKING`` imports
    show an IDE or a type checker: the same names, from the same modules."""
    import ast
    from pathlib import Path

    import qlrewrite

    tree = ast.parse(Path(qlrewrite.__file__).read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If))
    shown = {
        alias.asname: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    expected = {name: module.removesuffix(f".{name}") for name, module in qlrewrite._API.items()}
    expected = {name: module for name, module in qlrewrite._API.items()}
    expected |= {name: "qlrewrite" for name in qlrewrite._SUBMODULES}
    assert shown == expected
