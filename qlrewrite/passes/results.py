"""What the rewriting passes return: typed :class:`~onnx_ir.passes.PassResult` subclasses
(as onnxscript's ``FoldConstantsResult``), and the mark of a pass that repairs findings."""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx_ir as ir

from qlrewrite.verify.bound import EXACT_BOUND, Bound

__all__ = [
    "ConvertResult",
    "ConvertsCustomOps",
    "DowngradeResult",
    "FixResult",
    "FoldResult",
    "HalfResult",
    "ImportsResult",
    "IntegerIOResult",
    "NBitsResult",
    "QOperatorResult",
    "RepairsFindings",
    "RetargetResult",
    "RewritePassResult",
    "UpgradeResult",
]


@dataclasses.dataclass
class RewritePassResult(ir.passes.PassResult):
    """A rewrite's result: the model, whether it changed, counts of what changed (the
    summary line and ``--report``'s ``changes``) and warnings for the reader."""

    summary: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Strings, or objects with ``message`` and ``to_json()``.
    warnings: list[Any] = dataclasses.field(default_factory=list)
    #: What ``--verify`` accepts: exact, or a stated bound and why ONNX Runtime's outputs
    #: may differ (see :class:`qlrewrite.verify.bound.Bound`).
    verify_bound: Bound = EXACT_BOUND
    #: The findings it repaired, one ``(code, where, what)`` per repair, in the order
    #: made (``check --diff`` prints them; ``check --fix`` counts them per code).
    changes: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FixResult(RewritePassResult):
    """:class:`~qlrewrite.passes.fix.FixPass`: repairs per rule code in ``summary``, and
    one ``changes`` entry per repair."""


@dataclasses.dataclass
class FoldResult(RewritePassResult):
    """:class:`~qlrewrite.passes.fold.fold_pass.FoldPass`: ``dq_folded``, ``q_folded``,
    ``chains_folded``, ``nodes_removed``, ``initializers_removed``, ``opsets_removed``."""


@dataclasses.dataclass
class ConvertResult(RewritePassResult):
    """:class:`~qlrewrite.passes.convert.domain.ConvertDomainPass`: ``nodes_converted``,
    ``nodes_left``, ``opset_imports_dropped``, ``ir_version_raised``."""


@dataclasses.dataclass
class ImportsResult(RewritePassResult):
    """:class:`~qlrewrite.passes.imports.ImpliedImportsPass`: ``opset_imports_added``, and
    a warning naming them."""


@dataclasses.dataclass
class HalfResult(RewritePassResult):
    """:class:`~qlrewrite.passes.half.HalfPass`: ``values_retyped``,
    ``initializers_cast``, ``casts_added``, ``qdq_in_target_type``, ``qdq_kept_float32``;
    a warning per Q/DQ node kept in float32 for its scale."""


@dataclasses.dataclass
class IntegerIOResult(RewritePassResult):
    """:class:`~qlrewrite.passes.integer_io.IntegerIOPass`: ``inputs_made_integer``,
    ``outputs_made_integer``, ``quantize_nodes_merged`` (an input read by several equal
    QuantizeLinear nodes), ``inputs_left``, ``outputs_left``;
    :class:`~qlrewrite.passes.integer_io.FloatIOPass`: ``inputs_made_float``,
    ``outputs_made_float``."""


@dataclasses.dataclass
class NBitsResult(RewritePassResult):
    """:class:`~qlrewrite.passes.nbits.to_onnx.NBitsToOnnxPass`:
    ``matmul_nbits_converted``, ``gather_block_quantized_converted``, ``nbits_nodes_left``,
    ``initializers_removed``, ``opset_imports_dropped``;
    :class:`~qlrewrite.passes.nbits.from_onnx.NBitsFromOnnxPass`: ``matmul_nbits_made``,
    ``gather_block_quantized_made``, ``8bit_weights_left`` (0 with ``include_8bit``)."""


@dataclasses.dataclass
class QOperatorResult(RewritePassResult):
    """:class:`~qlrewrite.passes.convert.qoperator_to_qdq.QOperatorToQdqPass`:
    ``qoperator_converted``, ``qoperator_left``, ``opset_imports_dropped``; and
    ``differences``: the output name of each QuantizeLinear written for a converted node
    -> the steps it may differ by (the sources of :func:`qlrewrite.verify.difference.output_bounds`,
    which ``--verify`` re-checks on measured values)."""

    differences: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class UpgradeResult(RewritePassResult):
    """:class:`~qlrewrite.passes.upgrade.UpgradePass`: opsets and IR versions before and
    after, nodes converted to ai.onnx and com.microsoft nodes left."""


@dataclasses.dataclass
class DowngradeResult(RewritePassResult):
    """:class:`~qlrewrite.passes.downgrade.DowngradePass`: opsets and IR versions before and
    after, blocked nodes lowered, 4-bit initializers widened (and the bytes added), nodes
    written as com.microsoft, nodes relabelled at the older version."""


@dataclasses.dataclass
class RetargetResult(RewritePassResult):
    """:class:`~qlrewrite.passes.retarget.RetargetPass`: quantized tensors ``sign_flipped``,
    ``made_symmetric``, ``narrowed`` (to 4 bits) and ``narrow_left`` (8-bit weights that do
    not fit 4 bits or whose opset has no 4-bit types);
    :class:`~qlrewrite.passes.convert.tidy.QdqTidyPass`: ``redundant_pairs_removed``,
    ``shared_dequantize_split``, ``shared_initializers_split``."""


class ConvertsCustomOps:
    """Mixin of a pass that converts other producers' custom quantization operators
    (:mod:`qlrewrite.qdq.custom_ops`): the pipeline does not refuse an input for the
    ``(domain, op_type)`` pairs in ``custom_ops``."""

    custom_ops: frozenset[tuple[str, str]] = frozenset()


class RepairsFindings:
    """Mixin of a pass that repairs input findings: the pipeline does not refuse an input
    for error findings of ``repairs_rules`` (the output is checked again in full), and
    adds no pass of its own for them (:func:`qlrewrite.pipeline.with_implied_imports`).
    What a pass repairs is read from the rules' declarations (their ``Fix`` and
    ``upgrade_repairs``), never listed a second time."""

    @property
    def repairs_rules(self) -> tuple[str, ...]:
        """The codes of the rules whose findings the pass repairs (a pass states them as a
        class attribute, an attribute set when made, or a property read when asked)."""
        return ()
