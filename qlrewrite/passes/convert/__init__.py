"""The convert family: Q/DQ between the com.microsoft and ai.onnx domains
(:mod:`~qlrewrite.passes.convert.domain`), the QOperator / dynamic nodes and QONNX to
Q/DQ (:mod:`~qlrewrite.passes.convert.qoperator_to_qdq`,
:mod:`~qlrewrite.passes.convert.qonnx_to_qdq`), and the Q/DQ form tidied
(:mod:`~qlrewrite.passes.convert.tidy`)."""

from __future__ import annotations

from qlrewrite.passes.convert.domain import ConvertDomainPass
from qlrewrite.passes.convert.qonnx_to_qdq import QonnxToQdqPass
from qlrewrite.passes.convert.qoperator_to_qdq import QOperatorToQdqPass
from qlrewrite.passes.convert.tidy import QdqTidyPass

__all__ = ["ConvertDomainPass", "QOperatorToQdqPass", "QdqTidyPass", "QonnxToQdqPass"]
