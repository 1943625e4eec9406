"""qlrewrite: validate, constant-fold, convert and upgrade quantized ONNX models.

The public API is imported lazily (``import qlrewrite`` stays cheap for the CLI)::

    import qlrewrite

    model = qlrewrite.load("model.onnx")
    report = qlrewrite.check(model)          # or a path
    folded = qlrewrite.fold(model)           # in memory; qlrewrite.save(folded, "out.onnx")
"""

from __future__ import annotations

import importlib
from typing import Any

from qlrewrite._deferred_imports import defer_sympy

defer_sympy()

__version__ = "0.1.0"

#: Public name -> module that defines it.
_API = {
    "load": "qlrewrite.model_io",
    "save": "qlrewrite.model_io",
    "check": "qlrewrite.checker",
    "fold": "qlrewrite.passes.fold",
    "convert": "qlrewrite.passes.convert_domain",
    "upgrade": "qlrewrite.passes.upgrade",
    "dequantize": "qlrewrite.kernels",
    "quantize": "qlrewrite.kernels",
}

__all__ = ["__version__", *_API]  # noqa: PLE0604


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'qlrewrite' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
