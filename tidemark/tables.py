"""Plain-text tables for the terminal: the bench's results, ``tidemark sessions``."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def aligned(rows: Sequence[Sequence[str]], right: Collection[int] = (), rule: bool = False) -> list[str]:
    """``rows`` in columns as wide as their widest cell, two spaces apart, the columns whose index is
    in ``right`` right-aligned; with ``rule``, a line of dashes under the first row (the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(row: Sequence[str]) -> str:
        cells = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        return "  ".join(cells).rstrip()

    lines = [line(row) for row in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
