"""The probe's one-node models: every form the runtime tables record, built with onnx.helper
(through the builders of the rules' examples, imported from ``tests/``: this module puts
that folder on ``sys.path``), each with the key qlrewrite gives it.

A case is a model file and the feeds the runner makes for it (name, NumPy dtype, shape):
the runner, in a venv holding only the runtime and NumPy, needs no onnx. Inputs of types
NumPy cannot feed (int4, float8, ...) are initializers instead, and the runner disables
constant folding so the node still runs in the kernel under test.

Keys: ``ir_version=N`` (an Add at opset 7 saved with IR version N), ``<domain> opset=N``
(one node of that domain at that opset, IR 7; for the domains without a node the probe
runs, an ai.onnx Add whose model imports the domain at N), and the node forms of
:func:`qlrewrite.targets.forms.form_of` (read back from the built model, so the probe and the
rules cannot disagree on a key).
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from qlrewrite.io.ir_version import needed_ir_version
from qlrewrite.qdq import node_views
from qlrewrite.rules.registry import CHECKED_KINDS
from qlrewrite.targets.forms import WEIGHT_PATTERN, form_of, pad_pool_key, pattern_key

#: The test-model builders (the rules' examples are built from them) live in tests/.
TESTS = Path(__file__).resolve().parents[2] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import qoperator_models  # noqa: E402  (tests/: the builders of the rules' examples)
from example_models import (  # noqa: E402
    DQ,
    DT,
    MS,
    WEIGHT_OPS,
    Q,
    gather_block_quantized_model,
    matmul_nbits_model,
    pad_pool,
    qdq_matmul_weight,
    qdq_model,
    qdq_weight_op,
)

#: The newest ai.onnx opset and IR version probed (the installed onnx's).
NEWEST_OPSET = onnx.defs.onnx_opset_version()
NEWEST_IR = onnx.IR_VERSION

#: Quantized element types probed in Q/DQ (ai.onnx), oldest first.
QDQ_TYPES = (
    DT.UINT8,
    DT.INT8,
    DT.INT32,
    DT.UINT16,
    DT.INT16,
    DT.FLOAT8E4M3FN,
    DT.FLOAT8E4M3FNUZ,
    DT.FLOAT8E5M2,
    DT.FLOAT8E5M2FNUZ,
    DT.INT4,
    DT.UINT4,
    DT.FLOAT4E2M1,
    DT.INT2,
    DT.UINT2,
)
MS_TYPES = (DT.UINT8, DT.INT8, DT.UINT16, DT.INT16, DT.INT32, DT.INT4, DT.UINT4)
#: Element types NumPy (and so the runner's feeds) can hold.
FEEDABLE = {
    DT.FLOAT: "float32",
    DT.FLOAT16: "float16",
    DT.UINT8: "uint8",
    DT.INT8: "int8",
    DT.UINT16: "uint16",
    DT.INT16: "int16",
    DT.INT32: "int32",
    DT.INT64: "int64",
}


@dataclasses.dataclass
class Case:
    """One probe model: its key, the model, and what the runner feeds it."""

    key: str
    model: onnx.ModelProto
    feeds: list[tuple[str, str, list[int]]] = dataclasses.field(default_factory=list)
    #: Shapes of the one float input "a" at which the runner compares the default
    #: session's output with ORT_DISABLE_ALL's (values in [0, 6), seeded).
    compare: list[list[int]] = dataclasses.field(default_factory=list)
    #: The model the ONNX reference evaluator runs instead of ``model`` (None: ``model``).
    reference: onnx.ModelProto | None = None


def _feeds_of(model: onnx.ModelProto) -> list[tuple[str, str, list[int]]] | None:
    """The graph inputs as (name, NumPy dtype, shape); None when one cannot be fed."""
    feeds = []
    for value in model.graph.input:
        tensor = value.type.tensor_type
        dtype = FEEDABLE.get(DT(tensor.elem_type))
        if dtype is None:
            return None
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        feeds.append((value.name, dtype, shape))
    return feeds


def _as_initializer(model: onnx.ModelProto, name: str) -> None:
    """Graph input ``name`` becomes a zero-filled initializer of its type and shape."""
    value = next(v for v in model.graph.input if v.name == name)
    tensor = value.type.tensor_type
    shape = [d.dim_value or 1 for d in tensor.shape.dim]
    dtype = DT(tensor.elem_type)
    array = np.zeros(shape, dtype=dtype.numpy())
    init = ir.serde.serialize_tensor(ir.Tensor(array, dtype=dtype, name=name))
    model.graph.initializer.append(init)
    model.graph.input.remove(value)


def _case(model: onnx.ModelProto, key: str | None = None) -> Case | None:
    """The case of a one-node model (key from qlrewrite's view when not given); None when
    qlrewrite gives the node no form (an unknown type)."""
    if key is None:
        key = key_of(model)
        if key is None:
            return None
    feeds = _feeds_of(model)
    if feeds is None:
        for value in list(model.graph.input):
            if DT(value.type.tensor_type.elem_type) not in FEEDABLE:
                _as_initializer(model, value.name)
        feeds = _feeds_of(model) or []
    return Case(key, model, feeds)


def key_of(model: onnx.ModelProto, node: str | None = None) -> str | None:
    """The form qlrewrite gives the model's quantized node (``node``: the one of that name)."""
    ir_model = ir.serde.deserialize_model(model)
    for site, views in node_views(ir_model, kinds=CHECKED_KINDS):
        if node is None or site.node.name == node:
            return form_of(views[0])
    return None


def _with_min_ir(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` saved with the lowest IR version its opset and types need."""
    model.ir_version = needed_ir_version(ir.serde.deserialize_model(model))
    return model


def ir_cases() -> Iterator[Case]:
    """An Add at opset 7 under each IR version 3 .. the newest."""
    for version in range(3, NEWEST_IR + 1):
        yield _case(_add_model("", 7, version), f"ir_version={version}")  # type: ignore[misc]


def _add_model(domain: str, opset: int, ir_version: int) -> onnx.ModelProto:
    op = "Gelu" if domain == MS else "Add"
    inputs = ["a"] if domain == MS else ["a", "a"]
    node = helper.make_node(op, inputs, ["y"], domain=domain)
    value = helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2])
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    imports = [helper.make_opsetid("", opset if domain == "" else 13)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    graph = helper.make_graph([node], "g", [value], [out])
    return helper.make_model(graph, opset_imports=imports, ir_version=ir_version)


def opset_cases() -> Iterator[Case]:
    """One ai.onnx Add per opset 7 .. the newest, one com.microsoft Gelu per opset 1 .. 3,
    and an ai.onnx Add importing each of :data:`IMPORT_DOMAINS` at each of its opsets the
    installed onnx knows (IR 7: the IR version is probed on its own)."""
    for opset in range(7, NEWEST_OPSET + 1):
        yield _case(_add_model("", opset, 7), f"ai.onnx opset={opset}")  # type: ignore[misc]
    for opset in (1, 2, 3):
        yield _case(_add_model(MS, opset, 7), f"com.microsoft opset={opset}")  # type: ignore[misc]
    for domain in IMPORT_DOMAINS:
        for opset in range(1, _newest_version(domain) + 1):
            model = _add_model("", 13, 7)
            model.opset_import.append(helper.make_opsetid(domain, opset))
            yield _case(model, f"{domain} opset={opset}")  # type: ignore[misc]


#: The domains whose import alone is probed (ONNX Runtime refuses a model importing a
#: version newer than it knows, used or not: "ai.onnx.ml is till opset 3").
IMPORT_DOMAINS = ("ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training")


def _newest_version(domain: str) -> int:
    """The newest opset of ``domain`` the installed onnx knows."""
    schemas = onnx.defs.get_all_schemas_with_history()
    return max((s.since_version for s in schemas if s.domain == domain), default=1)


#: (x shape, scale shape, attributes) per granularity: per-axis on the last axis (a MatMul
#: weight's N), blocks of 32 along the last axis.
GRANULARITIES = {
    "per-tensor": ((4, 8), (), {}),
    "per-axis": ((4, 8), (8,), {"axis": 1}),
    "blocked": ((4, 64), (4, 2), {"axis": 1, "block_size": 32}),
}


def _qdq(
    op: str, opset: int, domain: str, qtype: DT, *, scale: DT, granularity: str
) -> Case | None:
    x_shape, scale_shape, attrs = GRANULARITIES[granularity]
    x_type = scale if op == Q else qtype
    try:
        model = qdq_model(
            op,
            opset,
            domain=domain,
            x_type=x_type,
            x_shape=x_shape,
            scale_type=scale,
            scale_shape=scale_shape,
            zp_type=qtype,
            zp_shape=scale_shape,
            attrs=attrs,
            out_type=qtype if op == Q else scale,
        )
    except (ValueError, TypeError):  # a type onnx.helper cannot write
        return None
    if domain == MS:  # as ORT's quantizer writes it: IR 7, whatever the types
        model.ir_version = 7
        return _case(model)
    return _case(_with_min_ir(model))


def qdq_cases() -> Iterator[Case]:
    """ai.onnx Q/DQ at each opset 10 .. the newest, each quantized type and granularity, float
    scales (and float16 scales per-tensor from opset 19); com.microsoft Q/DQ at opset 1."""
    forms = itertools.product((Q, DQ), range(10, NEWEST_OPSET + 1), QDQ_TYPES, GRANULARITIES)
    for op, opset, qtype, granularity in forms:
        if op == Q and qtype == DT.INT32:
            continue
        scales = (
            (DT.FLOAT, DT.FLOAT16) if opset >= 19 and granularity == "per-tensor" else (DT.FLOAT,)
        )
        for scale in scales:
            case = _qdq(op, opset, "", qtype, scale=scale, granularity=granularity)
            if case is not None:
                yield case
    for op, qtype, granularity in itertools.product((Q, DQ), MS_TYPES, GRANULARITIES):
        case = _qdq(op, 1, MS, qtype, scale=DT.FLOAT, granularity=granularity)
        if case is not None:
            yield case


def matmul_nbits_cases() -> Iterator[Case]:
    """MatMulNBits: bits 2 / 4 / 8, accuracy_level not written (as older quantizers write
    it; ORT 1.15-1.16 refuse the attribute) or 0 .. 4, zero points none / packed uint8 /
    float, with and without g_idx, float32 and float16 activations (K 64, N 8, block 32);
    at ai.onnx opset 13 and the lowest IR version that allows (7: the releases that load
    no IR 10 still get a verdict on the operator)."""
    forms = itertools.product(
        (2, 4, 8),
        (None, *range(5)),
        (None, "packed", "float"),
        (False, True),
        (DT.FLOAT, DT.FLOAT16),
    )
    for bits, level, zp, g_idx, a_type in forms:
        model = matmul_nbits_model(
            k=64,
            n=8,
            bits=bits,
            block_size=32,
            a_type=a_type,
            a_shape=[2, 64],
            zp=zp,
            g_idx=g_idx,
            attrs={} if level is None else {"accuracy_level": level},
            opset=13,
        )
        case = _case(_with_min_ir(model))
        if case is not None:
            yield case


def gather_block_cases() -> Iterator[Case]:
    """GatherBlockQuantized: packed uint8 (bits 4 and 8), int4 and uint4 data; quantized on
    the last axis or the first; with and without zero points; float32 and float16 scales;
    at ai.onnx opset 13 and the lowest IR version its types allow."""
    datas = (
        (DT.UINT8, 4, (8, 16)),
        (DT.UINT8, 8, (8, 32)),
        (DT.INT4, 4, (8, 32)),
        (DT.UINT4, 4, (8, 32)),
    )
    for (dtype, bits, shape), axis, zp, scale in itertools.product(
        datas, (1, 0), (False, True), (DT.FLOAT, DT.FLOAT16)
    ):
        try:
            model = gather_block_quantized_model(
                data_type=dtype,
                data_shape=shape,
                bits=bits,
                block_size=16,
                quantize_axis=axis,
                scale_type=scale,
                zp=zp,
                opset=13,
            )
        except (ValueError, TypeError):
            continue
        case = _case(_with_min_ir(model))
        if case is not None:
            yield case


#: Per-tensor weight scales and zero points of the QOperator models whose examples are
#: per-channel.
PER_TENSOR_WEIGHTS = {
    "QLinearConv": {"w_scale": np.array(0.01, np.float32), "w_zero_point": np.array(0, np.int8)},
    "ms-QLinearConv": {"w_scale": np.array(0.01, np.float32), "w_zero_point": np.array(0, np.int8)},
    "QLinearMatMul": {"b_scale": np.array(0.01, np.float32), "b_zero_point": np.array(0, np.int8)},
    "QGemm": {"b_scale": np.array(0.01, np.float32), "b_zero_point": np.array(0, np.int8)},
}


#: The QOperator ops ``convert --to qoperator`` writes, probed with int8 activations too.
INT8_ACTIVATIONS = frozenset(
    {
        "QLinearConv",
        "QLinearMatMul",
        "QGemm",
        "QLinearAdd",
        "QLinearMul",
        "QLinearConcat",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearLeakyRelu",
        "QLinearSigmoid",
        "QLinearSoftmax",
    }
)


def _int8_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its uint8 activations and zero points int8 (zero point 128 -> 0):
    every uint8 graph input, output and initializer becomes int8, values shifted by 128."""
    for value in (*model.graph.input, *model.graph.output):
        if value.type.tensor_type.elem_type == onnx.TensorProto.UINT8:
            value.type.tensor_type.elem_type = onnx.TensorProto.INT8
    for index, tensor in enumerate(model.graph.initializer):
        if tensor.data_type == onnx.TensorProto.UINT8:
            shifted = (onnx.numpy_helper.to_array(tensor).astype(np.int16) - 128).astype(np.int8)
            model.graph.initializer[index].CopyFrom(
                onnx.numpy_helper.from_array(shifted, tensor.name)
            )
    return model


def qoperator_cases() -> Iterator[Case]:
    """Every QOperator model of the rules' examples at ai.onnx opset 13 and the newest, plus
    MatMulInteger and ConvInteger (uint8 / int8 inputs, zero points none, per-tensor or per
    channel, as ORT's dynamic quantizer writes them) and DynamicQuantizeLinear."""
    for name, opset in itertools.product(qoperator_models.OPS, (13, 21)):
        case = _case(qoperator_models.build(name, opset=opset))
        if case is not None:
            yield case
        per_tensor = PER_TENSOR_WEIGHTS.get(name)
        if per_tensor is not None:  # the same op with per-tensor weight scale and zero point
            case = _case(qoperator_models.build(name, opset=opset, **per_tensor))
            if case is not None:
                yield case
        variants = [{}, *([per_tensor] if per_tensor else [])]
        for overrides in variants if name in INT8_ACTIVATIONS else ():
            built = qoperator_models.build(name, opset=opset, **overrides)
            case = _case(_int8_activations(built))  # what convert --to qoperator writes
            if case is not None:  # from ORT's int8-activation quantize_static outputs
                yield case
    for a, b, zero_points in itertools.product(
        (DT.UINT8, DT.INT8), (DT.UINT8, DT.INT8), ("none", "per-tensor", "per-channel")
    ):
        shapes = {
            "MatMulInteger": ([2, 4], [4, 3], [2, 3]),
            "ConvInteger": ([1, 2, 4, 4], [3, 2, 3, 3], None),
        }
        for op, (a_shape, b_shape, y_shape) in shapes.items():
            model = _integer_model(op, (a, b), a_shape, b_shape, y_shape, zero_points=zero_points)
            case = _case(model)
            if case is not None:
                yield case
    yield _case(_dynamic_quantize_model())  # type: ignore[misc]


def _signed_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with int8 activations: its uint8 graph inputs and outputs int8, its uint8
    zero points shifted by -128 (the same real values); weights stay as they are."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in [*model.graph.input, *model.graph.output]:
        if value.type.tensor_type.elem_type == onnx.TensorProto.UINT8:
            value.type.tensor_type.elem_type = onnx.TensorProto.INT8
    for index, init in enumerate(model.graph.initializer):
        if "zero_point" in init.name and init.data_type == onnx.TensorProto.UINT8:
            array = onnx.numpy_helper.to_array(init).astype(np.int16) - 128
            shifted = onnx.numpy_helper.from_array(array.astype(np.int8), init.name)
            model.graph.initializer[index].CopyFrom(shifted)
    return model


def _activation_b(model: onnx.ModelProto, b_type: DT) -> onnx.ModelProto:
    """A QLinearMatMul ``model`` whose b is a graph input of ``b_type`` (activation x
    activation), its zero point per-tensor 0."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = model.graph.initializer
    for name in ("b", "b_scale", "b_zero_point"):
        inits.remove(next(i for i in inits if i.name == name))
    inits.extend(
        [
            onnx.numpy_helper.from_array(np.array(0.01, np.float32), "b_scale"),
            onnx.numpy_helper.from_array(np.array(0, b_type.numpy()), "b_zero_point"),
        ]
    )
    model.graph.input.append(helper.make_tensor_value_info("b", int(b_type), [4, 3]))
    return model


def qoperator_activation_cases() -> Iterator[Case]:
    """The QOperator models of :func:`qoperator_cases` with int8 activations (weights
    per-channel and per-tensor), and QLinearMatMul of two activations (uint8 / int8 each),
    at ai.onnx opset 13 and the newest."""
    for name, opset in itertools.product(qoperator_models.OPS, (13, 21)):
        for overrides in ({}, PER_TENSOR_WEIGHTS.get(name)):
            if overrides is None:
                continue
            case = _case(
                _signed_activations(qoperator_models.build(name, opset=opset, **overrides))
            )
            if case is not None:
                yield case
        if name != "QLinearMatMul":
            continue
        for signed, b_type in itertools.product((False, True), (DT.UINT8, DT.INT8)):
            model = _activation_b(qoperator_models.build(name, opset=opset), b_type)
            case = _case(_signed_activations(model) if signed else model)
            if case is not None:
                yield case


def _integer_model(
    op: str, types: tuple[DT, DT], *shapes: list[int] | None, zero_points: str
) -> onnx.ModelProto:
    """MatMulInteger / ConvInteger of an input A and a constant B, their zero points
    "none", "per-tensor" (both scalars) or "per-channel" (B's per output channel: the last
    axis of a MatMul weight, the first of a Conv weight)."""
    (a, b), (a_shape, b_shape, y_shape) = types, shapes
    weight = np.zeros(b_shape, dtype=b.numpy())  # type: ignore[arg-type]
    inits = [ir.serde.serialize_tensor(ir.Tensor(weight, dtype=b, name="B"))]
    names = ["A", "B"]
    if zero_points != "none":
        channels = b_shape[-1 if op == "MatMulInteger" else 0]  # type: ignore[index]
        b_zero = np.zeros([channels] if zero_points == "per-channel" else [], b.numpy())
        for name, dtype, array in (("A_zp", a, np.zeros([], a.numpy())), ("B_zp", b, b_zero)):
            inits.append(ir.serde.serialize_tensor(ir.Tensor(array, dtype=dtype, name=name)))
            names.append(name)
    node = helper.make_node(op, names, ["Y"], name="node")
    inputs = [helper.make_tensor_value_info("A", int(a), a_shape)]
    out = helper.make_tensor_value_info("Y", onnx.TensorProto.INT32, y_shape)
    graph = helper.make_graph([node], "g", inputs, [out], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _dynamic_quantize_model() -> onnx.ModelProto:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], name="node")
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])]
    outs = [
        helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [2, 3]),
        helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, []),
        helper.make_tensor_value_info("z", onnx.TensorProto.UINT8, []),
    ]
    graph = helper.make_graph([node], "g", inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _weight_pattern(qtype: DT, granularity: str, opset: int) -> onnx.ModelProto:
    """DQ(constant [64, 8] weight) -> MatMul (the QDQ MatMul patterns, whose activation is
    quantized too, are :func:`example_models.qdq_matmul_weight`'s)."""
    scale_shape, attrs = {
        "per-tensor": ((), {}),
        "per-axis": ((8,), {"axis": 1}),
        "blocked": ((2, 8), {"axis": 0, "block_size": 32}),
    }[granularity]
    weight = ir.serde.serialize_tensor(
        ir.Tensor(np.ones((64, 8), dtype=qtype.numpy()), dtype=qtype, name="w")
    )
    values = np.full(scale_shape or (), 0.01, np.float32).ravel().tolist()
    scale = helper.make_tensor("s", onnx.TensorProto.FLOAT, scale_shape, values)
    zero = ir.serde.serialize_tensor(
        ir.Tensor(np.zeros(scale_shape, dtype=qtype.numpy()), dtype=qtype, name="z")
    )
    nodes = [
        helper.make_node(DQ, ["w", "s", "z"], ["wf"], name="dq", **attrs),
        helper.make_node("MatMul", ["a", "wf"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
        initializer=[weight, scale, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return _with_min_ir(model)


def weight_pattern_cases() -> Iterator[Case]:
    """DQ(constant weight) -> MatMul for each weight type and granularity, at opset 21 (at
    25 for the 2-bit and float4 types, which came with it)."""
    weights = (
        DT.UINT8,
        DT.INT8,
        DT.UINT4,
        DT.INT4,
        DT.UINT16,
        DT.INT16,
        DT.FLOAT8E4M3FN,
        DT.FLOAT8E5M2,
        DT.INT2,
        DT.UINT2,
        DT.FLOAT4E2M1,
    )
    for qtype, granularity in itertools.product(weights, GRANULARITIES):
        opset = 25 if qtype in (DT.INT2, DT.UINT2, DT.FLOAT4E2M1) else 21
        try:
            model = _weight_pattern(qtype, granularity, opset)
        except (ValueError, TypeError):
            continue
        form = key_of(model, "dq")
        if form is not None:
            yield Case(WEIGHT_PATTERN + form, model, _feeds_of(model) or [])


def _pattern_key_of(model: onnx.ModelProto) -> str | None:
    """The pattern key qlrewrite gives the weight DQ "dq" of the model and its MatMul."""
    ir_model = ir.serde.deserialize_model(model)
    for site, views in node_views(ir_model, kinds=CHECKED_KINDS):
        if site.node.name == "dq":
            matmul = site.node.outputs[0].consumers()[0]
            return pattern_key(views[0], matmul)
    return None


#: The blocked weight layouts probed (weight [64, 16]): blocks along K (axis 0) of 16
#: (4 blocks) or 64 (one), along N (axis 1) of 8 (2 blocks) or 16 (one); each with and
#: without zero point, its MatMul's output quantized (QLinearMatMul) or float
#: (MatMulIntegerToFloat).
BLOCK_LAYOUTS = tuple(
    itertools.product(
        (("K", 16), ("K", 64), ("N", 8), ("N", 16)), (True, False), ("quantized", "float")
    )
)


def _compared(model: onnx.ModelProto, scale_rows: int) -> Case | None:
    """The case of a QDQ MatMul pattern, compared at two activation shapes: as many rows as
    the weight's scale has (where a scale misread as per-column still broadcasts) and 3."""
    key = _pattern_key_of(model)
    if key is None:
        return None
    shapes = [[rows, 64] for rows in dict.fromkeys((scale_rows, 3))]
    return Case(key, model, [("a", "float32", shapes[0])], compare=shapes)


def qdq_pattern_cases() -> Iterator[Case]:
    """The QDQ MatMul of ORT's quantizer at opset 21: 8- and 16-bit activations, 8- and
    4-bit weights per-tensor and per-axis (zero point given, output quantized; the 8-bit
    ones at opset 13 too), and blocked in each of :data:`BLOCK_LAYOUTS`; every one compared
    with ORT_DISABLE_ALL's output."""
    activations = (DT.UINT8, DT.INT8, DT.UINT16, DT.INT16)
    weights = (DT.UINT8, DT.INT8, DT.INT4, DT.UINT4)
    for act, weight in itertools.product(activations, weights):
        for granularity in ("per-tensor", "per-axis"):
            case = _compared(qdq_matmul_weight(act, weight, granularity), 2)
            if case is not None:
                yield case
    for act, weight, granularity in itertools.product(
        activations[:2], weights[:2], ("per-tensor", "per-axis")
    ):  # 8-bit at opset 13 (IR 7): a verdict for the releases that load no IR 10
        case = _compared(qdq_matmul_weight(act, weight, granularity, opset=13), 2)
        if case is not None:
            yield case
    for act, weight in itertools.product(activations, weights):
        for (along, block), zero_point, output in BLOCK_LAYOUTS:
            model = qdq_matmul_weight(
                act,
                weight,
                "blocked",
                along=along,
                block=block,
                zero_point=zero_point,
                output=output,
            )
            case = _compared(model, 64 // block if along == "K" else 64)
            if case is not None:
                yield case


#: (granularity, axis, zero points) of the weight-operator patterns every pair of types is
#: probed with (the rest of the product is probed for the first pair only: see
#: :func:`weight_op_cases`); blocked forms from opset 21.
CORE_WEIGHT_FORMS = (
    ("per-tensor", 0, "equal"),
    ("per-axis", 0, "equal"),
    ("per-axis", 0, "differ"),
    ("per-axis", 1, "equal"),
    ("blocked", 0, "equal"),
    ("blocked", 1, "equal"),
)
#: (activation, weight) types of the weight-operator patterns per opset; the first pair is
#: probed with every form, the others with :data:`CORE_WEIGHT_FORMS`.
WEIGHT_OP_TYPES = {
    13: ((DT.UINT8, DT.INT8), (DT.INT8, DT.INT8), (DT.UINT8, DT.UINT8)),
    21: (
        (DT.UINT8, DT.INT8),
        (DT.INT8, DT.INT8),
        (DT.UINT16, DT.INT8),
        (DT.UINT16, DT.INT16),
        (DT.UINT8, DT.INT4),
    ),
}


def _all_weight_forms(rank: int, opset: int) -> Iterator[tuple[str, int, str]]:
    """Every (granularity, axis, zero points): per-tensor, per-axis on every axis, blocked
    on the first two (opset 21), zero points equal, differing and absent."""
    yield from (("per-tensor", 0, zp) for zp in ("equal", "none"))
    zero_points = ("equal", "differ", "none")
    yield from itertools.product(("per-axis",), range(rank), zero_points)
    if opset >= 21:
        yield from itertools.product(("blocked",), (0, 1), zero_points)


def _weight_op_case(
    op: str,
    types: tuple[DT, DT],
    form: tuple[str, int, str],
    *,
    opset: int,
    trans_b: int,
    output: str = "quantized",
    activation_zero: int = 0,
) -> Case | None:
    """The case of one weight-operator pattern (None: blocked below opset 21, or no key)."""
    (act, weight), (granularity, axis, zero_points) = types, form
    if granularity == "blocked" and opset < 21:
        return None
    shape = WEIGHT_OPS[op][1]
    shape = shape[::-1] if trans_b else shape
    model = qdq_weight_op(
        op,
        act,
        weight,
        granularity,
        axis=axis,
        block=max(1, shape[axis] // 2),
        zero_points=zero_points,
        trans_b=trans_b,
        opset=opset,
        output=output,
        activation_zero=activation_zero,
    )
    key = _pattern_key_of(model)
    if key is None:
        return None
    a_shape = [3 if d == "rows" else d for d in WEIGHT_OPS[op][0]]
    return Case(key, model, [("a", "float32", a_shape)], compare=[a_shape])


def weight_op_cases() -> Iterator[Case]:
    """The QDQ Conv, ConvTranspose and Gemm (transB 0 and 1) of ORT's quantizer
    (:func:`example_models.qdq_weight_op`), output quantized, at opset 13 and 21, every one
    compared with ORT_DISABLE_ALL's output. The type x form product is sampled: the first
    pair of :data:`WEIGHT_OP_TYPES` (uint8 activation, int8 weight) with every form of
    :func:`_all_weight_forms`, the other pairs with :data:`CORE_WEIGHT_FORMS`;
    Gemm with transB 0 and 1 for the first pair, transB 1 (as ORT's quantizer writes it)
    for the others; ConvTranspose with the core forms of the first pair only."""
    for op, opset in itertools.product(("Conv", "Gemm", "ConvTranspose"), (13, 21)):
        rank = len(WEIGHT_OPS[op][1])
        pairs = WEIGHT_OP_TYPES[opset][:1] if op == "ConvTranspose" else WEIGHT_OP_TYPES[opset]
        for index, (act, weight) in enumerate(pairs):
            forms = (
                _all_weight_forms(rank, opset)
                if index == 0 and op != "ConvTranspose"
                else CORE_WEIGHT_FORMS
            )
            trans = ((0, 1) if index == 0 else (1,)) if op == "Gemm" else (0,)
            for form, trans_b in itertools.product(forms, trans):
                case = _weight_op_case(op, (act, weight), form, opset=opset, trans_b=trans_b)
                if case is not None:
                    yield case
    yield from other_opset_cases()
    yield from contrib_conv_cases()


#: The other opsets a user imports the weight-operator patterns at (opset 10: per tensor
#: only, DequantizeLinear had no axis).
OTHER_OPSETS = (10, 19, 23)


#: The ConvTranspose weight forms of :func:`conv_transpose_cases`: per tensor, per axis on
#: axis 0 (C_in) and 1 (C_out / group: the output channel), zero points equal or differing.
CONV_TRANSPOSE_FORMS = (
    ("per-tensor", 0, "equal"),
    ("per-axis", 0, "equal"),
    ("per-axis", 0, "differ"),
    ("per-axis", 1, "equal"),
    ("per-axis", 1, "differ"),
)


def conv_transpose_cases() -> Iterator[Case]:
    """The QDQ ConvTranspose of :func:`example_models.qdq_weight_op` with uint8 / int8
    activations at opset 13 and uint8 / int8 / uint16 / int16 at 21, int8 / uint8 weights,
    each form of :data:`CONV_TRANSPOSE_FORMS` (the uint8 x int8 ones :func:`weight_op_cases`
    probed keep their first measurement)."""
    activations = {13: (DT.UINT8, DT.INT8), 21: (DT.UINT8, DT.INT8, DT.UINT16, DT.INT16)}
    for opset, acts in activations.items():
        combos = itertools.product(acts, (DT.INT8, DT.UINT8), CONV_TRANSPOSE_FORMS)
        for act, weight, form in combos:
            case = _weight_op_case("ConvTranspose", (act, weight), form, opset=opset, trans_b=0)
            if case is not None:
                yield case
    yield from _nonzero_activation_conv_transpose()


#: A zero point other than 0 per 8-bit activation type (inputs in [0, 6) stay in range).
NONZERO_ACTIVATION = {DT.UINT8: 128, DT.INT8: -128}


def _nonzero_activation_conv_transpose() -> Iterator[Case]:
    """The 8-bit ConvTranspose forms of :func:`conv_transpose_cases` with the activation's
    zero point not 0 (what ORT's quantizer writes for inputs of both signs)."""
    for opset, (act, zero) in itertools.product((13, 21), NONZERO_ACTIVATION.items()):
        combos = itertools.product((DT.INT8, DT.UINT8), CONV_TRANSPOSE_FORMS)
        for weight, form in combos:
            case = _weight_op_case(
                "ConvTranspose",
                (act, weight),
                form,
                opset=opset,
                trans_b=0,
                activation_zero=zero,
            )
            if case is not None:
                yield case


def other_opset_cases() -> Iterator[Case]:
    """The QDQ Conv, Gemm (transB 1) and MatMul of uint8 activations and int8 weights, per
    tensor and per channel on the output axis, at each of :data:`OTHER_OPSETS` (the DQ's
    opset is part of the key: each is looked up at its own; no Gemm at 10, whose C input
    is required there and the pattern has none)."""
    for opset in OTHER_OPSETS:
        forms = [("per-tensor", 0, "equal")]
        if opset > 10:
            forms.append(("per-axis", 0, "equal"))
        ops = ("Conv",) if opset == 10 else ("Conv", "Gemm")  # Gemm-9's C is required
        for op, form in itertools.product(ops, forms):
            trans_b = 1 if op == "Gemm" else 0
            case = _weight_op_case(op, (DT.UINT8, DT.INT8), form, opset=opset, trans_b=trans_b)
            if case is not None:
                yield case
        for granularity in [f for f, _, _ in forms]:
            model = qdq_matmul_weight(DT.UINT8, DT.INT8, granularity, opset=opset)
            if opset == 10:
                _per_tensor_only(model)
            case = _compared(model, 2)
            if case is not None:
                yield case


def _per_tensor_only(model: onnx.ModelProto) -> None:
    """Drop the axis attributes a per-tensor Q/DQ carries (opset 10 has none)."""
    for node in model.graph.node:
        if node.op_type in (Q, DQ):
            kept = [a for a in node.attribute if a.name != "axis"]
            del node.attribute[:]
            node.attribute.extend(kept)


def _in_contrib_domain(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every Q/DQ of ``model`` moved to com.microsoft (opset 1, IR 7), as ORT's quantizer
    writes them with ``UseQDQContribOps``."""
    for node in model.graph.node:
        if node.op_type in (Q, DQ):
            node.domain = MS
    model.opset_import.append(helper.make_opsetid(MS, 1))
    model.ir_version = 7
    return model


def contrib_conv_cases() -> Iterator[Case]:
    """The QDQ Conv and Gemm (transB 1) with com.microsoft Q/DQ: uint8 x int8, uint16 x
    int16 and int16 x int16, per tensor and per channel on the output axis, at ai.onnx 13."""
    pairs = ((DT.UINT8, DT.INT8), (DT.UINT16, DT.INT16), (DT.INT16, DT.INT16))
    forms = (("per-tensor", 0, "equal"), ("per-axis", 0, "equal"))
    combos = itertools.product(("Conv", "Gemm"), pairs, forms)
    for op, pair, (granularity, axis, zero_points) in combos:
        trans_b = 1 if op == "Gemm" else 0
        model = qdq_weight_op(
            op, *pair, granularity, axis=axis, zero_points=zero_points, trans_b=trans_b, opset=13
        )
        model = _in_contrib_domain(model)
        key = _pattern_key_of(model)
        if key is not None:
            a_shape = [3 if d == "rows" else d for d in WEIGHT_OPS[op][0]]
            yield Case(key, model, [("a", "float32", a_shape)], compare=[a_shape])


def float8_pattern_cases() -> Iterator[Case]:
    """The float8 QDQ MatMul (activation and weight of one float8 type, per-tensor and
    per-axis, zero points 0, output float: a float8 output's rounding step is up to a
    quarter of a value) at opset 21, compared with ORT_DISABLE_ALL's output and the
    reference."""
    types = (DT.FLOAT8E4M3FN, DT.FLOAT8E5M2)
    for dtype, granularity in itertools.product(types, ("per-tensor", "per-axis")):
        model = qdq_matmul_weight(dtype, dtype, granularity, output="float")
        case = _compared(model, 2)
        if case is not None:
            yield case


def float8_quantized_output_cases() -> Iterator[Case]:
    """The float8 QDQ MatMul of :func:`float8_pattern_cases` with its output quantized again
    (whether ORT loads and runs it; a float8 output differs by its rounding step)."""
    types = (DT.FLOAT8E4M3FN, DT.FLOAT8E5M2)
    for dtype, granularity in itertools.product(types, ("per-tensor", "per-axis")):
        case = _compared(qdq_matmul_weight(dtype, dtype, granularity), 2)
        if case is not None:
            yield case


#: (activation, weight) types of the weight patterns whose output is float.
FLOAT_OUTPUT_TYPES = ((DT.UINT8, DT.INT8), (DT.INT8, DT.INT8))
#: Per weight operator, the axis of its output channels in the weight (Gemm with transB 1).
OUTPUT_AXIS = {"Conv": 0, "Gemm": 0, "ConvTranspose": 1}


def float_output_cases() -> Iterator[Case]:
    """The QDQ Conv, ConvTranspose, Gemm (transB 1) and MatMul whose output is float (not
    quantized again: NNCF writes Q/DQ on an op's inputs only; ORT fuses MatMul into
    MatMulIntegerToFloat, the others into nothing): :data:`FLOAT_OUTPUT_TYPES`, per tensor
    and per channel on the output axis (zero points equal and differing), at opset 13 and
    21, compared with ORT_DISABLE_ALL's output."""
    for opset, types in itertools.product((13, 21), FLOAT_OUTPUT_TYPES):
        for op, axis in OUTPUT_AXIS.items():
            forms = (("per-tensor", 0, "equal"), ("per-axis", axis, "equal"))
            for form in (*forms, ("per-axis", axis, "differ")):
                trans_b = 1 if op == "Gemm" else 0
                case = _weight_op_case(
                    op, types, form, opset=opset, trans_b=trans_b, output="float"
                )
                if case is not None:
                    yield case
        for granularity in ("per-tensor", "per-axis"):
            model = qdq_matmul_weight(*types, granularity, opset=opset, output="float")
            case = _compared(model, 2)
            if case is not None:
                yield case


def pad_pool_cases() -> Iterator[Case]:
    """The Pad -> AveragePool pair (:func:`example_models.pad_pool`), the padding counted and
    not, the Pad's data float or dequantized (zero point 128 and 0), at each ai.onnx opset
    from 11 (Pad's inputs) to the newest, compared with ORT_DISABLE_ALL's output and the
    reference."""
    inputs = ({"quantized": False}, {"quantized": True}, {"quantized": True, "zero": 0})
    opsets = range(11, NEWEST_OPSET + 1)
    for opset, counted, given in itertools.product(opsets, (0, 1), inputs):
        model = pad_pool(counted, opset=opset, **given)
        ir_model = ir.serde.deserialize_model(model)
        pool = next(n for n in ir_model.graph if n.op_type == "AveragePool")
        key = pad_pool_key(pool, opset)
        if key is not None:
            yield Case(key, model, [("a", "float32", [1, 4, 6, 6])], compare=[[1, 4, 6, 6]])


def all_cases() -> Iterator[Case]:
    """Every case, IR and opset first."""
    from families import family_cases  # (they build on this module's Case)
    from qoperator_values import qoperator_value_cases

    for family in (
        ir_cases,
        opset_cases,
        qdq_cases,
        matmul_nbits_cases,
        gather_block_cases,
        qoperator_cases,
        weight_pattern_cases,
        qdq_pattern_cases,
        weight_op_cases,
        float8_pattern_cases,
        family_cases,
        qoperator_activation_cases,
        float_output_cases,  # later: the earlier cases keep their indices
        float8_quantized_output_cases,
        pad_pool_cases,
        qoperator_value_cases,
        conv_transpose_cases,
    ):
        yield from family()
