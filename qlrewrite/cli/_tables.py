"""Tables that fit the terminal: no column squeezed to nothing, no value cut to ``I...``.

Each column is as wide as its longest word at least (type names, counts and sizes are
never cut); text wraps at spaces. When even that does not fit, the columns that matter
least are dropped, and the caller names them. Every cell is escaped
(:func:`qlrewrite.text.escape`) and never read as rich markup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from qlrewrite.text import escape

__all__ = ["Column", "fitted_table"]

#: What rich adds per column (a space each side and a border) and for the last border.
_PER_COLUMN, _BORDER = 3, 1


@dataclasses.dataclass(frozen=True)
class Column:
    """A column: its header, whether it holds numbers (right-aligned, never wrapped), and
    its drop rank: when the table cannot fit, columns of the highest rank go first (0:
    never dropped)."""

    header: str
    numeric: bool = False
    drop_rank: int = 0
    longest_word: int = 24  # a longer word (a long tensor name) may fold inside itself


def _min_width(column: Column, cells: Sequence[str]) -> int:
    words = [w for text in (column.header, *cells) for w in text.split()]
    longest = max((len(w) for w in words), default=1)
    if column.numeric:  # numbers never wrap; a header may (``const`` / ``bytes``)
        return max(longest, *(len(text) for text in cells))
    return min(longest, column.longest_word)


def _widths(natural: list[int], mins: list[int], width: int) -> list[int]:
    """Column widths that fit ``width``: the widest slack given up first, never below a
    column's minimum (the caller dropped columns until the minimums fit)."""
    widths = list(natural)
    excess = sum(widths) + _PER_COLUMN * len(widths) + _BORDER - width
    while excess > 0:
        slack, index = max((w - m, i) for i, (w, m) in enumerate(zip(widths, mins, strict=True)))
        if slack <= 0:
            break
        step = min(slack, excess)
        widths[index] -= step
        excess -= step
    return widths


def fitted_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> tuple[Table, list[str]]:
    """A table of ``rows`` that fits ``width`` columns, and the headers of the columns
    dropped to make it fit (none when it fits whole)."""
    keep = list(range(len(columns)))
    mins = [_min_width(c, [row[i] for row in rows]) for i, c in enumerate(columns)]
    ranked = sorted((c.drop_rank, i) for i, c in enumerate(columns) if c.drop_rank)
    dropped = []
    while sum(mins[i] + _PER_COLUMN for i in keep) + _BORDER > width and ranked:
        _, index = ranked.pop()
        keep.remove(index)
        dropped.append(columns[index].header)
    natural = [
        max(len(text) for text in (columns[i].header, *(row[i] for row in rows))) for i in keep
    ]
    widths = _widths(natural, [mins[i] for i in keep], width)
    table = Table()
    for i, column_width in zip(keep, widths, strict=True):
        column = columns[i]
        table.add_column(
            Text(column.header),
            justify="right" if column.numeric else "left",
            overflow="fold",
            width=column_width,
        )
    for row in rows:
        table.add_row(*(Text(escape(row[i])) for i in keep))
    return table, dropped
