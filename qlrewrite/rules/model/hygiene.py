"""QL601-QL607: model hygiene met on the way: IR version, external data, tensor data sizes, and
weight-only forms ONNX Runtime's CPU provider cannot run (QL606)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, SAFE, WARNING, Finding
from qlrewrite.io.ir_version import needed_ir_version
from qlrewrite.qdq import WEIGHT_ONLY, NodeView, WeightOnlyView
from qlrewrite.rules.common import WEIGHT_ONLY_VERSIONS
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import ALL_KINDS, Example, Fix, ModelContext, rule

__all__: list[str] = []

#: The external data file of the examples: the scalar scale 0.5 as float32.
_SCALE_FILE = {"model.data": np.float32(0.5).tobytes()}


def _scale_in(location: str, offset: int = 0) -> ModelSpec:
    """The examples' model with its scale in the external file ``location``."""
    return ModelSpec(
        "edited",
        ModelSpec("qdq", DQ, 21),
        ModelSpec("external_data", "scale", location, offset=offset),
    )


def _raise_ir_version(model: ir.Model) -> str | None:
    """QL601's fix: the model's ir_version raised to what its types and opset need."""
    before, after = model.ir_version, needed_ir_version(model)
    if after <= before:
        return None
    model.ir_version = after
    return f"ir_version {before} -> {after}"


@rule(
    "QL601",
    "ir-version-too-old",
    WARNING,
    summary="The model's IR version predates an element type the node uses.",
    explanation="""
    Element types arrived with IR versions: float8 with IR 9, int4/uint4 with 10, float4
    with 11, float8e8m0 with 12, int2/uint2 with 13, float6 with 14 (for Q/DQ and for
    GatherBlockQuantized's int4 / float8 / float4 data alike). A model declaring an
    older IR version uses a type its own format version does not know; strict loaders and
    older runtimes refuse it.
    """,
    example="""
    warn: ir_version 9, DequantizeLinear(x: int4, ...)
    good: ir_version 10
    """,
    versions="all",
    needs_version=False,
    kinds=ALL_KINDS,
    fix=Fix(
        SAFE,
        """
        Raises the model's ir_version to what its element types and opset need (computation
        does not depend on it: outputs are bit-identical).
        """,
        model=_raise_ir_version,
    ),
    examples=[
        Example(
            "int4-ir-9",
            ModelSpec("qdq", DQ, 21, x_type=DT.INT4, ir_version=9),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT4),
            ort=False,  # ONNX Runtime's Python API cannot feed this input type
        ),
    ],
)
def ir_version_too_old(ctx: NodeView) -> Iterator[Finding]:
    types: dict[ir.DataType, str] = {}
    x_name = getattr(ctx.row, "weight", "x")  # a weight-only op's weight: "B", "data"
    for role, view in (
        (x_name, ctx.x),
        ("scale", ctx.scale),
        ("zero point", ctx.zero_point),
        ("output", ctx.output),
    ):
        if view is not None and view.dtype is not None:
            types.setdefault(view.dtype, role)
    for dtype, role in types.items():
        need = opsets.min_ir_version(dtype)
        if ctx.ir_version < need:
            yield ctx.report(
                f"{role} is {dtype.name}, which needs IR version {need}; the model declares "
                f"IR version {ctx.ir_version}",
                f"set the model's ir_version to {need} or later",
            )


def _data_rule(ctx: ModelContext, kinds: tuple[str, ...], hint: str) -> Iterator[Finding]:
    for problem in ctx.data_problems:
        if problem.kind in kinds:
            yield ctx.report(problem.message, hint, graph=problem.graph)


@rule(
    "QL602",
    "external-data-missing",
    ERROR,
    summary="A tensor's external data file is missing (or has no location).",
    explanation="""
    The tensor's values live in a file next to the model that is not there. Nothing can
    run or rewrite the model until the file is restored; tools that read it lazily fail
    late, in the middle of a run.
    """,
    example="""
    bad:  model.onnx -> location: weights.bin (no such file)
    good: copy weights.bin beside model.onnx
    """,
    versions="all",
    scope="model",
    examples=[
        Example(
            "file-missing",
            _scale_in("missing.data"),
            _scale_in("model.data"),
            files=_SCALE_FILE,
        ),
    ],
)
def external_data_missing(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx, ("external-missing",), "restore the external data file beside the model"
    )


@rule(
    "QL603",
    "external-data-escapes",
    ERROR,
    summary="A tensor's external data path leaves the model's folder.",
    explanation="""
    An absolute path, a `..` path or a symbolic link leading out of the model's folder lets
    a model file read arbitrary files of whoever loads it. qlrewrite refuses to follow it.
    """,
    example="""
    bad:  location: ../../etc/passwd
    good: location: model.onnx.data   (inside the model's folder)
    """,
    versions="all",
    scope="model",
    examples=[
        Example(
            "leaves-folder",
            _scale_in("../model.data"),
            _scale_in("model.data"),
            files=_SCALE_FILE,
        ),
    ],
)
def external_data_escapes(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx,
        ("external-escapes",),
        "keep external data in the model's folder, with a relative path",
    )


@rule(
    "QL604",
    "external-data-out-of-range",
    ERROR,
    summary="A tensor's external data offset/length does not fit its file.",
    explanation="""
    The offset and length recorded for the tensor point past the end of the data file (or
    are negative or not numbers): the file was truncated or belongs to another model.
    """,
    example="""
    bad:  location: w.data, offset: 4096, length: 1048576 (file has 8192 bytes)
    good: re-export the model with its data file
    """,
    versions="all",
    scope="model",
    examples=[
        Example(
            "past-the-end",
            _scale_in("model.data", offset=4096),
            _scale_in("model.data"),
            files=_SCALE_FILE,
        ),
    ],
)
def external_data_out_of_range(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx,
        ("external-range",),
        "re-export the model together with its external data file",
    )


@rule(
    "QL605",
    "tensor-data-length",
    ERROR,
    summary="A tensor's data size does not match its dims and type.",
    explanation="""
    The bytes (or values) stored for a tensor do not match the element count of its dims:
    the file is corrupt or was written by a buggy tool. Runtimes read past the data or
    refuse the model.
    """,
    example="""
    bad:  initializer w: INT8 dims [64, 3] with 100 bytes of raw_data
    good: 192 bytes of raw_data
    """,
    versions="all",
    scope="model",
    examples=[
        Example(
            "short-raw-data",
            ModelSpec(
                "edited",
                ModelSpec("qdq", DQ, 21, scale_shape=(4,), attrs={"axis": 0}),
                ModelSpec("data_length", "scale", 12),
            ),
            ModelSpec("qdq", DQ, 21, scale_shape=(4,), attrs={"axis": 0}),
        ),
    ],
)
def tensor_data_length(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx,
        ("data-length", "negative-dims"),
        "re-export the model; the tensor's data is corrupt",
    )


@rule(
    "QL606",
    "onnxruntime-cpu-unsupported",
    WARNING,
    summary="A valid MatMulNBits / GatherBlockQuantized form that ONNX Runtime's CPU "
    "provider cannot run.",
    explanation="""
    Some forms the schemas allow have no CPU kernel in ONNX Runtime 1.31: MatMulNBits with
    a block_size above 256 (refused at load), 8-bit MatMulNBits with float zero points or
    with g_idx (refused at run: its unpacked path handles 2 and 4 bits only), 2-bit
    MatMulNBits with both float zero points and g_idx, and bfloat16 activations, scales or
    zero points (no kernel). The model may run on other providers (CUDA, WebGPU)
    but not on CPU, where `--verify` runs it.
    """,
    example="""
    warn: MatMulNBits(A, B, scales, zero_points: float, K=64, N=64, bits=8, block_size=32)
    good: MatMulNBits(A, B, scales, zero_points: uint8 (packed), ..., bits=8, block_size=32)
    """,
    versions=WEIGHT_ONLY_VERSIONS,
    kinds=WEIGHT_ONLY,
    examples=[
        Example(
            "block-512",
            ModelSpec("matmul_nbits", k=512, block_size=512, a_shape=[2, 512]),
            ModelSpec("matmul_nbits", k=512, block_size=256, a_shape=[2, 512]),
        ),
    ],
)
def onnxruntime_cpu_unsupported(ctx: WeightOnlyView) -> Iterator[Finding]:
    for reason in _cpu_limits(ctx):
        yield ctx.report(
            f"ONNX Runtime's CPU provider cannot run it: {reason}",
            "fine for other providers; for CPU, write the supported form",
        )


def _cpu_limits(ctx: WeightOnlyView) -> Iterator[str]:
    row = ctx.version
    values = ctx.weight_attributes
    block = values.get("block_size")
    valid = block is not None and block >= row.min_block_size and block & (block - 1) == 0
    if row.cpu_block_sizes and valid and block not in row.cpu_block_sizes:
        sizes = ", ".join(str(b) for b in sorted(row.cpu_block_sizes))
        yield f"block_size={block} (it runs {sizes})"
    if ctx.op_type == "MatMulNBits":
        zp = ctx.operand("zero_points")
        float_zp = zp is not None and zp.dtype in opsets.FLOAT_TYPES
        g_idx = ctx.operand("g_idx") is not None
        bits = values.get("bits")
        if bits == 8 and float_zp:
            yield "8 bits with float zero points (pack them as uint8)"
        if bits == 8 and g_idx:
            yield "8 bits with g_idx"
        if bits == 2 and float_zp and g_idx:
            yield "2 bits with float zero points and g_idx"
    for name in ("A", "scales", "zero_points"):
        view = ctx.operand(name)
        if view is not None and view.dtype == ir.DataType.BFLOAT16:
            yield f"{name} is BFLOAT16 (no CPU kernel)"
            return


NO_QUANTIZED_NODE = "QL607"


@rule(
    NO_QUANTIZED_NODE,
    "no-quantized-node",
    WARNING,
    summary="The model has no quantized node at all: likely the float model, not the "
    "quantized one.",
    explanation="""
    A check that finds nothing to check passes, so a CI job pointed at the float model
    (the file before quantization, or an export that dropped the quantization) would pass
    silently. No QuantizeLinear, DequantizeLinear, weight-only (MatMulNBits,
    GatherBlockQuantized), QOperator / dynamic node, quantized kind qlrewrite leaves alone
    or other producer's quantization operator was found in any graph or function. A
    warning: exit 0 unless --strict; ignore it (`--ignore QL607`, per-file-ignores) for
    float models checked on purpose.
    """,
    example="""
    warn: model.onnx holds Conv, Relu, MatMul in float32 only
    good: model_quantized.onnx (QuantizeLinear / DequantizeLinear around them)
    """,
    versions="all",
    scope="report",
    needs_version=False,
    examples=[Example("float-only", ModelSpec("float_relu"), ModelSpec("qdq", DQ, 21))],
)
def no_quantized_node(ctx: object) -> Iterator[Finding]:
    """Made by :func:`qlrewrite.checking.checker.check_model` (it knows every kind it walked)."""
    return iter(())
