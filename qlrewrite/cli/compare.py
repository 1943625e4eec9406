"""`qlrewrite compare`: run two models on the same inputs and say how their outputs
differ, in ONNX Runtime, the ONNX reference evaluator and OpenVINO (when installed)."""

from __future__ import annotations

import io
import json
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np

from qlrewrite.cli._common import (
    FiniteRange,
    debug_option,
    input_shape_option,
    memory_option,
    run_command,
)
from qlrewrite.errors import InputError
from qlrewrite.io import model_io, reading
from qlrewrite.io.atomic import PendingFile
from qlrewrite.io.output_guard import refuse_if_read
from qlrewrite.text import escape
from qlrewrite.verify.compare import Comparison, compare_models, output_steps
from qlrewrite.verify.release_env import is_release, parse_release
from qlrewrite.verify.runtimes import RUNTIMES
from qlrewrite.verify.verify import VERIFY_TIMEOUT, generate_inputs, input_specs_or_refuse

__all__ = ["compare_command"]


@click.command(
    "compare",
    epilog="""\b
Examples:
  qlrewrite compare model.onnx model.fold.onnx
  qlrewrite compare float.onnx int8.onnx --rtol 0.05 --tensors
  qlrewrite compare a.onnx b.onnx --input-shape x=1,3,224,224 --runtime ort
  qlrewrite compare a.onnx b.onnx --inputs batch.npz --format json
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
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
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
    model = model_io.load(first)
    model_io.load(second)  # unreadable: exit 2 before anything runs
    if plot is not None:
        _refuse_plot_over_a_read(plot, first, second, inputs_path)
        _require_matplotlib()
    feeds = _feeds(model, inputs_path, input_shape, seed)
    comparison = compare_models(
        first,
        second,
        feeds,
        runtimes=runtimes or list(RUNTIMES),
        rtol=rtol,
        atol=atol,
        tensors=tensors,
        steps=output_steps(model),
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
    if value in RUNTIMES:
        return value
    if is_release(value):
        try:
            return str(parse_release(value))
        except InputError as exc:
            raise click.BadParameter(str(exc)) from None
    raise click.BadParameter(
        f"{value!r}: one of {', '.join(RUNTIMES)}, or a release (ort==1.16.3, openvino==2026.4)"
    )


def _feeds(
    model: Any, inputs_path: Path | None, shapes: Mapping[str, tuple[int, ...]], seed: int
) -> dict[str, np.ndarray]:
    """The inputs: read from ``inputs_path``, or generated from the first model."""
    if inputs_path is None:
        specs = input_specs_or_refuse(model, shapes)
        return generate_inputs(specs, np.random.default_rng(seed))
    data = reading.read_bytes(inputs_path, "input arrays file", reading.MODEL_BYTES)
    wanted = {v.name: v for v in model.graph.inputs if v.name not in model.graph.initializers}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_headers(archive, wanted, inputs_path)
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            feeds = {name: arrays[name] for name in arrays.files if name in wanted}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"{inputs_path}: not a readable .npz of arrays ({exc})") from None
    if absent := [name for name in wanted if name not in feeds]:
        raise InputError(f"{inputs_path}: no array for input(s) {', '.join(absent)}")
    return {name: feeds[name] for name in wanted}


#: The .npy header readers of the format versions NumPy writes for plain arrays.
_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _check_headers(archive: zipfile.ZipFile, wanted: Mapping[str, Any], path: Path) -> None:
    """Each array's header, read before its data: its size must fit the bytes stored for
    it (a header claiming 2^60 elements was an internal MemoryError), and its type and
    rank (and fixed dims) must be what the first model takes (a 1 MB archive of 1 GiB of
    zeros for a [1, 4] input was decompressed, then failed in the runtime, and the
    comparison said 'within tolerance')."""
    for info in archive.infolist():
        name = info.filename.removesuffix(".npy")
        if name not in wanted:
            continue
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version not in _HEADERS:
                raise InputError(f"{path}: array {escape(name)}: .npy format {version} not read")
            shape, _, dtype = _HEADERS[version](member)
        if dtype.hasobject:
            raise InputError(f"{path}: array {escape(name)} holds Python objects (not read)")
        if int(np.prod(shape, dtype=object)) * dtype.itemsize > info.file_size:
            raise InputError(f"{path}: array {escape(name)} is larger than the bytes it holds")
        _check_fits(wanted[name], shape, dtype, path)


def _check_fits(value: Any, shape: tuple[int, ...], dtype: np.dtype, path: Path) -> None:
    """``shape`` / ``dtype`` as the model's input ``value`` declares them (unknown dims
    take any size)."""
    name = escape(value.name)
    expected = value.dtype.numpy() if value.dtype is not None else None
    if expected is not None and np.dtype(expected) != dtype:
        raise InputError(f"{path}: array {name} is {dtype}, the model takes {np.dtype(expected)}")
    declared = value.shape
    if declared is None:
        return
    fixed = [d if isinstance(d, int) else None for d in declared]
    if len(fixed) != len(shape) or any(
        d is not None and d != g for d, g in zip(fixed, shape, strict=False)
    ):
        dims = ["?" if d is None else str(d) for d in fixed]
        raise InputError(
            f"{path}: array {name} has shape {list(shape)}, the model takes [{', '.join(dims)}]"
        )


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
    """Each output's relative error per runtime, one bar each (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4))
    ran = [r for r in comparison.runtimes if r.reason is None]
    names = list(dict.fromkeys(o.name for r in ran for o in r.outputs))
    width = 0.8 / max(len(ran), 1)
    for index, result in enumerate(ran):
        errors = {o.name: o.relative or 0.0 for o in result.outputs}
        xs = [i + index * width for i in range(len(names))]
        axes.bar(xs, [max(errors.get(n, 0.0), 1e-12) for n in names], width, label=result.runtime)
    axes.set_yscale("log")
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names, rotation=45)
    axes.set_ylabel("max |difference| / largest |value|")
    axes.axhline(max(comparison.rtol, 1e-12), linestyle="--", color="grey", label="rtol")
    axes.legend()
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format=path.suffix.lstrip(".") or "png")
    pyplot.close(figure)
    save_image(path, image.getvalue())


def save_image(path: Path, data: bytes) -> None:
    """``data`` at ``path`` as reports are written (:class:`~qlrewrite.io.atomic.PendingFile`):
    whole or not at all, a stream written into, never renamed over a link or a device."""
    with PendingFile(path) as pending:
        pending.write(data)
        pending.commit()
