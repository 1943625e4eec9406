"""``--target SPEC``: which runtime (and which releases of it) a model is checked against.

``ort`` (the installed ONNX Runtime's release), ``ort==1.20``, ``ort>=1.17``,
``ort>=1.17,<1.21`` (every release with a table in the range: a form is flagged when any
of them refuses it), ``openvino`` (the measured release), ``tensorrt`` and ``qnn``
(documented only: their rules cite the vendor's documents, nothing was run).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Callable, Iterable

from qlrewrite.errors import InputError
from qlrewrite.targets.runtimes import DOCUMENTED, ORT, TARGETS, named
from qlrewrite.targets.runtimes import RUNTIMES as RUNTIMES_BY_KEY
from qlrewrite.targets.tables import Table, ort_releases, table

__all__ = ["DOCUMENTED", "RUNTIMES", "Target", "parse_target", "parse_targets"]

#: The runtimes a target names, and those known from documents only
#: (:mod:`qlrewrite.targets.runtimes` holds each runtime's record).
RUNTIMES = TARGETS

_COMPARE: dict[str, Callable[[tuple[int, int], tuple[int, int]], bool]] = {
    "==": operator.eq,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "!=": operator.ne,
}
_CLAUSE = re.compile(r"(==|>=|<=|!=|>|<)\s*(\d+)\.(\d+)(?:\.\d+)?")


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed ``--target``: the runtime and, for measured ones, the tables of the releases
    it covers (oldest first)."""

    spec: str  # as written
    runtime: str  # one of RUNTIMES
    table_names: tuple[str, ...] = ()

    @property
    def documented(self) -> bool:
        """True for the targets known from documents only (TensorRT, QNN)."""
        return self.runtime in DOCUMENTED

    @property
    def tables(self) -> tuple[Table, ...]:
        """The measured tables (loaded on first use)."""
        return tuple(table(name) for name in self.table_names)

    @property
    def label(self) -> str:
        """How findings name the target: ``ORT 1.16``, ``ORT 1.17-1.20``, ``OpenVINO
        2025.3.0``, ``TensorRT (documented)``."""
        if self.documented:
            return RUNTIMES_BY_KEY[self.runtime].label + " (documented)"
        if self.runtime == "openvino":
            return self.tables[0].label
        releases = [n.removeprefix("ort-") for n in self.table_names]
        span = releases[0] if len(releases) == 1 else f"{releases[0]}-{releases[-1]}"
        return f"ORT {span}"


def _fail(spec: str, why: str) -> InputError:
    return InputError(f"target '{spec}': {why}", parameter="target")


def _installed_ort(spec: str) -> tuple[int, int]:
    import importlib.metadata  # here: about 15 ms, paid only for a plain "ort"

    try:
        version = importlib.metadata.version(str(ORT.package))
    except importlib.metadata.PackageNotFoundError:
        raise _fail(spec, "onnxruntime is not installed; name a release (ort==1.20)") from None
    major, minor = (int(p) for p in version.split(".")[:2])
    return major, minor


def _ort_target(spec: str, clauses: str) -> Target:
    known = ort_releases()
    if not clauses.strip():
        wanted = [_installed_ort(spec)]
        chosen = [r for r in known if r in wanted]
    else:
        parts = [c.strip() for c in clauses.split(",")]
        matches = [_CLAUSE.fullmatch(p) for p in parts]
        if not all(matches):
            raise _fail(spec, "write ort, ort==1.20, ort>=1.17 or ort>=1.17,<1.21")
        tests = [(_COMPARE[m[1]], (int(m[2]), int(m[3]))) for m in matches if m]
        chosen = [r for r in known if all(test(r, bound) for test, bound in tests)]
    if not chosen:
        span = f"{known[0][0]}.{known[0][1]}-{known[-1][0]}.{known[-1][1]}" if known else "none"
        raise _fail(spec, f"no measured ONNX Runtime release matches (tables: {span})")
    return Target(spec, "ort", tuple(f"ort-{a}.{b}" for a, b in chosen))


@functools.cache
def parse_target(spec: str) -> Target:
    """The target ``spec`` names; InputError (exit 2) naming it when it names none."""
    text = spec.strip()
    name = re.match(r"[a-z]*", text.lower())[0]  # type: ignore[index]
    rest = text[len(name) :]
    runtime = named(name)
    if runtime is ORT:
        return _ort_target(spec, rest)
    if runtime is None or not runtime.target:
        raise _fail(spec, f"unknown runtime (known: {', '.join(RUNTIMES)})")
    name = runtime.key
    if rest.strip():
        raise _fail(spec, f"{name} takes no version (one release is measured or documented)")
    if name == "openvino":
        return Target(spec, name, ("openvino",))
    return Target(spec, name)


def parse_targets(specs: Iterable[str]) -> tuple[Target, ...]:
    """Every target of ``specs``, each once, in order."""
    found: dict[Target, None] = {}
    for spec in specs:
        found.setdefault(parse_target(spec))
    return tuple(found)
