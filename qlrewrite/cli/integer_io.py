"""`qlrewrite integer-io`: make a model take and return its quantized type (the input
QuantizeLinear and output DequantizeLinear removed, their scales and zero points kept in
the metadata), or float again."""

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
from qlrewrite.passes.commands import IO_FORMS, integer_io_passes

__all__ = ["integer_io_command"]


@click.command(
    "integer-io",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite integer-io model.onnx -o int_io.onnx          # uint8 in, uint8 out
  qlrewrite integer-io int_io.onnx --to float -o model.onnx
  python -c "import onnx; print(onnx.load('int_io.onnx').metadata_props)"  # the scales
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--to",
    "to",
    type=click.Choice(IO_FORMS),
    default="integer",
    show_default=True,
    help="integer: inputs read only by equal per-tensor QuantizeLinear nodes and outputs "
    "written by a per-tensor DequantizeLinear take the quantized type (recorded in "
    "metadata_props under qlrewrite.integer_io.*); float: the reverse, from that metadata.",
)
@rewrite_options
@run_command
def integer_io_command(model: Path, to: str, options: RewriteOptions) -> None:
    """Make the model take and return its quantized type, or float again.

    Exact by construction: fed Q(x), the integer model returns Q(y) bit for bit (the
    nodes left compute what they computed). An input also read as float, a per-axis
    input or output node, or readers with different parameters are refused by name and
    nothing is written; other inputs and outputs are left (counted). --verify compares
    like inputs only, so it is refused here: the exactness needs no runtime.
    """
    if options.verify is not None:
        raise click.UsageError(
            "--verify compares float inputs; integer-io is exact by construction"
        )
    run_rewrite(model, integer_io_passes(to), command="integer-io", options=options)
