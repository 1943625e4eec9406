"""qlrewrite: validate, constant-fold, convert and upgrade quantized ONNX models.

The public API is imported on first use: the command line's start-up passes through this
package (``qlrewrite --version`` imports neither onnx nor NumPy); type checkers and IDEs
read the plain imports below ``TYPE_CHECKING``::

    import qlrewrite

    model = qlrewrite.load("model.onnx")    # or an onnx.ModelProto, to every function
    report = qlrewrite.check(model)          # InputError if the model cannot be read
    folded = qlrewrite.fold(model)           # in memory; qlrewrite.save(folded, "out.onnx")

``qlrewrite.passes`` holds the same rewrites as onnx_ir passes, to compose in an
``onnx_ir.passes.PassManager``. Reference: docs/python-api.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, as __getattr__ gives them at run time
    from qlrewrite import errors as errors
    from qlrewrite import passes as passes
    from qlrewrite.api import check as check
    from qlrewrite.api import compare as compare
    from qlrewrite.api import convert as convert
    from qlrewrite.api import downgrade as downgrade
    from qlrewrite.api import fix as fix
    from qlrewrite.api import fold as fold
    from qlrewrite.api import half as half
    from qlrewrite.api import info as info
    from qlrewrite.api import integer_io as integer_io
    from qlrewrite.api import load as load
    from qlrewrite.api import retarget as retarget
    from qlrewrite.api import save as save
    from qlrewrite.api import summary_of as summary_of
    from qlrewrite.api import upgrade as upgrade
    from qlrewrite.api import verify_rewrite as verify_rewrite
    from qlrewrite.errors import QlrewriteWarning as QlrewriteWarning
    from qlrewrite.kernels import dequantize as dequantize
    from qlrewrite.kernels import quantize as quantize

from qlrewrite._version import __version__

#: Public name -> module that defines it.
_API = {
    "load": "qlrewrite.api",
    "save": "qlrewrite.api",
    "check": "qlrewrite.api",
    "fix": "qlrewrite.api",
    "fold": "qlrewrite.api",
    "convert": "qlrewrite.api",
    "upgrade": "qlrewrite.api",
    "downgrade": "qlrewrite.api",
    "retarget": "qlrewrite.api",
    "half": "qlrewrite.api",
    "info": "qlrewrite.api",
    "integer_io": "qlrewrite.api",
    "compare": "qlrewrite.api",
    "verify_rewrite": "qlrewrite.api",
    "summary_of": "qlrewrite.api",
    "QlrewriteWarning": "qlrewrite.errors",
    "dequantize": "qlrewrite.kernels",
    "quantize": "qlrewrite.kernels",
}

#: Subpackages reachable as attributes without importing them first.
_SUBMODULES = ("errors", "passes")

__all__ = ["__version__", *_API, *_SUBMODULES]  # noqa: PLE0604


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"qlrewrite.{name}")
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'qlrewrite' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The public API (imported or not) and the module's own dunders."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
