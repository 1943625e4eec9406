"""What ``--verify`` accepts of a rewrite: bit-identical outputs, or a stated bound with
its reason (:class:`Bound`); the float32 summation-order bound the rewrites that sum in
another order state (:func:`summation_order_bound`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

__all__ = ["EXACT_BOUND", "FLOAT32_UNIT_ROUNDOFF", "Bound", "Compared", "summation_order_bound"]


class Compared(Protocol):
    """What a bound reads of one output's comparison
    (:class:`~qlrewrite.verify.arrays.OutputVerdict` is one)."""

    name: str
    exact: bool
    problem: str | None
    max_abs: float
    max_ref: float
    max_ulp: int | None


@dataclasses.dataclass(frozen=True)
class Bound:
    """What ``--verify`` accepts of a rewrite: bit-identical outputs (:data:`EXACT_BOUND`),
    or differences within a stated limit, with the reason ONNX Runtime computes the two
    forms differently.

    The one policy of every rewrite (fold, convert, upgrade, QOperator conversions): a pass
    whose output ONNX Runtime does not compute bit-identically returns a ``Bound`` in its
    result (``verify_bound``); ``--verify`` accepts an output that is exact, or whose
    largest difference is within at least one stated limit:

    - ``relative``: max |expected - actual| <= relative x the output's largest finite
      |expected| (a float32 summation-order bound scales with the output's magnitude);
    - ``ulp``: at most ``ulp`` representable steps between expected and actual;
    - ``per_output``: (output name, limit) pairs: max |expected - actual| <= limit for that
      output (steps for an integer output, float units otherwise; see
      :mod:`qlrewrite.verify.difference`);
    - ``unbounded``: outputs whose difference nothing bounds (a LayerNormalization after a
      converted node): their difference is reported, not checked.

    A missing output, a changed type or shape, or NaN against a number is never accepted.
    """

    reason: str | None = None
    relative: float | None = None
    ulp: int | None = None
    per_output: tuple[tuple[str, float], ...] = ()
    unbounded: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        limits = (self.relative, self.ulp, *(v for _, v in self.per_output))
        if any(v is not None and v < 0 for v in limits):
            raise ValueError("a bound's limits are not negative")
        if (self.reason is None) != (all(v is None for v in limits) and not self.unbounded):
            raise ValueError("a bound states a limit and its reason, or neither (exact)")

    @property
    def exact(self) -> bool:
        """True when only bit-identical outputs pass."""
        return self.reason is None

    def accepts(self, verdict: Compared) -> bool:
        """Whether this bound accepts ``verdict`` (exact outputs always pass)."""
        if verdict.exact:
            return True
        if verdict.problem is not None or verdict.max_abs == float("inf"):
            return False
        if verdict.name in self.unbounded:
            return True
        relative = 0.0 if self.relative is None else self.relative * verdict.max_ref
        if relative > 0 and verdict.max_abs <= relative:  # a zero limit accepts nothing
            return True
        limit = dict(self.per_output).get(verdict.name)
        if limit is not None and limit > 0 and verdict.max_abs <= limit:
            return True
        return self.ulp is not None and verdict.max_ulp is not None and verdict.max_ulp <= self.ulp

    def join(self, other: Bound) -> Bound:
        """The bound of two rewrites applied one after the other: the looser limits, both
        reasons (the differences of either rewrite pass)."""
        if other.exact or other == self:
            return self
        if self.exact:
            return other
        reasons = list(dict.fromkeys([self.reason, other.reason]))
        relative = _looser(self.relative, other.relative)
        per_output = dict(self.per_output)
        for name, limit in other.per_output:
            per_output[name] = _looser(per_output.get(name), limit)
        unbounded = tuple(sorted({*self.unbounded, *other.unbounded}))
        return Bound(
            "; ".join(r for r in reasons if r),
            relative,
            _looser(self.ulp, other.ulp),
            tuple(sorted(per_output.items())),
            unbounded,
        )

    def describe(self) -> str:
        """``exact``, or the accepted limits in words."""
        if self.exact:
            return "exact"
        limits = []
        if self.relative is not None:
            limits.append(f"{self.relative:g} x each output's largest magnitude")
        if self.ulp is not None:
            limits.append(f"{self.ulp} ulp")
        if self.per_output:
            shown = ", ".join(f"{limit:.3g} at {name}" for name, limit in self.per_output[:4])
            more = f" and {len(self.per_output) - 4} more" if len(self.per_output) > 4 else ""
            limits.append(f"{shown}{more}")
        text = f"differences up to {' or '.join(limits)}" if limits else ""
        if self.unbounded:
            names = ", ".join(self.unbounded[:4])
            more = f" and {len(self.unbounded) - 4} more" if len(self.unbounded) > 4 else ""
            text += ("; " if text else "") + f"unbounded: {names}{more} (reported, not checked)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "exact": self.exact,
            "relative": self.relative,
            "ulp": self.ulp,
            "per_output": dict(self.per_output),
            "unbounded": list(self.unbounded),
            "reason": self.reason,
        }


def _looser(a: float | int | None, b: float | int | None) -> Any:
    return b if a is None else a if b is None else max(a, b)


#: Only bit-identical outputs pass.
EXACT_BOUND = Bound()

#: The unit roundoff of float32 (half its machine epsilon).
FLOAT32_UNIT_ROUNDOFF = 2.0**-24


def summation_order_bound(k: int, reason: str) -> Bound:
    """The bound of a rewrite whose float32 dot products of length ``k`` (plus one term: a
    bias) sum the same exactly-formed products in another order.

    Any two orders of summing n terms in float32 (with or without fused multiply-add)
    differ by at most ``2 gamma(n) sum |term|``, ``gamma(n) = n u / (1 - n u)``, ``u =
    2^-24`` (Higham, Accuracy and Stability of Numerical Algorithms, section 3.1). The
    limit stated is ``2 gamma(k + 1)`` times each output's largest magnitude: the bound
    with ``sum |a w|`` read as the output's magnitude.
    """
    n = k + 1
    gamma = n * FLOAT32_UNIT_ROUNDOFF / (1 - n * FLOAT32_UNIT_ROUNDOFF)
    return Bound(
        f"{reason} (limit: 2 gamma(K + 1), the float32 summation-order bound, K = {k})",
        relative=2 * gamma,
    )
