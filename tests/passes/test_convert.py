"""`qlrewrite convert` and ConvertDomainPass: com.microsoft <-> ai.onnx Q/DQ.

Expected outcomes are written by hand from the operator specs and ONNX Runtime's contrib
schemas (see ../shared/notes/qdq-facts.md), never computed with qlrewrite.opsets.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import helper
from ort_quantized import CONFIGS, INVALID_CONFIGS, inputs_for, model_name_of, quantized, run_ort
from qdq_models import DQ, MS, Q, qdq_model

from qlrewrite.checking.checker import check_model
from qlrewrite.cli import main
from qlrewrite.errors import Refusal
from qlrewrite.io.weightless import weightless_proto
from qlrewrite.passes.convert.domain import ConvertDomainPass, ConvertResult, convert
from qlrewrite.pipeline import validate_output

DT = ir.DataType
QDQ = ("QuantizeLinear", "DequantizeLinear")

#: (config, target) -> the opset named in the refusal (0: refused without an opset), or
#: None: converts. Written from the facts: int4 needs ai.onnx 21; com.microsoft has no
#: blocked form.
EXPECTED = {
    ("cnn-int4-per-channel-contrib", "onnx"): 21,
    ("mlp-nbits-sym", "com.microsoft"): 0,
    ("mlp-nbits-asym", "com.microsoft"): 0,
}
VALID_CONFIGS = [c for c in CONFIGS if c not in INVALID_CONFIGS]


def _nodes(model: ir.Model | onnx.ModelProto) -> list[tuple]:
    """(op, domain, inputs, outputs, attributes) of every node, in order."""
    proto = model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)
    return [
        (
            n.op_type,
            n.domain,
            list(n.input),
            list(n.output),
            sorted((a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute),
        )
        for n in proto.graph.node
    ]


def _qdq_domains(proto: onnx.ModelProto) -> set[str]:
    return {n.domain for n in proto.graph.node if n.op_type in QDQ}


def _run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stderr


# --------------------------------------------------------------------------- ORT models


@pytest.mark.parametrize("target", ["onnx", "com.microsoft"])
@pytest.mark.parametrize("config", VALID_CONFIGS)
def test_ort_quantized_models_convert_or_refuse(config: str, target: str) -> None:
    source = quantized(config)
    model = ir.serde.deserialize_model(source)
    expected = EXPECTED.get((config, target))
    if expected is not None:
        before = _nodes(model)
        with pytest.raises(Refusal) as info:
            convert(model, target)
        message = str(info.value)
        assert "nothing written" in message
        assert "DequantizeLinear '" in message and "in main" in message
        if expected:
            assert f"qlrewrite upgrade --opset {expected}`" in message
        else:
            assert "block" in message
        assert _nodes(model) == before  # nothing changed before the refusal
        return
    convert(model, target)
    validate_output(model, weightless=weightless_proto(model))
    proto = ir.serde.serialize_model(model)
    domain = "" if target == "onnx" else MS
    assert _qdq_domains(proto) == {domain}
    imports = {o.domain: o.version for o in proto.opset_import}
    assert (MS in imports) == (target == "com.microsoft")
    assert imports[""] == {o.domain: o.version for o in source.opset_import}[""]  # opset kept
    feeds = inputs_for(model_name_of(config))
    for before, after in zip(run_ort(source, feeds), run_ort(proto, feeds), strict=True):
        np.testing.assert_array_equal(before, after)  # bit-identical
        assert before.dtype == after.dtype


def test_int16_contrib_at_opset_21_converts_to_onnx_per_node() -> None:
    source = quantized("cnn-int16-contrib")
    model = convert(ir.serde.deserialize_model(source), "onnx")
    proto = ir.serde.serialize_model(model)
    # Only the domain changed: same ops, inputs, outputs and attributes, node by node.
    expected = [
        (op, "" if domain == MS else domain, i, o, a) for op, domain, i, o, a in _nodes(source)
    ]
    assert _nodes(proto) == expected
    assert any(n.op_type in QDQ for n in proto.graph.node)


@pytest.mark.parametrize(
    "config", ["cnn-u8s8", "cnn-per-channel", "mlp-per-channel-21", "cnn-int4-per-channel-21"]
)
def test_round_trip_onnx_microsoft_onnx_is_identity_on_nodes(config: str) -> None:
    source = quantized(config)
    model = ir.serde.deserialize_model(source)
    convert(model, "com.microsoft")
    middle = ir.serde.serialize_model(model)
    assert _qdq_domains(middle) == {MS}
    convert(model, "onnx")
    back = ir.serde.serialize_model(model)
    assert _nodes(back) == _nodes(source)
    assert {o.domain: o.version for o in back.opset_import} == {
        o.domain: o.version for o in source.opset_import
    }


def test_round_trip_microsoft_onnx_microsoft_is_identity_on_nodes() -> None:
    source = quantized("mlp-int16-contrib")
    model = ir.serde.deserialize_model(source)
    convert(model, "onnx")
    convert(model, "com.microsoft")
    assert _nodes(model) == _nodes(source)


# --------------------------------------------------------------------------- one-node cases


def _convert_one(proto: onnx.ModelProto, target: str) -> tuple[ir.Model, ConvertResult]:
    model = ir.serde.deserialize_model(proto)
    result = ConvertDomainPass(target)(model)
    assert isinstance(result, ConvertResult)
    return model, result


def test_microsoft_without_axis_and_1d_scale_gets_axis_1_and_a_warning() -> None:
    proto = qdq_model(
        DQ,
        domain=MS,
        x_type=DT.INT16,
        scale_shape=(3,),
        scale=[0.5, 1, 2],
        imports={"": 21, MS: 1},
    )
    model, conv = _convert_one(proto, "onnx")
    proto_out = ir.serde.serialize_model(model)
    (node,) = proto_out.graph.node
    assert (node.domain, [(a.name, a.i) for a in node.attribute]) == ("", [("axis", 1)])
    assert len(conv.warnings) == 1 and "axis" in conv.warnings[0].message
    assert conv.summary["nodes_converted"] == 1
    # ai.onnx 13 imported: int16 needs 21 -> refused naming 21; at 21 it converts.
    refused = qdq_model(DQ, domain=MS, x_type=DT.INT16, imports={"": 13, MS: 1})
    with pytest.raises(Refusal, match=r"upgrade --opset 21"):
        _convert_one(refused, "onnx")


def test_microsoft_per_tensor_1_element_scale_gets_no_axis() -> None:
    proto = qdq_model(DQ, domain=MS, scale_shape=(1,), scale=[0.5], imports={"": 13, MS: 1})
    model, conv = _convert_one(proto, "onnx")
    (node,) = ir.serde.serialize_model(model).graph.node
    assert (node.domain, list(node.attribute)) == ("", [])
    assert conv.warnings == []


def test_microsoft_fp16_needs_opset_19() -> None:
    proto = qdq_model(
        DQ, domain=MS, scale_type=DT.FLOAT16, imports={"": 13, MS: 1}, out_type=DT.FLOAT16
    )
    with pytest.raises(Refusal, match=r"upgrade --opset 19`"):
        _convert_one(proto, "onnx")


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        (
            {
                "op": DQ,
                "opset": 21,
                "x_type": DT.INT4,
                "x_shape": (4, 64),
                "scale_shape": (4, 2),
                "attrs": {"axis": 1, "block_size": 32},
            },
            "block",
        ),
        ({"op": DQ, "opset": 19, "x_type": DT.FLOAT8E4M3FN}, "FLOAT8E4M3FN"),
        ({"op": DQ, "opset": 23, "x_type": DT.FLOAT4E2M1}, "FLOAT4E2M1"),
        ({"op": DQ, "opset": 25, "x_type": DT.INT2}, "INT2"),
        ({"op": DQ, "opset": 21, "scale_type": DT.BFLOAT16}, "BFLOAT16"),
        (
            {
                "op": DQ,
                "opset": 24,
                "scale_type": DT.FLOAT8E8M0,
                "scale": 1.0,
                "attrs": {"output_dtype": int(DT.FLOAT)},
            },
            "FLOAT8E8M0",
        ),
        ({"op": DQ, "opset": 23, "attrs": {"output_dtype": int(DT.FLOAT16)}}, "output_dtype"),
        ({"op": Q, "opset": 23, "attrs": {"precision": int(DT.FLOAT)}}, "precision"),
        ({"op": Q, "opset": 19, "attrs": {"saturate": 0}}, "saturate"),
    ],
)
def test_to_microsoft_refuses_what_contrib_ops_cannot_express(kwargs: dict, why: str) -> None:
    proto = qdq_model(**kwargs)
    assert not check_model(ir.serde.deserialize_model(proto)).errors  # a valid input
    model = ir.serde.deserialize_model(proto)
    with pytest.raises(Refusal, match=why) as info:
        ConvertDomainPass("com.microsoft")(model)
    assert "'qdq' in main" in str(info.value)
    assert MS not in model.opset_imports
    assert next(iter(model.graph)).domain == ""


@pytest.mark.parametrize(
    ("op", "opset", "attrs"),
    [
        (Q, 19, {"saturate": 1}),
        (Q, 21, {"block_size": 0, "output_dtype": int(DT.UINT8)}),
        (DQ, 21, {"block_size": 0}),
        (DQ, 23, {"output_dtype": int(DT.FLOAT)}),  # = the scale type
        (Q, 23, {"precision": 0}),
    ],
)
def test_to_microsoft_drops_attributes_equal_to_their_default(
    op: str, opset: int, attrs: dict
) -> None:
    model, _ = _convert_one(qdq_model(op, opset, attrs=attrs), "com.microsoft")
    validate_output(model, weightless=weightless_proto(model))
    (node,) = ir.serde.serialize_model(model).graph.node
    assert (node.domain, list(node.attribute)) == (MS, [])


def test_to_microsoft_keeps_axis_and_int16() -> None:
    proto = qdq_model(DQ, 21, x_type=DT.INT16, scale_shape=(3,), scale=[1, 2, 3], attrs={"axis": 1})
    model, _ = _convert_one(proto, "com.microsoft")
    validate_output(model, weightless=weightless_proto(model))
    (node,) = ir.serde.serialize_model(model).graph.node
    assert node.domain == MS and [(a.name, a.i) for a in node.attribute] == [("axis", 1)]


# --------------------------------------------------------------------------- graphs


def _if_model(domain: str) -> onnx.ModelProto:
    """An If whose two branches each hold a DQ of the outer x (and a nested If in one)."""

    def branch(name: str, nested: bool = False) -> onnx.GraphProto:
        nodes = [
            helper.make_node(DQ, ["x", "s", "zp"], [f"{name}_y"], name=f"{name}_dq", domain=domain)
        ]
        if nested:
            inner = helper.make_graph(
                [
                    helper.make_node(
                        DQ, ["x", "s", "zp"], ["inner_y"], name="inner_dq", domain=domain
                    )
                ],
                "inner",
                [],
                [helper.make_tensor_value_info("inner_y", 1, [4])],
            )
            nodes = [
                helper.make_node(
                    "If", ["c"], [f"{name}_y"], name="nested", then_branch=inner, else_branch=inner
                )
            ]
        return helper.make_graph(
            nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", 1, [4])]
        )

    graph = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["c"],
                ["y"],
                name="if",
                then_branch=branch("then", True),
                else_branch=branch("else"),
            )
        ],
        "g",
        [
            helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", onnx.TensorProto.INT16, [4]),
        ],
        [helper.make_tensor_value_info("y", 1, [4])],
        initializer=[
            helper.make_tensor("s", 1, [], [0.5]),
            helper.make_tensor("zp", onnx.TensorProto.INT16, [], [3]),
        ],
    )
    imports = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(MS, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def _all_qdq_domains(model: ir.Model) -> list[str]:
    return [n.domain for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type == DQ]


def test_subgraphs_convert_both_ways() -> None:
    model = ir.serde.deserialize_model(_if_model(MS))
    convert(model, "onnx")
    assert _all_qdq_domains(model) == ["", "", ""]
    assert MS not in model.opset_imports
    validate_output(model, weightless=weightless_proto(model))
    feeds = {"c": np.array(True), "x": np.array([-5, 0, 3, 300], np.int16)}
    out = run_ort(ir.serde.serialize_model(model), feeds)[0]
    np.testing.assert_array_equal(out, np.array([-4, -1.5, 0, 148.5], np.float32))
    convert(model, "com.microsoft")
    assert _all_qdq_domains(model) == [MS, MS, MS]
    np.testing.assert_array_equal(run_ort(ir.serde.serialize_model(model), feeds)[0], out)


def _function_model(domain: str, x_type: int) -> onnx.ModelProto:
    """main: y = local.Deq(x); the function holds the DQ (its own opset imports)."""
    fn_imports = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(MS, 1)] if domain else [])
    function = helper.make_function(
        "local",
        "Deq",
        ["a"],
        ["b"],
        [
            helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", 1, [], [0.25])),
            helper.make_node(DQ, ["a", "s"], ["b"], name="fn_dq", domain=domain),
        ],
        fn_imports,
    )
    graph = helper.make_graph(
        [helper.make_node("Deq", ["x"], ["y"], name="call", domain="local")],
        "g",
        [helper.make_tensor_value_info("x", x_type, [4])],
        [helper.make_tensor_value_info("y", 1, [4])],
    )
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]
    imports += [helper.make_opsetid(MS, 1)] if domain else []
    return helper.make_model(graph, opset_imports=imports, functions=[function], ir_version=10)


def test_functions_convert_with_their_own_opset_imports() -> None:
    model = ir.serde.deserialize_model(_function_model(MS, onnx.TensorProto.UINT16))
    convert(model, "onnx")
    function = next(iter(model.functions.values()))
    assert [n.domain for n in function if n.op_type == DQ] == [""]
    assert MS not in function.opset_imports and MS not in model.opset_imports
    validate_output(model, weightless=weightless_proto(model))
    model = ir.serde.deserialize_model(_function_model("", onnx.TensorProto.UINT16))
    convert(model, "com.microsoft")
    function = next(iter(model.functions.values()))
    assert function.opset_imports.get(MS) == 1 and model.opset_imports.get(MS) == 1
    validate_output(model, weightless=weightless_proto(model))


def test_other_domains_untouched_and_their_imports_kept() -> None:
    proto = quantized("cnn-int16-contrib")
    # a com.microsoft contrib op that is not Q/DQ, and an ai.onnx.ml node
    proto.graph.node.append(helper.make_node("Gelu", ["y"], ["g"], name="gelu", domain=MS))
    proto.graph.node.append(
        helper.make_node("Normalizer", ["y"], ["nz"], name="norm", domain="ai.onnx.ml", norm="L1")
    )
    proto.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    proto.graph.output.append(helper.make_tensor_value_info("g", 1, [1, 32]))
    proto.graph.output.append(helper.make_tensor_value_info("nz", 1, [1, 32]))
    model = convert(ir.serde.deserialize_model(proto), "onnx")
    out = ir.serde.serialize_model(model)
    assert _nodes(out)[-2:] == _nodes(proto)[-2:]
    assert {o.domain for o in out.opset_import} == {"", MS, "ai.onnx.ml"}
    feeds = inputs_for("cnn")
    for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds), strict=True):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- CLI


def test_cli_refusal_writes_nothing_and_leaves_the_input(tmp_path: Path) -> None:
    source = tmp_path / "int4.onnx"
    onnx.save(quantized("cnn-int4-per-channel-contrib"), source)
    before = source.read_bytes()
    code, err = _run("convert", source, "--to", "onnx", "--report", tmp_path / "r.json")
    assert code == 1
    assert "upgrade --opset 21" in err and "w1_DequantizeLinear" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int4.onnx"]
    assert source.read_bytes() == before


def test_cli_convert_writes_report_and_dry_run_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    onnx.save(quantized("mlp-int16-contrib"), source)
    code, _ = _run("convert", source, "--to", "onnx", "--dry-run", "-q")
    assert code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    code, err = _run("convert", source, "--to", "onnx", "--report", tmp_path / "r.json")
    assert code == 0, err
    written = onnx.load(tmp_path / "m.convert.onnx")
    assert _qdq_domains(written) == {""}
    report = json.loads((tmp_path / "r.json").read_text())
    n_qdq = sum(n.op_type in QDQ for n in written.graph.node)
    assert report["changes"]["ConvertDomainPass"]["nodes_converted"] == n_qdq
    assert report["written"] is True


def test_cli_help_ends_with_examples() -> None:
    result = CliRunner().invoke(main, ["convert", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output and "--to onnx" in result.output.split("Examples:")[1]
    code, err = _run("convert", "nowhere.onnx", "--to", "onnx")
    assert code == 2 and "no such file" in err


# --------------------------------------------------------------------------- type sweep

#: What com.microsoft Q/DQ take (ONNX Runtime's contrib schemas, by hand).
_MS_INTEGER = {DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT4, DT.UINT4}
_MS_SCALES = {DT.FLOAT, DT.FLOAT16}
_SWEEP_TYPES = sorted(_MS_INTEGER | {DT.FLOAT8E4M3FN, DT.FLOAT8E5M2}, key=lambda t: t.name)


@pytest.mark.parametrize("scale_type", [DT.FLOAT, DT.FLOAT16])
@pytest.mark.parametrize("q_type", _SWEEP_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("op", [Q, DQ])
def test_type_sweep_at_opset_21_round_trips_bit_identical(
    op: str, q_type: DT, scale_type: DT
) -> None:
    """Per-axis nodes of every 8/16/4-bit type: com.microsoft expresses exactly the integer
    ones; what converts runs bit-identically in ORT and converts back to the same node."""
    kwargs = {"x_type": q_type} if op == DQ else {"x_type": scale_type, "zp_type": q_type}
    proto = qdq_model(
        op,
        21,
        scale_type=scale_type,
        scale_shape=(3,),
        scale=[0.5, 0.25, 2.0],
        zp=0,
        attrs={"axis": 1},
        **kwargs,
    )
    if q_type.bitwidth == 4:
        _wrap_4_bit(proto, op)  # ORT's Python API cannot feed or fetch 4-bit arrays
    model = ir.serde.deserialize_model(proto)
    assert not check_model(model).errors
    if q_type not in _MS_INTEGER:
        with pytest.raises(Refusal, match=q_type.name):
            convert(model, "com.microsoft")
        return
    convert(model, "com.microsoft")
    validate_output(model, weightless=weightless_proto(model))
    converted = ir.serde.serialize_model(model)
    rng = np.random.default_rng(4)
    if op == DQ:
        low, high = (-8, 8) if q_type == DT.INT4 else (0, 16) if q_type == DT.UINT4 else (-50, 50)
        low = max(low, 0) if q_type.name.startswith("U") else low
        x = rng.integers(low, high, (4, 3)).astype(q_type.numpy())
    else:
        x = (rng.standard_normal((4, 3)) * 40).astype(scale_type.numpy())
    feeds = {} if op == DQ and q_type.bitwidth == 4 else {"x": x}
    _assert_ort_same(proto, converted, feeds)
    convert(model, "onnx")
    assert _nodes(model) == _nodes(proto)


def _assert_ort_same(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict) -> None:
    for before, after in zip(run_ort(a, feeds), run_ort(b, feeds), strict=True):
        assert before.dtype == after.dtype
        np.testing.assert_array_equal(before.view(np.uint8), after.view(np.uint8))


def _wrap_4_bit(proto: onnx.ModelProto, op: str) -> None:
    """DQ: x becomes a constant initializer; Q: the 4-bit output is cast to int8."""
    graph = proto.graph
    if op == DQ:
        x_type = graph.input[0].type.tensor_type.elem_type
        values = [-8, -1, 0, 7, 3, 2, -5, 6, 1, 0, 4, -3]
        if x_type == onnx.TensorProto.UINT4:
            values = [v + 8 for v in values]
        del graph.input[0]
        graph.initializer.append(helper.make_tensor("x", x_type, [4, 3], values))
        return
    graph.node.append(helper.make_node("Cast", ["y"], ["y8"], to=onnx.TensorProto.INT8))
    del graph.output[0]
    graph.output.append(helper.make_tensor_value_info("y8", onnx.TensorProto.INT8, [4, 3]))


def test_refusal_groups_nodes_that_share_a_reason() -> None:
    """Eight float8 DequantizeLinear nodes: one reason, said once, with a count."""
    proto = qdq_model(DQ, 21, x_type=DT.FLOAT8E4M3FN, zp_type=None)
    node = proto.graph.node[-1]
    for i in range(1, 8):
        copy = proto.graph.node.add()
        copy.CopyFrom(node)
        copy.name, copy.output[0] = f"dq{i}", f"y{i}"
    model = ir.serde.deserialize_model(proto)
    with pytest.raises(Refusal) as info:
        ConvertDomainPass("com.microsoft")(model)
    message = str(info.value)
    assert "cannot convert 8 node(s) to com.microsoft" in message
    assert "8 nodes (" in message and ", ...): " in message
    reason = message.split(", ...): ", 1)[1]
    assert reason and reason.split(";")[0] not in message.split(", ...): ", 1)[0]


@pytest.mark.parametrize(
    ("k", "n", "attrs", "scale_shape"),
    [(4, 0, {"axis": 1}, [0]), (0, 4, {"axis": 0, "block_size": 16}, [0, 4])],
)
def test_an_empty_weight_is_never_matmul_nbits(k, n, attrs, scale_shape) -> None:
    """A per-axis or blocked weight with K or N of 0 (valid ONNX) ended convert --to
    com.microsoft in an internal ValueError (MatMulNBits' layout needs K, N >= 1): it is
    not made a MatMulNBits; per-axis it stays a DequantizeLinear (valid output), blocked it
    is refused as any blocked node com.microsoft cannot hold."""
    from onnx import TensorProto, numpy_helper

    from qlrewrite import api

    weight = numpy_helper.from_array(np.zeros((k, n), np.uint8), "w")
    scale = numpy_helper.from_array(np.zeros(scale_shape, np.float32), "s")
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], **attrs),
            helper.make_node("MatMul", ["x", "wf"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [weight, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    if "block_size" in attrs:
        with pytest.raises(Refusal, match="has no blocked quantization"):
            api.convert(model, MS)
        return
    converted = ir.serde.serialize_model(api.convert(model, MS))
    onnx.checker.check_model(converted, full_check=True)
    assert [node.op_type for node in converted.graph.node] == ["DequantizeLinear", "MatMul"]
