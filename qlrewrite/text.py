"""Text that reaches an output: one escaping for every name, and node names grouped.

A name read from a model or a file system may hold a newline (a forged report line, a
forged ``::warning`` workflow command), other control characters, bidirectional controls
(text shown in another order than it is stored), or bytes that are not UTF-8 (a file
name decoded with ``surrogateescape``). :func:`escape` turns each of those into a
visible backslash escape, so that one finding stays one line, shows what it holds, and
every output encodes.

A refusal of 40 nodes for 2 reasons reads ``38 nodes ('a' in main, 'b' in main, 'c' in
main, ...): reason; 2 nodes (...): other reason`` (:func:`grouped`), not 40 repetitions
of the reasons.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["escape", "grouped"]

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, the bidirectional
# controls (embeddings, overrides, isolates and marks: U+202E shows "evil\u202eexe.onnx"
# as "evilxnno.exe" to a reader), the invisible characters that make two names look alike
# ("m.onnx" and "m\u200b.onnx": zero width space, word joiner and invisible operators,
# byte order mark; not the joiners U+200C / U+200D that scripts and emoji need), lone
# surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _one(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every control character, line separator, bidirectional control,
    invisible character and undecodable byte shown as a backslash escape (printable text
    unchanged)."""
    return _UNSAFE.sub(_one, text)


def grouped(items: Iterable[tuple[str, Iterable[str]]], names: int = 3) -> str:
    """``(where, reasons)`` pairs as one line: the nodes with the same reasons (in the
    order met) grouped as ``N nodes (a, b, c, ...): reason; reason``, at most ``names``
    names each; a node alone reads ``where (reason; reason)``."""
    groups: dict[str, list[str]] = {}
    for where, reasons in items:
        groups.setdefault("; ".join(dict.fromkeys(reasons)), []).append(where)
    parts = []
    for reasons, wheres in groups.items():
        if len(wheres) == 1:
            parts.append(f"{wheres[0]} ({reasons})")
            continue
        named = ", ".join(wheres[:names]) + (", ..." if len(wheres) > names else "")
        parts.append(f"{len(wheres)} nodes ({named}): {reasons}")
    return "; ".join(parts)
