"""`qlrewrite fold`: constant-fold quantized initializers."""

from __future__ import annotations

import functools
import re
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
from qlrewrite.passes.commands import fold_passes
from qlrewrite.passes.fold.fold_pass import FLOAT16_MODES
from qlrewrite.verify.compare import ort_fusions

__all__ = ["SIZE", "fold_command", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    **{p: 1000**i for i, p in enumerate("kmgt", start=1)},
    **{f"{p}b": 1000**i for i, p in enumerate("kmgt", start=1)},
    **{f"{p}ib": 1024**i for i, p in enumerate("kmgt", start=1)},
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in ``4GB``, ``500MB``, ``1.5GiB``, ``1024`` (KB/MB/GB decimal, KiB/MiB/GiB binary)."""
    match = _SIZE.match(text.lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 4GB, 500MB, 1.5GiB, 1048576)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


class _SizeType(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):  # click's signature
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = _SizeType()


@click.command(
    "fold",
    cls=RewriteCommand,
    epilog="""\b
Examples:
  qlrewrite fold model.onnx                      # writes model.fold.onnx
  qlrewrite fold model.onnx -o folded.onnx --max-size 4GB
  qlrewrite fold model.onnx --keep-dq -o smaller.onnx
  qlrewrite fold int8_cnn.onnx --keep-fused       # for ONNX Runtime: keep what it fuses
  qlrewrite fold int8_cnn.onnx --bias-only        # for TensorRT: only the int32 biases
  qlrewrite fold int4_llm.onnx --dequantize-weights -o float_baseline.onnx
  qlrewrite fold model.onnx --dry-run --report fold.json
""",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--keep-dq",
    is_flag=True,
    help="Fold only QuantizeLinear of constants; keep every DequantizeLinear (QDQ form).",
)
@click.option(
    "--keep-fused",
    is_flag=True,
    help="Leave the DequantizeLinear that ONNX Runtime's CPU provider (the installed "
    "release) fuses into integer / weight-only kernels (QLinearConv, QLinearMatMul, QGemm, "
    "MatMulNBits, ...) and fold the rest: for models run by ORT. Read from ORT's optimized "
    "graph of the input; without it, fold warns of those it folds.",
)
@click.option(
    "--bias-only",
    is_flag=True,
    help="Fold only DequantizeLinear of int32 constants (the biases ONNX Runtime's "
    "quantizer writes for Conv / Gemm), which TensorRT refuses; every other Q/DQ stays.",
)
@click.option(
    "--dequantize-weights",
    is_flag=True,
    help="Also turn com.microsoft MatMulNBits / GatherBlockQuantized with constant weights "
    "into MatMul / Gather of float initializers (an un-quantized accuracy baseline).",
)
@click.option(
    "--float16",
    type=click.Choice(FLOAT16_MODES),
    default="exact",
    show_default=True,
    help="float16 weights ONNX Runtime's CPU provider dequantizes in float32: 'exact' "
    "writes the float32 value and a Cast to float16 (outputs stay bit-identical in ORT); "
    "'compact' writes float16 (half the size; ORT's outputs may change, with a warning).",
)
@click.option(
    "--max-size",
    type=SIZE,
    default=None,
    help="Refuse (exit 1, write nothing) if the output's initializers would exceed SIZE "
    "(4GB, 500MB, 1.5GiB or bytes).",
)
@rewrite_options
@run_command
def fold_command(  # noqa: PLR0917 (click passes options by keyword)
    model: Path,
    keep_dq: bool,
    keep_fused: bool,
    bias_only: bool,
    dequantize_weights: bool,
    float16: str,
    max_size: int | None,
    options: RewriteOptions,
) -> None:
    """Constant-fold QuantizeLinear / DequantizeLinear of constant inputs.

    Dequantized weights become float initializers bit-exact with ONNX Runtime (with
    --keep-dq, quantized weights become quantized initializers). Values are computed
    while the output is written, tensor by tensor, so memory stays small at any model
    size. A model with error findings is refused (exit 1) and nothing is written.

    --dequantize-weights also replaces each MatMulNBits / GatherBlockQuantized whose
    weights are constant by MatMul / Gather of the float weight ONNX Runtime's kernel
    computes (bit for bit), zero points in the scale type too (4-bit float32, as HQQ
    writes them); nodes it cannot (g_idx, other float zero points) stay, with a warning.

    float16 models: ONNX Runtime's CPU provider has no float16 MatMul, Conv, Gemm...: it
    computes a float16 DQ feeding them in float32 and never rounds the weight to float16.
    Such a DQ is folded to a float32 value and a Cast to float16 (--float16 exact), which
    ORT removes: its outputs stay bit-identical, and other runtimes get the float16 value.
    """
    # asked when the fold runs, after the input check; --keep-dq folds no DQ
    if keep_dq and bias_only:
        raise InputError("--keep-dq and --bias-only fold disjoint sets: give one")
    asks_ort = not (keep_dq or bias_only)  # nothing ORT fuses is folded otherwise
    fusions = functools.partial(ort_fusions, model, required=keep_fused) if asks_ort else None
    passes = fold_passes(
        keep_dq=keep_dq,
        float16=float16,
        dequantize_weights=dequantize_weights,
        fusions=fusions,
        keep_fused=keep_fused,
        bias_only=bias_only,
    )
    run_rewrite(
        model,
        passes,
        command="fold",
        options=options,
        max_size=max_size,
    )
