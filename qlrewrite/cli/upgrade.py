"""`qlrewrite upgrade`: raise a model's ai.onnx opset, on models of any size."""

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
from qlrewrite.passes.commands import upgrade_passes

__all__ = ["upgrade_command"]


@click.command(
    "upgrade",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite upgrade model.onnx --opset 21             # writes model.upgrade.onnx
  qlrewrite upgrade opset12.onnx --opset 13 -o fixed.onnx
  qlrewrite upgrade big.onnx --opset 23 --in-place --report upgrade.json
  qlrewrite upgrade int4.onnx --opset 21 --convert-weight-only   # MatMulNBits -> DQ + MatMul
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--opset",
    type=click.IntRange(min=1),
    required=True,
    help="The ai.onnx opset to convert to (at least the model's current one).",
)
@click.option(
    "--convert-weight-only",
    is_flag=True,
    help="Also rewrite com.microsoft MatMulNBits / GatherBlockQuantized as "
    "DequantizeLinear -> MatMul / Gather where opset N expresses them (default: kept).",
)
@rewrite_options
@run_command
def upgrade_command(
    model: Path,
    opset: int,
    convert_weight_only: bool,
    options: RewriteOptions,
) -> None:
    """Convert the model to ai.onnx opset N with ONNX's version converter.

    Weights never pass through the converter (it sees a weight-free copy), so models
    above 2 GB with external data work. Then com.microsoft Q/DQ nodes become ai.onnx
    where opset N expresses them, the IR version is raised to what the opset and the
    element types need, and unused opset imports are dropped. MatMulNBits and
    GatherBlockQuantized stay as they are (ONNX Runtime's weight-only kernels) unless
    --convert-weight-only is given. Q/DQ attributes newer than
    the input's opset (DQ `axis` at opset 12, as ORT's quantizer writes) are repaired.
    The output must pass onnx.checker and `qlrewrite check`, or nothing is written.
    Downgrades are a usage error (exit 2).
    """
    run_rewrite(
        model,
        upgrade_passes(opset, convert_weight_only=convert_weight_only),
        command="upgrade",
        options=options,
    )
