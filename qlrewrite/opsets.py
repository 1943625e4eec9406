"""The opset rules of the quantized operators as data.

One :class:`OpVersion` row per (domain, op_type, since_version) of QuantizeLinear /
DequantizeLinear: the attributes that exist (with type and default), the element types
allowed per role, the granularities, how the output type is decided, and the IR version
each element type needs. One :class:`WeightOnlyVersion` row per version of ONNX
Runtime's weight-only operators (com.microsoft MatMulNBits, GatherBlockQuantized): their
inputs and type parameters, attributes with defaults, and how each weight element type
is stored (:class:`WeightStorage`). The checker, the converters and the kernels' dispatch
read this table; supporting a new opset means adding rows here. ai.onnx rows are written
out (tests compare them with ``onnx.defs``); com.microsoft rows follow ONNX Runtime's
contrib operator schemas and, where the text leaves a point open, its CPU kernels.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import onnx_ir as ir

__all__ = [
    "BLOCKED",
    "FLOAT_TYPES",
    "IMPLIED_VERSIONS",
    "MS_DOMAIN",
    "ONNX_DOMAINS",
    "ONNX_OPSETS",
    "PER_AXIS",
    "PER_TENSOR",
    "QOPERATOR_ROWS",
    "QUANTIZED_LEFT_ALONE",
    "TABLE",
    "WEIGHT_ONLY_OPS",
    "NodeForm",
    "OpVersion",
    "Operand",
    "QOperatorVersion",
    "Quantized",
    "WeightOnlyVersion",
    "WeightStorage",
    "com_microsoft_problems",
    "expression_problems",
    "lookup",
    "lowest_onnx_opset",
    "min_ir_version",
    "normalize_domain",
    "output_type",
    "qdq_version",
    "qoperator",
    "read_at",
    "versions",
    "weight_only",
]

DT = ir.DataType
INT = ir.AttributeType.INT
MS_DOMAIN = "com.microsoft"
#: The version ONNX Runtime reads for a domain the model does not import: it gives every
#: domain missing from the model's imports the newest version it knows (its
#: core/graph/model.cc), and com.microsoft has one version. ONNX Runtime's own weight-only
#: quantizer (GPTQ, k-quant, INC RTN) writes MatMulNBits without the import. A model-local
#: function gets no such default: ORT refuses one whose nodes' domain it does not import.
IMPLIED_VERSIONS: dict[str, int] = {MS_DOMAIN: 1}
#: The two spellings of the ONNX domain.
ONNX_DOMAINS = ("", "ai.onnx")

PER_TENSOR = "per-tensor"
PER_AXIS = "per-axis"
BLOCKED = "blocked"

#: The ai.onnx opsets that introduced a version of QuantizeLinear / DequantizeLinear.
ONNX_OPSETS = (10, 13, 19, 21, 23, 24, 25, 28)

FLOAT_TYPES = frozenset({DT.FLOAT, DT.FLOAT16, DT.BFLOAT16})
_FLOAT8 = (DT.FLOAT8E4M3FN, DT.FLOAT8E4M3FNUZ, DT.FLOAT8E5M2, DT.FLOAT8E5M2FNUZ)

# Quantized (integer side) types, growing with the opset.
_Q10 = frozenset({DT.INT8, DT.UINT8})
_Q19 = _Q10 | frozenset(_FLOAT8)
_Q21 = _Q19 | frozenset({DT.INT16, DT.UINT16, DT.INT4, DT.UINT4})
_Q23 = _Q21 | frozenset({DT.FLOAT4E2M1})
_Q25 = _Q23 | frozenset({DT.INT2, DT.UINT2})
_Q28 = _Q25 | frozenset({DT.FLOAT6E2M3, DT.FLOAT6E3M2})

# Float side.
_F32 = frozenset({DT.FLOAT})
_F32_I32 = frozenset({DT.FLOAT, DT.INT32})
_FLOAT_I32 = FLOAT_TYPES | frozenset({DT.INT32})

_MS_Q = frozenset({DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT4, DT.UINT4})
_MS_FLOAT = frozenset({DT.FLOAT, DT.FLOAT16})

#: The IR version that introduced each element type (types not listed: IR 3 or older).
_MIN_IR = {
    **dict.fromkeys(_FLOAT8, 9),
    DT.INT4: 10,
    DT.UINT4: 10,
    DT.FLOAT4E2M1: 11,
    DT.FLOAT8E8M0: 12,
    DT.INT2: 13,
    DT.UINT2: 13,
    DT.FLOAT6E2M3: 14,
    DT.FLOAT6E3M2: 14,
}


@dataclasses.dataclass(frozen=True)
class OpVersion:
    """One version of QuantizeLinear or DequantizeLinear in one domain."""

    domain: str  # "" for ai.onnx
    op_type: str
    since: int  # since_version
    until: int | None  # last opset of the domain this row is in force for (None: open)
    attributes: Mapping[str, tuple[ir.AttributeType, int | None]]  # name -> (type, default)
    x_types: frozenset[ir.DataType]
    scale_types: frozenset[ir.DataType]
    zero_point_types: frozenset[ir.DataType]
    output_types: frozenset[ir.DataType]
    #: Where the output type comes from, first that applies: "zero_point", "output_dtype",
    #: "scale", or a fixed type name ("FLOAT", "UINT8").
    output_from: tuple[str, ...]
    granularities: frozenset[str]
    scalar_only: bool = False  # opset 10: scale and zero point must be scalars
    scale_matches_x: bool = False  # Q-19/21 and com.microsoft Q: scale type == x type
    output_dtype_matches_zero_point: bool = False  # Q-21+: both given -> equal
    scale_needs_output_dtype: frozenset[ir.DataType] = frozenset()  # DQ-24+: e8m0
    has_block_size: bool = False

    @property
    def is_quantize(self) -> bool:
        """True for QuantizeLinear."""
        return self.op_type == "QuantizeLinear"

    @property
    def label(self) -> str:
        """``ai.onnx QuantizeLinear-21`` style name."""
        return f"{self.domain or 'ai.onnx'} {self.op_type}-{self.since}"

    def default(self, name: str) -> int | None:
        """The default of attribute ``name`` (None when it has none or does not exist)."""
        entry = self.attributes.get(name)
        return entry[1] if entry else None


def _ints(*pairs: tuple[str, int | None]) -> dict[str, tuple[ir.AttributeType, int | None]]:
    return {name: (INT, default) for name, default in pairs}


#: The axis a Q/DQ node applies when it names none: the default of ai.onnx's versions
#: from 13, and what ONNX Runtime's kernels apply for com.microsoft's (whose schema has
#: no default). Read through :attr:`qlrewrite.qdq.NodeView.axis` and the kernels' default.
DEFAULT_AXIS = 1
#: MatMulNBits' accuracy_level values: 0 unset, 1 float32, 2 float16, 3 bfloat16, 4 int8.
ACCURACY_LEVELS = range(5)

_AXIS = ("axis", DEFAULT_AXIS)
_SATURATE = ("saturate", 1)
_BLOCK = ("block_size", 0)
_OUT_DTYPE = ("output_dtype", 0)
_PRECISION = ("precision", 0)

_GRAN_TENSOR = frozenset({PER_TENSOR})
_GRAN_AXIS = frozenset({PER_TENSOR, PER_AXIS})
_GRAN_BLOCK = frozenset({PER_TENSOR, PER_AXIS, BLOCKED})
_E8M0 = frozenset({DT.FLOAT8E8M0})


_Types = frozenset[ir.DataType]


def _dq(
    since: int,
    until: int | None,
    attrs: tuple[tuple[str, int | None], ...],
    *,
    x: _Types,
    scale: _Types,
    **kw: Any,
) -> OpVersion:
    """An ai.onnx DequantizeLinear row; the zero point takes the type of x."""
    kw.setdefault("output_types", FLOAT_TYPES)
    kw.setdefault("granularities", _GRAN_BLOCK if since >= 21 else _GRAN_AXIS)
    return OpVersion(
        "",
        "DequantizeLinear",
        since,
        until,
        _ints(*attrs),
        x_types=x | {DT.INT32},
        scale_types=scale,
        zero_point_types=x | {DT.INT32},
        has_block_size=since >= 21,
        **kw,
    )


def _q(
    since: int,
    until: int | None,
    attrs: tuple[tuple[str, int | None], ...],
    *,
    x: _Types,
    scale: _Types,
    y: _Types,
    **kw: Any,
) -> OpVersion:
    """An ai.onnx QuantizeLinear row; the output takes the type of the zero point."""
    kw.setdefault("output_from", ("zero_point", "output_dtype", "UINT8"))
    kw.setdefault("granularities", _GRAN_BLOCK if since >= 21 else _GRAN_AXIS)
    return OpVersion(
        "",
        "QuantizeLinear",
        since,
        until,
        _ints(*attrs),
        x_types=x,
        scale_types=scale,
        zero_point_types=y,
        output_types=y,
        has_block_size=since >= 21,
        output_dtype_matches_zero_point=since >= 21,
        **kw,
    )


_DQ_23 = (_AXIS, _BLOCK, _OUT_DTYPE)
_Q_23 = (_AXIS, _SATURATE, _BLOCK, _OUT_DTYPE, _PRECISION)
_FROM_SCALE = ("scale",)
_FROM_DTYPE = ("output_dtype", "scale")
_FROM_ZP = ("zero_point", "UINT8")

#: The com.microsoft operators whose weights are quantized inside the node.
WEIGHT_ONLY_OPS = ("MatMulNBits", "GatherBlockQuantized")


@dataclasses.dataclass(frozen=True)
class Operand:
    """One input or output of a weight-only operator, as its schema declares it."""

    name: str
    type_param: str  # the schema's type parameter; operands sharing one have one type
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class WeightStorage:
    """How one element type of the quantized weight input holds its values.

    ``bits``: the values the ``bits`` attribute may take with this type (empty: the
    attribute is ignored, the type fixes the width). ``packed``: uint8 bytes holding
    ``8 // bits`` values each, low bits first. ``zero_point``: what an absent zero point
    means -- "half" (2^(bits-1)), "zero" (0) -- or "none" (no zero point input allowed).
    """

    bits: frozenset[int]
    packed: bool
    zero_point: str  # "half", "zero" or "none"
    block_size_zero: bool = False  # block_size 0: one block over the whole quantize axis
    scale_broadcast: bool = False  # a scale dim of 1 broadcasts on the other axes
    gather_axis_zero: bool = False  # GatherBlockQuantized: gather_axis must be 0
    quantize_axis_last: bool = False  # GatherBlockQuantized: quantize_axis must be last

    def default_zero_point(self, bits: int) -> int | None:
        """The zero point used when the input is absent (None: no zero point at all)."""
        if self.zero_point == "half":
            return 1 << (bits - 1)
        return 0 if self.zero_point == "zero" else None


@dataclasses.dataclass(frozen=True)
class WeightOnlyVersion:
    """One version of a com.microsoft weight-only operator (MatMulNBits,
    GatherBlockQuantized): the weights are quantized blockwise inside the node."""

    domain: str
    op_type: str
    since: int
    until: int | None
    inputs: tuple[Operand, ...]
    output: Operand
    type_params: Mapping[str, frozenset[ir.DataType]]
    attributes: Mapping[str, tuple[ir.AttributeType, int | None]]  # name -> (type, default)
    required: frozenset[str]  # attributes without a default that must be given
    weight: str  # the input holding the quantized weights
    activation: str  # the input that is not part of the weights (A, indices)
    storage: Mapping[ir.DataType, WeightStorage]  # per element type of ``weight``
    #: block_size: a power of two at least this (0 allowed where the storage says so).
    min_block_size: int = 16
    #: The block sizes ONNX Runtime's CPU provider runs (None: every valid one).
    cpu_block_sizes: frozenset[int] | None = None
    #: accuracy_level values the schema defines (empty: no such attribute).
    accuracy_levels: frozenset[int] = frozenset()
    #: Inputs whose values the check rules read when small (the rest: shapes and types).
    read_values: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """``com.microsoft MatMulNBits-1`` style name."""
        return f"{self.domain} {self.op_type}-{self.since}"

    def default(self, name: str) -> int | None:
        """The default of attribute ``name`` (None when it has none or does not exist)."""
        entry = self.attributes.get(name)
        return entry[1] if entry else None

    def input_index(self, name: str) -> int:
        """The position of input ``name``."""
        return next(i for i, operand in enumerate(self.inputs) if operand.name == name)

    def types_of(self, name: str) -> frozenset[ir.DataType]:
        """The element types input (or output) ``name`` may have."""
        operands = (*self.inputs, self.output)
        return self.type_params[next(o.type_param for o in operands if o.name == name)]

    @property
    def input_range(self) -> tuple[int, int]:
        """The fewest and most inputs a node may have."""
        required = [i for i, operand in enumerate(self.inputs) if not operand.optional]
        return max(required) + 1, len(self.inputs)


_F16_32_BF16 = frozenset({DT.FLOAT, DT.FLOAT16, DT.BFLOAT16})
_PACKED_UINT8 = WeightStorage(bits=frozenset({2, 4, 8}), packed=True, zero_point="half")
_FP_STORAGE = WeightStorage(
    bits=frozenset(), packed=False, zero_point="none", block_size_zero=True, scale_broadcast=True
)

#: com.microsoft MatMulNBits-1: Y = A @ dequantize(B).T. B is [N, k_blocks, blob] uint8
#: (blob = block_size * bits / 8), quantized along K; zero points packed uint8 or in a
#: float type. ONNX Runtime 1.31's CPU kernel runs block sizes 16 to 256 only.
MATMUL_NBITS_1 = WeightOnlyVersion(
    MS_DOMAIN,
    "MatMulNBits",
    1,
    None,
    inputs=(
        Operand("A", "T1"),
        Operand("B", "T2"),
        Operand("scales", "T1"),
        Operand("zero_points", "T3", True),
        Operand("g_idx", "T4", True),
        Operand("bias", "T1", True),
    ),
    output=Operand("Y", "T1"),
    type_params={
        "T1": _F16_32_BF16,
        "T2": frozenset({DT.UINT8}),
        "T3": _F16_32_BF16 | {DT.UINT8},
        "T4": frozenset({DT.INT32}),
    },
    attributes=_ints(
        ("K", None),
        ("N", None),
        ("bits", 4),
        ("block_size", None),
        ("accuracy_level", 0),
        ("weight_prepacked", 0),
    ),
    required=frozenset({"K", "N", "block_size"}),
    weight="B",
    activation="A",
    storage={DT.UINT8: _PACKED_UINT8},
    cpu_block_sizes=frozenset({16, 32, 64, 128, 256}),
    accuracy_levels=frozenset(ACCURACY_LEVELS),
    read_values=frozenset({"g_idx"}),
)

#: com.microsoft GatherBlockQuantized-1: Gather of data quantized blockwise along
#: quantize_axis. uint8 data packs 8 / bits values along the last axis (gather_axis 0);
#: int4 / uint4 hold one value per element (bits 4, zero point default 0); float8 /
#: float4 data is symmetric (no zero point, block_size 0 allowed, scales broadcast).
GATHER_BLOCK_QUANTIZED_1 = WeightOnlyVersion(
    MS_DOMAIN,
    "GatherBlockQuantized",
    1,
    None,
    inputs=(
        Operand("data", "T1"),
        Operand("indices", "Tind"),
        Operand("scales", "T2"),
        Operand("zero_points", "T1", True),
    ),
    output=Operand("output", "T2"),
    type_params={
        "T1": frozenset({DT.INT4, DT.UINT4, DT.UINT8, *_FLOAT8, DT.FLOAT4E2M1}),
        "T2": _F16_32_BF16,
        "Tind": frozenset({DT.INT32, DT.INT64}),
    },
    attributes=_ints(("bits", 4), ("block_size", 128), ("gather_axis", 0), ("quantize_axis", 1)),
    required=frozenset(),
    weight="data",
    activation="indices",
    storage={
        DT.UINT8: dataclasses.replace(
            _PACKED_UINT8, gather_axis_zero=True, quantize_axis_last=True
        ),
        DT.INT4: WeightStorage(bits=frozenset({4}), packed=False, zero_point="zero"),
        DT.UINT4: WeightStorage(bits=frozenset({4}), packed=False, zero_point="zero"),
        **dict.fromkeys((*_FLOAT8, DT.FLOAT4E2M1), _FP_STORAGE),
    },
)


@dataclasses.dataclass(frozen=True)
class Quantized:
    """One (data, scale, zero point) triple of a QOperator / dynamic operator: schema names
    of the quantized value (an input, or an output for role "output"), its scale and its
    zero point (None: the operator has no such input, e.g. MatMulInteger's scales).

    ``role``: "input" (an activation), "weight" (may be per-channel), "output". A per-channel
    scale is 1-D along ``channel_axis`` of the data (None: per-tensor only); where an
    attribute moves that axis (QGemm's transB), ``channel_axis_if`` names it and the axis
    used when it is nonzero.
    """

    role: str
    data: str
    scale: str | None
    zero_point: str | None
    channel_axis: int | None = None
    channel_axis_if: tuple[str, int] | None = None


@dataclasses.dataclass(frozen=True)
class QOperatorVersion:
    """One version of a QOperator or dynamic quantized operator (QLinearConv, QLinearMatMul,
    MatMulInteger, com.microsoft QLinear*, QGemm, ...): the integer kernel takes quantized
    tensors with their scales and zero points and requantizes its result itself.

    ``float_op``: the ai.onnx operator its Q/DQ form runs between DequantizeLinear and
    QuantizeLinear (None: no such form; ``refusal`` says why it is not converted).
    ``variadic``: inputs after the fixed ones come in (data, scale, zero point) threes
    (QLinearConcat); they are quantized inputs.
    """

    domain: str
    op_type: str
    since: int
    until: int | None
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    type_params: Mapping[str, frozenset[ir.DataType]]
    attributes: Mapping[str, tuple[ir.AttributeType, Any]]  # name -> (type, default)
    required: frozenset[str]
    triples: tuple[Quantized, ...]
    float_op: str | None = None
    refusal: str = ""
    variadic: bool = False
    dynamic: bool = False  # the scale of an activation is computed at run time
    #: Scales and zero points must be rank 0 (ONNX Runtime's shape inference of
    #: QLinearAdd / QLinearMul refuses a 1-element 1-D one); else 1 element is per-tensor.
    scalar_only: bool = False
    #: ONNX Runtime's shape inference reads every input slot up to the last one given: an
    #: optional zero point given as an empty name is refused when the model loads (one
    #: left out at the end is not). Measured with ONNX Runtime 1.31.
    empty_optional_refused: bool = False
    #: Optional inputs ONNX Runtime needs a slot for: with the node's inputs ending before
    #: them, 1.31 aborts the process when it loads the model (an empty name is accepted).
    slot_needed: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """``com.microsoft QLinearAdd-1`` style name."""
        return f"{self.domain or 'ai.onnx'} {self.op_type}-{self.since}"

    def default(self, name: str) -> Any:
        """The default of attribute ``name`` (None when it has none or does not exist)."""
        entry = self.attributes.get(name)
        return entry[1] if entry else None

    def input_index(self, name: str) -> int:
        """The position of input ``name``."""
        return next(i for i, operand in enumerate(self.inputs) if operand.name == name)

    def output_index(self, name: str) -> int | None:
        """The position of output ``name`` (None: an input)."""
        found = [i for i, operand in enumerate(self.outputs) if operand.name == name]
        return found[0] if found else None

    def types_of(self, name: str) -> frozenset[ir.DataType]:
        """The element types input or output ``name`` may have."""
        operand = next(o for o in (*self.inputs, *self.outputs) if o.name == name)
        return self.type_params[operand.type_param]

    @property
    def read_values(self) -> frozenset[str]:
        """The inputs whose values the rules read when small: the scales and zero points."""
        return frozenset(
            name for t in self.triples for name in (t.scale, t.zero_point) if name is not None
        )

    @property
    def input_range(self) -> tuple[int, int | None]:
        """The fewest and most inputs a node may have (None: no upper bound)."""
        required = [i for i, operand in enumerate(self.inputs) if not operand.optional]
        return max(required) + 1, None if self.variadic else len(self.inputs)


FLOAT_ = "tensor(float)"
_I8_U8 = frozenset({DT.INT8, DT.UINT8})
_TS = {FLOAT_: _F32, "tensor(int32)": frozenset({DT.INT32})}
_INTS = ir.AttributeType.INTS
_FLT = ir.AttributeType.FLOAT
_STR = ir.AttributeType.STRING
_CONV_ATTRS = {
    "auto_pad": (_STR, "NOTSET"),
    "dilations": (_INTS, None),
    "group": (INT, 1),
    "kernel_shape": (_INTS, None),
    "pads": (_INTS, None),
    "strides": (_INTS, None),
}
_X, _W, _Y = (
    ("x", "x_scale", "x_zero_point"),
    ("w", "w_scale", "w_zero_point"),
    ("y", "y_scale", "y_zero_point"),
)


def _ops(*names: tuple[str, str, bool]) -> tuple[Operand, ...]:
    return tuple(Operand(name, param, optional) for name, param, optional in names)


def _qop(
    key: tuple[str, str, int, int | None],
    inputs: tuple[Any, ...],
    outputs: tuple[Any, ...],
    types: Mapping[str, _Types],
    triples: tuple[Any, ...],
    **kw: Any,
) -> QOperatorVersion:
    """A row from its (domain, op, since, until) and schema-like tuples."""
    attrs = kw.pop("attrs", {})
    return QOperatorVersion(
        *key,
        _ops(*inputs),
        _ops(*outputs),
        {**_TS, **types},
        attrs,
        kw.pop("required", frozenset()),
        tuple(Quantized(*t) for t in triples),
        **kw,
    )


def _conv(domain: str, extra: Mapping[str, tuple[Any, ...]]) -> QOperatorVersion:
    return _qop(
        (domain, "QLinearConv", 10 if domain == "" else 1, None),
        (
            ("x", "T1", False),
            ("x_scale", FLOAT_, False),
            ("x_zero_point", "T1", False),
            ("w", "T2", False),
            ("w_scale", FLOAT_, False),
            ("w_zero_point", "T2", False),
            ("y_scale", FLOAT_, False),
            ("y_zero_point", "T3", False),
            ("B", "T4", True),
        ),
        (("y", "T3", False),),
        {"T1": _I8_U8, "T2": _I8_U8, "T3": _I8_U8, "T4": frozenset({DT.INT32})},
        (("input", *_X), ("weight", *_W, 0), ("output", *_Y)),
        attrs={**_CONV_ATTRS, **extra},
        float_op="Conv",
    )


def _binary(op: str, float_op: str) -> QOperatorVersion:
    """com.microsoft QLinearAdd / QLinearMul: C = op(A, B), every zero point optional."""
    return _qop(
        (MS_DOMAIN, op, 1, None),
        (
            ("A", "T", False),
            ("A_scale", FLOAT_, False),
            ("A_zero_point", "T", True),
            ("B", "T", False),
            ("B_scale", FLOAT_, False),
            ("B_zero_point", "T", True),
            ("C_scale", FLOAT_, False),
            ("C_zero_point", "T", True),
        ),
        (("C", "T", False),),
        {"T": _I8_U8},
        (
            ("input", "A", "A_scale", "A_zero_point"),
            ("input", "B", "B_scale", "B_zero_point"),
            ("output", "C", "C_scale", "C_zero_point"),
        ),
        float_op=float_op,
        scalar_only=True,
        empty_optional_refused=True,
    )


def _unary(op: str, names: tuple[str, ...], float_op: str | None, **kw: Any) -> QOperatorVersion:
    """A com.microsoft QLinear op of one quantized input X and output Y."""
    x, xs, xz, ys, yz, y = names
    optional = kw.pop("zero_points_optional", (True, True))
    return _qop(
        (MS_DOMAIN, op, 1, None),
        (
            (x, "T", False),
            (xs, FLOAT_, False),
            (xz, "T", optional[0]),
            (ys, FLOAT_, False),
            (yz, "T", optional[1]),
        ),
        ((y, "T", False),),
        {"T": _I8_U8},
        (("input", x, xs, xz), ("output", y, ys, yz)),
        float_op=float_op,
        **kw,
    )


_FLOAT8_SET = frozenset(_FLOAT8)


def _matmul_inputs(scale: str) -> tuple[Any, ...]:
    """QLinearMatMul's inputs; the scales are ``scale`` (float at 10, TS from 21)."""
    return tuple(
        (name, scale if name.endswith("scale") else param, False)
        for name, param in (
            ("a", "T1"),
            ("a_scale", ""),
            ("a_zero_point", "T1"),
            ("b", "T2"),
            ("b_scale", ""),
            ("b_zero_point", "T2"),
            ("y_scale", ""),
            ("y_zero_point", "T3"),
        )
    )


_MATMUL_TRIPLES = (
    ("input", "a", "a_scale", "a_zero_point"),
    ("weight", "b", "b_scale", "b_zero_point", -1),
    ("output", "y", "y_scale", "y_zero_point"),
)
_POOL_ATTRS = {
    "auto_pad": (_STR, "NOTSET"),
    "ceil_mode": (INT, 0),
    "channels_last": (INT, 0),
    "count_include_pad": (INT, 0),
    "kernel_shape": (_INTS, None),
    "pads": (_INTS, None),
    "strides": (_INTS, None),
}
_XY = ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point", "Y")
_DYNAMIC_REFUSAL = (
    "its activation scale is computed at run time inside the node; convert the graph "
    "around it only where its scales are inputs"
)

#: The QOperator and dynamic operators: the integer kernels that take quantized tensors
#: with their scales and zero points (ai.onnx and ONNX Runtime's com.microsoft ops).
QOPERATOR_ROWS: tuple[QOperatorVersion, ...] = (
    _conv("", {}),
    _qop(
        ("", "QLinearMatMul", 10, 20),
        _matmul_inputs(FLOAT_),
        (("y", "T3", False),),
        {"T1": _I8_U8, "T2": _I8_U8, "T3": _I8_U8},
        _MATMUL_TRIPLES,
        float_op="MatMul",
    ),
    _qop(
        ("", "QLinearMatMul", 21, None),
        _matmul_inputs("TS"),
        (("y", "T3", False),),
        {
            "TS": FLOAT_TYPES,
            "T1": _I8_U8 | _FLOAT8_SET,
            "T2": _I8_U8 | _FLOAT8_SET,
            "T3": _I8_U8 | _FLOAT8_SET,
        },
        _MATMUL_TRIPLES,
        float_op="MatMul",
    ),
    _qop(
        ("", "ConvInteger", 10, None),
        (
            ("x", "T1", False),
            ("w", "T2", False),
            ("x_zero_point", "T1", True),
            ("w_zero_point", "T2", True),
        ),
        (("y", "T3", False),),
        {"T1": _I8_U8, "T2": _I8_U8, "T3": frozenset({DT.INT32})},
        (("input", "x", None, "x_zero_point"), ("weight", "w", None, "w_zero_point", 0)),
        attrs=_CONV_ATTRS,
        dynamic=True,
        refusal="its int32 output has no scale: only ONNX Runtime's dynamic pattern "
        "(DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul by a_scale * b_scale) "
        "becomes DequantizeLinear -> Conv",
    ),
    _qop(
        ("", "MatMulInteger", 10, None),
        (
            ("A", "T1", False),
            ("B", "T2", False),
            ("a_zero_point", "T1", True),
            ("b_zero_point", "T2", True),
        ),
        (("Y", "T3", False),),
        {"T1": _I8_U8, "T2": _I8_U8, "T3": frozenset({DT.INT32})},
        (("input", "A", None, "a_zero_point"), ("weight", "B", None, "b_zero_point", -1)),
        dynamic=True,
        refusal="its int32 output has no scale: only ONNX Runtime's dynamic pattern "
        "(DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by a_scale * b_scale) "
        "becomes DequantizeLinear -> MatMul",
    ),
    _qop(
        ("", "DynamicQuantizeLinear", 11, None),
        (("x", "T1", False),),
        (("y", "T2", False), ("y_scale", FLOAT_, False), ("y_zero_point", "T2", False)),
        {"T1": _F32, "T2": frozenset({DT.UINT8})},
        (("output", *_Y),),
        dynamic=True,
        refusal="it is the QuantizeLinear of dynamic Q/DQ (ai.onnx): it stays",
    ),
    _conv(MS_DOMAIN, {"channels_last": (INT, 0)}),
    _binary("QLinearAdd", "Add"),
    _binary("QLinearMul", "Mul"),
    _unary(
        "QLinearSigmoid",
        ("X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point", "Y"),
        "Sigmoid",
        slot_needed=frozenset({"Y_zero_point"}),
    ),
    _unary(
        "QLinearLeakyRelu",
        ("X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point", "Y"),
        "LeakyRelu",
        attrs={"alpha": (_FLT, 0.01)},
        slot_needed=frozenset({"Y_zero_point"}),
    ),
    _unary(
        "QLinearAveragePool",
        _XY,
        "AveragePool",
        attrs=_POOL_ATTRS,
        required=frozenset({"kernel_shape"}),
        empty_optional_refused=True,
    ),
    _unary(
        "QLinearGlobalAveragePool",
        _XY,
        "GlobalAveragePool",
        attrs={"channels_last": (INT, 0)},
        zero_points_optional=(False, False),
    ),
    _qop(
        (MS_DOMAIN, "QLinearConcat", 1, None),
        (("Y_scale", "TF", False), ("Y_zero_point", "T8", False), ("inputs", "TV", False)),
        (("Y", "T8", False),),
        {"TF": _F32, "T8": _I8_U8, "TV": _I8_U8 | _F32},
        (("output", "Y", "Y_scale", "Y_zero_point"),),
        attrs={"axis": (INT, None)},
        required=frozenset({"axis"}),
        float_op="Concat",
        variadic=True,
    ),
    _unary(
        "QLinearSoftmax",
        ("X", "X_scale", "x_zero_point", "y_scale", "y_zero_point", "Y"),
        "Softmax",
        attrs={"axis": (INT, -1), "opset": (INT, None)},
        required=frozenset({"opset"}),
        zero_points_optional=(True, False),
    ),
    _qop(
        (MS_DOMAIN, "QLinearWhere", 1, None),
        (
            ("condition", "B", False),
            ("X", "T", False),
            ("x_scale", "TF", False),
            ("x_zero_point", "T", False),
            ("Y", "T", False),
            ("y_scale", "TF", False),
            ("y_zero_point", "T", False),
            ("z_scale", "TF", False),
            ("z_zero_point", "T", False),
        ),
        (("Z", "T", False),),
        {"B": frozenset({DT.BOOL}), "TF": _F32, "T": _I8_U8},
        (
            ("input", "X", "x_scale", "x_zero_point"),
            ("input", "Y", "y_scale", "y_zero_point"),
            ("output", "Z", "z_scale", "z_zero_point"),
        ),
        float_op="Where",
    ),
    _unary(
        "QLinearReduceMean",
        ("data", "data_scale", "data_zero_point", "reduced_scale", "reduced_zero_point", "reduced"),
        "ReduceMean",
        attrs={"axes": (_INTS, None), "keepdims": (INT, None)},
        required=frozenset({"axes", "keepdims"}),
        empty_optional_refused=True,
    ),
    _qop(
        (MS_DOMAIN, "QGemm", 1, None),
        (
            ("A", "TA", False),
            ("a_scale", "T", False),
            ("a_zero_point", "TA", False),
            ("B", "TB", False),
            ("b_scale", "T", False),
            ("b_zero_point", "TB", False),
            ("C", "TC", True),
            ("y_scale", "T", True),
            ("y_zero_point", "TYZ", True),
        ),
        (("Y", "TY", False),),
        {
            "T": _F32,
            "TA": _I8_U8,
            "TB": _I8_U8,
            "TC": frozenset({DT.INT32}),
            "TYZ": _I8_U8,
            "TY": _I8_U8 | _F32,
        },
        (
            ("input", "A", "a_scale", "a_zero_point"),
            ("weight", "B", "b_scale", "b_zero_point", 1, ("transB", 0)),
            ("output", "Y", "y_scale", "y_zero_point"),
        ),
        attrs={"alpha": (_FLT, 1.0), "transA": (INT, 0), "transB": (INT, 0)},
        float_op="Gemm",
    ),
    _qop(
        (MS_DOMAIN, "DynamicQuantizeMatMul", 1, None),
        (
            ("A", "T1", False),
            ("B", "T2", False),
            ("b_scale", "T1", False),
            ("b_zero_point", "T2", True),
            ("bias", "T1", True),
        ),
        (("Y", "T1", False),),
        {"T1": _F32, "T2": _I8_U8},
        (("weight", "B", "b_scale", "b_zero_point", -1),),
        dynamic=True,
        float_op="MatMul",
    ),
    _qop(
        (MS_DOMAIN, "MatMulIntegerToFloat", 1, None),
        (
            ("A", "T1", False),
            ("B", "T2", False),
            ("a_scale", "T3", False),
            ("b_scale", "T3", False),
            ("a_zero_point", "T1", True),
            ("b_zero_point", "T2", True),
            ("bias", "T3", True),
        ),
        (("Y", "T3", False),),
        {"T1": _I8_U8, "T2": _I8_U8, "T3": _MS_FLOAT},
        (("input", "A", "a_scale", "a_zero_point"), ("weight", "B", "b_scale", "b_zero_point", -1)),
        float_op="MatMul",
    ),
    _qop(
        (MS_DOMAIN, "QAttention", 1, None),
        (
            ("input", "T1", False),
            ("weight", "T2", False),
            ("bias", "T3", False),
            ("input_scale", "T3", False),
            ("weight_scale", "T3", False),
            ("mask_index", "T4", True),
            ("input_zero_point", "T1", True),
            ("weight_zero_point", "T2", True),
            ("past", "T3", True),
        ),
        (("output", "T3", False), ("present", "T3", True)),
        {"T1": _I8_U8, "T2": _I8_U8, "T3": _MS_FLOAT, "T4": frozenset({DT.INT32})},
        (
            ("input", "input", "input_scale", "input_zero_point"),
            ("weight", "weight", "weight_scale", "weight_zero_point", -1),
        ),
        attrs={
            "do_rotary": (INT, 0),
            "mask_filter_value": (_FLT, -10000.0),
            "num_heads": (INT, None),
            "past_present_share_buffer": (INT, 0),
            "scale": (_FLT, 0.0),
            "unidirectional": (INT, 0),
        },
        required=frozenset({"num_heads"}),
        refusal="ai.onnx has no Attention operator below opset 23 to put between "
        "DequantizeLinear and QuantizeLinear",
    ),
)

#: Quantized operators qlrewrite recognises but neither checks nor converts, with why.
QUANTIZED_LEFT_ALONE: Mapping[tuple[str, str], str] = {
    **dict.fromkeys(
        (
            (MS_DOMAIN, op)
            for op in (
                "QOrderedMatMul",
                "QOrderedAttention",
                "QOrderedLayerNormalization",
                "QOrderedGelu",
                "QOrderedLongformerAttention",
                "QuantizeWithOrder",
                "DequantizeWithOrder",
            )
        ),
        "ONNX Runtime's CUDA-only ordered int8 operators (COL32 layouts); no ai.onnx form",
    ),
    (
        MS_DOMAIN,
        "QEmbedLayerNormalization",
    ): "a fused embedding + layer normalization with quantized tables; no ai.onnx form",
    (MS_DOMAIN, "DynamicQuantizeLSTM"): "a fused LSTM quantizing at run time; no ai.onnx form",
    (MS_DOMAIN, "MatMulInteger16"): "16-bit integer MatMul without scales; no ai.onnx form",
    (MS_DOMAIN, "MulInteger"): "an integer Mul without output scale; no ai.onnx form",
    (MS_DOMAIN, "ReduceSumInteger"): "an integer ReduceSum without scales; no ai.onnx form",
    (MS_DOMAIN, "QuantizeBFP"): "block floating point; ONNX has no such type",
    (MS_DOMAIN, "DequantizeBFP"): "block floating point; ONNX has no such type",
    (MS_DOMAIN, "QMoE"): "a fused mixture of experts with quantized weights; no ai.onnx form",
    (MS_DOMAIN, "MatMulBlockQuantizedFp8Weight"): "a fused float8 weight-only MatMul",
    (MS_DOMAIN, "MatMulBlockQuantizedFp4Weight"): "a fused float4 weight-only MatMul",
    (MS_DOMAIN, "MatMulBnb4"): "FP4 / NF4 weights on bitsandbytes' value tables (not "
    "float4e2m1); no ai.onnx form",
    (MS_DOMAIN, "MatMulFpQ4"): "a pre-packed int4 blob whose layout is MLAS's (ORT 1.15-era "
    "MatMul4BitsQuantizer); no ai.onnx form",
    (MS_DOMAIN, "MatMulNBitsMlp"): "ORT's fused gate / up MatMulNBits pair (with RMSNorm); "
    "unfused, each projection is a MatMulNBits",
    (MS_DOMAIN, "MatMulNBitsQkv"): "ORT's fused q / k / v MatMulNBits triple (with RMSNorm); "
    "unfused, each projection is a MatMulNBits",
}


#: Every row, per (domain, op_type) in ascending since_version.
#: A row of the table: one operator version of one kind of quantized node.
Row = OpVersion | WeightOnlyVersion | QOperatorVersion

TABLE: tuple[Row, ...] = (
    # ai.onnx DequantizeLinear
    _dq(
        10,
        12,
        (),
        x=_Q10,
        scale=_F32,
        output_types=_F32,
        output_from=("FLOAT",),
        granularities=_GRAN_TENSOR,
        scalar_only=True,
    ),
    _dq(13, 18, (_AXIS,), x=_Q10, scale=_F32, output_types=_F32, output_from=("FLOAT",)),
    _dq(19, 20, (_AXIS,), x=_Q19, scale=FLOAT_TYPES, output_from=_FROM_SCALE),
    _dq(21, 22, (_AXIS, _BLOCK), x=_Q21, scale=FLOAT_TYPES, output_from=_FROM_SCALE),
    _dq(23, 23, _DQ_23, x=_Q23, scale=FLOAT_TYPES, output_from=_FROM_DTYPE),
    _dq(
        24,
        24,
        _DQ_23,
        x=_Q23,
        scale=FLOAT_TYPES | _E8M0,
        output_from=_FROM_DTYPE,
        scale_needs_output_dtype=_E8M0,
    ),
    _dq(
        25,
        27,
        _DQ_23,
        x=_Q25,
        scale=FLOAT_TYPES | _E8M0,
        output_from=_FROM_DTYPE,
        scale_needs_output_dtype=_E8M0,
    ),
    _dq(
        28,
        None,
        _DQ_23,
        x=_Q28,
        scale=FLOAT_TYPES | _E8M0,
        output_from=_FROM_DTYPE,
        scale_needs_output_dtype=_E8M0,
    ),
    # ai.onnx QuantizeLinear
    _q(
        10,
        12,
        (),
        x=_F32_I32,
        scale=_F32,
        y=_Q10,
        output_from=_FROM_ZP,
        granularities=_GRAN_TENSOR,
        scalar_only=True,
    ),
    _q(13, 18, (_AXIS,), x=_F32_I32, scale=_F32, y=_Q10, output_from=_FROM_ZP),
    _q(
        19,
        20,
        (_AXIS, _SATURATE),
        x=_FLOAT_I32,
        scale=_FLOAT_I32,
        y=_Q19,
        output_from=_FROM_ZP,
        scale_matches_x=True,
    ),
    _q(
        21,
        22,
        (_AXIS, _SATURATE, _BLOCK, _OUT_DTYPE),
        x=_FLOAT_I32,
        scale=_FLOAT_I32,
        y=_Q21,
        scale_matches_x=True,
    ),
    _q(23, 23, _Q_23, x=_FLOAT_I32, scale=_FLOAT_I32, y=_Q23),
    _q(24, 24, _Q_23, x=_FLOAT_I32, scale=_FLOAT_I32 | _E8M0, y=_Q23),
    _q(25, 27, _Q_23, x=_FLOAT_I32, scale=_FLOAT_I32 | _E8M0, y=_Q25),
    _q(28, None, _Q_23, x=_FLOAT_I32, scale=_FLOAT_I32 | _E8M0, y=_Q28),
    # com.microsoft (ONNX Runtime contrib ops). axis has no default in the schema text
    # (absent: per-tensor), but ORT's kernel applies axis 1 to a 1-D scale.
    OpVersion(
        MS_DOMAIN,
        "DequantizeLinear",
        1,
        None,
        _ints(("axis", None)),
        x_types=_MS_Q | {DT.INT32},
        scale_types=_MS_FLOAT,
        zero_point_types=_MS_Q | {DT.INT32},
        output_types=_MS_FLOAT,
        output_from=_FROM_SCALE,
        granularities=_GRAN_AXIS,
    ),
    OpVersion(
        MS_DOMAIN,
        "QuantizeLinear",
        1,
        None,
        _ints(("axis", None)),
        x_types=_MS_FLOAT,
        scale_types=_MS_FLOAT,
        zero_point_types=_MS_Q,
        output_types=_MS_Q,
        output_from=_FROM_ZP,
        granularities=_GRAN_AXIS,
        scale_matches_x=True,
    ),
    MATMUL_NBITS_1,
    GATHER_BLOCK_QUANTIZED_1,
    *QOPERATOR_ROWS,
)

_BY_OP: dict[tuple[str, str], list[Row]] = {}
for _row in TABLE:
    _BY_OP.setdefault((_row.domain, _row.op_type), []).append(_row)


def normalize_domain(domain: str) -> str:
    """``""`` for the ONNX domain however it is spelled, else ``domain``."""
    return "" if domain in ONNX_DOMAINS else domain


def versions(domain: str, op_type: str) -> list[Row]:
    """Every row of ``op_type`` in ``domain`` ('' or 'ai.onnx' for ONNX), oldest first:
    :class:`OpVersion` for Q/DQ, :class:`WeightOnlyVersion` for the weight-only ops,
    :class:`QOperatorVersion` for the QOperator ones."""
    return list(_BY_OP.get((normalize_domain(domain), op_type), ()))


def qdq_version(domain: str, op_type: str, imported: int | None) -> OpVersion | None:
    """The QuantizeLinear / DequantizeLinear :class:`OpVersion` in force (None: not a Q/DQ
    op, or none at that opset)."""
    row = lookup(domain, op_type, imported)
    return row if isinstance(row, OpVersion) else None


def weight_only(domain: str, op_type: str, imported: int | None) -> WeightOnlyVersion | None:
    """The :class:`WeightOnlyVersion` in force (None: not a weight-only op, or none at
    that opset)."""
    row = lookup(domain, op_type, imported)
    return row if isinstance(row, WeightOnlyVersion) else None


def qoperator(domain: str, op_type: str, imported: int | None) -> QOperatorVersion | None:
    """The :class:`QOperatorVersion` in force (None: not a QOperator / dynamic op, or none
    at that opset)."""
    row = lookup(domain, op_type, imported)
    return row if isinstance(row, QOperatorVersion) else None


def read_at(domain: str, imported: int | None) -> int | None:
    """The version a node of ``domain`` is read at: the imported one, else the one ONNX
    Runtime implies (:data:`IMPLIED_VERSIONS`: com.microsoft 1), else None."""
    return imported if imported is not None else IMPLIED_VERSIONS.get(domain)


@functools.cache  # once per (domain, op, opset), not per node
def lookup(domain: str, op_type: str, imported: int | None) -> Row | None:
    """The version in force when the model imports opset ``imported`` of ``domain``.

    None when the domain is not imported or has no version of the op at that opset
    (ai.onnx below 10, com.microsoft below 1, an unknown op or domain).
    """
    if imported is None:
        return None
    found = None
    for row in versions(domain, op_type):
        if row.since <= imported:
            found = row
    return found


def min_ir_version(dtype: ir.DataType) -> int:
    """The lowest IR version in which ``dtype`` exists (3 for the old types)."""
    return _MIN_IR.get(dtype, 3)


def output_type(
    row: OpVersion,
    *,
    scale_type: ir.DataType | None,
    zero_point_type: ir.DataType | None = None,
    output_dtype: int | None = None,
) -> ir.DataType | None:
    """The element type of the output as ``row`` decides it (None: cannot tell)."""
    for source in row.output_from:
        if source == "zero_point":
            if zero_point_type is not None:
                return zero_point_type
        elif source == "output_dtype":
            if output_dtype:
                return DT(output_dtype)
        elif source == "scale":
            return scale_type
        else:
            return DT.__members__[source]
    return None


@dataclasses.dataclass(frozen=True)
class NodeForm:
    """What a Q/DQ node asks of an operator version: element types, attributes it carries
    (those equal to their default left out), and its granularity.

    ``output_type`` None means "whatever the version derives".
    """

    x_type: ir.DataType
    scale_type: ir.DataType
    zero_point_type: ir.DataType | None = None
    output_type: ir.DataType | None = None
    attributes: tuple[str, ...] = ()
    blocked: bool = False
    per_axis: bool = False


def expression_problems(row: OpVersion, form: NodeForm) -> list[str]:
    """Why a node of this ``form`` cannot be written as ``row`` ([] if it can).

    A requested ``output_type`` that the row cannot derive from the zero point or scale
    counts as expressible when the row has an ``output_dtype`` attribute (a converter may
    add it).
    """
    problems = _operand_type_problems(row, form)
    name, scale_type = row.label, form.scale_type
    unknown = sorted(set(form.attributes) - set(row.attributes))
    if unknown:
        problems.append(f"{name} has no attribute {', '.join(unknown)}")
    if form.blocked and BLOCKED not in row.granularities:
        problems.append(f"{name} has no blocked quantization (block_size)")
    if form.per_axis and PER_AXIS not in row.granularities:
        problems.append(f"{name} has no per-axis quantization")
    if scale_type in row.scale_needs_output_dtype and "output_dtype" not in row.attributes:
        problems.append(f"{name} cannot give a float output for a {scale_type.name} scale")
    output_problem = _output_type_problem(row, form)
    if output_problem is not None:
        problems.append(output_problem)
    return problems


def _operand_type_problems(row: OpVersion, form: NodeForm) -> list[str]:
    """Why ``row`` does not take the form's x, scale and zero point types ([] if it does)."""
    problems: list[str] = []
    name = row.label
    x_type, scale_type, zero_point_type = form.x_type, form.scale_type, form.zero_point_type
    if x_type not in row.x_types:
        problems.append(f"{name} does not take x of type {x_type.name}")
    if scale_type not in row.scale_types:
        problems.append(f"{name} does not take a scale of type {scale_type.name}")
    if row.scale_matches_x and scale_type != x_type:
        problems.append(f"{name} needs the scale type to equal the x type")
    if zero_point_type is not None and zero_point_type not in row.zero_point_types:
        problems.append(f"{name} does not take a zero point of type {zero_point_type.name}")
    if zero_point_type is not None and not row.is_quantize and zero_point_type != x_type:
        problems.append(f"{name} needs the zero point type to equal the x type")
    return problems


def _output_type_problem(row: OpVersion, form: NodeForm) -> str | None:
    """Why ``row`` cannot output the form's ``output_type`` (None: it can, or none asked)."""
    wanted = form.output_type
    if wanted is None:
        return None
    name, zero_point_type = row.label, form.zero_point_type
    derived = output_type(row, scale_type=form.scale_type, zero_point_type=zero_point_type)
    if wanted not in row.output_types:
        return f"{name} cannot output {wanted.name}"
    if derived != wanted and not (
        "output_dtype" in row.attributes and (zero_point_type is None or not row.is_quantize)
    ):
        return f"{name} outputs {derived.name if derived else '?'}, not {wanted.name}"
    return None


def lowest_onnx_opset(op_type: str, form: NodeForm) -> int | None:
    """The lowest ai.onnx opset whose version of ``op_type`` can express the node.

    None when no known version can (e.g. a com.microsoft-only combination).
    """
    for row in versions("", op_type):
        if isinstance(row, OpVersion) and not expression_problems(row, form):
            return row.since
    return None


def com_microsoft_problems(op_type: str, form: NodeForm) -> list[str]:
    """Why the node cannot be a com.microsoft op (``[]``: it can)."""
    row = lookup(MS_DOMAIN, op_type, 1)
    if not isinstance(row, OpVersion):
        return [f"com.microsoft has no {op_type}"]
    return expression_problems(row, form)
