"""The runtimes qlrewrite names, one record each: what ``--target``, ``compare --runtime``,
``--verify-on``, the measured tables and the reports call them, which Python package
runs them and how it is installed, and whether what is known of them was measured (the
probe's tables) or read from the vendor's documents.

Adding a runtime: its record here; its table (``targets/data/<key>.json``, made by the
probe, or the documented facts in that file) and its rules (``rules/targets/<key>.py``,
imported in ``rules/targets/__init__.py``); a runner in ``verify/runtimes.py`` if
``compare`` runs it; then the generated docs (``docs/targets.md``, ``docs/rules.md``).
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "COMPARED",
    "DOCUMENTED",
    "OPENVINO",
    "ORT",
    "QNN",
    "REFERENCE",
    "RELEASED",
    "RUNTIMES",
    "TARGETS",
    "TENSORRT",
    "Runtime",
    "by_table",
    "named",
]


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One runtime qlrewrite names."""

    key: str  # how --target, compare --runtime and the tables' file names spell it
    label: str  # how findings and reports name it: "ORT", "OpenVINO"
    aliases: tuple[str, ...] = ()  # other spellings accepted ("onnxruntime")
    module: str | None = None  # what must import for compare to run it here (None: never)
    package: str | None = None  # its package on the registry, for a release's own environment
    install: str = ""  # how to install it
    target: bool = True  # a --target
    measured: bool = True  # its target tables measured by the probe (else documented)
    #: A documented target: its section's title and its row in docs/targets.md's spec table.
    title: str = ""
    about: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling of the runtime."""
        return (self.key, *self.aliases)


ORT = Runtime(
    "ort",
    "ORT",
    ("onnxruntime",),
    "onnxruntime",
    "onnxruntime",
    "pip install 'qlrewrite[verify]'",
)
OPENVINO = Runtime("openvino", "OpenVINO", (), "openvino", "openvino", "pip install openvino")
TENSORRT = Runtime(
    "tensorrt",
    "TensorRT",
    measured=False,
    title="TensorRT",
    about="what TensorRT documents (not run: it needs an NVIDIA GPU)",
)
QNN = Runtime(
    "qnn",
    "QNN",
    measured=False,
    title="QNN (ONNX Runtime QNN EP)",
    about="what ONNX Runtime's QNN EP documents (not run: it needs a Snapdragon NPU)",
)
REFERENCE = Runtime(
    "reference", "ONNX reference", (), "onnx.reference", None, "pip install onnx", target=False
)

#: Every runtime, by key.
RUNTIMES = {r.key: r for r in (ORT, REFERENCE, OPENVINO, TENSORRT, QNN)}
#: The keys ``--target`` takes.
TARGETS = tuple(r.key for r in RUNTIMES.values() if r.target)
#: The targets known from documents only.
DOCUMENTED = tuple(r.key for r in RUNTIMES.values() if r.target and not r.measured)
#: The runtimes ``compare`` runs here.
COMPARED = tuple(r.key for r in RUNTIMES.values() if r.module is not None)
#: The runtimes a release of which runs in its own environment (``ort==1.16.3``).
RELEASED = tuple(r for r in RUNTIMES.values() if r.package is not None)


def named(name: str) -> Runtime | None:
    """The runtime spelled ``name`` (its key or an alias), or None."""
    return next((r for r in RUNTIMES.values() if name in r.names), None)


def by_table(runtime: str) -> Runtime | None:
    """The runtime of a measured table, whose ``runtime`` field is the package's name."""
    return next((r for r in RUNTIMES.values() if runtime in (r.package, r.key)), None)
