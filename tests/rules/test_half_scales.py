"""QL506 (float16 / bfloat16 subnormal scales) measured in the installed ONNX Runtime: the CPU
kernels compute the stored subnormal as it is, so a scale meant as 3e-8 dequantizes to about
twice the meant values; normal and zero scales (QL501's) are not QL506's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from example_models import qdq_model
from ort_quantized import run_session
from qdq_models import DQ, DT, Q, load_ir

from qlrewrite.checking.checker import check_model

ort = pytest.importorskip("onnxruntime")


def _codes(proto: onnx.ModelProto) -> list[str]:
    return [f.rule for f in check_model(load_ir(proto)).findings]


def _run(proto: onnx.ModelProto, x: np.ndarray, optimized: bool) -> np.ndarray:
    return run_session(proto, x, optimized=optimized)


@pytest.mark.parametrize("optimized", [True, False])
def test_ort_dequantizes_with_the_stored_subnormal_not_the_meant_scale(optimized: bool) -> None:
    meant = 3e-8
    stored = float(np.float16(meant))
    assert stored == 2.0**-24  # the smallest float16 subnormal: one significant bit
    model = qdq_model(DQ, 21, x_type=DT.INT8, scale_type=DT.FLOAT16, scale=meant)
    x = np.array([[100, -7, 1]] * 4, np.int8)
    y = _run(model, x, optimized)
    assert y.dtype == np.float16
    if y.max() == 0:
        pytest.skip(f"ORT {ort.__version__} flushes float16 subnormal scales to zero")
    assert (
        y.astype(np.float64).tolist()
        == (x.astype(np.float64) * stored).astype(np.float16).astype(np.float64).tolist()
    )
    assert y.max() > 1.9 * 100 * meant  # about twice what the scale meant
    assert "QL506" in _codes(model)


def test_ort_quantizes_with_a_float16_subnormal_scale_as_stored() -> None:
    model = qdq_model(Q, 21, x_type=DT.FLOAT16, scale_type=DT.FLOAT16, scale=1e-6, zp_type=DT.INT8)
    stored = float(np.float16(1e-6))
    x = np.array([[1e-5, -3e-6, 1.0]] * 4, np.float16)
    y = _run(model, x, optimized=True)
    wanted = np.clip(np.rint(x.astype(np.float64) / stored), -128, 127).astype(np.int8)
    assert y.tolist() == wanted.tolist()
    assert "QL506" in _codes(model)


@pytest.mark.parametrize(
    ("scale_type", "scale", "flagged"),
    [
        (DT.FLOAT16, 6.2e-5, False),  # normal: above 2^-14
        (DT.FLOAT16, 6.0e-5, True),
        (DT.FLOAT16, 0.0, False),  # zero: QL501's
        (DT.FLOAT16, -1e-6, True),
        (DT.BFLOAT16, 1e-38, True),  # below 2^-126
        (DT.BFLOAT16, 1e-37, False),
        (DT.FLOAT, 1e-39, False),  # float32 scales are not QL506's
    ],
)
def test_the_subnormal_threshold_of_each_type(scale_type: DT, scale: float, flagged: bool) -> None:
    model = qdq_model(DQ, 21, x_type=DT.INT8, scale_type=scale_type, scale=scale)
    assert ("QL506" in _codes(model)) is flagged
