"""The retarget family: exact rewrites of the Q/DQ form for runtimes that take only some
of it (:mod:`~qlrewrite.passes.retarget.retarget_pass`), a quantized tensor with all its
Q/DQ nodes changed as one (:mod:`~qlrewrite.passes.retarget.groups`)."""

from __future__ import annotations

from qlrewrite.passes.retarget.retarget_pass import SIGNEDNESS, RetargetPass

__all__ = ["SIGNEDNESS", "RetargetPass"]
