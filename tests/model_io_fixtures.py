"""Model files for the model_io, pipeline and info tests, built in code with onnx.helper.

No tests here: the builders are shared by tests/io/test_model_io*.py,
tests/pipeline/test_pipeline*.py and tests/cli/test_cli_info*.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner, Result
from onnx import TensorProto, helper, numpy_helper

__all__ = ["cli", "external_tensor", "matmul_model", "weights", "write_external_model"]


def weights(shape: Sequence[int] = (64, 32), seed: int = 0) -> np.ndarray:
    """Float32 weights from a fixed seed."""
    return np.random.RandomState(seed).standard_normal(shape).astype(np.float32)


def matmul_model(
    initializers: Sequence[onnx.TensorProto] | None = None,
    *,
    k: int = 64,
    n: int = 32,
    ir_version: int = 10,
    opset: int = 21,
) -> onnx.ModelProto:
    """``y = x @ W`` with W the initializer named 'W' (default: inline float weights)."""
    if initializers is None:
        initializers = [numpy_helper.from_array(weights((k, n)), "W")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        initializer=list(initializers),
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )


def external_tensor(
    name: str,
    dims: Sequence[int],
    location: str,
    *,
    offset: int | None = None,
    length: int | None = None,
    data_type: int = TensorProto.FLOAT,
) -> onnx.TensorProto:
    """A tensor proto whose data is in ``location`` (nothing written)."""
    tensor = TensorProto(name=name, data_type=data_type, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def write_external_model(
    folder: Path, name: str = "model.onnx", *, k: int = 64, n: int = 32, seed: int = 0
) -> tuple[Path, np.ndarray]:
    """A MatMul model with W in ``<name>.data`` beside it; returns (path, W)."""
    w = weights((k, n), seed)
    data = folder / f"{name}.data"
    data.write_bytes(b"\0" * 16 + w.tobytes())  # an offset, as real data files have
    tensor = external_tensor("W", w.shape, data.name, offset=16, length=w.nbytes)
    path = folder / name
    path.write_bytes(matmul_model([tensor], k=k, n=n).SerializeToString())
    return path, w


def cli(*args: str) -> Result:
    """Run ``qlrewrite ARGS`` in-process (stdout and stderr kept apart)."""
    from qlrewrite.cli import main

    return CliRunner().invoke(main, list(args))
