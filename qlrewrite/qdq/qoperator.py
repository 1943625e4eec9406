"""The QOperator / dynamic nodes (QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft
QLinear*, QGemm, ...): their (data, scale, zero point) triples as views.

A QOperator node carries several quantized tensors, each with its own scale and zero
point: the inputs (activations), a weight that may be quantized per channel, the output
the kernel requantizes to. Their names per operator are rows of
:data:`qlrewrite.opsets.QOPERATOR_ROWS` (:class:`~qlrewrite.opsets.Quantized`);
:func:`triples` binds them to one node's values. Rules, ``info`` and the converter to
Q/DQ read them here.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.qdq.view import NodeView, ValueView

__all__ = ["PER_CHANNEL", "TripleView", "triples"]

#: Granularity of a weight whose scale is 1-D along its channel axis.
PER_CHANNEL = "per-channel"


@dataclasses.dataclass(frozen=True)
class TripleView:
    """One quantized tensor of a QOperator node, with its scale and zero point."""

    spec: opsets.Quantized
    label: str  # the schema name of the data ("inputs[1]" for QLinearConcat's)
    values: tuple[ir.Value | None, ir.Value | None, ir.Value | None]  # data, scale, zp
    data: ValueView | None
    scale: ValueView | None
    zero_point: ValueView | None
    #: The axis of the data a per-channel scale runs along (None: per-tensor only).
    channel_axis: int | None

    @property
    def role(self) -> str:
        """ "input", "weight" or "output"."""
        return self.spec.role

    @property
    def dtype(self) -> ir.DataType | None:
        """The quantized element type: the data's, else its zero point's."""
        for view in (self.data, self.zero_point):
            if view is not None and view.dtype is not None:
                return view.dtype
        return None

    @property
    def granularity(self) -> str:
        """ "per-tensor", "per-channel", "?" (scale shape unknown) or "rank-N"."""
        scale = self.scale if self.spec.scale is not None else self.zero_point
        if scale is None and self.spec.scale is None:
            return opsets.PER_TENSOR  # no scale, no zero point: zero point 0
        if scale is None or scale.shape is None:
            return "?"
        shape = scale.shape
        if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
            return opsets.PER_TENSOR
        if len(shape) == 1 or self.column_shaped(scale):
            return PER_CHANNEL
        return f"rank-{len(shape)}"

    def column_shaped(self, view: ValueView | None) -> bool:
        """A per-column MatMul weight's scale or zero point written [1, ..., 1, N] (rank 2
        or more, every dim but the last 1): ONNX Runtime's QLinearMatMul takes it."""
        shape = view.shape if view is not None else None
        return (
            self.channel_axis == -1
            and shape is not None
            and len(shape) >= 2
            and all(d == 1 for d in shape[:-1])
        )

    def describe(self) -> str:
        """``w INT8 per-channel(axis 0)`` for ``info`` (``, scale FLOAT16`` when the scale
        is not float32)."""
        dtype = self.dtype.name if self.dtype is not None else "?"
        granularity = self.granularity
        if granularity == PER_CHANNEL and self.channel_axis is not None:
            granularity = f"{PER_CHANNEL}(axis {self.channel_axis})"
        scale = self.scale.dtype if self.scale is not None else None
        unusual = f", scale {scale.name}" if scale not in (None, ir.DataType.FLOAT) else ""
        return f"{self.label} {dtype} {granularity}{unusual}"


def _channel_axis(view: NodeView, spec: opsets.Quantized) -> int | None:
    if spec.channel_axis_if is not None:
        name, axis = spec.channel_axis_if
        if view.attr_or_default(name):
            return axis
    return spec.channel_axis


_Values = tuple[ir.Value | None, ir.Value | None, ir.Value | None]


def _bind(
    view: NodeView,
    spec: opsets.Quantized,
    label: str,
    values: _Values,
) -> TripleView:
    data, scale, zero_point = values
    return TripleView(
        spec,
        label,
        values,
        view.value_view(data),
        view.value_view(scale, read=True),
        view.value_view(zero_point, read=True),
        _channel_axis(view, spec),
    )


def _value(view: NodeView, row: opsets.QOperatorVersion, name: str | None) -> ir.Value | None:
    if name is None:
        return None
    index = row.output_index(name)
    slots = view.node.outputs if index is not None else view.node.inputs
    index = index if index is not None else row.input_index(name)
    return slots[index] if index < len(slots) else None


def triples(view: NodeView) -> list[TripleView]:
    """The (data, scale, zero point) triples of a QOperator node in schema order, then the
    variadic inputs of QLinearConcat; [] for other nodes or without a version in force."""
    row = view.row
    if not isinstance(row, opsets.QOperatorVersion):
        return []
    found = [
        _bind(
            view,
            spec,
            spec.data,
            (
                _value(view, row, spec.data),
                _value(view, row, spec.scale),
                _value(view, row, spec.zero_point),
            ),
        )
        for spec in row.triples
    ]
    if row.variadic:
        fixed = len(row.inputs) - 1
        inputs = list(view.node.inputs)
        spec = opsets.Quantized("input", row.inputs[-1].name, "", "")
        for number, start in enumerate(range(fixed, len(inputs) - 2, 3)):
            values = (inputs[start], inputs[start + 1], inputs[start + 2])
            found.append(_bind(view, spec, f"{spec.data}[{number}]", values))
    return found
