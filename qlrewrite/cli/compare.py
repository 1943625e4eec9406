"""`qlrewrite compare`: run two models on the same inputs and say how their outputs
differ, in ONNX Runtime, the ONNX reference evaluator and OpenVINO (when installed)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from qlrewrite.cli._common import (
    FiniteRange,
    debug_option,
    input_shape_option,
    memory_option,
    output_format_option,
    run_command,
)
from qlrewrite.errors import InputError
from qlrewrite.io import model_io
from qlrewrite.io.atomic import PendingFile
from qlrewrite.io.output_plan import refuse_if_read
from qlrewrite.reports import compare_report
from qlrewrite.text import escape
from qlrewrite.verify.compare import Comparison, parse_runtime
from qlrewrite.verify.verify import VERIFY_TIMEOUT

__all__ = ["compare_command"]


@click.command(
    "compare",
    epilog="""\b
Examples:
  qlrewrite compare model.onnx model.fold.onnx
  qlrewrite compare float.onnx int8.onnx --rtol 0.05 --tensors
  qlrewrite compare a.onnx b.onnx --input-shape x=1,3,224,224 --runtime ort
  qlrewrite compare a.onnx b.onnx --inputs batch.npz --output-format json
  qlrewrite compare a.onnx b.onnx --plot errors.png     # needs matplotlib

Exit codes: 0 within tolerance, 1 an output (or with --tensors a tensor) diverges
or no runtime ran both models, 2 usage error, unreadable model or --inputs.
""",
)
@click.argument("first", type=click.Path(path_type=Path))
@click.argument("second", type=click.Path(path_type=Path))
@click.option(
    "--runtime",
    "runtimes",
    multiple=True,
    callback=lambda ctx, param, value: [_runtime(v) for v in value],
    metavar="RUNTIME",
    help="Runtime to compare in (repeatable; default: all three, those not installed "
    "skipped). ort: ONNX Runtime's default session; reference: onnx.reference (slow: "
    "leave it out on large models); openvino: OpenVINO CPU; ort==1.16.3, "
    "openvino==2026.4: that exact release, in its own environment (made on first use "
    "from the package registry, cached in ~/.cache/qlrewrite/runtimes).",
)
@click.option(
    "--inputs",
    "inputs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Feed these inputs (.npz, one array per input name) instead of generated ones.",
)
@input_shape_option("Shape of an input with unknown dimensions (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the inputs.")
@click.option(
    "--rtol",
    type=FiniteRange(min=0),
    default=1e-4,
    show_default=True,
    help="Diverges beyond ATOL + RTOL x the output's largest |value| (in the first model).",
)
@click.option("--atol", type=FiniteRange(min=0), default=0.0, show_default=True)
@click.option(
    "--tensors",
    is_flag=True,
    help="Also compare the intermediate tensors both models name (ONNX Runtime, "
    "optimizations off) and name the first, in topological order, that diverges.",
)
@output_format_option(["text", "json"], "Output format.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw each output's relative error per runtime to this image (needs matplotlib).",
)
@click.option(
    "--timeout",
    type=FiniteRange(min=0, min_open=True),
    default=VERIFY_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Give up on a runtime after SECONDS (reported; the others still run).",
)
@memory_option("--memory")
@debug_option
@run_command
def compare_command(  # noqa: PLR0917 (click passes options by keyword)
    first: Path,
    second: Path,
    runtimes: Sequence[str],
    inputs_path: Path | None,
    input_shape: Mapping[str, tuple[int, ...]],
    seed: int,
    rtol: float,
    atol: float,
    tensors: bool,
    output_format: str,
    plot: Path | None,
    timeout: float,
    memory: int | None,
) -> None:
    """Run two models on the same inputs and compare their outputs per runtime.

    Per output: the largest absolute difference, that relative to the output's largest
    |value|, in ulp, and in quantization steps where the first model's output is
    dequantized (its scale) or an integer. Inputs are generated from the first model's
    input types (seeded; --input-shape for unknown dimensions) or read from --inputs.
    Each runtime runs in a child process: one that crashes is reported.
    """
    if plot is not None:
        _refuse_plot_over_a_read(plot, first, second, inputs_path)
        _require_matplotlib()
    comparison = compare_report(
        first,
        second,
        runtimes=runtimes,
        inputs=inputs_path,
        input_shapes=input_shape,
        seed=seed,
        rtol=rtol,
        atol=atol,
        tensors=tensors,
        timeout=timeout,
        memory=memory,
    )
    if output_format == "json":
        click.echo(
            json.dumps(
                {"first": str(first), "second": str(second), **comparison.to_json()}, indent=2
            )
        )
    else:
        _print_text(comparison, first, second, seed if inputs_path is None else None)
    if plot is not None:
        _plot(comparison, plot)
    sys.exit(1 if comparison.diverges or not comparison.compared else 0)


def _runtime(value: str) -> str:
    """An installed runtime's name, or a release (``ort==1.16.3``)."""
    try:
        return parse_runtime(value)
    except InputError as exc:
        raise click.BadParameter(str(exc)) from None


def _print_text(comparison: Comparison, first: Path, second: Path, seed: int | None) -> None:
    inputs = f"seed {seed}" if seed is not None else "given inputs"
    limit = f"{comparison.atol:g} + {comparison.rtol:g} x |largest|"
    click.echo(
        f"compare {escape(str(first))} {escape(str(second))} ({inputs}; diverges beyond {limit})"
    )
    for result in comparison.runtimes:
        if result.reason is not None:
            click.echo(f"  {result.runtime}: {escape(result.reason)}")
            for line in result.details:
                click.echo(f"    {escape(line)}")
            continue
        click.echo(f"  {result.runtime} ({result.label}):")
        for line in result.details:
            click.echo(f"    {escape(line)}")
        beyond = {o.name for o in result.diverging(comparison.rtol, comparison.atol)}
        for output in result.outputs:
            mark = "  DIVERGES" if output.name in beyond else ""
            click.echo(f"    {escape(output.name)}: {escape(output.describe())}{mark}")
    divergence = comparison.divergence
    if divergence is not None:
        click.echo(f"  tensors: {escape(_tensor_line(divergence))}")
    if not comparison.compared:
        click.echo("not compared: no runtime ran both models")
        return
    click.echo("diverges" if comparison.diverges else "within tolerance")


def _tensor_line(divergence: Any) -> str:
    if divergence.reason is not None:
        return f"not compared: {divergence.reason}"
    if divergence.tensor is None:
        return f"{divergence.compared} shared tensors, none diverges (ORT, optimizations off)"
    return (
        f"first diverging of {divergence.compared} shared: '{divergence.tensor.name}' "
        f"from {divergence.node}: {divergence.tensor.describe()}"
    )


def _refuse_plot_over_a_read(
    plot: Path, first: Path, second: Path, inputs_path: Path | None
) -> None:
    """``--plot`` naming a model compared, one of its data files or the --inputs file
    (or a link to one) is refused before anything runs: it was replaced by the image."""
    reads = [*model_io.files_read_by(first), *model_io.files_read_by(second)]
    refuse_if_read(plot, [*reads, *([inputs_path] if inputs_path else [])], "--plot")


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'qlrewrite[plot]'") from None


def _plot(comparison: Comparison, path: Path) -> None:
    """Each output's relative error per runtime (bars, log scale) and, with --tensors,
    every intermediate tensor's in the first model's order (ONNX Runtime, optimizations
    off); legends beside the axes, never over the bars."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    by_tensor = comparison.divergence.by_tensor if comparison.divergence else []
    rows = 2 if by_tensor else 1
    figure, axes = pyplot.subplots(rows, 1, figsize=(10, 4 * rows), squeeze=False)
    _plot_outputs(axes[0][0], comparison)
    if by_tensor:
        _plot_tensors(axes[1][0], by_tensor, comparison.rtol)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format=path.suffix.lstrip(".") or "png", bbox_inches="tight")
    pyplot.close(figure)
    save_image(path, image.getvalue())


#: What a bar of zero is drawn as on the log scale (an exact output).
_FLOOR = 1e-12


def _plot_outputs(axes: Any, comparison: Comparison) -> None:
    ran = [r for r in comparison.runtimes if r.reason is None]
    names = list(dict.fromkeys(o.name for r in ran for o in r.outputs))
    width = 0.8 / max(len(ran), 1)
    for index, result in enumerate(ran):
        errors = {o.name: o.relative or 0.0 for o in result.outputs}
        xs = [i + index * width for i in range(len(names))]
        axes.bar(xs, [max(errors.get(n, 0.0), _FLOOR) for n in names], width, label=result.runtime)
    axes.set_yscale("log")
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names, rotation=45)
    axes.set_ylabel("max |difference| / largest |value|")
    axes.set_title("outputs, per runtime")
    axes.axhline(max(comparison.rtol, _FLOOR), linestyle="--", color="grey", label="rtol")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _plot_tensors(axes: Any, by_tensor: Sequence[tuple[str, float | None]], rtol: float) -> None:
    """One bar per intermediate tensor (a type change, which has no relative error, drawn
    at the top in red)."""
    values = [r for _, r in by_tensor if r is not None]
    top = max([*values, rtol, _FLOOR]) * 10
    heights = [top if r is None else max(r, _FLOOR) for _, r in by_tensor]
    colours = ["tab:red" if r is None or r > rtol else "tab:blue" for _, r in by_tensor]
    axes.bar(range(len(by_tensor)), heights, color=colours)
    axes.set_yscale("log")
    step = max(1, len(by_tensor) // 40)  # at most 40 names under the axis
    ticks = list(range(0, len(by_tensor), step))
    axes.set_xticks(ticks, [by_tensor[i][0] for i in ticks], rotation=90, fontsize=7)
    axes.set_ylabel("max |difference| / largest |value|")
    axes.set_title(
        "every tensor both models name (ONNX Runtime, optimizations off; "
        "red: beyond rtol or type changed)"
    )
    axes.axhline(max(rtol, _FLOOR), linestyle="--", color="grey", label="rtol")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def save_image(path: Path, data: bytes) -> None:
    """``data`` at ``path`` as reports are written (:class:`~qlrewrite.io.atomic.PendingFile`):
    whole or not at all, a stream written into, never renamed over a link or a device."""
    with PendingFile(path) as pending:
        pending.write(data)
        pending.commit()
