"""The integer I/O family: a model that takes and returns its quantized type instead of
float (:mod:`~qlrewrite.passes.integer_io.to_integer`), and back
(:mod:`~qlrewrite.passes.integer_io.to_float`), each input's and output's scale and zero
point kept in the model's metadata (:mod:`~qlrewrite.passes.integer_io.record`)."""

from __future__ import annotations

from qlrewrite.passes.integer_io.record import KEY_PREFIX
from qlrewrite.passes.integer_io.to_float import FloatIOPass
from qlrewrite.passes.integer_io.to_integer import IntegerIOPass

__all__ = ["KEY_PREFIX", "FloatIOPass", "IntegerIOPass"]
