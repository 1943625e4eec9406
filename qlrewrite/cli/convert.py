"""`qlrewrite convert`: move QuantizeLinear / DequantizeLinear between com.microsoft and ai.onnx."""

from __future__ import annotations

from pathlib import Path

import click

from qlrewrite.cli._common import RewriteOptions, rewrite_options, run_command, run_rewrite
from qlrewrite.passes.convert_domain import TARGETS, ConvertDomainPass

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
    """
    run_rewrite(
        model,
        [ConvertDomainPass(to)],
        command="convert",
        options=options,
    )
