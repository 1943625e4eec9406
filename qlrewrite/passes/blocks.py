"""Writing nodes before a node, and a per-block tensor repeated over its blocks, with the
standard ops of every opset from 10: one home for the downgrade's blocked lowering and the
float-zero-point (HQQ) MatMulNBits conversion.

:func:`repeat_blocks` turns a tensor with one entry per block along ``axis`` into one entry
per element: Reshape (a length-1 axis after the block axis) / Expand (to the block size) /
Reshape (blocks times block size), and a Slice when the last block is partial. Values are
copied, never computed: exact for any element type.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from qlrewrite.toolkit import FreshNames, add_constant

__all__ = ["Writer", "repeat_blocks"]


class Writer:
    """Adds nodes and int64 constants before ``anchor`` in its graph (initializers) or
    function (Constant nodes), named from ``names``."""

    def __init__(
        self,
        anchor: ir.Node,
        names: FreshNames,
        base: str | None = None,
        *,
        graph: ir.Graph | ir.Function | None = None,
    ) -> None:
        owner = graph if graph is not None else anchor.graph
        if owner is None:
            raise ValueError(f"{anchor.op_type} node '{anchor.name}' is in no graph")
        self.anchor, self.names = anchor, names
        #: Where new nodes go: ``graph`` when given (a function: say so, as a node inside
        #: one belongs to the function's inner graph), else the anchor's graph.
        self.graph: ir.Graph | ir.Function = owner
        self.base = base or anchor.name or anchor.op_type.lower()

    def ints(self, values: list[int]) -> ir.Value:
        """A constant int64 vector."""
        name = self.names.fresh(f"{self.base}_shape")
        tensor = ir.tensor(np.array(values, dtype=np.int64), name=name)
        return add_constant(self.graph, tensor, name, before=self.anchor, node_name=name)

    def node(self, op: str, inputs: list[ir.Value], **attributes: int) -> ir.Value:
        """A node of ``op`` on ``inputs``; its (single) output."""
        output = ir.Value(name=self.names.fresh(f"{self.base}_{op.lower()}"))
        node = ir.node(
            op,
            inputs,
            attributes,
            outputs=[output],
            name=self.names.fresh(f"{self.base}/{op}"),
        )
        self.graph.insert_before(self.anchor, node)
        return output


def repeat_blocks(
    writer: Writer, value: ir.Value, shape: list[int], *, axis: int, block: int, length: int
) -> ir.Value:
    """``value`` (``shape``, one entry per block along ``axis``) repeated over each block of
    ``block`` elements, cut to ``length`` along the axis. A block longer than the axis (one
    block: ``block_size`` 2^40 on 64 rows is valid ONNX) is repeated over ``length`` only:
    the same values, and no Expand to more elements than the tensor has."""
    blocks = shape[axis]
    block = min(block, length)
    before, after = shape[:axis], shape[axis + 1 :]
    split = writer.node("Reshape", [value, writer.ints([*before, blocks, 1, *after])])
    wide = writer.node("Expand", [split, writer.ints([*before, blocks, block, *after])])
    joined = writer.node("Reshape", [wide, writer.ints([*before, blocks * block, *after])])
    if blocks * block == length:
        return joined
    starts, ends, axes = writer.ints([0]), writer.ints([length]), writer.ints([axis])
    return writer.node("Slice", [joined, starts, ends, axes])
