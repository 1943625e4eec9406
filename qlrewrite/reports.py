"""What ``info``, ``compare`` and ``--verify`` find, built once for the command line (which
renders it) and the Python API (which returns it): a model's summary, two models'
differences per runtime, a rewrite's verification."""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from qlrewrite.checking.checker import check
from qlrewrite.checking.summary import model_summary
from qlrewrite.errors import InputError
from qlrewrite.io import model_io, reading
from qlrewrite.io.source import source_of
from qlrewrite.io.weightless import weightless_from_source
from qlrewrite.text import escape
from qlrewrite.verify.compare import Comparison, compare_models, verify_both
from qlrewrite.verify.runtimes import RUNTIMES
from qlrewrite.verify.verify import (
    VERIFY_TIMEOUT,
    Verification,
    Verifier,
    VerifyOptions,
    generate_inputs,
    input_specs_or_refuse,
    output_steps,
)

__all__ = ["compare_report", "info_report", "read_feeds", "staged_path", "verify_report"]

#: What the functions take as a model (the API's ModelLike).
Model = ir.Model | onnx.ModelProto | str | os.PathLike


def _loaded(model: Model) -> ir.Model:
    if isinstance(model, ir.Model):
        return model
    if isinstance(model, onnx.ModelProto):
        return model_io.from_proto(model)
    return model_io.load(model)


def info_report(model: Model, *, targets: Sequence[str] = ()) -> dict[str, Any]:
    """``qlrewrite info``'s report (``--output-format json`` prints it): ``path`` (None for
    a model not read from a file), the summary of :func:`~qlrewrite.checking.summary.
    model_summary` and, with ``targets`` (``"ort==1.16"``...), per target the QL7xx
    findings of ``check --target``."""
    path = None if isinstance(model, ir.Model | onnx.ModelProto) else str(model)
    loaded = _loaded(model)
    # Just loaded: type inference can run on a copy of the file's nodes.
    source = source_of(loaded)
    weightless = weightless_from_source(source.proto, max_inline_bytes=0) if source else None
    summary: dict[str, Any] = {"path": path, **model_summary(loaded, weightless=weightless)}
    if targets:
        summary["targets"] = _target_findings(loaded, targets)
    return summary


def _target_findings(loaded: ir.Model, specs: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Per target, the QL7xx findings of check --target (what the runtime refuses)."""
    from qlrewrite.targets.spec import parse_targets

    found = {}
    for runtime in parse_targets(tuple(specs)):
        report = check(loaded, select=["QL7"], targets=[runtime.spec])
        found[runtime.label] = [f.to_json() for f in report.findings]
    return found


@contextmanager
def staged_path(model: Model, name: str) -> Iterator[Path]:
    """A path of ``model``: the path it is, or the model saved to a temporary folder
    (removed on exit) for a runtime that reads files."""
    if isinstance(model, str | os.PathLike):
        yield Path(model)
        return
    with tempfile.TemporaryDirectory(prefix="qlrewrite-") as folder:
        path = Path(folder) / name
        model_io.save(_loaded(model), path)
        yield path


def compare_report(
    first: Model,
    second: Model,
    *,
    runtimes: Iterable[str] = (),
    inputs: str | os.PathLike | Mapping[str, np.ndarray] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 0.0,
    tensors: bool = False,
    timeout: float = VERIFY_TIMEOUT,
    memory: int | None = None,
) -> Comparison:
    """``qlrewrite compare``: both models on the same inputs (``inputs``: arrays by input
    name or an .npz file; else generated from the first model's inputs with ``seed``) in
    each of ``runtimes`` (default: every installed runtime; ``ort==1.16.3`` runs that
    release in its own environment), each runtime's child ended after ``timeout`` seconds
    or above ``memory`` bytes."""
    model = _loaded(first)
    _loaded(second)  # unreadable: InputError before anything runs
    feeds = read_feeds(model, inputs, input_shapes or {}, seed)
    with staged_path(first, "first.onnx") as one, staged_path(second, "second.onnx") as two:
        return compare_models(
            one,
            two,
            feeds,
            runtimes=list(runtimes) or list(RUNTIMES),
            rtol=rtol,
            atol=atol,
            tensors=tensors,
            steps=output_steps(model),
            timeout=timeout,
            memory=memory,
        )


def verify_report(
    original: Model, rewritten: Model, options: VerifyOptions, results: Sequence[Any] = ()
) -> Verification:
    """``--verify``: ``rewritten`` against ``original`` in ONNX Runtime, as the rewriting
    commands verify before writing (the same :class:`~qlrewrite.verify.verify.Verifier`);
    ``results``: the rewrite's pass results, whose stated bounds it accepts. Raises
    :class:`~qlrewrite.verify.verify.VerificationFailed` when the outputs differ."""
    if options.deployed:
        steps = tuple(sorted(output_steps(_loaded(original)).items()))
        options = VerifyOptions(**{**vars(options), "output_steps": steps})
    with staged_path(original, "original.onnx") as one, staged_path(rewritten, "out.onnx") as two:
        verifier = Verifier(one, _loaded(original), options, run=verify_both)
        verifier.expect_differences(results)
        verifier(two)
    assert verifier.result is not None
    return verifier.result


def read_feeds(
    model: ir.Model,
    inputs: str | os.PathLike | Mapping[str, np.ndarray] | None,
    shapes: Mapping[str, tuple[int, ...]],
    seed: int,
) -> dict[str, np.ndarray]:
    """The inputs: given, read from an .npz, or generated from ``model``'s inputs."""
    if inputs is None:
        specs = input_specs_or_refuse(model, shapes)
        return generate_inputs(specs, np.random.default_rng(seed))
    wanted = {v.name: v for v in model.graph.inputs if v.name not in model.graph.initializers}
    if isinstance(inputs, Mapping):
        feeds = {name: np.asarray(inputs[name]) for name in wanted if name in inputs}
        where = "inputs"
    else:
        feeds, where = _read_npz(Path(inputs), wanted), str(inputs)
    if absent := [name for name in wanted if name not in feeds]:
        raise InputError(f"{where}: no array for input(s) {', '.join(absent)}")
    return {name: feeds[name] for name in wanted}


def _read_npz(path: Path, wanted: Mapping[str, Any]) -> dict[str, np.ndarray]:
    data = reading.read_bytes(path, "input arrays file", reading.MODEL_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_headers(archive, wanted, path)
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files if name in wanted}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: not a readable .npz of arrays ({exc})") from None


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
