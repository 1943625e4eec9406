"""`qlrewrite convert`: move QuantizeLinear / DequantizeLinear between com.microsoft and ai.onnx;
rewrite weight-only and QOperator / dynamic nodes as Q/DQ (--to onnx), Q/DQ groups as
QLinear / integer operators (--to qoperator)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from qlrewrite.cli._common import (
    RewriteCommand,
    RewriteOptions,
    rewrite_options,
    run_command,
    run_rewrite,
)
from qlrewrite.opsets import ACCURACY_LEVELS
from qlrewrite.passes.commands import convert_passes, qoperator_passes
from qlrewrite.passes.convert.domain import TARGETS
from qlrewrite.passes.convert.qoperator_plan import CONVERTIBLE

__all__ = ["convert_command"]

_HELP = """Convert every QuantizeLinear / DequantizeLinear to the ai.onnx or com.microsoft domain,
or Q/DQ groups to QLinear operators (--to qoperator).

Only the Q/DQ nodes change (ONNX Runtime computes both domains with the same
kernels); the ai.onnx opset stays. --to onnx uses the ai.onnx version in force at the
model's opset; a node that needs a newer opset (int16, int4 need 21) is refused with
the opset to pass to `qlrewrite upgrade --opset N`. --to com.microsoft refuses what
ONNX Runtime's contrib ops cannot express (blocked quantization, float8/float4/int2,
bfloat16, saturate=0, ...). A refusal names the nodes, exits 1 and writes nothing.
float16 Q/DQ are refused unless --allow-float16: ONNX Runtime's CPU provider has no
float16 kernel for the com.microsoft ones and computes them, and the Casts next to
them, differently, so its outputs would change.

--to onnx also rewrites com.microsoft MatMulNBits as DequantizeLinear -> MatMul (-> Add
for a bias) with the weight laid out [K, N] (int4/uint4 need opset 21, int2/uint2 25)
and GatherBlockQuantized as DequantizeLinear -> Gather; the dequantized weights are
bit-identical to ONNX Runtime's kernels'. --to com.microsoft does the reverse where it
is exact: a constant int2/uint2/int4/uint4 DequantizeLinear blocked along K (or per
output channel) feeding MatMul's B (also through a Transpose; a following Add of a
constant bias is fused) becomes MatMulNBits, and DequantizeLinear -> Gather of
int4/uint4 becomes GatherBlockQuantized. int8/uint8 weights per column with a float32
scale only with --include-8bit (blocked or float16 ones always: com.microsoft's
DequantizeLinear cannot hold them exactly):
ONNX Runtime's default session fuses them itself (MatMulIntegerToFloat, or its own
MatMulNBits at accuracy_level 4) and ran them 2-35x faster than an 8-bit MatMulNBits
at accuracy_level 0 (1.31.1).

--to onnx also rewrites the QOperator form as Q/DQ (ONNX Runtime's QDQ quantizer's
form): each QLinearConv, QLinearMatMul, com.microsoft QLinearAdd / QLinearMul /
QLinearSigmoid / QLinearLeakyRelu / QLinearAveragePool / QLinearGlobalAveragePool /
QLinearConcat / QLinearSoftmax / QLinearWhere / QLinearReduceMean / QGemm becomes
DequantizeLinear -> the float op -> QuantizeLinear, weights staying quantized behind
their DequantizeLinear (per channel where they were), QLinearConv's int32 bias an
int32 DequantizeLinear with scale x_scale * w_scale. Dynamic forms: MatMulIntegerToFloat,
DynamicQuantizeMatMul and ORT's DynamicQuantizeLinear -> MatMulInteger / ConvInteger ->
Cast -> Mul become DequantizeLinear -> MatMul / Conv. QAttention and channels_last
nodes are refused with the reason; ai.onnx ConvInteger / MatMulInteger outside that
pattern stay, with a warning. The integer kernels round their requantization their own
way: outputs may differ by one quantization step per converted node (see --verify).

--to qoperator goes the other way: each DequantizeLinear -> op -> QuantizeLinear group
becomes QLinearConv / QLinearMatMul (ai.onnx) or com.microsoft QGemm / QLinearAdd /
QLinearMul / QLinearConcat / QLinearAveragePool / QLinearGlobalAveragePool /
QLinearLeakyRelu / QLinearSigmoid / QLinearSoftmax (a Relu / Clip before the QuantizeLinear is
folded where exact); MaxPool, Reshape, Transpose, ... with one scale on both sides run
on the integers; DequantizeLinear -> MatMul / Conv with a float output after
DynamicQuantizeLinear becomes MatMulInteger / ConvInteger -> Cast -> Mul. A group the
QOperator form cannot hold (LayerNormalization, 16-bit or 4-bit types, a blocked
scale, a per-channel scale on an axis the operator does not take, a bias whose scale
is not x_scale * w_scale, ...) stays Q/DQ, counted by reason in the summary. Measured
on ONNX Runtime 1.31.1 with optimizations off: QLinearConv / QLinearMatMul / QGemm,
QLinearSigmoid / QLinearLeakyRelu / QLinearConcat bit-identical to the Q/DQ form;
QLinearAdd, QLinearMul, the average pools and QLinearSoftmax one step off in up to 7% of the
elements; --verify checks one step per such node (docs/qoperator.md).
"""


@click.command(
    "convert",
    cls=RewriteCommand,
    help=_HELP,
    epilog="""\b
Examples:
  qlrewrite convert model.onnx --to onnx              # writes model.convert.onnx
  qlrewrite convert model.onnx --to onnx -o standard.onnx --report convert.json
  qlrewrite convert model.onnx --to com.microsoft --dry-run
  qlrewrite convert qdq_int4.onnx --to com.microsoft --accuracy-level 4 -o nbits.onnx
  qlrewrite convert model.onnx --to qoperator --verify   # QLinearConv, QLinearMatMul, ...
  qlrewrite convert model.onnx --to qoperator --ops Conv,MatMul --target openvino
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--to",
    "to",
    type=click.Choice((*TARGETS, "qoperator")),
    required=True,
    help="The domain every Q/DQ node is written in; qoperator: Q/DQ groups become "
    "QLinear / integer operators.",
)
@click.option(
    "--ops",
    "ops",
    multiple=True,
    metavar="OP[,OP...]",
    help="--to qoperator: the float op types whose groups are converted "
    f"({', '.join(CONVERTIBLE)}; default: all).",
)
@click.option(
    "--target",
    "target",
    metavar="RUNTIME",
    help="--to qoperator: leave Q/DQ the groups whose QLinear form this runtime refuses, "
    "as its measured tables say (ort, ort==1.20, openvino).",
)
@click.option(
    "--accuracy-level",
    type=click.IntRange(ACCURACY_LEVELS[0], ACCURACY_LEVELS[-1]),
    default=0,
    show_default=True,
    help="--to com.microsoft: accuracy_level of the MatMulNBits written (0 keeps float "
    "math; 4 lets ONNX Runtime quantize A to int8).",
)
@click.option(
    "--include-8bit",
    is_flag=True,
    help="--to com.microsoft: make 8-bit weights MatMulNBits too. Left as DequantizeLinear "
    "by default: ONNX Runtime fuses those itself and runs them faster (a note says how many).",
)
@click.option(
    "--allow-float16",
    is_flag=True,
    help="Convert float16 Q/DQ too: ONNX Runtime's CPU provider computes them differently "
    "in the two domains, so its outputs can change (a warning says so).",
)
@rewrite_options
@run_command
def convert_command(
    model: Path,
    *,
    to: str,
    accuracy_level: int,
    include_8bit: bool,
    allow_float16: bool,
    ops: tuple[str, ...],
    target: str | None,
    options: RewriteOptions,
) -> None:
    """``qlrewrite convert``: see :data:`_HELP`."""
    _refuse_misplaced(to)
    if to == "qoperator":
        chosen = [op.strip() for item in ops for op in item.split(",") if op.strip()]
        verifying = options.verify is not None  # the bound reads every weight: asked then
        passes = qoperator_passes(ops=chosen or None, target=target, bound=verifying)
        run_rewrite(model, passes, command="convert", options=options)
        return
    run_rewrite(
        model,
        convert_passes(
            to,
            allow_float16=allow_float16,
            accuracy_level=accuracy_level,
            include_8bit=include_8bit,
        ),
        command="convert",
        options=options,
    )


def _refuse_misplaced(to: str) -> None:
    """Options that shape one --to only: given with another, they would be ignored
    without a word."""
    ctx = click.get_current_context()
    owners = {
        "accuracy_level": "com.microsoft",
        "include_8bit": "com.microsoft",
        "allow_float16": "onnx or com.microsoft",
        "ops": "qoperator",
        "target": "qoperator",
    }
    for name, owner in owners.items():
        if to in owner.split(" or "):
            continue
        if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT):
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} applies to --to {owner}, not --to {to}")
