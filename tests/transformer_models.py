"""BERT-like and GPT-2-like float models built in code, quantized by ONNX Runtime's own
quantizer (no downloads): the graphs ``convert --to onnx --verify`` meets from users.

Each is one small transformer layer with a dynamic sequence length: token and position
embeddings, LayerNormalization, self-attention (MatMul, Add, Softmax), an MLP with Gelu
(BERT: the Erf form; GPT-2: the Tanh form) and, for BERT, the pooler (Gather -> Gemm ->
Tanh). :func:`quantized` returns them quantized with ``QuantFormat.QOperator``, either as
written or after ONNX Runtime's graph optimizer fused them (``fused=True``).
"""

from __future__ import annotations

import functools
import logging
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["MODELS", "float_model", "quantized"]

D, HEADS, FFN, VOCAB, MAX_POS = 32, 2, 64, 50, 16
_F32 = np.float32


def _weights(rng: np.random.Generator) -> list[onnx.TensorProto]:
    def w(name: str, *shape: int, scale: float = 0.1) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(_F32), name)

    return [
        w("word_emb", VOCAB, D, scale=1.0),
        w("pos_emb", MAX_POS, D, scale=0.5),
        *(w(n, D, D) for n in ("wq", "wk", "wv", "wo")),
        *(w(n, D, scale=0.02) for n in ("bq", "bk", "bv", "bo")),
        w("w1", D, FFN),
        w("b1", FFN, scale=0.02),
        w("w2", FFN, D),
        w("b2", D, scale=0.02),
        *(
            numpy_helper.from_array(np.ones(D, _F32) * g, f"ln{i}_g")
            for i, g in ((0, 1.0), (1, 0.9), (2, 1.1))
        ),
        *(numpy_helper.from_array(np.full(D, 0.01 * i, _F32), f"ln{i}_b") for i in range(3)),
        numpy_helper.from_array(np.array([0, -1, HEADS, D // HEADS], np.int64), "heads_shape"),
        numpy_helper.from_array(np.array([0, -1, D], np.int64), "merge_shape"),
        numpy_helper.from_array(np.array(1 / np.sqrt(D // HEADS), _F32), "inv_sqrt_dh"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]


def _node(op: str, inputs: list[str], output: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=output + "_" + op.lower(), **attrs)


def _embeddings() -> list[onnx.NodeProto]:
    """word_emb[input_ids] + pos_emb[:S], normalized: ``h0`` [1, S, D]."""
    return [
        _node("Gather", ["word_emb", "input_ids"], "word"),
        _node("Shape", ["input_ids"], "ids_shape"),
        _node("Slice", ["ids_shape", "one", "two_end"], "seq_len"),
        _node("Slice", ["pos_emb", "zero", "seq_len", "zero"], "pos"),
        _node("Add", ["word", "pos"], "emb"),
        _node("LayerNormalization", ["emb", "ln0_g", "ln0_b"], "h0", axis=-1, epsilon=1e-5),
    ]


def _attention(x: str, causal: bool) -> list[str | onnx.NodeProto]:
    """Multi-head self-attention of ``x`` plus the residual: ``att_out``."""
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [
            _node("MatMul", [x, f"w{name}"], f"{name}_mm"),
            _node("Add", [f"{name}_mm", f"b{name}"], f"{name}_b"),
            _node("Reshape", [f"{name}_b", "heads_shape"], f"{name}_heads"),
        ]
    nodes += [
        _node("Transpose", ["q_heads"], "q_t", perm=[0, 2, 1, 3]),
        _node("Transpose", ["k_heads"], "k_t", perm=[0, 2, 3, 1]),
        _node("Transpose", ["v_heads"], "v_t", perm=[0, 2, 1, 3]),
        _node("MatMul", ["q_t", "k_t"], "scores"),
        _node("Mul", ["scores", "inv_sqrt_dh"], "scaled"),
    ]
    logits = "scaled"
    if causal:  # -1e4 above the diagonal, the [S, S] corner of a [MAX_POS, MAX_POS] mask
        nodes += [
            _node("Concat", ["seq_len", "seq_len"], "seq_len2", axis=0),
            _node("Slice", ["causal_mask", "zero2", "seq_len2", "axes01"], "mask"),
            _node("Add", ["scaled", "mask"], "masked"),
        ]
        logits = "masked"
    nodes += [
        _node("Softmax", [logits], "probs", axis=-1),
        _node("MatMul", ["probs", "v_t"], "context"),
        _node("Transpose", ["context"], "context_t", perm=[0, 2, 1, 3]),
        _node("Reshape", ["context_t", "merge_shape"], "merged"),
        _node("MatMul", ["merged", "wo"], "o_mm"),
        _node("Add", ["o_mm", "bo"], "o_b"),
        _node("Add", ["o_b", x], "att_out"),
    ]
    return nodes


def _gelu_erf(x: str) -> list[onnx.NodeProto]:
    return [
        _node("Div", [x, "sqrt2"], "g_div"),
        _node("Erf", ["g_div"], "g_erf"),
        _node("Add", ["g_erf", "f_one"], "g_add"),
        _node("Mul", [x, "g_add"], "g_mul"),
        _node("Mul", ["g_mul", "f_half"], "gelu"),
    ]


def _gelu_tanh(x: str) -> list[onnx.NodeProto]:
    return [
        _node("Pow", [x, "f_three"], "g_pow"),
        _node("Mul", ["g_pow", "c0447"], "g_cube"),
        _node("Add", [x, "g_cube"], "g_inner"),
        _node("Mul", ["g_inner", "sqrt_2_pi"], "g_arg"),
        _node("Tanh", ["g_arg"], "g_tanh"),
        _node("Add", ["g_tanh", "f_one"], "g_add"),
        _node("Mul", [x, "g_add"], "g_mul"),
        _node("Mul", ["g_mul", "f_half"], "gelu"),
    ]


def _scalars() -> list[onnx.TensorProto]:
    values = {
        "sqrt2": np.sqrt(2),
        "f_one": 1.0,
        "f_half": 0.5,
        "f_three": 3.0,
        "c0447": 0.044715,
        "sqrt_2_pi": np.sqrt(2 / np.pi),
    }
    return [numpy_helper.from_array(np.array(v, _F32), n) for n, v in values.items()] + [
        numpy_helper.from_array(np.array([2], np.int64), "two_end"),
        numpy_helper.from_array(np.array([0, 0], np.int64), "zero2"),
        numpy_helper.from_array(np.array([0, 1], np.int64), "axes01"),
        numpy_helper.from_array(np.array(0, np.int64), "first"),
        numpy_helper.from_array(np.triu(np.full((MAX_POS, MAX_POS), -1e4, _F32), 1), "causal_mask"),
    ]


def _bert() -> onnx.ModelProto:
    nodes = [
        *_embeddings(),
        *_attention("h0", causal=False),
        _node("LayerNormalization", ["att_out", "ln1_g", "ln1_b"], "h1", axis=-1, epsilon=1e-5),
        _node("MatMul", ["h1", "w1"], "up"),
        _node("Add", ["up", "b1"], "up_b"),
        *_gelu_erf("up_b"),
        _node("MatMul", ["gelu", "w2"], "down"),
        _node("Add", ["down", "b2"], "down_b"),
        _node("Add", ["down_b", "h1"], "res2"),
        _node(
            "LayerNormalization",
            ["res2", "ln2_g", "ln2_b"],
            "last_hidden_state",
            axis=-1,
            epsilon=1e-5,
        ),
        _node("Gather", ["last_hidden_state", "first"], "cls", axis=1),
        _node("Gemm", ["cls", "wp", "bp"], "pooled", transB=1),
        _node("Tanh", ["pooled"], "pooler_output"),
    ]
    rng = np.random.default_rng(7)
    extra = [
        numpy_helper.from_array((rng.standard_normal((D, D)) * 0.1).astype(_F32), "wp"),
        numpy_helper.from_array((rng.standard_normal(D) * 0.02).astype(_F32), "bp"),
    ]
    outputs = [
        helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, "seq", D]),
        helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [1, D]),
    ]
    return _model("bert", nodes, outputs, extra)


def _gpt2() -> onnx.ModelProto:
    nodes = [
        *_embeddings(),
        *_attention("h0", causal=True),
        _node("LayerNormalization", ["att_out", "ln1_g", "ln1_b"], "h1", axis=-1, epsilon=1e-5),
        _node("MatMul", ["h1", "w1"], "up"),
        _node("Add", ["up", "b1"], "up_b"),
        *_gelu_tanh("up_b"),
        _node("MatMul", ["gelu", "w2"], "down"),
        _node("Add", ["down", "b2"], "down_b"),
        _node("Add", ["down_b", "att_out"], "res2"),
        _node("LayerNormalization", ["res2", "ln2_g", "ln2_b"], "final", axis=-1, epsilon=1e-5),
        _node("MatMul", ["final", "lm_head"], "logits"),
    ]
    rng = np.random.default_rng(8)
    extra = [
        numpy_helper.from_array((rng.standard_normal((D, VOCAB)) * 0.2).astype(_F32), "lm_head")
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", VOCAB])]
    return _model("gpt2", nodes, outputs, extra)


def _model(name, nodes, outputs, extra) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])],
        outputs,
        initializer=[*_weights(rng), *_scalars(), *extra],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


MODELS = {"bert": _bert, "gpt2": _gpt2}


def float_model(name: str) -> onnx.ModelProto:
    """The float model ``name`` ("bert" or "gpt2")."""
    return MODELS[name]()


def _feeds(seed: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, VOCAB, (1, seq)).astype(np.int64)}


def _reader():
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._data = iter([_feeds(seed, seq) for seed, seq in enumerate((8, 3, 12, 1, 5))])

        def get_next(self) -> dict | None:
            return next(self._data, None)

    return Reader()


def _fused(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """``model`` as ONNX Runtime's graph optimizer saves it (extended level: FusedMatMul,
    BiasGelu, FusedGemm, ... of com.microsoft)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(folder / "fused.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return _typed(onnx.load_model(folder / "fused.onnx"))


def _typed(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the element type of every node output declared, as ONNX Runtime
    computes them (the quantizer needs the types of com.microsoft ops' outputs, which ONNX
    shape inference does not know)."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [o for n in model.graph.node for o in n.output if o]
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = session.run(None, _feeds(0, 4))
    declared = {v.name for v in (*model.graph.input, *model.graph.output)}
    model.graph.value_info.extend(
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), None)
        for n, v in zip(names, values, strict=True)
        if n not in declared
    )
    return model


def _softmax_readers(model: onnx.ModelProto) -> list[str]:
    """The Softmax nodes and the nodes after them up to the next MatMul with a weight."""
    names, frontier = [], {o for n in model.graph.node if n.op_type == "Softmax" for o in n.output}
    names += [n.name for n in model.graph.node if n.op_type == "Softmax"]
    for node in model.graph.node:  # topological order
        if frontier & set(node.input):
            names.append(node.name)
            weighted = node.op_type == "MatMul" and node.input[1].startswith("w")
            if not weighted:
                frontier.update(node.output)
    return names


@functools.cache
def _quantized_bytes(
    name: str, fused: bool, op_types: tuple[str, ...] | None, qdq: bool = False
) -> bytes:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            folder = Path(tmp)
            model = float_model(name)
            extra: dict = {"op_types_to_quantize": list(op_types)} if op_types else {}
            if fused:
                model = _fused(model, folder)
                # ORT 1.31's quantizer has no range for a Softmax output in a fused graph
                # (it fails on the nodes reading it): those stay float
                extra["nodes_to_exclude"] = _softmax_readers(model)
            onnx.save_model(model, folder / "float.onnx")
            quantize_static(
                str(folder / "float.onnx"),
                str(folder / "q.onnx"),
                _reader(),
                quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                **extra,
            )
            return (folder / "q.onnx").read_bytes()
    finally:
        logging.getLogger().setLevel(quiet)


def quantized(
    name: str,
    *,
    fused: bool = False,
    op_types: tuple[str, ...] | None = None,
    qdq: bool = False,
) -> onnx.ModelProto:
    """``name`` quantized by ``quantize_static`` (QOperator, or Q/DQ with ``qdq``; uint8
    activations, int8 weights), after ONNX Runtime's graph optimizer when ``fused``;
    ``op_types``: the operator types to quantize (default: all ONNX Runtime quantizes)."""
    return onnx.load_model_from_string(_quantized_bytes(name, fused, op_types, qdq))
