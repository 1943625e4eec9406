"""`qlrewrite info`: the table's content on every example (expected values worked out by
hand from the builders), subgraphs and functions, reads no weights, readable in a pipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import ort_quantized
import pytest
from model_io_fixtures import cli, external_tensor
from onnx import TensorProto, helper, numpy_helper

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _json(path: Path) -> dict[str, Any]:
    result = cli("info", str(path), "--format", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    return json.loads(result.stdout)


def _rows(doc: dict[str, Any]) -> set[tuple]:
    return {
        (
            r["domain"],
            r["op_type"],
            r["version"],
            r["x_type"],
            r["scale_type"],
            r["granularity"],
            r["constant"],
            r["nodes"],
            r["input_bytes"],
        )
        for r in doc["qdq"]
    }


# Bytes by hand: blocked = uint4 weights 64*48/2 + 48*16/2, float scales 2*48*4 + 2*16*4,
# uint4 zero points 2*48/2 + 2*16/2.
BLOCKED_BYTES = 1536 + 384 + 384 + 128 + 48 + 16

EXPECTED: dict[str, dict[str, Any]] = {
    "blocked_int4_opset21.onnx": {
        "ir_version": 10,
        "opset_imports": {"ai.onnx": 21},
        "initializers": {"count": 6, "bytes": BLOCKED_BYTES, "external_data": False},
        "qdq_nodes": 2,
        "rows": {
            (
                "ai.onnx",
                "DequantizeLinear",
                21,
                "UINT4",
                "FLOAT",
                "blocked(axis=0, block=32)",
                True,
                2,
                BLOCKED_BYTES,
            )
        },
    },
    "msdomain_int16_opset13.onnx": {
        "ir_version": 7,
        "opset_imports": {"ai.onnx": 13, "com.microsoft": 1},
        # scales 4 + 32 + 32 + 4, zero points 2 + 8 + 32 + 2, weight 128, bias 32
        "initializers": {"count": 10, "bytes": 276, "external_data": False},
        "qdq_nodes": 6,
        "rows": {
            # activations: two scales (4 B) and two int16 zero points (2 B), shared by Q and DQ
            ("com.microsoft", "QuantizeLinear", 1, "FLOAT", "FLOAT", "per-tensor", False, 2, 12),
            ("com.microsoft", "DequantizeLinear", 1, "INT16", "FLOAT", "per-tensor", False, 2, 12),
            (
                "com.microsoft",
                "DequantizeLinear",
                1,
                "INT8",
                "FLOAT",
                "per-axis(axis=1)",
                True,
                1,
                128 + 32 + 8,
            ),
            (
                "com.microsoft",
                "DequantizeLinear",
                1,
                "INT32",
                "FLOAT",
                "per-axis(axis=0)",
                True,
                1,
                32 + 32 + 32,
            ),
        },
    },
    "qdq_float_weights_opset13.onnx": {
        "ir_version": 7,
        "opset_imports": {"ai.onnx": 13},
        "initializers": {"count": 5, "bytes": 512 + 32 + 8 + 4 + 1, "external_data": False},
        "qdq_nodes": 4,
        "rows": {
            ("ai.onnx", "QuantizeLinear", 13, "FLOAT", "FLOAT", "per-tensor", False, 1, 5),
            ("ai.onnx", "DequantizeLinear", 13, "UINT8", "FLOAT", "per-tensor", False, 1, 5),
            ("ai.onnx", "QuantizeLinear", 13, "FLOAT", "FLOAT", "per-axis(axis=1)", True, 1, 552),
            ("ai.onnx", "DequantizeLinear", 13, "INT8", "FLOAT", "per-axis(axis=1)", False, 1, 40),
        },
    },
    "invalid_per_axis_scale.onnx": {
        "ir_version": 7,
        "opset_imports": {"ai.onnx": 13},
        "initializers": {"count": 2, "bytes": 128 + 20, "external_data": False},
        "qdq_nodes": 1,
        "rows": {
            ("ai.onnx", "DequantizeLinear", 13, "INT8", "FLOAT", "per-axis(axis=1)", True, 1, 148)
        },
    },
}


@pytest.mark.parametrize("name", EXPECTED)
def test_info_json_on_every_example(name: str) -> None:
    doc = _json(EXAMPLES / name)
    expected = EXPECTED[name]
    assert doc["path"] == str(EXAMPLES / name)
    for key in ("ir_version", "opset_imports", "initializers", "qdq_nodes"):
        assert doc[key] == expected[key], key
    assert (doc["graphs"], doc["subgraphs"], doc["functions"]) == (1, 0, 0)
    assert _rows(doc) == expected["rows"]
    assert sum(r["nodes"] for r in doc["qdq"]) == doc["qdq_nodes"]


@pytest.mark.parametrize("name", EXPECTED)
def test_info_text_on_every_example(name: str) -> None:
    result = cli("info", str(EXAMPLES / name))
    assert result.exit_code == 0, result.output
    out = result.stdout
    expected = EXPECTED[name]
    opsets = ", ".join(f"{d} {v}" for d, v in expected["opset_imports"].items())
    assert f"IR version {expected['ir_version']}; opsets: {opsets}" in out
    assert "1 graph, 0 subgraph(s), 0 function(s)" in out
    assert f"{expected['initializers']['count']} initializer(s)" in out
    assert f"{expected['qdq_nodes']} Q/DQ node(s)" in out
    lines = out.splitlines()
    for row in expected["rows"]:
        domain, op, version, x, scale, gran, const, nodes, _ = row
        cells = [domain, op, str(version), x, scale, gran, "yes" if const else "no", str(nodes)]
        matches = [line for line in lines if [c.strip() for c in line.split("│")[1:9]] == cells]
        assert len(matches) == 1, (row, out)


def test_table_is_not_squeezed_in_a_pipe() -> None:
    """stdout is a pipe: rich would cut to 80 columns; every cell must stay whole."""
    done = subprocess.run(
        [sys.executable, "-m", "qlrewrite", "info", str(EXAMPLES / "msdomain_int16_opset13.onnx")],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "TERM": "dumb"},
    )
    out = done.stdout
    assert "…" not in out
    assert "com.microsoft" in out and "per-axis(axis=1)" in out and "const bytes" in out
    assert "\x1b[" not in out  # no colour codes in a pipe
    table = [line for line in out.splitlines() if line.startswith(("│", "┃"))]
    assert len(table) == 1 + 4  # header and one line per group: nothing wrapped
    assert done.stderr == ""
    assert all(line == line.rstrip() for line in out.splitlines())  # no padding


def test_markup_in_the_path_is_printed_as_is(tmp_path: Path) -> None:
    path = tmp_path / "m[bold]x.onnx"
    shutil.copy(EXAMPLES / "blocked_int4_opset21.onnx", path)
    result = cli("info", str(path))
    assert result.exit_code == 0, result.output
    assert str(path) in result.stdout


# --------------------------------------------------------------------------- graphs


def _dq_node(prefix: str, out: str) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.int8).reshape(2, 3), f"{prefix}_q"),
        numpy_helper.from_array(np.float32(0.5), f"{prefix}_scale"),
    ]
    node = helper.make_node("DequantizeLinear", [f"{prefix}_q", f"{prefix}_scale"], [out])
    return node, inits


def _leaf(name: str) -> onnx.GraphProto:
    """A branch without Q/DQ: returns a constant."""
    value = helper.make_tensor(f"{name}_v", TensorProto.FLOAT, [1], [1.0])
    return helper.make_graph(
        [helper.make_node("Constant", [], [f"{name}_out"], value=value)],
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [1])],
    )


def _branch(name: str, nested: bool = False) -> onnx.GraphProto:
    node, inits = _dq_node(name, f"{name}_out")
    nodes = [node]
    if nested:  # an If inside this branch: one more level of subgraphs (2 leaves)
        flag = helper.make_tensor("flag_v", TensorProto.BOOL, [], [True])
        nodes = [
            helper.make_node("Constant", [], ["flag"], value=flag),
            helper.make_node(
                "If",
                ["flag"],
                ["inner"],
                then_branch=_leaf("inner_then"),
                else_branch=_leaf("inner_else"),
            ),
            node,
        ]
    return helper.make_graph(
        nodes,
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])],
        initializer=inits,
    )


def _if_model(tmp_path: Path) -> Path:
    node = helper.make_node(
        "If",
        ["cond"],
        ["y"],
        then_branch=_branch("then", nested=True),
        else_branch=_branch("else"),
    )
    function = helper.make_function(
        "local",
        "Dq",
        ["fx", "fs"],
        ["fy"],
        [helper.make_node("DequantizeLinear", ["fx", "fs"], ["fy"])],
        opset_imports=[helper.make_opsetid("", 21)],
    )
    _, call_inits = _dq_node("main", "unused")  # only for its initializers
    call = helper.make_node("Dq", ["main_q", "main_scale"], ["z"], domain="local")
    graph = helper.make_graph(
        [node, call],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
        ],
        initializer=call_inits,
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        ir_version=10,
        functions=[function],
    )
    onnx.checker.check_model(proto, full_check=True)
    path = tmp_path / "if.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


def test_subgraphs_and_functions_are_counted(tmp_path: Path) -> None:
    doc = _json(_if_model(tmp_path))
    # then, else, and the two branches of the If inside then: 4 subgraphs.
    assert (doc["graphs"], doc["subgraphs"], doc["functions"]) == (1, 4, 1)
    # then and else: one DQ each on constants (6 + 4 bytes each); the function's DQ has
    # types and granularity unknown (its inputs are the function's parameters).
    assert _rows(doc) == {
        ("ai.onnx", "DequantizeLinear", 21, "INT8", "FLOAT", "per-tensor", True, 2, 20),
        ("ai.onnx", "DequantizeLinear", 21, "?", "?", "?", False, 1, 0),
    }
    assert doc["initializers"]["count"] == 6  # 2 in the main graph, 2 per branch
    text = cli("info", str(tmp_path / "if.onnx")).stdout
    assert "1 graph, 4 subgraph(s), 1 function(s)" in text


def test_undeclared_x_type_is_inferred(tmp_path: Path) -> None:
    """Opset 13 Q takes float or int32 x: only type inference can tell which."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32),
            helper.make_node("QuantizeLinear", ["xi", "s"], ["qi"]),
            helper.make_node("Relu", ["x"], ["xr"]),
            helper.make_node("QuantizeLinear", ["xr", "s"], ["qf"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [
            helper.make_tensor_value_info("qi", TensorProto.UINT8, [4]),
            helper.make_tensor_value_info("qf", TensorProto.UINT8, [4]),
        ],
        initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = tmp_path / "cast.onnx"
    path.write_bytes(proto.SerializeToString())
    assert {r["x_type"] for r in _json(path)["qdq"]} == {"INT32", "FLOAT"}


@pytest.mark.parametrize("config", ort_quantized.CONFIGS)
def test_info_on_onnxruntime_quantizer_outputs(config: str, tmp_path: Path) -> None:
    """Real quantizer outputs: every node counted, every type and granularity known."""
    proto = ort_quantized.quantized(config)
    path = tmp_path / "q.onnx"
    path.write_bytes(proto.SerializeToString())
    doc = _json(path)
    qdq = [n for n in proto.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert doc["qdq_nodes"] == len(qdq) == sum(r["nodes"] for r in doc["qdq"])
    domains = {n.domain or "ai.onnx" for n in qdq}
    assert {r["domain"] for r in doc["qdq"]} == domains
    for row in doc["qdq"]:
        assert "?" not in (row["x_type"], row["scale_type"], row["granularity"]), row
    grans = {r["granularity"] for r in doc["qdq"]}
    if "nbits" in config:
        assert grans == {"blocked(axis=0, block=32)"}
    if "per-channel" in config:
        assert any(g.startswith("per-axis") for g in grans)
    if "int16" in config:
        assert "INT16" in {r["x_type"] for r in doc["qdq"] if r["op_type"] == "DequantizeLinear"}
    assert doc["initializers"]["count"] == len(proto.graph.initializer)


def test_undeclared_scale_type_is_inferred(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.FLOAT16),
            helper.make_node("Cast", ["s"], ["sh"], to=TensorProto.FLOAT16),
            helper.make_node("QuantizeLinear", ["xh", "sh"], ["q"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, [4])],
        initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "half.onnx"
    path.write_bytes(proto.SerializeToString())
    (row,) = _json(path)["qdq"]
    assert (row["x_type"], row["scale_type"], row["constant"]) == ("FLOAT16", "FLOAT16", False)


def test_onnx_ir_warnings_stay_quiet(tmp_path: Path) -> None:
    """An input with a shape but no element type makes onnx_ir log a warning when it
    serializes the model (for type inference): not the user's business without --debug."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("QuantizeLinear", ["r", "s"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 16])],
        initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])],
    )
    graph.input[0].type.tensor_type.ClearField("elem_type")
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = tmp_path / "untyped.onnx"
    path.write_bytes(proto.SerializeToString())
    # In a real process: pytest's own log capture would hide the warning in-process.
    command = [sys.executable, "-m", "qlrewrite"]
    quiet = subprocess.run(
        [*command, "info", str(path)], capture_output=True, text=True, check=True
    )
    assert quiet.stderr == "" and "QuantizeLinear" in quiet.stdout
    # info infers on a copy of the file's nodes; a rewrite serializes its output (refused
    # here by onnx.checker): the warning shows with --debug only.
    fold = [*command, "fold", str(path), "-o", str(tmp_path / "out.onnx")]
    plain = subprocess.run(fold, capture_output=True, text=True, check=False)
    assert plain.returncode == 1 and "type for shape" not in plain.stderr
    debug = subprocess.run(
        [*command, "--debug", *fold[3:]], capture_output=True, text=True, check=False
    )
    assert "type for shape [1,16] is not known" in debug.stderr


def test_attribute_of_the_wrong_type(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.ones((4, 3), np.int8), "w_q")
    scale = numpy_helper.from_array(np.full(3, 0.5, np.float32), "s")
    dq = helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="dq", axis=1)
    dq.attribute[0].type = onnx.AttributeProto.UNDEFINED
    graph = helper.make_graph(
        [dq],
        "g",
        [],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3])],
        initializer=[weight, scale],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "attr.onnx"
    path.write_bytes(proto.SerializeToString())
    (row,) = _json(path)["qdq"]
    assert row["granularity"] == "? (axis is UNDEFINED)"
    assert row["x_type"] == "INT8" and row["input_bytes"] == 12 + 12


def _q_then_dq(tmp_path: Path, domain: str, **q_attrs: Any) -> Path:
    q = helper.make_node("QuantizeLinear", ["x", "s"], ["q"], domain=domain, **q_attrs)
    dq = helper.make_node("DequantizeLinear", ["q", "s"], ["y"], domain=domain)
    graph = helper.make_graph(
        [q, dq],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])],
    )
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    path = tmp_path / "qdq.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.parametrize(
    ("domain", "attrs", "dq_x"),
    [
        # ONNX type inference does not know com.microsoft: the producing Q decides (uint8).
        ("com.microsoft", {}, "UINT8"),
        ("", {"output_dtype": TensorProto.INT16}, "INT16"),
        ("", {"output_dtype": 999}, "?"),  # no such type: unknown, not a crash
    ],
)
def test_dq_x_type_from_the_producing_q(
    tmp_path: Path, domain: str, attrs: dict[str, int], dq_x: str
) -> None:
    rows = {r["op_type"]: r for r in _json(_q_then_dq(tmp_path, domain, **attrs))["qdq"]}
    assert rows["DequantizeLinear"]["x_type"] == dq_x
    assert rows["QuantizeLinear"]["x_type"] == "FLOAT"


def test_model_without_qdq(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "relu.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    result = cli("info", str(path))
    assert result.exit_code == 0
    assert "No quantized nodes (QuantizeLinear / DequantizeLinear" in result.stdout
    assert _json(path)["qdq"] == _json(path)["weight_only"] == []


# --------------------------------------------------------------------------- no weights


def test_info_reads_no_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DQ whose 1 MiB weight is external and whose scale is in the proto: neither read."""
    data = tmp_path / "m.onnx.data"
    with open(data, "wb") as handle:
        handle.truncate(1024 * 1024)
    weight = external_tensor("w_q", [1024, 1024], data.name, data_type=TensorProto.INT8)
    scale = numpy_helper.from_array(np.full(1024, 0.5, np.float32), "w_scale")
    # The Q's x has no declared type: info runs type inference (on a weight-free copy).
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=0),
            helper.make_node("Relu", ["w"], ["r"]),
            helper.make_node("QuantizeLinear", ["r", "s"], ["y"]),
        ],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1024, 1024])],
        initializer=[weight, scale, helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])],
    )
    path = tmp_path / "m.onnx"
    proto = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    path.write_bytes(proto.SerializeToString())

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a weight was read")

    monkeypatch.setattr(ir.ExternalTensor, "_load", refuse)
    monkeypatch.setattr(ir.serde.TensorProtoTensor, "numpy", refuse)
    monkeypatch.setattr(ir.serde.TensorProtoTensor, "tobytes", refuse)
    monkeypatch.setattr(ir.serde.TensorProtoTensor, "__array__", refuse)
    doc = _json(path)
    assert doc["initializers"] == {
        "count": 3,
        "bytes": 1024 * 1024 + 4096 + 4,
        "external_data": True,
    }
    assert _rows(doc) == {
        ("ai.onnx", "QuantizeLinear", 21, "FLOAT", "FLOAT", "per-tensor", False, 1, 4),
        (
            "ai.onnx",
            "DequantizeLinear",
            21,
            "INT8",
            "FLOAT",
            "per-axis(axis=0)",
            True,
            1,
            1024 * 1024 + 4096,
        ),
    }
    text = cli("info", str(path))
    assert text.exit_code == 0, text.output
    assert "(external data)" in text.stdout


def _constant_node_scales(tmp_path: Path) -> Path:
    """As the TorchScript exporter writes them: scale and zero point are Constant nodes
    (no value_info), the weight an initializer; one per-axis DQ and one per-tensor DQ."""
    weight = numpy_helper.from_array(np.arange(12, dtype=np.int8).reshape(4, 3), "w")
    nodes = [
        helper.make_node(
            "Constant",
            [],
            ["s"],
            value=numpy_helper.from_array(np.array([0.5, 1, 2, 4], np.float32)),
        ),
        helper.make_node(
            "Constant", [], ["zp"], value=numpy_helper.from_array(np.zeros(4, np.int8))
        ),
        helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["y"], axis=0),
        helper.make_node("Constant", [], ["s1"], value_float=0.25),
        helper.make_node(
            "Constant", [], ["zp1"], value=numpy_helper.from_array(np.array(3, np.int8))
        ),
        helper.make_node("DequantizeLinear", ["w", "s1", "zp1"], ["y1"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 3]) for n in ("y", "y1")],
        initializer=[weight],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(proto, full_check=True)
    path = tmp_path / "constants.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


def test_constant_node_scale_and_zero_point_give_the_granularity(tmp_path: Path) -> None:
    """Issue 16 finding 2: info read the scale's shape from the graph only and printed
    '?'; it resolves Constant nodes as check does."""
    path = _constant_node_scales(tmp_path)
    # bytes by hand: w 12 (counted once per group), s 16 + zp 4; s1 4 + zp1 1
    assert _rows(_json(path)) == {
        ("ai.onnx", "DequantizeLinear", 13, "INT8", "FLOAT", "per-axis(axis=0)", True, 1, 32),
        ("ai.onnx", "DequantizeLinear", 13, "INT8", "FLOAT", "per-tensor", True, 1, 17),
    }
    result = cli("check", str(path), "--format", "json")
    assert json.loads(result.stdout)["files"][0]["findings"] == []
