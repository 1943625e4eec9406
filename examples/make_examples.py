"""Build the example models in this folder, deterministically.

    python examples/make_examples.py [OUT_DIR]

Every model is built with onnx.helper from fixed seeds (numpy's legacy RandomState, whose
streams never change), with a fixed producer and no timestamps, and serialized
deterministically: running the script twice gives identical bytes, and the committed files
are what it writes (tests/project/test_examples.py checks it).

- ``msdomain_int16_opset13.onnx``: QDQ in the com.microsoft form at opset 13 with int16
  activations and int8 per-channel weights, as ONNX Runtime's quantizer writes it with
  ``UseQDQContribOps=True`` (A16W8): MatMul, int32 bias, Relu.
- ``blocked_int4_opset21.onnx``: ai.onnx opset 21, two MatMuls whose uint4 weights are
  dequantized blockwise (axis 0, block_size 32, with zero points), as
  MatMulNBitsQuantizer's QDQ format writes them; the second weight ends in a partial block.
- ``qdq_float_weights_opset13.onnx``: float weights behind QuantizeLinear ->
  DequantizeLinear (per-channel int8), activations in uint8, as fake-quantized exports have.
- ``invalid_per_axis_scale.onnx``: a per-axis DequantizeLinear whose scale has 5 entries
  for an axis of length 8: invalid, for ``qlrewrite check`` to find.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["EXAMPLES", "build_all", "main"]

PRODUCER = "qlrewrite-examples"
PRODUCER_VERSION = "1"
MS = "com.microsoft"
Q = "QuantizeLinear"
DQ = "DequantizeLinear"


def _model(  # noqa: PLR0917
    nodes: list[onnx.NodeProto],
    name: str,
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto],
    opsets: dict[str, int],
    ir_version: int,
    doc: str,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
        ir_version=ir_version,
        producer_name=PRODUCER,
        producer_version=PRODUCER_VERSION,
        doc_string=doc,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _scalar(name: str, dtype: int, value: float | int) -> onnx.TensorProto:
    return helper.make_tensor(name, dtype, [], [value])


def _int4_tensor(name: str, dtype: int, values: np.ndarray) -> onnx.TensorProto:
    """A uint4/int4 tensor: values packed two per byte, low nibble first."""
    flat = values.astype(np.int64).ravel()
    return helper.make_tensor(name, dtype, list(values.shape), flat.tolist())


def _msdomain_int16_inits(k: int, n: int) -> list[onnx.TensorProto]:
    """The constants of :func:`msdomain_int16_opset13` (seeded)."""
    rng = np.random.RandomState(13)
    w_scale = (rng.uniform(0.002, 0.01, size=n)).astype(np.float32)
    w_q = rng.randint(-127, 128, size=(k, n)).astype(np.int8)
    in_scale = np.float32(1 / 4096)
    bias_scale = (in_scale * w_scale).astype(np.float32)
    bias_q = rng.randint(-20000, 20000, size=n).astype(np.int32)
    out_scale = np.float32(1 / 2048)
    return [
        _scalar("input_scale", TensorProto.FLOAT, float(in_scale)),
        _scalar("input_zero_point", TensorProto.INT16, 0),
        numpy_helper.from_array(w_q, "weight_quantized"),
        numpy_helper.from_array(w_scale, "weight_scale"),
        numpy_helper.from_array(np.zeros(n, np.int8), "weight_zero_point"),
        numpy_helper.from_array(bias_q, "bias_quantized"),
        numpy_helper.from_array(bias_scale, "bias_scale"),
        numpy_helper.from_array(np.zeros(n, np.int32), "bias_zero_point"),
        _scalar("output_scale", TensorProto.FLOAT, float(out_scale)),
        _scalar("output_zero_point", TensorProto.INT16, 0),
    ]


def _ms_qdq(op: str, x: str, output: str, name: str, **attrs: int) -> onnx.NodeProto:
    """A com.microsoft Q or DQ of ``x`` with ``<x>_scale`` / ``<x>_zero_point``."""
    stem = x.removesuffix("_QuantizeLinear_Output").removesuffix("_quantized")
    inputs = [x, f"{stem}_scale", f"{stem}_zero_point"]
    return helper.make_node(op, inputs, [output], name=name, domain=MS, **attrs)


def msdomain_int16_opset13() -> onnx.ModelProto:
    """A16W8 in the com.microsoft form: MatMul + int32 bias + Relu."""
    k, n = 16, 8
    nodes = [
        _ms_qdq(Q, "input", "input_QuantizeLinear_Output", "input_QuantizeLinear"),
        _ms_qdq(
            DQ,
            "input_QuantizeLinear_Output",
            "input_DequantizeLinear_Output",
            "input_DequantizeLinear",
        ),
        _ms_qdq(
            DQ,
            "weight_quantized",
            "weight_DequantizeLinear_Output",
            "weight_DequantizeLinear",
            axis=1,
        ),
        _ms_qdq(
            DQ, "bias_quantized", "bias_DequantizeLinear_Output", "bias_DequantizeLinear", axis=0
        ),
        helper.make_node(
            "MatMul",
            ["input_DequantizeLinear_Output", "weight_DequantizeLinear_Output"],
            ["matmul_output"],
            name="MatMul",
        ),
        helper.make_node(
            "Add", ["matmul_output", "bias_DequantizeLinear_Output"], ["add_output"], name="Add"
        ),
        helper.make_node("Relu", ["add_output"], ["relu_output"], name="Relu"),
        helper.make_node(
            Q,
            ["relu_output", "output_scale", "output_zero_point"],
            ["output_QuantizeLinear_Output"],
            name="output_QuantizeLinear",
            domain=MS,
        ),
        _ms_qdq(DQ, "output_QuantizeLinear_Output", "output", "output_DequantizeLinear"),
    ]
    return _model(
        nodes,
        "msdomain_int16",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, n])],
        _msdomain_int16_inits(k, n),
        {"": 13, MS: 1},
        7,
        "QDQ with com.microsoft Q/DQ, int16 activations, int8 per-channel weights.",
    )


def blocked_int4_opset21() -> onnx.ModelProto:
    """Two MatMuls with blockwise uint4 weights (axis 0, block_size 32), opset 21."""
    rng = np.random.RandomState(21)
    block = 32
    dims = [(64, 48), (48, 16)]  # 48 rows: one full block and one partial block
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current = "input"
    for index, (k, n) in enumerate(dims):
        blocks = -(-k // block)
        prefix = f"MatMul_{index}_weight"
        w_q = rng.randint(0, 16, size=(k, n))
        zp = rng.randint(6, 10, size=(blocks, n))
        scale = rng.uniform(0.005, 0.02, size=(blocks, n)).astype(np.float32)
        inits += [
            _int4_tensor(f"{prefix}_Q4", TensorProto.UINT4, w_q),
            numpy_helper.from_array(scale, f"{prefix}_scales"),
            _int4_tensor(f"{prefix}_zero_points", TensorProto.UINT4, zp),
        ]
        nodes.append(
            helper.make_node(
                DQ,
                [f"{prefix}_Q4", f"{prefix}_scales", f"{prefix}_zero_points"],
                [f"{prefix}_DQ"],
                name=f"{prefix}_DequantizeLinear",
                axis=0,
                block_size=block,
            )
        )
        out = "output" if index == len(dims) - 1 else f"MatMul_{index}_output"
        nodes.append(
            helper.make_node("MatMul", [current, f"{prefix}_DQ"], [out], name=f"MatMul_{index}")
        )
        if index < len(dims) - 1:
            nodes.append(helper.make_node("Relu", [out], [f"Relu_{index}_output"]))
            nodes[-1].name = f"Relu_{index}"
            current = f"Relu_{index}_output"
    return _model(
        nodes,
        "blocked_int4",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", dims[0][0]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", dims[-1][1]])],
        inits,
        {"": 21},
        10,
        "MatMul weights in uint4, DequantizeLinear axis 0 block_size 32 (MatMulNBits QDQ form).",
    )


def qdq_float_weights_opset13() -> onnx.ModelProto:
    """Float weights behind QuantizeLinear -> DequantizeLinear (per-channel int8)."""
    rng = np.random.RandomState(7)
    k, n = 16, 8
    weight = rng.normal(0, 0.5, size=(k, n)).astype(np.float32)
    w_scale = (np.abs(weight).max(axis=0) / 127).astype(np.float32)
    inits = [
        numpy_helper.from_array(weight, "weight"),
        numpy_helper.from_array(w_scale, "weight_scale"),
        numpy_helper.from_array(np.zeros(n, np.int8), "weight_zero_point"),
        _scalar("input_scale", TensorProto.FLOAT, 0.02),
        _scalar("input_zero_point", TensorProto.UINT8, 128),
    ]
    nodes = [
        helper.make_node(
            Q, ["input", "input_scale", "input_zero_point"], ["input_q"], name="input_Q"
        ),
        helper.make_node(
            DQ, ["input_q", "input_scale", "input_zero_point"], ["input_dq"], name="input_DQ"
        ),
        helper.make_node(
            Q,
            ["weight", "weight_scale", "weight_zero_point"],
            ["weight_q"],
            name="weight_Q",
            axis=1,
        ),
        helper.make_node(
            DQ,
            ["weight_q", "weight_scale", "weight_zero_point"],
            ["weight_dq"],
            name="weight_DQ",
            axis=1,
        ),
        helper.make_node("MatMul", ["input_dq", "weight_dq"], ["output"], name="MatMul"),
    ]
    return _model(
        nodes,
        "qdq_float_weights",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, n])],
        inits,
        {"": 13},
        7,
        "Float weights fake-quantized by QuantizeLinear -> DequantizeLinear (per-channel int8).",
    )


def invalid_per_axis_scale() -> onnx.ModelProto:
    """Per-axis DequantizeLinear whose scale length (5) is not x.shape[axis] (8)."""
    rng = np.random.RandomState(5)
    k, n = 16, 8
    inits = [
        numpy_helper.from_array(rng.randint(-127, 128, size=(k, n)).astype(np.int8), "weight_q"),
        numpy_helper.from_array(np.full(5, 0.01, np.float32), "weight_scale"),
    ]
    nodes = [
        helper.make_node(DQ, ["weight_q", "weight_scale"], ["weight"], name="weight_DQ", axis=1),
        helper.make_node("MatMul", ["input", "weight"], ["output"], name="MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "invalid_per_axis_scale",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, n])],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13)],
        ir_version=7,
        producer_name=PRODUCER,
        producer_version=PRODUCER_VERSION,
        doc_string="Invalid on purpose: per-axis scale of length 5 for an axis of length 8.",
    )


#: File name -> builder.
EXAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {
    "msdomain_int16_opset13.onnx": msdomain_int16_opset13,
    "blocked_int4_opset21.onnx": blocked_int4_opset21,
    "qdq_float_weights_opset13.onnx": qdq_float_weights_opset13,
    "invalid_per_axis_scale.onnx": invalid_per_axis_scale,
}


def build_all(out_dir: str | Path) -> list[Path]:
    """Write every example into ``out_dir``; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in EXAMPLES.items():
        path = out / name
        path.write_bytes(build().SerializeToString(deterministic=True))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    """Build the examples into the given folder (default: this script's folder)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).resolve().parent
    for path in build_all(out):
        print(f"{path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
