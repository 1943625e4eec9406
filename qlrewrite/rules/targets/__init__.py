"""The rules of ``--target``: what a runtime refuses, fails on or computes wrong."""

from qlrewrite.rules.targets import (  # noqa: F401 (register their rules)
    openvino,
    openvino_boundary,
    ort,
    ort_nbits,
    ort_pad_pool,
    ort_values,
    qnn,
    qoperator_values,
    tensorrt,
)
