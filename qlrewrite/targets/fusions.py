"""What a runtime fuses, as data: per release and weight pattern, the kernel the runtime forms
from a weight's DequantizeLinear, what that kernel computes differently, and what the runtime
makes of the same pattern once the weight is folded to float; read from the measured tables.

The probe (``tools/probe/drive.py``) runs each multi-node pattern (a constant weight
dequantized into its consumer, the activation float or quantized) in the runtime's default
session and records, per release: ``kernel`` (the integer / weight-only kernel formed, with
the attribute that changes its arithmetic: ``com.microsoft:MatMulNBits accuracy_level=4``;
None when the DequantizeLinear stays and the consumer runs in float; for OpenVINO the
compute layer that runs on the compressed weight, ``FullyConnected:i8``), the fused
output's largest difference from ORT_DISABLE_ALL's (relative to the largest output), and
under ``folded`` the same for the pattern with the weight folded to float (measured
against the unfolded model's ORT_DISABLE_ALL output). ``qlrewrite fold`` reads this for its
warning and ``--keep-fused``: no session of the user's model is built.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

import onnx_ir as ir

from qlrewrite.qdq import NodeView
from qlrewrite.targets.forms import pattern_key
from qlrewrite.targets.spec import Target, parse_target
from qlrewrite.targets.tables import DATA, Table

__all__ = [
    "COMPUTE_LAYERS",
    "FLOAT_PRECISIONS",
    "INTEGER_KERNELS",
    "Fusion",
    "FusionTable",
    "NoFusionTable",
    "consumer_of",
    "fusion_table",
    "fusions_for",
    "kernel_of_ops",
    "kernels_only_in_original",
]

#: Integer and weight-only kernels of ONNX Runtime's CPU provider (ai.onnx and
#: com.microsoft): what a fused DQ of a weight becomes.
INTEGER_KERNELS = frozenset(
    {
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
        "QGemm",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "MatMulNBits",
        "GatherBlockQuantized",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSoftmax",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearConcat",
        "QLinearReduceMean",
        "QLinearWhere",
        "QAttention",
        "DynamicQuantizeLSTM",
        "QEmbedLayerNormalization",
        "MatMulBnb4",
        "QLinearConvTranspose",
    }
)


def kernels_only_in_original(lost: Mapping[str, int], runtime: str = "ORT") -> str:
    """The words for kernels a runtime forms from the original model and not from the
    rewritten one: ``--verify``'s deployment check (measured) and ``fold``'s warning (read
    from the measured tables) say it the same way."""
    listed = ", ".join(f"{op} x{n}" for op, n in lost.items())
    return f"kernels {runtime} forms from the original only: {listed}"


#: OpenVINO runtime precisions that are not integer or low-precision float: a compute layer
#: running in one of these runs on a decompressed weight.
FLOAT_PRECISIONS = frozenset({"f32", "f16", "bf16", "f64", "dynamic", "undefined", "?"})
#: OpenVINO execution-graph layers that compute (not constants, reorders or transposes).
COMPUTE_LAYERS = ("FullyConnected", "MatMul", "Convolution", "Gemm")


def kernel_of_ops(ops: Iterable[str], runtime: str = "onnxruntime") -> str | None:
    """The fused kernel among a runtime's ops as the probe lists them (``runtime_ops``):
    ONNX Runtime's integer / weight-only kernels (``com.microsoft:QGemm``), OpenVINO's
    compute layers on a non-float precision (``FullyConnected:u8``); None when none."""
    if runtime == "openvino":
        found = [
            op
            for op in ops
            if op.startswith(COMPUTE_LAYERS) and op.partition(":")[2] not in FLOAT_PRECISIONS
        ]
    else:
        found = [op for op in ops if op.rpartition(":")[2] in INTEGER_KERNELS]
    return ", ".join(sorted(found)) or None


def _largest(versus: Iterable[Mapping[str, Any]]) -> float | None:
    diffs = [v["max_rel_diff"] for v in versus if "max_rel_diff" in v]
    return max(diffs) if diffs else None


@dataclasses.dataclass(frozen=True)
class Fusion:
    """One pattern in one release: the kernel formed from the quantized weight (None: the
    DequantizeLinear stays, the consumer runs in float), that output's largest difference
    from ORT_DISABLE_ALL's, and the kernel and difference once the weight is folded
    (``folded_measured`` False: the probe did not run the folded pattern)."""

    key: str
    kernel: str | None
    difference: float | None = None
    folded_kernel: str | None = None
    folded_difference: float | None = None
    folded_measured: bool = False

    @classmethod
    def of_row(cls, key: str, row: Mapping[str, Any], runtime: str) -> Fusion:
        """The fusion a table row of ``runtime`` records (rows measured before the probe
        recorded ``kernel``: the kernel read from ``runtime_ops``)."""
        ops = row.get("runtime_ops", ())
        kernel = row["kernel"] if "kernel" in row else kernel_of_ops(ops, runtime)
        folded = row.get("folded")
        return cls(
            key,
            kernel,
            _largest(row.get("versus_unoptimized", ())),
            folded.get("kernel") if isinstance(folded, Mapping) else None,
            _largest(folded.get("versus_unoptimized", ())) if isinstance(folded, Mapping) else None,
            isinstance(folded, Mapping),
        )

    @property
    def short_kernel(self) -> str | None:
        """The kernel without its domain (``MatMulNBits accuracy_level=4``)."""
        return None if self.kernel is None else self.kernel.replace("com.microsoft:", "")

    @property
    def kernel_op(self) -> str:
        """The kernel as ``--verify``'s deployment check names it: ONNX Runtime's op type
        (``MatMulNBits``), OpenVINO's layer and precision (``FullyConnected:i8``)."""
        first = (self.kernel or "none").split(", ")[0].split(" ")[0]
        return first.removeprefix("com.microsoft:")

    @property
    def consumer(self) -> str:
        """The consumer op of the pattern (``MatMul``)."""
        return self.key.partition(":")[0].rpartition(" ")[2].removeprefix("DQ->")

    def describe(self) -> str:
        """What the pattern computes fused and folded, against ORT_DISABLE_ALL's output
        (as measured by the probe)."""
        fused = f"{self.short_kernel} {_versus(self.difference)}"
        if not self.folded_measured:
            return f"{fused}; folded: not measured"
        kernel = self.folded_kernel
        runs = kernel.replace("com.microsoft:", "") if kernel else f"float {self.consumer}"
        return f"{fused}; folded, {runs} {_versus(self.folded_difference)}"


def _versus(difference: float | None) -> str:
    if difference is None:
        return "(output not compared)"
    if difference == 0:
        return "(output equal to ORT_DISABLE_ALL's)"
    return f"(output {difference:.2%} of its largest value off ORT_DISABLE_ALL's)"


@dataclasses.dataclass(frozen=True)
class NoFusionTable:
    """Why no measured table answers what the runtime fuses (``runtime``: as named)."""

    runtime: str
    reason: str


_PATTERN_OPSET = re.compile(r"opset=\d+")


def consumer_of(view: NodeView) -> ir.Node | None:
    """The node taking the DequantizeLinear's output as its weight (second input): the
    consumer the probe's patterns key (``MatMul`` today; Conv / Gemm when probed)."""
    outputs = view.node.outputs
    for node in outputs[0].consumers() if outputs else ():
        if len(node.inputs) > 1 and node.inputs[1] is outputs[0]:
            return node
    return None


@dataclasses.dataclass(frozen=True)
class FusionTable:
    """What one measured release fuses: :meth:`of` answers for a DequantizeLinear site."""

    table: Table

    @property
    def label(self) -> str:
        """Where the answers come from: ``qlrewrite/targets/data/ort-1.31.json``."""
        return str((DATA / f"{self.table.name}.json").relative_to(DATA.parents[2]))

    @property
    def runtime(self) -> str:
        """``ORT 1.31.1`` / ``OpenVINO 2026.4.0``."""
        return self.table.label

    def key(self, view: NodeView) -> str | None:
        """The pattern key of the DequantizeLinear seen by ``view`` (None: it feeds no
        weight input, or the weight has no form)."""
        consumer = consumer_of(view)
        return pattern_key(view, consumer) if consumer is not None else None

    def of(self, view: NodeView) -> Fusion | None:
        """:meth:`measured`, with ONNX Runtime's node-group rule applied: its QDQ selectors
        take a DequantizeLinear into a kernel only when the DequantizeLinear feeds that
        one node (``CheckOutputEdges`` in onnxruntime/core/optimizer/qdq_transformer/
        selectors_actions/qdq_selectors.cc; measured on ORT's own quantizer output: an
        activation DequantizeLinear shared by q/k/v_proj leaves them unfused in 1.31.1)."""
        fusion = self.measured(view)
        if fusion is None or fusion.kernel is None or self.table.runtime != "onnxruntime":
            return fusion
        consumer = consumer_of(view)
        inputs = [view.node.outputs[0]]
        if consumer is not None and fusion.key.startswith("QDQ "):
            inputs.append(consumer.inputs[0])  # the activation's DequantizeLinear output
        if all(len(v.uses()) == 1 and not v.is_graph_output() for v in inputs if v is not None):
            return fusion
        return dataclasses.replace(fusion, kernel=None)

    def measured(self, view: NodeView) -> Fusion | None:
        """What the release makes of the pattern ``view``'s DequantizeLinear is the weight
        of; None when the table does not hold it (not measured) or the release refuses it.
        The patterns were probed at one opset (21; 25 for the types that came with it): a
        weight DQ of another opset reads the row of the same pattern at those."""
        key = self.key(view)
        if key is None:
            return None
        for candidate in (key, *(_PATTERN_OPSET.sub(f"opset={o}", key, 1) for o in (21, 25))):
            row = self.table.forms.get(candidate)
            if isinstance(row, Mapping):
                return (
                    Fusion.of_row(candidate, row, self.table.runtime) if row.get("runs") else None
                )
        return None


def fusion_table(target: Target | str) -> FusionTable:
    """The fusion table of ``target`` (a parsed ``--target`` or its spelling): one measured
    release (``ort`` the installed one, ``ort==1.20``, ``openvino``). InputError (exit 2)
    for a range or a documented target, whose fusions nothing measured."""
    from qlrewrite.errors import InputError

    parsed = parse_target(target) if isinstance(target, str) else target
    if parsed.documented or len(parsed.table_names) != 1:
        what = "a documented target" if parsed.documented else "a range of releases"
        raise InputError(
            f"target '{parsed.spec}': {what}; fold reads one measured release's fusions "
            "(ort, ort==1.20, openvino)",
            parameter="target",
        )
    return FusionTable(parsed.tables[0])


def fusions_for(spec: str | None) -> FusionTable | NoFusionTable:
    """The fusion table ``fold`` reads: of ``--target SPEC`` (InputError, exit 2, when it
    names none), else of the installed ONNX Runtime's release (its version read from the
    package metadata: onnxruntime is not imported), or why there is none."""
    from qlrewrite.errors import InputError

    if spec is not None:
        return fusion_table(spec)
    try:
        return fusion_table("ort")
    except InputError as exc:
        reason = str(exc).removeprefix("target 'ort': ").split(";")[0]
        return NoFusionTable(
            "ONNX Runtime", f"{reason} (--target ort==1.20 or openvino reads that runtime's table)"
        )
