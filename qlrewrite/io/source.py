"""Where a model was read from: the file and the proto as read, recorded on the model.

:func:`qlrewrite.io.model_io.load` records a :class:`Source`; the checker, ``info`` and the
pipeline read it (a weight-free copy for shape inference without serializing again,
the folder external data is resolved against, the files an output must not overwrite).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import onnx_ir as ir

from qlrewrite.toolkit import model_folder

__all__ = ["Source", "set_source", "source_of"]

_KEY = "qlrewrite.io.source"


@dataclasses.dataclass(frozen=True)
class Source:
    """A model's file (None: a proto handed in, read as if from the current folder) and
    its proto as read (without external data; the model may have changed since)."""

    path: Path | None
    proto: onnx.ModelProto
    #: What was derived from ``proto`` once, by whoever derived it (data problems, ...).
    facts: dict[str, object] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def folder(self) -> Path:
        """The folder external data locations are relative to: the file's folder as
        named (not through a link to the file, as ONNX Runtime resolves them)."""
        return model_folder(self.path) if self.path is not None else Path.cwd()


def source_of(model: ir.Model) -> Source | None:
    """The :class:`Source` recorded on ``model`` (None: built in memory)."""
    return model.meta.get(_KEY)


def set_source(model: ir.Model, source: Source | None) -> None:
    """Record where ``model`` was read from (a model made from a loaded one keeps its
    source)."""
    if source is not None:
        model.meta[_KEY] = source
