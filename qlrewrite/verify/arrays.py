"""How two output arrays differ: bit for bit, and on a difference the largest absolute
difference (integers as integers, exactly: int64 values near 2^60 differing by 1 differ
by 1, not by 0 as in float64), the largest ulp distance of floats, and the largest
magnitude of the expected output.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

if TYPE_CHECKING:
    from qlrewrite.verify.bound import Bound

__all__ = ["ULP_SHOWN", "OutputVerdict", "compare_arrays", "integer_difference", "ulp_words"]


@dataclasses.dataclass
class OutputVerdict:
    """How one graph output compares over every run."""

    name: str
    exact: bool = True
    elements: int = 0
    mismatched: int = 0
    max_abs: float = 0.0
    max_ulp: int | None = None
    problem: str | None = None  # missing output, dtype or shape differs
    max_ref: float = 0.0  # the largest finite magnitude of the expected output (on a mismatch)

    def merge(self, other: OutputVerdict) -> None:
        """Fold the verdict of another run of the same output into this one."""
        self.exact = self.exact and other.exact
        self.elements += other.elements
        self.mismatched += other.mismatched
        self.max_abs = max(self.max_abs, other.max_abs)
        if other.max_ulp is not None:
            self.max_ulp = max(self.max_ulp or 0, other.max_ulp)
        self.problem = self.problem or other.problem
        self.max_ref = max(self.max_ref, other.max_ref)

    def within(self, tolerance: float | None, bound: Bound | None = None) -> bool:
        """Exact, or every difference at most ``tolerance``, or accepted by ``bound``
        (NaN against a number never is; a zero tolerance accepts no difference at all)."""
        if self.exact:
            return True
        if self.problem is not None:
            return False
        if tolerance is not None and tolerance > 0 and self.max_abs <= tolerance:
            return True
        return bound is not None and bound.accepts(self)

    def describe(self) -> str:
        """``exact`` or the differences, in words."""
        if self.problem:
            return self.problem
        if self.exact:
            return "exact"
        ulp = ""
        if self.max_ulp is not None:  # about 2e9 when a value crosses zero: said in words
            shown = self.max_ulp < ULP_SHOWN
            ulp = f", max ulp {self.max_ulp}" if shown else f", {ulp_words(self.max_ulp)}"
        if self.max_ref > 0 and self.max_abs != float("inf"):
            ulp += f", {self.max_abs / self.max_ref:.2g} of the largest |value|"
        return (
            f"{self.mismatched} of {self.elements} elements differ: max abs {self.max_abs:.6g}{ulp}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "exact": self.exact,
            "elements": self.elements,
            "mismatched": self.mismatched,
            "max_abs": None if self.max_abs == float("inf") else self.max_abs,
            "max_ulp": self.max_ulp,
            "max_ref": self.max_ref,
            "problem": self.problem,
        }


def compare_arrays(name: str, expected: np.ndarray, actual: np.ndarray) -> OutputVerdict:
    """Compare two outputs bit for bit; on a difference, the largest abs and ulp difference."""
    verdict = OutputVerdict(name, elements=int(expected.size))
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        verdict.exact = False
        verdict.max_abs = float("inf")
        verdict.mismatched = verdict.elements
        verdict.problem = (
            f"{expected.dtype}{list(expected.shape)} became {actual.dtype}{list(actual.shape)}"
        )
        return verdict
    if expected.dtype == object:  # strings
        differs = expected != actual
        verdict.mismatched = int(np.count_nonzero(differs))
        verdict.exact = verdict.mismatched == 0
        verdict.max_abs = 0.0 if verdict.exact else float("inf")
        return verdict
    bits = np.dtype(f"uint{expected.dtype.itemsize * 8}")
    a = np.ascontiguousarray(expected).view(bits)
    b = np.ascontiguousarray(actual).view(bits)
    differs = a != b
    verdict.mismatched = int(np.count_nonzero(differs))
    dtype = ir.DataType.from_numpy(expected.dtype)
    if dtype.is_floating_point():
        verdict.max_ulp = 0
    if verdict.mismatched == 0:
        return verdict
    verdict.exact = False
    if expected.dtype.kind in "iub":
        verdict.max_abs = integer_difference(expected[differs], actual[differs])
        return verdict
    verdict.max_abs = _float_difference(expected[differs], actual[differs])
    if dtype.is_floating_point():
        magnitude = np.abs(expected.astype(np.float64))
        finite = magnitude[np.isfinite(magnitude)]
        verdict.max_ref = float(finite.max()) if finite.size else 0.0
        verdict.max_ulp = _max_ulp(a[differs], b[differs], expected.dtype.itemsize * 8)
    return verdict


def integer_difference(expected: np.ndarray, actual: np.ndarray) -> float:
    """The largest ``|expected - actual|`` of two integer arrays of one type, computed
    exactly (in uint64: the difference of two int64 fits), as the smallest float at
    least that large (a difference is never rounded down to within a tolerance)."""
    if expected.size == 0:
        return 0.0
    wide = np.int64 if expected.dtype.kind in "ib" else np.uint64
    ea, aa = expected.astype(wide), actual.astype(wide)
    high, low = np.maximum(ea, aa), np.minimum(ea, aa)
    largest = int((high.view(np.uint64) - low.view(np.uint64)).max())  # modulo 2^64: exact
    rounded = float(largest)
    return rounded if int(rounded) >= largest else math.nextafter(rounded, math.inf)


def _float_difference(fa: np.ndarray, fb: np.ndarray) -> float:
    """The largest ``|fa - fb|`` of float values, in float64 (equal zeros and infinities
    0, two NaNs 0, a NaN against a number infinite)."""
    fa, fb = fa.astype(np.float64), fb.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(fa - fb)
    diff[fa == fb] = 0.0  # +0 / -0, equal infinities
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    diff[nan_a & nan_b] = 0.0  # NaN payloads differ: not exact, but no distance
    diff[nan_a ^ nan_b] = np.inf
    return float(diff.max())


def _max_ulp(a_bits: np.ndarray, b_bits: np.ndarray, width: int) -> int:
    """Largest distance in representable steps between float bit patterns (sign-magnitude)."""
    sign = np.uint64(1) << np.uint64(width - 1)
    a, b = a_bits.astype(np.uint64), b_bits.astype(np.uint64)
    ma, mb = a & (sign - np.uint64(1)), b & (sign - np.uint64(1))
    same_sign = (a & sign) == (b & sign)
    steps = np.where(same_sign, np.maximum(ma, mb) - np.minimum(ma, mb), ma + mb)
    return int(steps.max())


#: From this many ulp on (2^23: the values are a power of two apart, or of opposite signs)
#: the count says nothing a person can use: max abs and the relative difference do.
ULP_SHOWN = 1 << 23


def ulp_words(ulp: int) -> str:
    """``12 ulp``, or, from :data:`ULP_SHOWN` on (a value crossing zero gives about 2e9),
    that the values differ in sign or by a factor of two or more."""
    if ulp >= ULP_SHOWN:
        return "2^23 ulp or more (sign or power of two differs)"
    return f"{ulp} ulp"
