"""`qlrewrite downgrade`: lower a model's ai.onnx opset exactly, on models of any size."""

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
from qlrewrite.passes.commands import downgrade_passes

__all__ = ["downgrade_command"]


@click.command(
    "downgrade",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite downgrade int4_opset21.onnx --opset 19 --verify   # writes int4_opset21.downgrade.onnx
  qlrewrite downgrade model.onnx --opset 13 -o for_ort_1_16.onnx
  qlrewrite downgrade big.onnx --opset 17 --in-place --report downgrade.json
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--opset",
    type=click.IntRange(min=1),
    required=True,
    help="The ai.onnx opset to lower to (below the model's current one; at least 10).",
)
@rewrite_options
@run_command
def downgrade_command(model: Path, opset: int, options: RewriteOptions) -> None:
    """Lower the model to ai.onnx opset N, exactly, or refuse naming what N cannot hold.

    Each QuantizeLinear / DequantizeLinear the older version cannot express is lowered
    exactly where it can be: a blocked DequantizeLinear of a weight (opset 21) becomes
    Cast / Sub / Mul with its scale repeated per block, computed in the order
    DequantizeLinear computes (bit-exact with ONNX Runtime's kernel); int4 / uint4
    weights are stored as int8 / uint8 (twice the bytes, said in the summary); int16 /
    uint16 nodes become com.microsoft Q/DQ (ONNX Runtime's). Anything else (float8 below
    19, per-axis below 13, a blocked or 4-bit QuantizeLinear of activations) is refused
    with the lowest opset that holds it, and nothing is written. The rest of the graph
    goes through ONNX's version converter on a weight-free copy (ops whose newer version
    only widened types are written unchanged); what it refuses is named. The IR version
    is lowered to what the model still needs. The output must pass onnx.checker and
    `qlrewrite check`; --verify runs both models in ONNX Runtime.
    """
    run_rewrite(model, downgrade_passes(opset), command="downgrade", options=options)
