"""Two models on the same inputs: how their outputs differ, in the runtimes at hand.

``--verify`` runs the rewritten model against the original twice: by the semantics
(:mod:`qlrewrite.verify`, ONNX Runtime's optimizations off: it decides) and as deployed
(:mod:`qlrewrite.deployed`, ORT's default session: it warns). ``qlrewrite compare`` runs
any two models in ONNX Runtime, the ONNX reference evaluator and OpenVINO when installed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import onnx_ir as ir

from qlrewrite.deployed import Deployment, Fusions, compare_deployed, optimized_graph
from qlrewrite.qdq import constant_tensor, iter_sites
from qlrewrite.tensors import initializer_bytes
from qlrewrite.verify import UNVERIFIABLE, InputSpec, Verification, VerifyOptions
from qlrewrite.verify_child import ChildFailed, call_in_child, verify_in_child

__all__ = ["FUSION_CHECK_MAX_BYTES", "ort_fusions", "output_steps", "verify_both"]


#: Initializer bytes above which fold does not load the input into ONNX Runtime to warn
#: of fusions (the session holds every weight, prepacked ones twice); --keep-fused does.
FUSION_CHECK_MAX_BYTES = 2 << 30


def ort_fusions(path: str | os.PathLike, model: ir.Model, *, required: bool = False) -> Fusions:
    """The graph ONNX Runtime's default CPU session makes of the model at ``path``
    (``model`` as loaded), read in the child process (no run); when ORT is not installed,
    fails on it, or (unless ``required``) the model's initializers exceed
    :data:`FUSION_CHECK_MAX_BYTES`, the reason it was not checked."""
    try:
        import onnxruntime
    except ImportError:
        return Fusions("ONNX Runtime", reason="onnxruntime is not installed")
    runtime = f"ONNX Runtime {onnxruntime.__version__}"
    size = initializer_bytes(model)
    if size > FUSION_CHECK_MAX_BYTES and not required:
        return Fusions(runtime, reason=f"the initializers take {size / 2**30:.1f} GiB, above "
                       f"the {FUSION_CHECK_MAX_BYTES >> 30} GiB this check loads into ORT "
                       "(--keep-fused checks at any size)")  # fmt: skip
    try:
        return Fusions(runtime, call_in_child(optimized_graph, os.fspath(path)))
    except ChildFailed as exc:
        return Fusions(runtime, reason=f"it fails on the input ({exc})")


def output_steps(model: ir.Model) -> dict[str, float]:
    """The quantization step of each graph output a DequantizeLinear of one scale
    produces (its scale): where an output's difference reads in steps."""
    outputs = {v.name for v in model.graph.outputs}
    steps = {}
    for site in iter_sites(model):
        produced = site.node.outputs[0].name
        if site.graph is not model.graph or produced not in outputs:
            continue
        if site.node.op_type != "DequantizeLinear":
            continue
        tensor = constant_tensor(site.input("scale"))
        if tensor is not None and tensor.size == 1:
            steps[produced] = float(tensor.numpy().reshape(-1)[0])
    return steps


def verify_both(
    original: str | os.PathLike,
    rewritten: str | os.PathLike,
    specs: Sequence[InputSpec],
    options: VerifyOptions,
) -> Verification:
    """The ``--verify`` runner: the semantic verification in the child process, then
    (with ``options.deployed``, when it did not end unverifiable) both models as
    deployed, kept in ``Verification.deployment`` (ORT crashing there is said, never a
    failure)."""
    result = verify_in_child(original, rewritten, specs, options)
    if not options.deployed or result.status == UNVERIFIABLE:
        return result
    try:
        result.deployment = call_in_child(
            compare_deployed, os.fspath(original), os.fspath(rewritten), list(specs),
            seed=options.seed, steps=dict(options.output_steps),
        )  # fmt: skip
    except ChildFailed as exc:
        result.deployment = Deployment("ONNX Runtime CPU, default session", reason=str(exc))
    return result
