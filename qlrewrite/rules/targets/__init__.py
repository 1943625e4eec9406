"""The rules of ``--target``: what a runtime refuses, fails on or computes wrong."""

from qlrewrite.rules.targets import ort, ort_values, qnn, tensorrt  # noqa: F401 (register their rules)
