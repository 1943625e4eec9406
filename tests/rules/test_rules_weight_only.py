"""The check rules of com.microsoft MatMulNBits / GatherBlockQuantized: each fires on a
model that breaks it and stays silent on one that keeps it, and ONNX Runtime agrees:
every good model loads and runs, every model breaking an error rule fails to load or run
(the few where ORT is more lenient than its schema are strict xfails, with the reason)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nbits_models import DT, gather_block_quantized_model, matmul_nbits_model, ort_runs
from qdq_models import load_ir

from qlrewrite.checking.checker import check_model
from qlrewrite.rules import RULES

MM = "MatMulNBits"
GBQ = "GatherBlockQuantized"


def _inputs(count: int) -> Callable[[onnx.ModelProto], None]:
    def cut(proto: onnx.ModelProto) -> None:
        del proto.graph.node[0].input[count:]

    return cut


def _empty_input(index: int) -> Callable[[onnx.ModelProto], None]:
    def empty(proto: onnx.ModelProto) -> None:
        proto.graph.node[0].input[index] = ""

    return empty


def _second_output(proto: onnx.ModelProto) -> None:
    proto.graph.node[0].output.append("extra")


def _float_attr(name: str, value: float) -> Callable[[onnx.ModelProto], None]:
    def change(proto: onnx.ModelProto) -> None:
        node = proto.graph.node[0]
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend([*kept, onnx.helper.make_attribute(name, value)])

    return change


@dataclasses.dataclass(frozen=True)
class Case:
    code: str
    label: str
    op: str
    bad: dict
    good: dict = dataclasses.field(default_factory=dict)
    bad_post: Callable[[onnx.ModelProto], None] | None = None
    #: Why ONNX Runtime runs the bad model although the rule says error (None: it fails).
    ort_lenient: str | None = None

    def model(self, which: str) -> onnx.ModelProto:
        build = matmul_nbits_model if self.op == MM else gather_block_quantized_model
        proto = build(**(self.bad if which == "bad" else self.good))
        if which == "bad" and self.bad_post is not None:
            self.bad_post(proto)
        return proto


_U8_B8 = {"bits": 8, "data_shape": (8, 32)}
_INT4 = {"data_type": DT.INT4, "data_shape": (8, 32)}
_FP8 = {"data_type": DT.FLOAT8E4M3FN, "data_shape": (8, 32), "bits": None}

CASES = [
    # structure, shared with Q/DQ
    Case("QL102", "two-outputs", MM, {}, bad_post=_second_output),
    Case("QL103", "no-com-microsoft-import", MM, {"ms_opset": None}),
    Case("QL103", "no-com-microsoft-import", GBQ, {"ms_opset": None}),
    Case("QL104", "com-microsoft-0", MM, {"ms_opset": 0}),
    Case("QL105", "too-few-inputs", MM, {}, bad_post=_inputs(2)),
    Case("QL105", "too-many-inputs", MM, {"bias": True, "extra_inputs": 1}, {"bias": True}),
    Case("QL105", "empty-scales", GBQ, {}, bad_post=_empty_input(2)),
    Case("QL201", "unknown-attribute", MM, {"attrs": {"axis": 1}}),
    Case("QL201", "unknown-attribute", GBQ, {"attrs": {"axis": 0}}),
    Case("QL202", "float-bits", MM, {}, bad_post=_float_attr("bits", 4.0)),
    Case("QL203", "no-block-size", MM, {"drop_attrs": ["block_size"]}),
    Case("QL203", "no-k", MM, {"drop_attrs": ["K"]}),
    Case("QL204", "bits-3", MM, {"bits": 3, "b_shape": (8, 2, 6)}, {"bits": 2}),
    Case("QL204", "bits-5", MM, {"bits": 5, "b_shape": (8, 2, 10)}, {"bits": 8}),
    Case("QL204", "uint8-bits-3", GBQ, {"bits": 3}, {"bits": 2, "data_shape": (8, 8)}),
    Case("QL204", "int4-bits-8", GBQ, {**_INT4, "bits": 8}, _INT4),
    Case("QL205", "block-24", MM, {"block_size": 24}, {"block_size": 32}),
    Case("QL205", "block-8", MM, {"block_size": 8, "b_shape": (8, 4, 4), "scale_shape": (8, 4)}),
    Case("QL205", "block-0", GBQ, {"block_size": 0}, {**_FP8, "block_size": 0}),
    Case("QL205", "block-negative", GBQ, {"block_size": -16}),
    Case(
        "QL206",
        "accuracy-7",
        MM,
        {"attrs": {"accuracy_level": 7}},
        {"attrs": {"accuracy_level": 4}},
        ort_lenient="ORT's CPU kernel clamps accuracy_level into 0-4 (the schema defines 0-4)",
    ),
    Case("QL207", "n-negative", MM, {"n": -8, "b_shape": (8, 2, 8), "scale_shape": (8, 2)}),
    # types
    Case("QL310", "b-int8", MM, {"b_type": DT.INT8}),
    Case("QL310", "g-idx-int64", MM, {"g_idx": True, "g_idx_type": DT.INT64}, {"g_idx": True}),
    Case("QL310", "zero-point-int8", MM, {"zp": "float", "zp_type": DT.INT8}, {"zp": "float"}),
    Case("QL310", "data-int8", GBQ, {"data_type": DT.INT8}),
    Case("QL310", "indices-float", GBQ, {"indices_type": DT.FLOAT}, {"indices_type": DT.INT32}),
    Case(
        "QL311",
        "scales-float16",
        MM,
        {"scale_type": DT.FLOAT16},
        {"scale_type": DT.FLOAT16, "a_type": DT.FLOAT16},
    ),
    Case("QL311", "bias-float16", MM, {"bias": True, "bias_type": DT.FLOAT16}, {"bias": True}),
    Case(
        "QL311",
        "zero-point-uint4-int4-data",
        GBQ,
        {**_INT4, "zp": True, "zp_type": DT.UINT4},
        {**_INT4, "zp": True},
    ),
    Case(
        "QL312", "zero-point-float16", MM, {"zp": "float", "zp_type": DT.FLOAT16}, {"zp": "float"}
    ),
    Case("QL313", "float8-zero-point", GBQ, {**_FP8, "zp": True}, _FP8),
    # shapes
    Case("QL420", "a-last-dim", MM, {"a_shape": [2, 16]}, {"a_shape": [2, 3, 32]}),
    Case("QL421", "b-rows", MM, {"b_shape": (7, 2, 8)}),
    Case("QL421", "b-blob", MM, {"b_shape": (8, 2, 4)}, {"k": 40}),
    Case("QL421", "b-2d", MM, {"b_shape": (8, 16)}),
    Case("QL422", "scales-blocks", MM, {"scale_shape": (8, 3)}, {"scale_shape": (16,)}),
    Case("QL422", "scales-3d", MM, {"scale_shape": (8, 2, 1)}),
    Case(
        "QL423",
        "zero-point-unpacked-uint8",
        MM,
        {"k": 64, "zp": "float", "zp_type": DT.UINT8},
        {"k": 64, "zp": "packed"},
    ),
    Case(
        "QL423",
        "zero-point-packed-1d",
        MM,
        {"zp": "packed1d", "zp_shape": (16,)},
        {"zp": "packed1d"},
    ),
    Case("QL423", "zero-point-float", MM, {"zp": "float", "zp_shape": (8, 3)}, {"zp": "float1d"}),
    Case(
        "QL427",
        "zero-point-one-stream",
        MM,
        {"k": 48, "zp": "packed1d", "zp_shape": (12,)},
        {"k": 48, "zp": "packed1d"},
    ),
    Case(
        "QL424",
        "g-idx-short",
        MM,
        {"g_idx": True, "g_idx_shape": (31,)},
        {"k": 40, "g_idx": True, "g_idx_shape": (48,)},
    ),
    Case("QL425", "bias-2d", MM, {"bias": True, "bias_shape": (1, 8)}, {"bias": True}),
    Case("QL430", "data-1d", GBQ, {"data_shape": (16,), "gather_axis": 0, "quantize_axis": 0}),
    Case("QL431", "gather-axis-out-of-range", GBQ, {"gather_axis": 2}, {"gather_axis": -2}),
    Case(
        "QL431",
        "uint8-gather-axis-1",
        GBQ,
        {"gather_axis": 1, "quantize_axis": 0, "data_shape": (32, 8)},
        {**_INT4, "gather_axis": 1, "quantize_axis": 0, "data_shape": (32, 8)},
    ),
    Case(
        "QL431",
        "uint8-quantize-axis-0",
        GBQ,
        {**_U8_B8, "gather_axis": 0, "quantize_axis": 0},
        {**_U8_B8, "quantize_axis": -1},
    ),
    Case("QL432", "scales-blocks", GBQ, {"scale_shape": (8, 3)}, {"zp": True}),
    Case(
        "QL432",
        "scales-rows",
        GBQ,
        {**_INT4, "scale_shape": (1, 2)},
        {**_FP8, "scale_shape": (1, 2)},
    ),
    Case("QL432", "scales-rank", GBQ, {"scale_shape": (16,)}),
    Case(
        "QL433",
        "uint8-zero-point-unpacked",
        GBQ,
        {"zp": True, "zp_shape": (8, 2)},
        {"bits": 2, "data_shape": (8, 8), "zp": True},
    ),
    Case(
        "QL433",
        "int4-zero-point",
        GBQ,
        {**_INT4, "zp": True, "zp_shape": (8, 1)},
        {**_INT4, "data_shape": (8, 40), "zp": True},
    ),
    # values, runtime support
    Case(
        "QL510",
        "g-idx-out-of-range",
        MM,
        {"g_idx": True, "g_idx_values": [0] * 31 + [2]},
        {"g_idx": True},
    ),
    Case("QL601", "int4-data-ir-9", GBQ, {**_INT4, "ir_version": 9}, _INT4),
    Case(
        "QL606",
        "block-512",
        MM,
        {"k": 512, "block_size": 512, "a_shape": [2, 512]},
        {"k": 512, "block_size": 256, "a_shape": [2, 512]},
    ),
    Case(
        "QL606",
        "bits-8-float-zero-point",
        MM,
        {"bits": 8, "zp": "float"},
        {"bits": 8, "zp": "packed"},
    ),
    Case("QL606", "bits-8-g-idx", MM, {"bits": 8, "g_idx": True}, {"bits": 4, "g_idx": True}),
    Case(
        "QL606",
        "bits-2-float-zero-point-g-idx",
        MM,
        {"bits": 2, "zp": "float", "g_idx": True},
        {"bits": 2, "zp": "packed", "g_idx": True},
    ),
    Case("QL606", "bfloat16", MM, {"a_type": DT.BFLOAT16}, {"a_type": DT.FLOAT16}),
    Case("QL606", "bfloat16-scales", GBQ, {"scale_type": DT.BFLOAT16}, {"scale_type": DT.FLOAT16}),
]

#: Codes whose rules apply to the weight-only ops (test_rules_cases checks the Q/DQ ones).
CODES = {case.code for case in CASES}
PARAMS = [pytest.param(case, id=f"{case.code}-{case.op}-{case.label}") for case in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_rule_fires_on_bad_and_not_on_good(case: Case) -> None:
    report = check_model(load_ir(case.model("bad")))
    hits = [f for f in report.findings if f.rule == case.code]
    assert hits, f"{case.code} silent on bad model: {report.findings}"
    for finding in hits:
        assert finding.severity == RULES[case.code].severity
        assert finding.op_type == case.op and finding.domain == "com.microsoft"
        assert finding.graph == "main" and finding.hint and finding.node in finding.message
    good = case.model("good")
    good_report = check_model(load_ir(good))
    assert not good_report.findings, good_report.findings
    onnx.checker.check_model(good, full_check=True)


# --------------------------------------------------------------------------- ORT's verdict

pytest.importorskip("onnxruntime")


def _verdict_params() -> list[Any]:
    params = []
    for case in CASES:
        name = f"{case.code}-{case.op}-{case.label}"
        params.append(pytest.param(case, "good", id=f"{name}-good"))
        marks = []
        if case.ort_lenient:
            marks = [pytest.mark.xfail(reason=case.ort_lenient, strict=True)]
        params.append(pytest.param(case, "bad", id=f"{name}-bad", marks=marks))
    return params


#: Warning rules whose bad model ORT still runs (a portability warning, not a failure).
RUNS_DESPITE_WARNING = {"QL103", "QL312", "QL601"}


@pytest.mark.parametrize(("case", "which"), _verdict_params())
def test_ort_agrees(case: Case, which: str) -> None:
    """Good models run in ORT; a model breaking an error rule (or QL606, which predicts
    exactly this) fails to load or run there."""
    runs = ort_runs(case.model(which))
    if which == "good" or case.code in RUNS_DESPITE_WARNING:
        assert runs
    else:
        assert not runs


def test_prepacking_hides_wrong_b_shape() -> None:
    """ORT 1.31 with weight prepacking (its default) runs a float16 MatMulNBits whose B is
    far smaller than K and N say (reading past it); without prepacking its input check
    refuses it. check reports it statically."""
    proto = matmul_nbits_model(
        a_type=DT.FLOAT16,
        k=4096,
        n=256,
        a_shape=[1, 4096],
        b_shape=(1, 1, 8),
        scale_shape=(256, 256),
    )
    assert ort_runs(proto, prepack=True)
    assert not ort_runs(proto)
    assert [f.rule for f in check_model(load_ir(proto)).errors] == ["QL421"]


# --------------------------------------------------------------------------- random nodes

#: Codes whose error ORT does not enforce (see the cases' ort_lenient).
ORT_LENIENT = {"QL206"}


def _nudge(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape``, or (sometimes) one dim off by one, or one dim dropped."""
    kind = draw(st.sampled_from(["same"] * 6 + ["off", "drop"]))
    if kind == "same" or not shape:
        return shape
    index = draw(st.integers(0, len(shape) - 1))
    if kind == "drop":
        return shape[:index] + shape[index + 1 :]
    return tuple(d + 1 if i == index else d for i, d in enumerate(shape))


@st.composite
def _matmul_nbits(draw: st.DrawFn) -> dict:
    k = draw(st.integers(1, 80))
    n = draw(st.integers(1, 6))
    bits = draw(st.sampled_from([2, 4, 4, 8, 8, 3]))
    block = draw(st.sampled_from([16, 16, 32, 32, 64, 8, 24]))
    k_blocks = -(-k // block)
    kw: dict[str, Any] = {"k": k, "n": n, "bits": bits, "block_size": block}
    kw["b_shape"] = _nudge(draw, (n, k_blocks, block * bits // 8))
    kw["scale_shape"] = _nudge(draw, draw(st.sampled_from([(n, k_blocks), (n * k_blocks,)])))
    zp = draw(st.sampled_from([None, "packed", "packed1d", "float", "float1d"]))
    kw["zp"] = zp
    if zp is not None:
        width = -(-k_blocks * bits // 8) if zp.startswith("packed") else k_blocks
        shape = (n * width,) if zp.endswith("1d") else (n, width)
        kw["zp_shape"] = _nudge(draw, shape)
    if draw(st.booleans()):
        kw["g_idx"] = True
        kw["g_idx_shape"] = _nudge(draw, draw(st.sampled_from([(k,), (k_blocks * block,)])))
    if draw(st.booleans()):
        kw["bias"] = True
        kw["bias_shape"] = _nudge(draw, (n,))
    last = draw(st.sampled_from([k, k, k, k + 1]))
    kw["a_shape"] = [draw(st.integers(1, 3)), last]
    kw["a_type"] = draw(st.sampled_from([DT.FLOAT, DT.FLOAT, DT.FLOAT16]))
    kw["attrs"] = {"accuracy_level": draw(st.sampled_from([0, 4]))}
    return kw


@st.composite
def _gather_block(draw: st.DrawFn) -> dict:
    data_type = draw(st.sampled_from([DT.UINT8, DT.UINT8, DT.INT4, DT.UINT4, DT.FLOAT8E4M3FN]))
    rank = draw(st.sampled_from([2, 2, 2, 3, 1]))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(rank))
    bits = draw(st.sampled_from([2, 4, 8, 8, 3])) if data_type == DT.UINT8 else 4
    block = draw(st.sampled_from([16, 16, 32, 128, 8, 0]))
    gather = draw(st.one_of(st.just(0), st.integers(-rank, rank)))
    quantize = draw(st.one_of(st.just(-1), st.integers(-rank, rank)))
    kw: dict[str, Any] = {
        "data_type": data_type,
        "data_shape": shape,
        "bits": bits,
        "block_size": block,
        "gather_axis": gather,
        "quantize_axis": quantize,
        "scale_type": draw(st.sampled_from([DT.FLOAT, DT.FLOAT16])),
    }
    if -rank <= quantize < rank and block >= 0:
        q = quantize % rank
        per_byte = 8 // bits if data_type == DT.UINT8 and bits in (2, 4, 8) else 1
        blocks = -(-shape[q] * per_byte // block) if block else 1
        scales = tuple(blocks if i == q else d for i, d in enumerate(shape))
        kw["scale_shape"] = _nudge(draw, scales)
        if draw(st.booleans()):
            kw["zp"] = True
            zps = tuple(-(-d // per_byte) if i == q else d for i, d in enumerate(kw["scale_shape"]))
            kw["zp_shape"] = _nudge(draw, zps) if len(zps) == rank else zps
    return kw


def _agrees(proto: onnx.ModelProto, kwargs: dict) -> None:
    findings = check_model(load_ir(proto)).findings
    refusing = [f for f in findings if f.severity == "error" and f.rule not in ORT_LENIENT]
    refusing += [f for f in findings if f.rule == "QL606"]
    if ort_runs(proto):
        assert not refusing, (kwargs, refusing)
    else:
        assert refusing, (kwargs, findings)


@settings(max_examples=150)
@given(_matmul_nbits())
def test_check_agrees_with_ort_matmul_nbits(kwargs: dict) -> None:
    _agrees(matmul_nbits_model(**kwargs), kwargs)


@settings(max_examples=150)
@given(_gather_block())
def test_check_agrees_with_ort_gather_block_quantized(kwargs: dict) -> None:
    _agrees(gather_block_quantized_model(**kwargs), kwargs)


# --------------------------------------------------------------------------- ORT's quantizer


def _embedding_mlp() -> onnx.ModelProto:
    """Gather (embedding 64 x 96) -> MatMul (96 x 80) -> MatMul (80 x 40) + bias."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32), "emb"),
        numpy_helper.from_array(rng.standard_normal((96, 80)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((80, 40)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["h0"], name="embed"),
        helper.make_node("MatMul", ["h0", "w1"], ["h1"], name="fc1"),
        helper.make_node("MatMul", ["h1", "w2"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "b2"], ["y"], name="bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 40])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize(
    ("bits", "block_size", "symmetric", "accuracy_level"),
    [
        (4, 32, False, None),
        (4, 128, True, 4),
        (8, 32, True, None),
        (8, 128, False, 4),
        (2, 32, False, None),
    ],
)
def test_matmul_nbits_quantizer_output_has_no_findings(
    bits: int, block_size: int, symmetric: bool, accuracy_level: int | None
) -> None:
    pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    import logging
    import warnings

    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger().setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantizer = MatMulNBitsQuantizer(
            _embedding_mlp(),
            bits=bits,
            block_size=block_size,
            is_symmetric=symmetric,
            accuracy_level=accuracy_level,
            op_types_to_quantize=("MatMul", "Gather"),
        )
        quantizer.process()
    proto = quantizer.model.model
    ops = sorted(n.op_type for n in proto.graph.node)
    assert ops.count("MatMulNBits") == 2 and "MatMul" not in ops
    # ORT's quantizer turns Gather into GatherBlockQuantized for 4 bits only.
    assert ops.count("GatherBlockQuantized") == (bits == 4)
    report = check_model(load_ir(proto))
    assert report.nodes_checked == 2 + (bits == 4)
    assert not report.findings, report.findings
    assert ort_runs(proto)


def test_check_reads_only_g_idx(monkeypatch: pytest.MonkeyPatch) -> None:
    """Static: of a MatMulNBits / GatherBlockQuantized node only a small g_idx is read (an
    LLM's scales, up to 1 MiB each, are not), and QL510 still sees g_idx's values."""
    import onnx_ir as ir

    read: list[str] = []
    real = ir.serde.TensorProtoTensor.numpy

    def numpy(self: Any) -> Any:
        read.append(self.name)
        return real(self)

    monkeypatch.setattr(ir.serde.TensorProtoTensor, "numpy", numpy)
    proto = matmul_nbits_model(zp="float", bias=True, g_idx=True, g_idx_values=[0] * 31 + [2])
    codes = [f.rule for f in check_model(load_ir(proto)).findings]
    assert codes == ["QL510"] and read == ["g_idx"]
    read.clear()
    assert not check_model(load_ir(gather_block_quantized_model(zp=True))).findings
    assert read == []
