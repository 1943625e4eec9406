"""`qlrewrite convert`: move QuantizeLinear / DequantizeLinear between com.microsoft and ai.onnx."""

from __future__ import annotations

from pathlib import Path

import click

from qlrewrite.cli._common import RewriteOptions, rewrite_options, run_command, run_rewrite
from qlrewrite.passes.convert_domain import TARGETS, ConvertDomainPass
from qlrewrite.passes.nbits_to_onnx import NBitsToOnnxPass

__all__ = ["convert_command"]


@click.command(
    "convert",
    epilog="""\b
Examples:
  qlrewrite convert model.onnx --to onnx              # writes model.convert.onnx
  qlrewrite convert model.onnx --to onnx -o standard.onnx --report convert.json
  qlrewrite convert model.onnx --to com.microsoft --dry-run
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--to",
    "to",
    type=click.Choice(TARGETS),
    required=True,
    help="The domain every Q/DQ node is written in.",
)
@rewrite_options
@run_command
def convert_command(
    model: Path,
    to: str,
    options: RewriteOptions,
) -> None:
    """Convert every QuantizeLinear / DequantizeLinear to the ai.onnx or com.microsoft domain.

    Only the Q/DQ nodes change (ONNX Runtime computes both domains with the same
    kernels); the ai.onnx opset stays. --to onnx uses the ai.onnx version in force at the
    model's opset; a node that needs a newer opset (int16, int4 need 21) is refused with
    the opset to pass to `qlrewrite upgrade --opset N`. --to com.microsoft refuses what
    ONNX Runtime's contrib ops cannot express (blocked quantization, float8/float4/int2,
    bfloat16, saturate=0, ...). A refusal names the nodes, exits 1 and writes nothing.

    --to onnx also rewrites com.microsoft MatMulNBits as DequantizeLinear -> MatMul (-> Add
    for a bias) with the weight laid out [K, N] (int4/uint4 need opset 21, int2/uint2 25)
    and GatherBlockQuantized as DequantizeLinear -> Gather; the dequantized weights are
    bit-identical to ONNX Runtime's kernels'.
    """
    passes: list = [ConvertDomainPass(to)]
    if to == "onnx":
        passes.insert(0, NBitsToOnnxPass())
    run_rewrite(
        model,
        passes,
        command="convert",
        options=options,
    )
