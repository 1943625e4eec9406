"""Structural fuzzing of one-node Q/DQ models: `check` never crashes, and agrees with ONNX
Runtime wherever ONNX Runtime can tell.

Broader than tests/rules/test_rules_ort.py: every Q/DQ version 10-25 of ai.onnx and
com.microsoft, every element type (int2 to int32, float8, float4, bf16/f16/f32 scales,
e8m0 scales), scalar / 1-element / per-axis / blocked / odd scale shapes, zero points of
other shapes and types, axis, block_size, saturate, output_dtype, precision and unknown
attributes, declared output types right or wrong, x a constant or a graph input.

The contract, per generated model:
- ORT loads and runs it: `check` has no error finding (except ORT_LENIENT rules);
- ORT refuses it when loading or running (INVALID_GRAPH, FAIL, INVALID_ARGUMENT, a shape
  error at run time): `check` has an error finding;
- ORT has no kernel (NOT_IMPLEMENTED) or no version for it: no verdict.

Known disagreements are decided in KNOWN (each with a strict xfail example below).
``QLREWRITE_FUZZ_EXAMPLES`` raises the number of examples for a long run by hand.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper
from ort_quantized import ort_version
from qdq_models import (
    DQ,
    DT,
    IR_OF_OPSET,
    MS,
    Q,
    blocked_with_one_element_scale,
    default_output_type,
)

import qlrewrite

ort = pytest.importorskip("onnxruntime")

EXAMPLES = int(os.environ.get("QLREWRITE_FUZZ_EXAMPLES", "300"))

#: Rules whose violation ONNX Runtime accepts (see notes/qdq-facts.md): per-axis
#: DequantizeLinear at opset 10-12 (QL402).
ORT_LENIENT = {"QL402"}

ONNX_OPSETS = (10, 13, 19, 21, 23, 24, 25)
INT_TYPES = (DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.INT4, DT.UINT4, DT.INT2, DT.UINT2)
FLOAT8 = (DT.FLOAT8E4M3FN, DT.FLOAT8E4M3FNUZ, DT.FLOAT8E5M2, DT.FLOAT8E5M2FNUZ)
QUANTIZED = INT_TYPES + FLOAT8 + (DT.FLOAT4E2M1,)
FLOATS = (DT.FLOAT, DT.FLOAT16, DT.BFLOAT16)
NATIVE = (DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.FLOAT, DT.FLOAT16)


def _values(dtype: DT, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Deterministic values: ``x`` spans a small range, ``scale`` is positive, ``zp`` 0."""
    count = int(np.prod(shape, dtype=np.int64))
    if kind == "scale":
        base = 0.25 + (np.arange(count) % 4) * 0.125
    elif kind == "zp":
        base = np.zeros(count)
    else:
        base = (np.arange(count) % 7) - 3.0
        if not dtype.is_floating_point():
            info = (0, 3) if not dtype.is_signed() else (-1, 2)
            base = np.clip(base, *info)
    return base.reshape(shape).astype(np.float32).astype(dtype.numpy())


def _tensor(name: str, dtype: DT, shape: tuple[int, ...], kind: str) -> onnx.TensorProto:
    return ir.serde.serialize_tensor(ir.tensor(_values(dtype, shape, kind), dtype=dtype, name=name))


#: Types by version, from the operator docs (independent of qlrewrite.opsets).
_DQ_X = {
    10: (DT.INT8, DT.UINT8, DT.INT32),
    19: FLOAT8,
    21: (DT.INT16, DT.UINT16, DT.INT4, DT.UINT4),
    23: (DT.FLOAT4E2M1,),
    25: (DT.INT2, DT.UINT2),
}
_MS_X = (DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT4, DT.UINT4)


def _allowed_x(op: str, domain: str, opset: int) -> tuple[DT, ...]:
    """The quantized types of a version (DQ x, Q zero point / output)."""
    if domain == MS:
        return _MS_X + ((DT.INT32,) if op == DQ else ())
    types = tuple(t for since, ts in _DQ_X.items() if since <= opset for t in ts)
    return types if op == DQ else tuple(t for t in types if t != DT.INT32)


def _allowed_scale(domain: str, opset: int) -> tuple[DT, ...]:
    return (DT.FLOAT, DT.FLOAT16) if domain == MS or opset >= 19 else (DT.FLOAT,)


#: One defect at a time, to reach each rule from a valid node.
DEFECTS = (
    "x-type",
    "scale-type",
    "zp-type",
    "zp-shape",
    "scale-length",
    "axis",
    "block-size",
    "new-attribute",
    "bogus-attribute",
    "output-type",
    "output-dtype",
    "scale-rank",
    "e8m0-scale",
    "precision",
)


@st.composite
def qdq_cases(draw: st.DrawFn) -> dict[str, Any]:  # noqa: C901
    """A valid node by the operator docs, then (often) one defect."""
    op = draw(st.sampled_from([Q, DQ]))
    domain = draw(st.sampled_from(["", "", "", MS]))
    opset = draw(st.sampled_from(ONNX_OPSETS if domain == "" else (13, 21)))
    quantized_type = draw(st.sampled_from(_allowed_x(op, domain, opset)))
    scale_type = draw(st.sampled_from(_allowed_scale(domain, opset)))
    if op == DQ:
        x_type = quantized_type
    else:
        x_type = scale_type if domain == MS or opset < 23 else draw(st.sampled_from(FLOATS))
    rank = draw(st.integers(0, 3))
    x_shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    kinds = ["scalar", "one"]
    if rank and (domain == MS or opset >= 13):
        kinds.append("axis")
    if rank and domain == "" and opset >= 21 and quantized_type not in FLOAT8:
        kinds.append("blocked")
    kind = draw(st.sampled_from(kinds))
    attrs: dict[str, int] = {}
    axis = draw(st.integers(-rank, rank - 1)) if rank else 0
    if kind in ("scalar", "one"):
        scale_shape: tuple[int, ...] = () if kind == "scalar" else (1,)
    elif kind == "axis":
        scale_shape = (x_shape[axis],)
        attrs["axis"] = axis
    else:
        block = draw(st.integers(1, 4))
        scale_shape = tuple(
            -(-d // block) if i == axis % rank else d for i, d in enumerate(x_shape)
        )
        attrs["axis"] = axis
        attrs["block_size"] = block
    zp: tuple[DT, tuple[int, ...]] | None = None
    if draw(st.booleans()) or (op == Q and quantized_type != DT.UINT8):
        zp = (quantized_type, scale_shape)
    if op == Q and opset >= 19 and domain == "" and draw(st.booleans()):
        attrs["saturate"] = 1 if quantized_type not in FLOAT8 else draw(st.sampled_from([0, 1]))
    if op == Q and opset >= 21 and domain == "" and zp is None and draw(st.booleans()):
        attrs["output_dtype"] = int(quantized_type)
    if op == DQ and opset >= 23 and domain == "" and draw(st.booleans()):
        attrs["output_dtype"] = int(scale_type)
    case = dict(
        op=op,
        domain=domain,
        opset=opset,
        x_type=x_type,
        x_shape=x_shape,
        scale_type=scale_type,
        scale_shape=scale_shape,
        zp=zp,
        attrs=attrs,
        x_input=False,
        wrong_output=False,
    )
    if draw(st.integers(0, 9)) < 6:
        _defect(draw, case, draw(st.sampled_from(DEFECTS)))
    case["x_input"] = case["x_type"] in NATIVE and draw(st.booleans())
    return case


def _defect(draw: st.DrawFn, case: dict[str, Any], defect: str) -> None:  # noqa: C901
    attrs, rank = case["attrs"], len(case["x_shape"])
    everything = (*QUANTIZED, *FLOATS, DT.INT32, DT.INT64, DT.DOUBLE, DT.BOOL)
    if defect == "x-type":
        case["x_type"] = draw(st.sampled_from(everything))
    elif defect == "scale-type":
        case["scale_type"] = draw(st.sampled_from((*FLOATS, DT.DOUBLE, DT.INT32, *FLOAT8)))
    elif defect == "zp-type":
        case["zp"] = (draw(st.sampled_from(everything)), case["scale_shape"])
    elif defect == "zp-shape":
        shape = tuple(draw(st.lists(st.integers(1, 4), max_size=3)))
        case["zp"] = ((case["zp"] or (DT.UINT8,))[0], shape)
    elif defect == "scale-length":
        case["scale_shape"] = tuple(d + draw(st.integers(1, 2)) for d in case["scale_shape"]) or (
            2,
        )
        if case["zp"]:
            case["zp"] = (case["zp"][0], case["scale_shape"])
    elif defect == "axis":
        attrs["axis"] = draw(st.sampled_from([rank, -rank - 1, rank + 2]))
    elif defect == "block-size":
        attrs["block_size"] = draw(st.sampled_from([-1, 0, 1, 5, 9]))
    elif defect == "new-attribute":
        name = draw(
            st.sampled_from(["axis", "block_size", "saturate", "output_dtype", "precision"])
        )
        attrs[name] = {"output_dtype": int(DT.UINT8), "precision": int(DT.FLOAT)}.get(name, 1)
    elif defect == "bogus-attribute":
        attrs["bogus"] = 1
    elif defect == "output-type":
        case["wrong_output"] = True
    elif defect == "output-dtype":
        attrs["output_dtype"] = int(draw(st.sampled_from(everything)))
    elif defect == "scale-rank":
        case["scale_shape"] = tuple(draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)))
        if case["zp"]:
            case["zp"] = (case["zp"][0], case["scale_shape"])
    elif defect == "e8m0-scale":
        case["scale_type"] = DT.FLOAT8E8M0
    elif defect == "precision":
        attrs["precision"] = int(draw(st.sampled_from((*FLOATS, DT.INT8, DT.DOUBLE))))


def build(case: dict[str, Any]) -> onnx.ModelProto:
    """The one-node model of a case (x a constant or a graph input)."""
    op, domain, opset = case["op"], case["domain"], case["opset"]
    inits = [_tensor("scale", case["scale_type"], case["scale_shape"], "scale")]
    names = ["x", "scale"]
    zp_type = None
    if case["zp"] is not None:
        zp_type, zp_shape = case["zp"]
        inits.append(_tensor("zp", zp_type, zp_shape, "zp"))
        names.append("zp")
    inputs = []
    if case["x_input"]:
        inputs.append(helper.make_tensor_value_info("x", int(case["x_type"]), case["x_shape"]))
    else:
        inits.append(_tensor("x", case["x_type"], case["x_shape"], "x"))
    node = helper.make_node(op, names, ["y"], name="qdq", domain=domain, **case["attrs"])
    out_type = default_output_type(
        op,
        opset,
        domain=domain,
        scale_type=case["scale_type"],
        zp_type=zp_type,
        attrs=case["attrs"],
    )
    if case["wrong_output"]:
        out_type = DT.INT64
    graph = helper.make_graph(
        [node],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", int(out_type), None)],
        initializer=inits,
    )
    imports = [helper.make_opsetid("", opset)]
    if domain == MS:
        imports.append(helper.make_opsetid(MS, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_OF_OPSET[25])


def ort_verdict(case: dict[str, Any], proto: onnx.ModelProto) -> str:
    """``runs``, ``rejects`` (invalid model or shapes) or ``unknown`` (no kernel / version)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = {}
        if case["x_input"]:
            x = _values(case["x_type"], case["x_shape"], "x")
            feeds["x"] = ort.OrtValue.ortvalue_from_numpy(x)
        session.run_with_ort_values(None, feeds)  # outputs stay OrtValues (int4, float8...)
    except Exception as exc:
        text = str(exc)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            return "unknown"
        return "rejects"
    return "runs"


def _error_codes(proto: onnx.ModelProto) -> set[str]:
    try:
        report = qlrewrite.check(proto)
    except qlrewrite.errors.InputError:  # a proto onnx_ir cannot read
        return {"unreadable"}
    return {f.rule for f in report.errors}


def known_disagreement(case: dict[str, Any], verdict: str, codes: set[str]) -> str | None:
    """The decided disagreement this case falls under (see KNOWN), or None."""
    for name, (matches, _reason) in KNOWN.items():
        if matches(case, verdict, codes):
            return name
    return None


def _mixed_q23(case: dict[str, Any], verdict: str, codes: set[str]) -> bool:
    return (
        case["op"] == Q
        and case["domain"] == ""
        and case["opset"] >= 23
        and case["x_type"] in FLOATS
        and case["scale_type"] in FLOATS
        and case["x_type"] != case["scale_type"]
        and verdict == "rejects"
    )


def _blocked_one_element(case: dict[str, Any], verdict: str, codes: set[str]) -> bool:
    return blocked_with_one_element_scale(case) and verdict == "rejects"


def _float4_dq_half(case: dict[str, Any], verdict: str, codes: set[str]) -> bool:
    return (
        case["op"] == DQ
        and case["x_type"] == DT.FLOAT4E2M1
        and verdict == "rejects"
        and case["attrs"].get("output_dtype") == int(DT.FLOAT16)
    )


#: name -> (predicate(case, ORT verdict, check's error codes), decision). Found by the long
#: runs by hand; each has a strict xfail example in test_known_disagreements.
KNOWN: dict[str, tuple[Any, str]] = {
    "ort-no-mixed-type-q23": (
        _mixed_q23,
        "QuantizeLinear-23+ allows a scale type different from x (float/float16); ORT 1.31 "
        "fails at run time ('Tensor type mismatch'): a missing kernel, not an invalid node. "
        "check follows the spec (no error).",
    ),
    "ort-blocked-one-element-scale": (
        _blocked_one_element,
        "A blocked node whose scale has one element (x [n], scale [1], block_size >= n) is "
        "valid by the spec; ORT takes a one-element scale as per-tensor and then refuses "
        "block_size ('block_size must be 0 for per-tensor quantization'). check follows the "
        "spec (no error).",
    ),
    "ort-float4-dq-float16-output-dtype": (
        _float4_dq_half,
        "DequantizeLinear-23+ of float4e2m1 with output_dtype=FLOAT16 is valid by the spec; "
        "ORT 1.31 inserts a float cast for float4 and then fails type checking ('Type "
        "(tensor(float)) of output arg (InsertedPrecisionFreeCast_y) ... does not match "
        "expected type (tensor(float16))'). An ORT bug; check follows the spec (no error).",
    ),
}


def agrees(case: dict[str, Any]) -> tuple[bool, str, set[str]]:
    proto = build(case)
    codes = _error_codes(proto)  # must not raise
    verdict = ort_verdict(case, proto)
    if verdict == "runs":
        return not (codes - ORT_LENIENT), verdict, codes
    if verdict == "rejects":
        return bool(codes), verdict, codes
    return True, verdict, codes


@settings(max_examples=EXAMPLES)
@given(qdq_cases())
def test_check_agrees_with_ort(case: dict[str, Any]) -> None:
    ok, verdict, codes = agrees(case)
    if not ok and known_disagreement(case, verdict, codes):
        return
    assert ok, (verdict, sorted(codes), case)


def _case(
    op: str,
    opset: int,
    x: tuple[DT, tuple[int, ...]],
    scale: tuple[DT, tuple[int, ...]],
    attrs: dict[str, int],
) -> dict[str, Any]:
    return dict(
        op=op,
        domain="",
        opset=opset,
        x_type=x[0],
        x_shape=x[1],
        scale_type=scale[0],
        scale_shape=scale[1],
        zp=None,
        attrs=attrs,
        x_input=False,
        wrong_output=False,
    )


#: One example of each known disagreement.
KNOWN_EXAMPLES = {
    "ort-no-mixed-type-q23": _case(Q, 23, (DT.FLOAT, (4,)), (DT.FLOAT16, ()), {}),
    "ort-blocked-one-element-scale": _case(
        DQ, 21, (DT.INT8, (3,)), (DT.FLOAT, (1,)), {"axis": 0, "block_size": 3}
    ),
    "ort-float4-dq-float16-output-dtype": _case(
        DQ, 23, (DT.FLOAT4E2M1, (4, 4)), (DT.FLOAT16, ()), {"output_dtype": int(DT.FLOAT16)}
    ),
}


#: Disagreements ONNX Runtime fixed, with the version that runs the example as the spec says.
FIXED_IN = {"ort-no-mixed-type-q23": (1, 32)}


def _fixed(name: str) -> bool:
    return name in FIXED_IN and ort_version() >= FIXED_IN[name]


@pytest.mark.parametrize("name", list(KNOWN))
def test_known_examples_fall_in_their_category(name: str) -> None:
    case = KNOWN_EXAMPLES[name]
    _, verdict, codes = agrees(case)
    if _fixed(name):
        assert (verdict, codes) == ("runs", set())
        return
    assert (verdict, codes) == ("rejects", set())
    assert known_disagreement(case, verdict, codes) == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(not _fixed(n), strict=True, reason=KNOWN[n][1]))
        for n in KNOWN
    ],
)
def test_known_disagreements(name: str) -> None:
    """Fails while ORT and check disagree; passes (strict xfail: an error) once they agree."""
    ok, verdict, codes = agrees(KNOWN_EXAMPLES[name])
    assert ok, (verdict, codes)
