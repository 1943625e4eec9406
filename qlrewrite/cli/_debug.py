"""``--debug``: one light module (the group's option; no onnx imported to parse it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["debug_enabled", "debug_option"]

F = TypeVar("F", bound=Callable[..., Any])

_DEBUG_KEY = "qlrewrite.debug"


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_DEBUG_KEY] = True  # meta is shared by the group's and the command's context


def debug_enabled() -> bool:
    """True with ``--debug`` (on the group or the command) or $QLREWRITE_DEBUG set."""
    ctx = click.get_current_context(silent=True)
    given = ctx is not None and ctx.meta.get(_DEBUG_KEY, False)
    return bool(given or os.environ.get("QLREWRITE_DEBUG"))


def debug_option(func: F) -> F:
    """``--debug``: show tracebacks instead of one-line errors."""
    return click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="Show the full traceback on errors.",
    )(func)
