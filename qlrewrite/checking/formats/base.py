"""What an output format of ``qlrewrite check`` is: :class:`OutputFormat`, and the parts
its emitters share."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path, PurePath
from typing import Any

from rich.console import Console

from qlrewrite.findings import Report

__all__ = ["OutputFormat", "RenderOptions", "relative_posix"]


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    """How a report is asked for: ``codes`` (the rules enabled: SARIF lists them),
    ``summary`` (the closing line), ``show_all`` (no grouping of similar findings),
    ``load_errors`` (unreadable files in the report, not only on stderr)."""

    codes: Collection[str] | None = None
    summary: bool = True
    show_all: bool = False
    load_errors: bool = True


@dataclasses.dataclass(frozen=True)
class OutputFormat:
    """One ``--output-format``: its ``name``, what it is for (``summary``, shown by
    ``--help``) and its emitter: ``render`` makes the whole report as one string.

    ``terminal`` (optional): how it prints on a terminal instead (text: tables);
    ``statistics`` (optional): ``--statistics`` rows (dicts) as text in this format.
    """

    name: str
    summary: str
    render: Callable[[Sequence[Report], RenderOptions], str]
    terminal: Callable[[Sequence[Report], Console, RenderOptions], None] | None = None
    statistics: Callable[[Sequence[dict[str, Any]]], str] | None = None


def relative_posix(path: str) -> str:
    """``path`` relative to the current folder when inside it, with forward slashes."""
    pure = Path(path)
    if pure.is_absolute():
        try:
            pure = pure.relative_to(Path.cwd())
        except ValueError:
            return pure.as_posix()
    return PurePath(os.path.normpath(pure)).as_posix()
