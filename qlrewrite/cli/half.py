"""`qlrewrite half`: float32 -> float16 / bfloat16 that keeps the Q/DQ nodes valid."""

from __future__ import annotations

from pathlib import Path

import click

from qlrewrite.cli._common import (
    RewriteCommand,
    RewriteOptions,
    rewrite_options,
    run_command,
    run_rewrite,
)
from qlrewrite.passes.commands import half_passes
from qlrewrite.passes.half import HALF_TYPES

__all__ = ["half_command"]


@click.command(
    "half",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite half model.onnx -o fp16.onnx --verify
  qlrewrite half model.onnx --to bfloat16 -o bf16.onnx
  qlrewrite half model.onnx --block Softmax,LayerNormalization --convert-io
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--to", "to", type=click.Choice(list(HALF_TYPES)), default="float16", show_default=True
)
@click.option(
    "--block",
    default="",
    metavar="OP,...",
    help="Op types computed in float32 (Casts around them).",
)
@click.option(
    "--convert-io",
    is_flag=True,
    help="Give the model float16 / bfloat16 inputs and outputs (default: float32).",
)
@rewrite_options
@run_command
def half_command(
    model: Path, to: str, block: str, convert_io: bool, options: RewriteOptions
) -> None:
    """Convert float32 to float16 / bfloat16 keeping the Q/DQ nodes valid.

    From ai.onnx opset 19 the QuantizeLinear inputs and the scales take the new type (a
    DequantizeLinear's output follows its scale); below 19, in com.microsoft, or for a
    scale subnormal in the new type (reported), the Q/DQ stay float32 with Casts around
    them. A scale that rounds to zero (1e-8 in float16) is refused by name. Not exact:
    --verify measures the difference (accepted up to 5% of each output's largest value).
    ONNX Runtime's CPU provider runs most float16 ops in float32 and has no bfloat16
    MatMul / Conv: see docs/commands/half.md.
    """
    ops = tuple(op for op in block.split(",") if op)
    run_rewrite(
        model, half_passes(to, block=ops, convert_io=convert_io), command="half", options=options
    )
