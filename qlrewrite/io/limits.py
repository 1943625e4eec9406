"""What a model file may hold before it is refused (read by :mod:`qlrewrite.io.model_io`,
set by the command line's ``--max-nodes`` / ``--max-depth``): a module of its own so the
command line reads it without importing onnx."""

from __future__ import annotations

import contextvars
import dataclasses

__all__ = ["LIMITS", "Limits"]


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a model file may hold before it is refused, read or not (a 2 MB file of a
    million empty nodes would take a minute and gigabytes to check). Raise them with
    ``qlrewrite --max-nodes N --max-depth N COMMAND`` or ``LIMITS.set(Limits(...))``."""

    #: Nodes in all graphs, subgraphs and functions together.
    max_nodes: int = 500_000
    #: Subgraphs nested in subgraphs, and functions calling functions.
    max_depth: int = 64


#: The limits :func:`qlrewrite.io.model_io.load` applies (a context variable: set per thread
#: or task).
LIMITS: contextvars.ContextVar[Limits] = contextvars.ContextVar(
    "qlrewrite_limits",
    default=Limits(),  # noqa: B039 (frozen)
)
