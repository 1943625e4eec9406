"""A commit reads of the model it replaces only what it needs: the data files that model
names. A model of gigabytes held inline (as ONNX Runtime's quantizer saves them) is walked,
its weights never read, so replacing an earlier output costs no memory of its size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.io import atomic, reading


def _inline_model(path: Path, megabytes: int, *, external: str | None = None) -> None:
    weight = numpy_helper.from_array(np.ones((megabytes, 1 << 18), np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, megabytes])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if external:
        onnx.save(model, path, save_as_external_data=True, location=external, size_threshold=0)
    else:
        onnx.save(model, path)


def test_the_replaced_inline_model_is_walked_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "out.onnx"
    _inline_model(dest, 8)  # 8 MiB of weights inside the file
    staged = tmp_path / "staged.onnx"
    _inline_model(staged, 1)
    whole_reads: list[int] = []
    real = reading.read_bytes

    def counted(path, what, max_bytes, **kwargs):  # type: ignore[no-untyped-def]
        data = real(path, what, max_bytes, **kwargs)
        whole_reads.append(len(data))
        return data

    monkeypatch.setattr(reading, "read_bytes", counted)
    atomic.commit_model(staged, None, dest)
    assert all(size < 1 << 20 for size in whole_reads), whole_reads
    assert onnx.load(dest).graph.initializer[0].dims == [1, 1 << 18]


def test_the_data_file_a_replaced_walked_model_names_is_removed(tmp_path: Path) -> None:
    dest = tmp_path / "out.onnx"
    _inline_model(dest, 2, external="out.onnx.data")  # the model file is small: parsed whole
    # a model of 1 MiB or more that also names external data: walked, its location kept
    big = tmp_path / "big.onnx"
    _inline_model(big, 2)
    proto = onnx.load(big)
    extra = numpy_helper.from_array(np.ones(4, np.float32), "e")
    extra.data_location = TensorProto.EXTERNAL
    extra.ClearField("raw_data")
    extra.external_data.add(key="location", value="out.onnx.data")
    proto.graph.initializer.append(extra)
    onnx.save(proto, dest)
    staged = tmp_path / "staged.onnx"
    _inline_model(staged, 1)
    atomic.commit_model(staged, None, dest)
    assert not (tmp_path / "out.onnx.data").exists()
