"""`qlrewrite retarget`: rewrite Q/DQ exactly for runtimes that take only some of it."""

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
from qlrewrite.errors import InputError
from qlrewrite.passes.commands import retarget_passes
from qlrewrite.passes.retarget.retarget_pass import SIGNEDNESS

__all__ = ["retarget_command"]


@click.command(
    "retarget",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite retarget model.onnx --zero-point signed --symmetric --verify   # TensorRT
  qlrewrite retarget model.onnx --zero-point unsigned -o u8.onnx
  qlrewrite retarget int8.onnx --narrow-weights          # 8-bit weights that fit 4 bits
  qlrewrite retarget model.onnx --split-shared --drop-redundant-qdq
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--zero-point",
    type=click.Choice(SIGNEDNESS),
    help="signed: uint8 with zero point z becomes int8 with z - 128 (4 and 16 bits alike); "
    "unsigned: the reverse. Exact for Q and DQ; weights are shifted.",
)
@click.option(
    "--symmetric",
    is_flag=True,
    help="Zero points become 0: weights take x - z where that fits the type; a non-zero "
    "zero point of activations is refused (not exact).",
)
@click.option(
    "--narrow-weights",
    is_flag=True,
    help="8-bit weights whose values fit 4 bits become int4 / uint4 (opset 21+).",
)
@click.option(
    "--drop-redundant-qdq",
    is_flag=True,
    help="Remove DequantizeLinear -> QuantizeLinear pairs with identical parameters "
    "(proven to give back every value).",
)
@click.option(
    "--split-shared",
    is_flag=True,
    help="One DequantizeLinear per reader and one initializer per Q/DQ node.",
)
@rewrite_options
@run_command
def retarget_command(  # noqa: PLR0917 (click passes every option)
    model: Path,
    zero_point: str | None,
    symmetric: bool,
    narrow_weights: bool,
    drop_redundant_qdq: bool,
    split_shared: bool,
    options: RewriteOptions,
) -> None:
    """Rewrite the Q/DQ form exactly for a runtime that takes only some of it.

    Each rewrite is exact (ONNX Runtime computes the same outputs, --verify proves it) or
    refused with the tensors it cannot change, and nothing is written. Order: split
    shared inputs, drop redundant pairs, then zero points (signedness, then symmetric),
    then widths.
    """
    passes = retarget_passes(
        zero_point=zero_point,  # type: ignore[arg-type]
        symmetric=symmetric,
        narrow=narrow_weights,
        drop_redundant=drop_redundant_qdq,
        split_shared=split_shared,
    )
    if not passes:
        raise InputError(
            "nothing to do: give --zero-point, --symmetric, --narrow-weights, "
            "--drop-redundant-qdq or --split-shared"
        )
    run_rewrite(model, passes, command="retarget", options=options)
