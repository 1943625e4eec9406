"""Every ONNX backend test case of QuantizeLinear / DequantizeLinear, reproduced exactly."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from kernel_fixtures import bits
from onnx import helper

from qlrewrite.kernels import dequantize, quantize


def _cases() -> list:
    """The backend cases, importing only the two operator modules (collect_testcases(None)
    imports every operator and costs seconds; collect_testcases(op) works once per process)."""
    import importlib

    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node_cases._TargetOpType = None
        for module in ("quantizelinear", "dequantizelinear"):
            name = f"onnx.backend.test.case.node.{module}"
            if name in sys.modules:  # imported under another filter: run its exports again
                importlib.reload(sys.modules[name])
            else:
                importlib.import_module(name)
    unique = {c.name: c for c in node_cases._NodeTestCases}
    return [
        c
        for c in unique.values()
        if len(c.model.graph.node) == 1
        and c.model.graph.node[0].op_type in ("QuantizeLinear", "DequantizeLinear")
    ]


CASES = _cases()


def _array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return ir.serde.deserialize_tensor(value).numpy()
    return np.asarray(value)


def test_cases_found():
    names = {c.name for c in CASES}
    assert len(CASES) == 27  # onnx 1.23.2: 14 DequantizeLinear, 13 QuantizeLinear
    assert {"test_quantizelinear_blocked_symmetric", "test_dequantizelinear_int2"} <= names


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    node = case.model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for inputs, outputs in case.data_sets:
        args = [_array(v) for v in inputs]
        expected = _array(outputs[0])
        kwargs = {"axis": attrs.get("axis", 1), "block_size": attrs.get("block_size", 0)}
        if node.op_type == "QuantizeLinear":
            got = quantize(
                *args,
                saturate=bool(attrs.get("saturate", 1)),
                output_dtype=attrs.get("output_dtype", 0),
                precision=attrs.get("precision", 0),
                **kwargs,
            )
        else:
            got = dequantize(*args, output_dtype=attrs.get("output_dtype", 0), **kwargs)
        assert got.dtype == expected.dtype
        assert got.shape == expected.shape
        np.testing.assert_array_equal(bits(got), bits(expected))
