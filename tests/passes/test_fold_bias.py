"""`fold --bias-only`: only the int32 bias DequantizeLinear of ORT's static quantizer
outputs fold (TensorRT refuses them, onnx/onnx-tensorrt#850); every other Q/DQ stays and
ONNX Runtime's outputs are bit-identical (installed release, optimizations off)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from ort_quantized import inputs_for, model_name_of, quantized, run_ort

from qlrewrite import api
from qlrewrite.cli import main
from qlrewrite.errors import InputError


def _dq_types(model: onnx.ModelProto) -> list[int]:
    """The element type of each DequantizeLinear's x (initializers only)."""
    types = {t.name: t.data_type for t in model.graph.initializer}
    return [types.get(n.input[0], 0) for n in model.graph.node if n.op_type == "DequantizeLinear"]


@pytest.mark.parametrize("config", ["cnn-u8s8", "cnn-per-channel", "mlp-u8s8"])
def test_only_int32_biases_fold(config: str) -> None:
    source = quantized(config)
    folded = ir.serde.serialize_model(api.fold(quantized(config), bias_only=True))
    before, after = _dq_types(source), _dq_types(folded)
    assert onnx.TensorProto.INT32 not in after
    assert sorted(after) == sorted(t for t in before if t != onnx.TensorProto.INT32)
    feeds = inputs_for(model_name_of(config))
    for got, want in zip(run_ort(folded, feeds), run_ort(source, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def test_cli_verifies_and_refuses_keep_dq_with_it(tmp_path: Path) -> None:
    source, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(quantized("cnn-u8s8"), source)
    result = CliRunner().invoke(
        main, ["fold", str(source), "--bias-only", "-o", str(out), "--verify=semantics"]
    )
    assert result.exit_code == 0, result.output
    assert "dq folded 3" in result.output and "bit-identical" in result.output
    both = CliRunner().invoke(main, ["fold", str(source), "--bias-only", "--keep-dq"])
    assert both.exit_code == 2 and "give one" in both.output
    with pytest.raises(InputError, match="give one"):
        api.fold(quantized("cnn-u8s8"), bias_only=True, keep_dq=True)
