"""Models written the way other quantizers write them, through every command.

Each fixture mimics one producer's pattern in code (no producer is installed): NNCF's
symmetric weight compression (negative block scales), NVIDIA ModelOpt's float16 Q/DQ,
AMD Quark's custom domains and its many opset imports, Brevitas' QONNX export.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_quantized import ort_version

import qlrewrite


def nncf_int4_sym(path: Path, seed: int = 0) -> Path:
    """NNCF INT4_SYM weight compression: int4 blocked DQ (block 32, axis 0 of [K, N]),
    no zero point, scale = w[argmax |w|] / -8 per block (about half negative)."""
    rng = np.random.default_rng(seed)
    k, n, block = 64, 16, 32
    w = rng.normal(size=(k, n)).astype(np.float32)
    blocks = w.reshape(k // block, block, n)
    peak = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None, :], axis=1)[:, 0]
    scale = (peak / -8).astype(np.float32)  # [K / block, N]
    q = np.clip(np.rint(blocks / scale[:, None, :]), -8, 7).reshape(k, n)
    weight = helper.make_tensor("w_q", TensorProto.INT4, [k, n], q.astype(np.int8).ravel().tolist())
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], axis=0, block_size=block),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "nncf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [weight, numpy_helper.from_array(scale, "w_s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, path)
    return path


def test_negative_scales_are_no_warning_by_default(tmp_path: Path) -> None:
    path = nncf_int4_sym(tmp_path / "nncf.onnx")
    scales = numpy_helper.to_array(onnx.load(path).graph.initializer[1])
    assert (scales < 0).any() and (scales > 0).any()  # the pattern under test
    assert qlrewrite.check(path).findings == []
    selected = qlrewrite.check(path, select=["QL504"]).findings
    assert [f.rule for f in selected] == ["QL504"]
    assert "negative" in selected[0].message
    assert [f.rule for f in qlrewrite.check(path, select=["QL5"]).findings] == ["QL504"]
    assert qlrewrite.check(path, select=["ALL"]).findings == []  # ALL: the default set


# --------------------------------------------------------------------------- ModelOpt float16


def modelopt_fp16(opset: int = 19, *, weight: str = "float", n: int = 64) -> onnx.ModelProto:
    """NVIDIA ModelOpt with high_precision_dtype='fp16': x float32 -> Cast(float16) ->
    Q/DQ (float16 scalar scale, int8 zero point) -> MatMul with W behind Q/DQ per axis 1
    (float16 scales [n], int8 zero point 0) -> Cast(float). ``weight``: "float" (a float16
    W behind Q -> DQ, as ModelOpt writes it) or "int8" (W already quantized, DQ only)."""
    rng = np.random.default_rng(opset)
    w = rng.normal(size=(n, n)).astype(np.float16)
    w_scale = (np.abs(w.astype(np.float32)).max(axis=0) / 127).astype(np.float16)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float16), "x_s"),
        numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
        numpy_helper.from_array(w_scale, "w_s"),
        numpy_helper.from_array(np.zeros(n, np.int8), "w_zp"),
    ]
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("QuantizeLinear", ["x16", "x_s", "x_zp"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_zp"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y16"]),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    if weight == "float":
        inits.append(numpy_helper.from_array(w, "w"))
        nodes.insert(3, helper.make_node("QuantizeLinear", ["w", "w_s", "w_zp"], ["w_q"], axis=1))
    else:
        q = np.clip(np.rint(w.astype(np.float32) / w_scale.astype(np.float32)), -127, 127)
        inits.append(numpy_helper.from_array(q.astype(np.int8), "w_q"))
    graph = helper.make_graph(
        nodes,
        "modelopt_fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, n])],
        inits,
    )
    ir_version = {19: 9, 21: 10, 23: 11, 25: 13}[opset]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _ort_outputs(model: onnx.ModelProto, seed: int = 0) -> list[np.ndarray]:
    pytest.importorskip("onnxruntime")
    from ort_quantized import run_ort

    x = np.random.default_rng(seed).normal(size=(8, 64)).astype(np.float32) * 3
    return run_ort(model, {"x": x})


def _fold(model: onnx.ModelProto, tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    code, _, err = _cli("fold", str(source), "-o", str(out), *args)
    return code, err, out


def _cli(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from qlrewrite.cli import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("opset", [19, 21, 25])
@pytest.mark.parametrize("weight", ["float", "int8"])
@pytest.mark.parametrize("keep_dq", [False, True])
def test_float16_fold_keeps_ort_outputs(
    tmp_path: Path, opset: int, weight: str, keep_dq: bool
) -> None:
    model = modelopt_fp16(opset, weight=weight)
    code, err, out = _fold(model, tmp_path, *(["--keep-dq"] if keep_dq else []))
    assert code == 0, err
    same = _same_bits(_ort_outputs(model), _ort_outputs(onnx.load(out)))
    if opset >= 23 and weight == "float" and ort_version() < (1, 32):
        # QuantizeLinear-23+ of float16 without `precision` divides in float16 (the spec,
        # ORT 1.32); ORT 1.31 divides in float32, so its own outputs differ from the fold.
        assert not same
    else:
        assert same
    folded = onnx.load(out)
    casts = [n for n in folded.graph.node if n.op_type == "Cast" and n.output[0] == "w_dq"]
    # ORT computed the weight DQ in float32 only when its input came from the Q node.
    assert len(casts) == (weight == "float"), [n.op_type for n in folded.graph.node]
    if casts and not keep_dq:
        (value,) = [t for t in folded.graph.initializer if t.name == casts[0].input[0]]
        assert value.data_type == TensorProto.FLOAT
        # The float16 value the spec defines: the float32 product rounded once.
        source = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        w32, s32 = source["w"].astype(np.float32), source["w_s"].astype(np.float32)
        quotient = w32 / s32 if opset < 23 else (source["w"] / source["w_s"]).astype(np.float32)
        q = np.clip(np.rint(quotient), -128, 127)
        np.testing.assert_array_equal(numpy_helper.to_array(value), q * s32)


def test_float16_compact_rounds_and_warns(tmp_path: Path) -> None:
    model = modelopt_fp16(19)
    code, err, out = _fold(model, tmp_path, "--float16", "compact")
    assert code == 0, err
    assert "1 float16 value(s) that ONNX Runtime's CPU provider computes in float32" in err
    folded = onnx.load(out)
    assert not [n for n in folded.graph.node if n.output[0] == "w_dq"]
    (value,) = [t for t in folded.graph.initializer if t.name == "w_dq"]
    assert value.data_type == TensorProto.FLOAT16
    # The premise of the default: ORT's outputs do change when the weight is rounded.
    assert not _same_bits(_ort_outputs(model), _ort_outputs(folded))


def test_float16_fold_verify_is_exact(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    code, err, _ = _fold(modelopt_fp16(21), tmp_path, "--verify")
    assert code == 0, err
    assert "verify: exact" in err and "float32 with cast 1" in err


@pytest.mark.parametrize("opset", [23, 25])
@pytest.mark.parametrize("weight", ["float", "int8"])
def test_float16_upgrade_keeps_ort_outputs(tmp_path: Path, opset: int, weight: str) -> None:
    """QuantizeLinear-23 divides float16 in float16 unless `precision` says otherwise (ORT
    1.32 does; 1.31 and every earlier version divided in float32): the upgrade sets
    precision=FLOAT on the float16 QuantizeLinear nodes it moves past opset 23."""
    model = modelopt_fp16(19, weight=weight)
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    code, _, err = _cli("upgrade", str(source), "--opset", str(opset), "-o", str(out))
    assert code == 0, err
    upgraded = onnx.load(out)
    quantize = [n for n in upgraded.graph.node if n.op_type == "QuantizeLinear"]
    assert quantize and all(
        helper.get_attribute_value(a) == TensorProto.FLOAT
        for n in quantize
        for a in n.attribute
        if a.name == "precision"
    )
    assert all(any(a.name == "precision" for a in n.attribute) for n in quantize)
    assert _same_bits(_ort_outputs(model), _ort_outputs(upgraded))
    # and folding the upgraded model keeps them too (the fold reads `precision`)
    code, err, folded = _fold(upgraded, tmp_path)
    assert code == 0, err
    assert _same_bits(_ort_outputs(model), _ort_outputs(onnx.load(folded)))


def test_float16_upgrade_below_23_adds_no_precision(tmp_path: Path) -> None:
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(modelopt_fp16(19), source)
    code, _, err = _cli("upgrade", str(source), "--opset", "21", "-o", str(out))
    assert code == 0, err
    assert not any(a.name == "precision" for n in onnx.load(out).graph.node for a in n.attribute)


# --------------------------------------------------------------------------- AMD Quark, QONNX

#: The ten opset imports AMD Quark writes (most unused by the model).
QUARK_IMPORTS = [
    ("", 21),
    ("com.microsoft", 1),
    ("com.amd.quark", 1),
    ("ai.onnx.ml", 5),
    ("ai.onnx.training", 1),
    ("ai.onnx.preview.training", 1),
    ("com.microsoft.nchwc", 1),
    ("com.microsoft.experimental", 1),
    ("org.pytorch.aten", 1),
    ("com.ms.internal.nhwc", 1),
]


def _quark_activation(custom: str | None) -> list[onnx.NodeProto]:
    """x -> x_q (and x_q2 for "mx"): an Identity, or Quark's own BFP / MX ops."""
    quark = "com.amd.quark"
    if custom is None:
        return [helper.make_node("Identity", ["x"], ["x_q"])]
    if custom == "bfp16":
        bfp = {"bfp_method": "to_bfp", "axis": 1, "bit_width": 16, "block_size": 8}
        return [
            helper.make_node(
                "BFPQuantizeDequantize", ["x"], ["x_q"], domain=quark, rounding_mode=2, **bfp
            )
        ]
    mx = {"axis": 1, "block_size": 32}
    return [
        helper.make_node(
            "MXQuantizeDequantize", ["x"], ["x_q"], domain=quark, element_dtype="fp8_e4m3", **mx
        ),
        helper.make_node(
            "MXQuantizeDequantize", ["x_q"], ["x_q2"], domain=quark, element_dtype="fp4_e2m1", **mx
        ),
    ]


def quark_model(custom: str | None = None) -> onnx.ModelProto:
    """AMD Quark: com.microsoft int16 Q/DQ even at opset 21, ten opset imports; with
    ``custom`` ("bfp16" or "mx") the activation goes through Quark's own op instead."""
    w = np.random.default_rng(1).normal(size=(8, 8)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(0.01, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int16), "zp"),
    ]
    activation = _quark_activation(custom)
    nodes = [
        *activation,
        helper.make_node("QuantizeLinear", ["w", "s", "zp"], ["w_q"], domain="com.microsoft"),
        helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["w_dq"], domain="com.microsoft"),
        helper.make_node("MatMul", [activation[-1].output[0], "w_dq"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "quark",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        inits,
    )
    imports = [helper.make_opsetid(d, v) for d, v in QUARK_IMPORTS]
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def qonnx_model() -> onnx.ModelProto:
    """Brevitas export_qonnx: Quant (4-bit weights, 8-bit activations) and BipolarQuant in
    the qonnx.custom_op.general domain, scalar float inputs for scale, zero point, bits."""
    scalars = {"s": 0.1, "zp": 0.0, "b8": 8.0, "b4": 4.0}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in scalars.items()]
    inits.append(numpy_helper.from_array(np.ones((4, 4), np.float32), "w"))
    domain = "qonnx.custom_op.general"
    nodes = [
        helper.make_node(
            "Quant",
            ["x", "s", "zp", "b8"],
            ["xq"],
            domain=domain,
            narrow=0,
            signed=1,
            rounding_mode="ROUND",
        ),
        helper.make_node(
            "Quant",
            ["w", "s", "zp", "b4"],
            ["wq"],
            domain=domain,
            narrow=1,
            signed=1,
            rounding_mode="ROUND",
        ),
        helper.make_node("MatMul", ["xq", "wq"], ["h"]),
        helper.make_node("BipolarQuant", ["h", "s"], ["y"], domain=domain),
    ]
    graph = helper.make_graph(
        nodes,
        "qonnx",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        inits,
    )
    imports = [helper.make_opsetid("", 13), helper.make_opsetid(domain, 2)]
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def test_quark_convert_drops_every_unused_import(tmp_path: Path) -> None:
    source, out = tmp_path / "quark.onnx", tmp_path / "out.onnx"
    onnx.save(quark_model(), source)
    code, _, err = _cli("convert", str(source), "--to", "onnx", "-o", str(out))
    assert code == 0, err
    assert "opset imports dropped 9" in err
    assert [(o.domain, o.version) for o in onnx.load(out).opset_import] == [("", 21)]


def test_imports_in_use_are_kept(tmp_path: Path) -> None:
    """An import used only inside a subgraph, or only by a function, stays."""
    model = quark_model()
    branch = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["z"], domain="ai.onnx.ml")],
        "then",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])],
    )
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "c"))
    model.graph.node.append(
        helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=branch)
    )
    function = helper.make_function(
        "custom.fn",
        "Twice",
        ["a"],
        ["b"],
        [helper.make_node("Shape", ["a"], ["b"], domain="org.pytorch.aten")],
        [helper.make_opsetid("", 21), helper.make_opsetid("org.pytorch.aten", 1)],
    )
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("custom.fn", 1))
    model.graph.node.append(helper.make_node("Twice", ["y"], ["shape"], domain="custom.fn"))
    model.graph.output.extend(
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ]
    )
    from onnx_ir import serde

    from qlrewrite.qdq import drop_unused_domains

    ir_model = serde.deserialize_model(model)
    dropped = drop_unused_domains(ir_model)
    kept = set(ir_model.opset_imports)
    assert {"", "ai.onnx.ml", "org.pytorch.aten", "custom.fn", "com.microsoft"} <= kept
    assert "com.amd.quark" not in kept and dropped == 6
    assert set(ir_model.functions[("custom.fn", "Twice", "")].opset_imports) == {
        "",
        "org.pytorch.aten",
    }


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (lambda: quark_model("bfp16"), "AMD Quark: com.amd.quark BFPQuantizeDequantize x1"),
        (lambda: quark_model("mx"), "AMD Quark: com.amd.quark MXQuantizeDequantize x2"),
        (
            qonnx_model,
            "Brevitas / QONNX: qonnx.custom_op.general BipolarQuant x1, "
            "qonnx.custom_op.general Quant x2",
        ),
    ],
    ids=["quark-bfp16", "quark-mx", "qonnx"],
)
def test_custom_quantization_is_reported_and_refused(
    tmp_path: Path, model: object, expected: str
) -> None:
    source = tmp_path / "model.onnx"
    onnx.save(model(), source)  # type: ignore[operator]
    code, out, err = _cli("check", str(source))
    assert code == 0, err
    assert f"{source}: not checked: " in out and expected in out
    assert "custom quantization node(s) not checked" in out
    from qlrewrite.qdq.custom_ops import describe

    assert expected in describe(qlrewrite.check(source).custom_quant)
    code, out, _ = _cli("info", str(source), "--format", "json")
    groups = json.loads(out)["custom_quant"]
    assert [f"{g['domain']} {g['op_type']} x{g['nodes']}" for g in groups] == [
        part.split(": ")[-1] for part in expected.split(", ")
    ]
    for args in (
        ["fold"],
        ["fold", "--keep-dq"],
        ["convert", "--to", "onnx"],
        ["convert", "--to", "com.microsoft"],
        ["upgrade", "--opset", "23"],
    ):
        code, _, err = _cli(args[0], str(source), *args[1:], "-o", str(tmp_path / "out.onnx"))
        assert code == 1, (args, err)
        (line,) = err.strip().splitlines()
        # convert --to onnx converts QONNX Quant: only what it cannot convert is named
        converts_quant = args == ["convert", "--to", "onnx"] and "Quant x2" in expected
        named = "qonnx.custom_op.general BipolarQuant x1" if converts_quant else expected
        assert named in line and "nothing written" in line, line
        assert not (tmp_path / "out.onnx").exists()


def _weight_consumers(kind: str, n: int = 32) -> onnx.ModelProto:
    """The float16 Q -> DQ weight of a ModelOpt model feeding other consumers: ORT decides
    per consumer (it gives each its own DQ copy) whether it reads float16 or float32."""
    model = modelopt_fp16(19, n=n)
    graph = model.graph
    matmul = next(node for node in graph.node if node.op_type == "MatMul")
    if kind == "gemm":
        matmul.op_type = "Gemm"
        matmul.attribute.append(helper.make_attribute("transB", 1))
    elif kind == "add":
        matmul.op_type = "Add"
        for info in (graph.input[0], graph.output[0]):
            info.type.tensor_type.shape.dim[0].dim_value = n
    elif kind == "transpose":  # Transpose has a float16 kernel: the weight is rounded
        graph.node.insert(5, helper.make_node("Transpose", ["w_dq"], ["w_t"], perm=[1, 0]))
        matmul.input[1] = "w_t"
    elif kind == "shared":  # MatMul (float32) and Reshape (float16, a graph output)
        graph.initializer.append(numpy_helper.from_array(np.array([n * n], np.int64), "shape"))
        graph.node.append(helper.make_node("Reshape", ["w_dq", "shape"], ["flat"]))
        graph.output.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT16, [n * n]))
    return model


@pytest.mark.parametrize("kind", ["gemm", "add", "transpose", "shared"])
@pytest.mark.parametrize("keep_dq", [False, True])
def test_float16_fold_follows_each_consumer(tmp_path: Path, kind: str, keep_dq: bool) -> None:
    model = _weight_consumers(kind)
    onnx.checker.check_model(model, full_check=True)
    code, err, out = _fold(model, tmp_path, *(["--keep-dq"] if keep_dq else []))
    assert code == 0, err
    rows = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    x = np.random.default_rng(3).normal(size=(rows, 32)).astype(np.float32)
    from ort_quantized import run_ort

    assert _same_bits(run_ort(model, {"x": x}), run_ort(onnx.load(out), {"x": x}))
    assert ("float32 with cast" in err) == (kind != "transpose")


def _with_constant_nodes(model: onnx.ModelProto, names: tuple[str, ...]) -> onnx.ModelProto:
    """The initializers ``names`` as Constant nodes (as the TorchScript exporter writes
    scales and zero points), with no declared type."""
    graph = model.graph
    moved = [t for t in graph.initializer if t.name in names]
    kept = [t for t in graph.initializer if t.name not in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in moved]
    nodes += list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
@pytest.mark.parametrize("keep_dq", [False, True])
def test_float16_fold_with_constant_node_scales(tmp_path: Path, domain: str, keep_dq: bool) -> None:
    """Scales and zero points in Constant nodes, Q/DQ in either domain (com.microsoft has
    no float16 kernel: ORT computes every such DQ in float32)."""
    model = _with_constant_nodes(modelopt_fp16(19), ("w_s", "w_zp", "x_s"))
    if domain:
        for node in model.graph.node:
            if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                node.domain = domain
        model.opset_import.append(helper.make_opsetid(domain, 1))
    code, err, out = _fold(model, tmp_path, *(["--keep-dq"] if keep_dq else []))
    assert code == 0, err
    assert _same_bits(_ort_outputs(model), _ort_outputs(onnx.load(out)))
    # com.microsoft --keep-dq: the kept DQ computes in float32 in ORT anyway, unchanged
    assert ("float32 with cast 1" in err) == (not (keep_dq and domain))


def test_nncf_model_passes_strict_check_in_ci(tmp_path: Path) -> None:
    path = nncf_int4_sym(tmp_path / "nncf.onnx")
    code, out, err = _cli("check", str(path), "--strict")
    assert code == 0, out + err
    code, out, _ = _cli("check", str(path), "--strict", "--select", "QL504")
    assert code == 1 and "QL504" in out
    code, out, _ = _cli("rules", "QL504")
    assert code == 0 and "warning (opt-in)" in out


def test_convert_to_onnx_at_23_keeps_float32_division(tmp_path: Path) -> None:
    """com.microsoft QuantizeLinear divides float16 in float32; as ai.onnx-23+ it needs
    precision=FLOAT to do the same."""
    model = modelopt_fp16(23)
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            node.domain = "com.microsoft"
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    code, _, err = _cli("convert", str(source), "--to", "onnx", "-o", str(out), "--allow-float16")
    assert code == 0, err
    assert "precision set 2" in err
    for node in onnx.load(out).graph.node:
        if node.op_type == "QuantizeLinear":
            assert [(a.name, a.i) for a in node.attribute if a.name == "precision"] == [
                ("precision", TensorProto.FLOAT)
            ]


def test_float16_convert_refuses_only_what_onnx_runtime_would_compute_otherwise(
    tmp_path: Path,
) -> None:
    """ModelOpt's activation Q reads a Cast of a float32 input: as com.microsoft (no float16
    kernel) ORT drops that Cast and quantizes the unrounded value. That node is refused;
    with the input already float16 nothing changes and the conversion is exact."""
    model = modelopt_fp16(19)
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    args = ["convert", str(source), "--to", "com.microsoft", "-o", str(out)]
    code, _, err = _cli(*args)
    assert code == 1 and "cannot convert 1 node(s) exactly" in err and "'x_q'" in err
    assert not out.exists()
    code, _, err = _cli(*args, "--allow-float16")
    assert code == 0 and "converted with --allow-float16" in err
    assert not _same_bits(_ort_outputs(model), _ort_outputs(onnx.load(out)))  # the premise
    # float16 graph input straight into the Q: both domains read the same float16 x
    graph = model.graph
    del graph.node[0]  # the Cast
    graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    graph.node[0].input[0] = "x"
    onnx.save(model, source)
    out.unlink()
    code, _, err = _cli(*args, "--verify")
    assert code == 0, err
    assert "verify: exact" in err and "--allow-float16" not in err


def test_float16_kernel_table_matches_the_installed_onnxruntime() -> None:
    """Every float16 CPU kernel of the installed ORT is in the table ort_float16 decides
    with; the ops float16 graphs hinge on agree both ways."""
    pytest.importorskip("onnxruntime")
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    from qlrewrite.targets.ort_float16 import has_float16_kernel

    installed: set[tuple[str, str, int]] = set()
    for kernel in state.get_all_opkernel_def():
        constraints = kernel.type_constraints.values()
        if kernel.provider == "CPUExecutionProvider" and any(
            "tensor(float16)" in types for types in constraints
        ):
            low, high = kernel.version_range
            for version in range(low, min(high, 30) + 1):
                installed.add((kernel.domain, kernel.op_name, version))
    missing = [k for k in installed if not has_float16_kernel(*k)]
    assert not missing, sorted(missing)[:10]
    for op in ("QuantizeLinear", "DequantizeLinear", "MatMul", "Gemm", "Conv", "Add", "Mul"):
        for version in (13, 19, 21, 23, 25):
            assert has_float16_kernel("", op, version) == (("", op, version) in installed)
    assert not has_float16_kernel("com.microsoft", "DequantizeLinear", 1)
