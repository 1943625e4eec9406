"""QL506: float16 / bfloat16 scales whose values are subnormal (few significant bits;
flushed to zero by runtimes that do not keep subnormals)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from qlrewrite.findings import WARNING, Finding
from qlrewrite.qdq import QDQView
from qlrewrite.rules.model_spec import DQ, DT, ModelSpec
from qlrewrite.rules.registry import Example, rule

__all__: list[str] = []

#: The smallest normal value of each half-width scale type (below it, nonzero values are
#: subnormal).
_SMALLEST_NORMAL = {
    ir.DataType.FLOAT16: float(np.finfo(np.float16).smallest_normal),  # 2^-14
    ir.DataType.BFLOAT16: 2.0**-126,
}


def _per_axis_float16(scale: list[float]) -> ModelSpec:
    """A DequantizeLinear of int8 [4, 3] with a float16 ``scale`` per column."""
    return ModelSpec(
        "qdq",
        DQ,
        21,
        x_type=DT.INT8,
        scale_type=DT.FLOAT16,
        scale_shape=(3,),
        scale=scale,
        attrs={"axis": 1},
    )


@rule(
    "QL506",
    "half-scale-subnormal",
    WARNING,
    summary="A float16 / bfloat16 scale has subnormal values.",
    explanation="""
    A float16 scale below 2^-14 (6.1e-5), or a bfloat16 one below 2^-126, is subnormal:
    it keeps fewer significant bits the smaller it is (a float16 scale near 6e-8 has one:
    3e-8 written as float16 is stored as 5.96e-8, twice the value), and runtimes that
    flush subnormals to zero (GPU and NPU half-precision paths commonly do) compute a zero
    scale: DequantizeLinear gives zeros, QuantizeLinear saturates. Measured
    (`tests/rules/test_half_scales.py`): ONNX Runtime 1.31.1's CPU kernels compute float16
    subnormal scales as stored (DequantizeLinear and QuantizeLinear, per-tensor and
    per-axis); it has no CPU DequantizeLinear for a bfloat16 scale at opset 21. Zero
    scales are QL501's.
    """,
    example="""
    warn: DequantizeLinear(x: int8, scale: float16 = 1e-6, zp)
    good: DequantizeLinear(x: int8, scale: float16 = 0.01, zp)     # or a float32 scale
    """,
    versions="ai.onnx 19+",
    examples=[
        Example(
            "float16-subnormal",
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8, scale_type=DT.FLOAT16, scale=1e-6),
            ModelSpec("qdq", DQ, 21, x_type=DT.INT8, scale_type=DT.FLOAT16, scale=0.01),
        ),
        Example(
            "float16-subnormal-per-axis",
            _per_axis_float16([0.01, 3e-8, 0.02]),
            _per_axis_float16([0.01, 0.03, 0.02]),
        ),
    ],
)
def half_scale_subnormal(ctx: QDQView) -> Iterator[Finding]:
    scale = ctx.scale
    if scale is None or scale.array is None or scale.dtype not in _SMALLEST_NORMAL:
        return
    values = np.abs(scale.array.ravel())
    smallest = _SMALLEST_NORMAL[scale.dtype]
    tiny = (values > 0) & (values < smallest)
    if not tiny.any():
        return
    shown = ", ".join(f"{v:.3g}" for v in scale.array.ravel()[tiny][:4].tolist())
    yield ctx.report(
        f"{scale.dtype.name} scale '{scale.name}' has {int(tiny.sum())} subnormal value(s) "
        f"(below {smallest:.3g}): [{shown}{', ...' if tiny.sum() > 4 else ''}]",
        "keep the scale in float32, or requantize the tensor so that its scale is at least "
        f"{smallest:.3g}",
    )
