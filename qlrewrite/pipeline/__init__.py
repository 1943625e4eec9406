"""The path every rewriting command takes: load, check, rewrite, check again, save.

A command builds a list of onnx_ir passes and hands it to :func:`rewrite`
(:mod:`~qlrewrite.pipeline.flow`: the file, its output plan, staging, ``--verify``, the
commit). Between reading and writing, :func:`rewrite_model`
(:mod:`~qlrewrite.pipeline.in_memory`) refuses an input with error findings no pass
repairs, runs the passes (:mod:`qlrewrite.passes.manager`) and refuses an output that
ONNX's checker or our check rejects (:mod:`~qlrewrite.pipeline.validate`). Nothing is
written when it would exceed ``max_size``, when ``verify`` finds that ONNX Runtime
computes something else with it (or cannot run it), or on ``dry_run``.
:mod:`~qlrewrite.pipeline.fix_files` is ``check --fix`` over files.
"""

from __future__ import annotations

from qlrewrite.io.output_plan import default_output, model_output, resolve_output
from qlrewrite.passes.manager import run_passes, with_implied_imports
from qlrewrite.pipeline.flow import RewriteResult, rewrite
from qlrewrite.pipeline.in_memory import Rewritten, rewrite_model
from qlrewrite.pipeline.refusals import FindingsRefusal, refuse_errors, unrepaired
from qlrewrite.pipeline.validate import validate_output

__all__ = [
    "FindingsRefusal",
    "RewriteResult",
    "Rewritten",
    "default_output",
    "model_output",
    "refuse_errors",
    "resolve_output",
    "rewrite",
    "rewrite_model",
    "run_passes",
    "unrepaired",
    "validate_output",
    "with_implied_imports",
]
