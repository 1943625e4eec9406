"""Defer sympy: onnx_ir imports it at start-up (about half a second, more than the whole
check of a large model), but only arithmetic on symbolic dimensions uses it.

Before onnx_ir is first imported, ``sympy`` and ``onnx_ir._symbolic_shapes`` are entered
in ``sys.modules`` as placeholders that import the real module on the first attribute
anyone reads; they then behave as the module itself. Nothing changes when either module
was imported already.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import Any

__all__ = ["defer_sympy"]

_DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _Placeholder(types.ModuleType):
    """A module that imports the real one when an attribute it lacks is read."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


def _spec(name: str) -> Any:
    if "." not in name:
        return importlib.util.find_spec(name)
    package, _, module = name.rpartition(".")
    package_spec = importlib.util.find_spec(package)  # a top-level package: not imported
    if package_spec is None or not package_spec.submodule_search_locations:
        return None
    path = os.path.join(package_spec.submodule_search_locations[0], module + ".py")
    return importlib.util.spec_from_file_location(name, path) if os.path.exists(path) else None


def defer_sympy() -> None:
    """Install the placeholders (once, and only before onnx_ir or sympy is imported)."""
    if any(name in sys.modules for name in ("onnx_ir", *_DEFERRED)):
        return
    specs = {name: _spec(name) for name in _DEFERRED}
    if any(spec is None for spec in specs.values()):
        return  # an onnx_ir or sympy laid out differently: import them as usual
    for name, spec in specs.items():
        placeholder = _Placeholder(name)
        placeholder.__spec__ = spec
        sys.modules[name] = placeholder
