"""What one run of passes shares, handed to every pass: the run context.

A command runs several passes on one model (:func:`qlrewrite.passes.manager.run_passes`). What
is costly to learn about the whole model is learnt once per run and handed to each pass
in a typed :class:`RunContext`: the types and shapes nobody declared (ONNX shape
inference, run on first need), and the weight-free proto of the model as it was read
(the input check made it; a first pass that needs one copies it instead of serializing
the model). The context follows the passes: after each, it forgets what may no longer
hold (:meth:`RunContext.advance`).

A pass states what it reads and what it keeps true (:class:`ContextPass`): ``needs``
names the facts it asks the context for, ``keeps_types`` says that every value keeps its
type under its name and new values get fresh names with their types declared, so the
inference made before it still answers for the names it knows. A pass that does not say
so (any onnx_ir pass that is not a :class:`ContextPass`) makes the context infer again.
Called on its own (``FoldPass()(model)``), a pass gets a context of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import ClassVar, Literal

import onnx
import onnx_ir as ir

from qlrewrite.io.weightless import INLINE_BYTES, weightless_proto
from qlrewrite.qdq.inference import Inference
from qlrewrite.qdq.untouched import Checked

__all__ = ["ContextPass", "Fact", "RunContext"]

#: What a pass may ask the context for: the inference, or the weight-free proto.
Fact = Literal["inference", "weightless"]


@dataclasses.dataclass
class RunContext:
    """What the passes of one run share; ``model`` is the model the next pass gets."""

    model: ir.Model
    #: Types and shapes by value name, per graph; ONNX shape inference runs on first need.
    inference: Inference
    #: The weight-free proto of ``model`` as read (None once a pass ran: it may differ).
    unchanged: onnx.ModelProto | None = None
    #: The passes that ran, in order, and whether each changed the model.
    ran: list[tuple[str, bool]] = dataclasses.field(default_factory=list)
    #: What the input check judged of each node (the output check compares: what the
    #: passes left as it was is not checked again, :mod:`qlrewrite.qdq.untouched`).
    checked: Checked | None = None

    @classmethod
    def fresh(cls, model: ir.Model, unchanged: onnx.ModelProto | None = None) -> RunContext:
        """A context for ``model``; ``unchanged``: its weight-free proto as read, if made."""
        return cls(model, Inference(model, unchanged), unchanged)

    def weightless(self, *, max_inline_bytes: int = INLINE_BYTES) -> onnx.ModelProto:
        """A weight-free proto of ``model`` the caller may change: a copy of the one made
        when the model was read while no pass has run, else the model serialized."""
        if self.unchanged is None or max_inline_bytes != INLINE_BYTES:
            return weightless_proto(self.model, max_inline_bytes=max_inline_bytes)
        copy = onnx.ModelProto()
        copy.CopyFrom(self.unchanged)
        return copy

    def advance(self, rewrite_pass: ir.passes.PassBase, result: ir.passes.PassResult) -> None:
        """After ``rewrite_pass`` returned ``result``: the context describes its model.

        The proto as read no longer does (whatever the pass says it changed); the
        inference stays when the pass keeps types on the same model, else it is made
        again (lazily) for the model the pass returned."""
        keeps = isinstance(rewrite_pass, ContextPass) and rewrite_pass.keeps_types
        if result.model is not self.model or not keeps:
            self.inference = Inference(result.model)
        self.unchanged = None
        self.ran.append((_name(rewrite_pass), bool(result.modified)))
        self.model = result.model


class ContextPass:
    """Mixin of a pass that reads the run context (:meth:`context`) and states what it
    needs from it and whether it keeps the inference true (see the module)."""

    #: The facts the pass reads from the context.
    needs: ClassVar[frozenset[Fact]] = frozenset()
    #: Values keep their types under their names; new values are declared.
    keeps_types: ClassVar[bool] = True

    _handed: RunContext | None = None

    def context(self, model: ir.Model) -> RunContext:
        """The run's context, when the pipeline handed one for ``model``; else a fresh
        one (the pass called on its own)."""
        handed = self._handed
        return handed if handed is not None and handed.model is model else RunContext.fresh(model)

    @contextlib.contextmanager
    def handed(self, context: RunContext) -> Iterator[None]:
        """``context`` is this pass's while the block runs (the pipeline calls it)."""
        self._handed = context
        try:
            yield
        finally:
            self._handed = None


def _name(rewrite_pass: ir.passes.PassBase) -> str:
    return getattr(rewrite_pass, "name", type(rewrite_pass).__name__)
