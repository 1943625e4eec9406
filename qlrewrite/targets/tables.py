"""The measured runtime tables: one JSON file per release under ``data/``, parsed on first
use.

A table records the release it was measured with, the highest IR version and opset per
domain it loads, and per node form (:func:`qlrewrite.targets.forms.form_of`) whether the
release ran the one-node model of that form, or refused it (at load or at run) with its
reason and message. A form missing from a table was not measured: no rule speaks about it.
The QDQ patterns also record how the default session's output compared with an
ORT_DISABLE_ALL session's and with the ONNX reference evaluator's on the same inputs
(:class:`Divergence`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qlrewrite.io import reading
from qlrewrite.io.reading import DOCUMENT_BYTES
from qlrewrite.targets.runtimes import by_table

__all__ = [
    "DATA",
    "Divergence",
    "Fact",
    "Refusal",
    "Table",
    "documented",
    "ort_releases",
    "table",
]

DATA = Path(__file__).resolve().parent / "data"


#: Errors a probe model met only because its group ends at the graph's output: OpenVINO's
#: FQ stripping ("replace_output_update_name ... failed") refuses a 16-bit Q/DQ pair ending
#: at a graph output that reads a graph input, another graph output or a MaxPool, and not
#: the same group inside a graph (measured, OpenVINO 2026.4.1). QL753 judges a model's own
#: graph edge.
PROBE_BOUNDARY_ERRORS = ("replace_output_update_name",)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A form a release did not run: when (``load`` or ``run``), why (``ir``, ``opset``,
    ``kernel``, ``type``, ``crash`` or ``other``) and the runtime's own message."""

    stage: str
    reason: str
    error: str
    #: A compared pattern refused at load: "runs" when an ORT_DISABLE_ALL session loaded
    #: and ran it (the default optimizations refuse it), else its error ("": not tried).
    unoptimized: str = ""


@dataclasses.dataclass(frozen=True)
class Divergence:
    """A pattern the runtime computes otherwise than it should: ``miscomputes`` (other
    values, or another shape) or ``fails at run``, measured ``against`` ONNX Runtime's
    ORT_DISABLE_ALL session (``"ORT_DISABLE_ALL"``: the optimized session departs from
    the unoptimized one) or the ONNX reference evaluator (``"the ONNX reference"``), with
    the largest difference measured relative to the largest output (None: no shape ran)
    and the runtime's error, if any."""

    outcome: str
    max_rel_diff: float | None
    error: str
    against: str = "ORT_DISABLE_ALL"


_WRONG = ("miscomputes", "fails at run")


def _divergence(row: Mapping[str, Any]) -> Divergence | None:
    """From ``optimized`` (the default session against ORT_DISABLE_ALL) first, else from
    ``reference`` (the runtime against the ONNX reference evaluator)."""
    outcome = row.get("optimized")
    if outcome in _WRONG:
        versus = row.get("versus_unoptimized", [])
        return _measured(outcome, versus, "max_rel_diff", str(row.get("error", "")))
    reference = row.get("reference")
    if reference not in _WRONG:
        return None
    if "versus_reference" in row:  # OpenVINO
        return _measured(reference, row["versus_reference"], "max_rel_diff", "", reference=True)
    versus = row.get("versus_unoptimized", [])
    return _measured(reference, versus, "reference_rel_diff", "", reference=True)


def _measured(
    outcome: str, versus: list, key: str, fallback: str, *, reference: bool = False
) -> Divergence:
    diffs = [v[key] for v in versus if key in v]
    errors = [v["error"] for v in versus if "error" in v]
    against = "the ONNX reference" if reference else "ORT_DISABLE_ALL"
    error = errors[0] if errors else fallback
    return Divergence(outcome, max(diffs) if diffs else None, error, against)


@dataclasses.dataclass(frozen=True)
class Table:
    """One release's measured table."""

    name: str  # the file's stem: "ort-1.16", "openvino"
    runtime: str  # "onnxruntime", "openvino"
    release: str  # "1.16.3"
    measured: str  # the date
    max_ir_version: int | None
    max_opset: Mapping[str, int | None]
    forms: Mapping[str, Any]

    @property
    def label(self) -> str:
        """``ORT 1.16.3``, ``OpenVINO 2025.3.0``."""
        runtime = by_table(self.runtime)
        return f"{runtime.label if runtime else self.runtime} {self.release}"

    @property
    def minor(self) -> tuple[int, ...]:
        """The release as (major, minor): ``(1, 16)`` for ``1.16.3``."""
        return tuple(int(part) for part in self.release.split(".")[:2] if part.isdigit())

    def measured_form(self, form: str) -> bool:
        """Whether the probe measured ``form`` on this release."""
        return form in self.forms

    def refusal(self, form: str, *, between_graph_io: bool = True) -> Refusal | None:
        """How this release refused ``form`` (None: it ran it, or it was not measured).
        ``between_graph_io=False``: leave out a refusal the probe's model met only at the
        graph's edge (:data:`PROBE_BOUNDARY_ERRORS`; QL753 judges a model's own)."""
        row = self.forms.get(form)
        if not isinstance(row, dict) or row.get("runs"):
            return None
        boundary = any(mark in row.get("error", "") for mark in PROBE_BOUNDARY_ERRORS)
        if boundary and not between_graph_io:
            return None
        return Refusal(
            row["refused"], row["reason"], row.get("error", ""), row.get("unoptimized", "")
        )

    def divergence(self, form: str) -> Divergence | None:
        """How this release computed the pattern ``form`` otherwise than it should: its
        optimized session against its unoptimized one, or against the ONNX reference
        (None: it matched, or it was not compared)."""
        row = self.forms.get(form)
        return _divergence(row) if isinstance(row, dict) else None

    def computes_wrong(self, key: str) -> bool:
        """Whether this release refused, failed on or computed wrong the compared row
        ``key`` (a QOperator node with its zero points: :func:`~qlrewrite.targets.forms.
        values_key`); False when it computed it right or it was not measured."""
        return self.refusal(key) is not None or self.divergence(key) is not None

    def runtime_ops(self, form: str) -> list[str] | None:
        """What the runtime made of ``form`` when it ran it (OpenVINO: the execution graph's
        layer types and precisions), None when not recorded."""
        row = self.forms.get(form)
        return row.get("runtime_ops") if isinstance(row, dict) else None


def _document(name: str) -> dict[str, Any]:
    """``data/<name>.json``, read through the one reader of the package."""
    return json.loads(reading.read_text(DATA / f"{name}.json", "runtime table", DOCUMENT_BYTES))


@functools.cache
def table(name: str) -> Table:
    """The table ``data/<name>.json`` (parsed once)."""
    document = _document(name)
    return Table(
        name=name,
        runtime=document["runtime"],
        release=document["release"],
        measured=document["measured"],
        max_ir_version=document["max_ir_version"],
        max_opset=document["max_opset"],
        forms=document["forms"],
    )


def _minor(name: str) -> tuple[int, int]:
    major, minor = re.fullmatch(r"ort-(\d+)\.(\d+)", name).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


@functools.cache
def ort_releases() -> tuple[tuple[int, int], ...]:
    """The ONNX Runtime releases (major, minor) that have a table, oldest first."""
    names = [p.stem for p in DATA.glob("ort-*.json")]
    return tuple(sorted(_minor(n) for n in names))


@dataclasses.dataclass(frozen=True)
class Fact:
    """One documented limit of a target known from its vendor's documents only: the rule as
    the document states it, the values it names, and where it says so."""

    rule: str
    source: str  # the document's address
    section: str  # where in it
    values: Mapping[str, Any]  # the fact's other fields (types, block sizes, operators)
    target: str = ""  # the table it is a row of (``tensorrt``, ``qnn``)
    key: str = ""  # its row

    @property
    def cited(self) -> str:
        """``<source> (<section>)``: for ``qlrewrite rules CODE`` and the docs."""
        return f"{self.source} ({self.section})"

    @property
    def named(self) -> str:
        """The row in a few words, for a finding (``qlrewrite rules CODE`` cites the
        document)."""
        return f"{self.target} docs, {self.key}"


@functools.cache
def documented(name: str) -> dict[str, Fact]:
    """The documented facts of target ``name`` (``tensorrt``, ``qnn``): ``data/<name>.json``."""
    document = _document(name)
    facts = {}
    for key, entry in document["facts"].items():
        values = {k: v for k, v in entry.items() if k not in ("rule", "source", "section")}
        facts[key] = Fact(entry["rule"], entry["source"], entry["section"], values, name, key)
    return facts
