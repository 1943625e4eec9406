"""QL6xx: model hygiene met on the way: IR version, external data, tensor data sizes."""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from qlrewrite import opsets
from qlrewrite.findings import ERROR, SAFE, WARNING, Finding
from qlrewrite.qdq import NodeView
from qlrewrite.rules.registry import ALL_KINDS, ModelContext, rule

__all__: list[str] = []


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
    fix=SAFE,
    fix_summary="""
    Raises the model's ir_version to what its element types and opset need (computation does
    not depend on it: outputs are bit-identical).
    """,
)
def ir_version_too_old(ctx: NodeView) -> Iterator[Finding]:
    types: dict[ir.DataType, str] = {}
    x_name = getattr(ctx.row, "weight", "x")  # a weight-only op's weight: "B", "data"
    for role, view in ((x_name, ctx.x), ("scale", ctx.scale), ("zero point", ctx.zero_point),
                       ("output", ctx.output)):  # fmt: skip
        if view is not None and view.dtype is not None:
            types.setdefault(view.dtype, role)
    for dtype, role in types.items():
        need = opsets.min_ir_version(dtype)
        if ctx.ir_version < need:
            yield ctx.finding(
                "QL601",
                WARNING,
                f"{role} is {dtype.name}, which needs IR version {need}; the model declares "
                f"IR version {ctx.ir_version}",
                f"set the model's ir_version to {need} or later",
            )


def _data_rule(ctx: ModelContext, code: str, kinds: tuple[str, ...], hint: str):
    for problem in ctx.data_problems:
        if problem.kind in kinds:
            yield Finding(
                rule=code, severity=ERROR, message=problem.message, hint=hint, graph=problem.graph
            )


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
)
def external_data_missing(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx, "QL602", ("external-missing",), "restore the external data file beside the model"
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
)
def external_data_escapes(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx,
        "QL603",
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
)
def external_data_out_of_range(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx,
        "QL604",
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
)
def tensor_data_length(ctx: ModelContext) -> Iterator[Finding]:
    yield from _data_rule(
        ctx,
        "QL605",
        ("data-length", "negative-dims"),
        "re-export the model; the tensor's data is corrupt",
    )
