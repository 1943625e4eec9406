"""What ``convert --to qoperator`` returns: :class:`ToQOperatorResult`, and how far the
QLinear kernels of ONNX Runtime may compute otherwise than DequantizeLinear -> op ->
QuantizeLinear (the steps per operator, measured, and the bound ``--verify`` checks)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from qlrewrite.passes.results import RewritePassResult
from qlrewrite.verify.verify import EXACT_BOUND, Bound

__all__ = ["FLOAT_SUM_RELATIVE", "STEPS", "ToQOperatorResult", "stated_bound"]

#: Quantization steps a QLinear kernel's output may differ from DequantizeLinear -> float op
#: -> QuantizeLinear's with the same inputs: ONNX Runtime 1.31.1, ORT_DISABLE_ALL, measured
#: by tests/passes/test_to_qoperator.py::test_kernel_steps(_measured) (docs/qoperator.md).
#: 0: the kernel computes the float op's values then quantizes them as QuantizeLinear does
#: (a lookup table built from them, or a copy); 1: it computes in integers or its own float
#: path and requantizes with its own rounding (Add, Mul, the pools, Softmax: one step in
#: up to 7% of elements; Conv, MatMul, Gemm: never seen, not proven).
STEPS: Mapping[str, float] = {
    "QLinearConv": 1.0,
    "QLinearMatMul": 1.0,
    "QGemm": 1.0,
    "QLinearAdd": 1.0,
    "QLinearMul": 1.0,
    "QLinearAveragePool": 1.0,
    "QLinearGlobalAveragePool": 1.0,
    "QLinearSoftmax": 1.0,
    "QLinearConcat": 0.0,
    "QLinearLeakyRelu": 0.0,
    "QLinearSigmoid": 0.0,
}
#: MatMulInteger / ConvInteger sum exact int32 products and scale once; DequantizeLinear ->
#: MatMul sums float32 products: relative to an output's largest magnitude.
FLOAT_SUM_RELATIVE = 1e-5
REQUANTIZE_REASON = (
    "a QLinear kernel requantizes its integer result with its own rounding where "
    "DequantizeLinear -> op -> QuantizeLinear rounds the float result once: each converted "
    "QLinearConv / QLinearMatMul / QGemm / QLinearAdd / QLinearMul / QLinearAveragePool / "
    "QLinearGlobalAveragePool / QLinearSoftmax output may differ by one quantization step "
    "(ONNX Runtime 1.31.1), carried through the ops after it to every output "
    "(docs/qoperator.md)"
)
FLOAT_SUM_REASON = (
    "MatMulInteger / ConvInteger sum exact int32 products and scale once, "
    "DequantizeLinear -> MatMul / Conv sums float32 products (another rounding)"
)


@dataclasses.dataclass
class ToQOperatorResult(RewritePassResult):
    """:class:`~qlrewrite.passes.convert.qdq_to_qoperator.QdqToQOperatorPass`:
    ``groups_converted``, ``integer_ops_written`` (moves and selections on the integers,
    MatMulInteger / ConvInteger), ``left_<reason>`` per reason a group stays Q/DQ
    (:data:`~qlrewrite.passes.convert.qdq_groups.REASONS`), ``opset_imports_added``;
    ``written``: op type -> count; ``differences``: the output of each converted node that
    may differ -> the steps it may differ by."""

    written: dict[str, int] = dataclasses.field(default_factory=dict)
    differences: dict[str, float] = dataclasses.field(default_factory=dict)


def stated_bound(limits: Mapping[str, float], float_sums: bool) -> Bound:
    """The bound of the outputs' ``limits`` (steps or float units; ``inf`` unbounded) and
    of float sums in another order (``float_sums``)."""
    per_output = tuple((n, v) for n, v in sorted(limits.items()) if 0 < v < math.inf)
    unbounded = tuple(n for n, v in sorted(limits.items()) if v == math.inf)
    reasons = [REQUANTIZE_REASON] * bool(per_output or unbounded)
    reasons += [FLOAT_SUM_REASON] * float_sums
    if not reasons:
        return EXACT_BOUND
    relative = FLOAT_SUM_RELATIVE if float_sums else None
    return Bound("; ".join(reasons), relative, None, per_output, unbounded)
