"""The output formats of ``qlrewrite check``: one emitter module each, listed once here.

Adding a format (see docs/architecture.md, "Adding an output format"): write
``qlrewrite/checking/formats/<name>.py`` with its emitter and ``FORMAT = OutputFormat(...)``, and
add the module to the list below. The ``--output-format`` choices and help, the
configuration's ``output-format`` and ``--statistics`` all read :data:`FORMATS`.
"""

from __future__ import annotations

from qlrewrite.checking.formats import full, github, json, sarif, text
from qlrewrite.checking.formats.base import OutputFormat, RenderOptions

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "OutputFormat",
    "RenderOptions",
    "output_format",
    "register",
]

#: The format of a run that names none (nor its configuration).
DEFAULT_FORMAT = "text"
#: Every format by name, in the order ``--help`` lists them (text first: the default).
FORMATS: dict[str, OutputFormat] = {}


def register(fmt: OutputFormat) -> OutputFormat:
    """Add ``fmt`` to :data:`FORMATS` (a name is registered once)."""
    if fmt.name in FORMATS:
        raise ValueError(f"output format {fmt.name!r} registered twice")
    FORMATS[fmt.name] = fmt
    return fmt


def output_format(name: str) -> OutputFormat:
    """The format called ``name`` (ValueError: no such format)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown output format {name!r}") from None


for _module in (text, full, json, sarif, github):
    register(_module.FORMAT)
