"""Laying tables out so that what people copy stays whole (output.print_table draws them).

A cell is either free text (output.Free: bodies, properties), which may wrap anywhere, or
made of words people copy (ids, keys, topics, groups, addresses, offsets), which may wrap
only at spaces between them. Through a pipe every record is one line of aligned columns;
on a terminal the table is boxed when every word fits its column, else each record is a
block of `column  value` lines, a value too long for the line starting a line of its own.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Sequence

# rich's table with its default box and padding: a bar and a space either side of each cell
BOX_PER_COLUMN = 3
BOX_EDGE = 1
FREE_MIN = 12  # free text shrinks to this width before the table gives way to records
ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


class Free(str):
    """A cell of free text (a message body, a properties list): on a narrow terminal it may
    wrap anywhere. Every other cell holds what people copy (an id, key, topic, group,
    address, offset) and is never broken inside a word."""


def is_free(cell: str) -> bool:
    return isinstance(cell, Free)


def cell_len(text: str) -> int:
    """Terminal columns `text` takes (wide East Asian characters count two)."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


def _pad(text: str, width: int) -> str:
    return text + " " * (width - cell_len(text))


def plain(title: str, columns: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """Aligned columns two spaces apart, one record per line (line breaks inside a value are
    written as \\n), an empty value as "-"; the title and the header start with "#", so that
    `grep -v '^#'` leaves the records alone (mqadmin's header is "#"-prefixed too)."""
    header = ["#" + c for c in columns]
    rows = [[(v.translate(ESCAPES) or "-") for v in row] for row in cells]
    widths = [cell_len(h) for h in header]
    for row in rows:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], cell_len(v))
    lines = [f"# {title}"] if title else []
    for row in (header, *rows):
        lines.append("  ".join(_pad(v, w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _longest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


def fitted_widths(
    columns: Sequence[str], cells: Sequence[Sequence[str]], width: int
) -> list[int] | None:
    """Column widths (inside the padding) of a boxed table `width` columns wide in which no
    copied word is broken: every column as wide as its content when that fits, else free
    text narrowed first; None when even that does not fit (print records instead)."""
    natural = [cell_len(c) for c in columns]
    least = [_longest_word(c) for c in columns]
    for row in cells:
        for i, v in enumerate(row):
            lines = v.splitlines() or [""]
            natural[i] = max(natural[i], *(cell_len(ln) for ln in lines))
            need = min(FREE_MIN, natural[i]) if is_free(v) else _longest_word(v)
            least[i] = max(least[i], need)
    room = width - BOX_EDGE - BOX_PER_COLUMN * len(columns)
    if sum(natural) <= room:
        return natural
    if sum(least) > room:
        return None
    widths = list(least)
    spare = room - sum(widths)
    while spare > 0:  # hand the spare columns out one at a time to those that want more
        wanting = [i for i, w in enumerate(widths) if w < natural[i]]
        if not wanting:
            break
        for i in wanting[:spare]:
            widths[i] += 1
        spare -= min(spare, len(wanting))
    return widths


def records(
    title: str,
    columns: Sequence[str],
    cells: Sequence[Sequence[str]],
    width: int,
    *,
    fields: bool = False,
) -> str:
    """One block per record, `column  value` per line; a value that does not fit after its
    column's name starts the next line, whole (free text is wrapped to the width). With
    `fields`, the rows are (name, value) pairs of one record."""
    label_w = max((cell_len(c) for c in columns), default=0)
    out = [title] if title else []
    blocks = [list(zip(columns, row, strict=True)) for row in cells]
    if fields:  # a table of (name, value) rows is one block: each row's name is its label
        blocks = [[(row[0], row[1]) for row in cells]]
        label_w = max((cell_len(row[0]) for row in cells), default=0)
    for block in blocks:
        out.append("")
        for col, value in block:
            lines = value.splitlines() or [""]
            if len(lines) == 1 and label_w + 2 + cell_len(value) <= width:
                out.append(f"{_pad(col, label_w)}  {value}".rstrip())
                continue
            out.append(col)
            for line in lines:
                if is_free(value):
                    out.extend(textwrap.wrap(line, width, break_on_hyphens=False) or [""])
                else:
                    out.append(line)  # never broken: the terminal may wrap it, we do not
    return "\n".join(out)
