"""The bench's report: the table of what the stages measured with the checks beside it, and the JSON
document (``--json``) of the run, its machine and versions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from benchmarks.checks import Check
from benchmarks.figures import Measurement
from tidemark.tables import aligned


def table_rows(measurements: Iterable[Measurement], checks: Sequence[Check]) -> list[tuple[str, ...]]:
    """One row per measurement, its checks beside it (a further row for each extra check)."""
    rows: list[tuple[str, ...]] = []
    for m in measurements:
        count = f"{m.count:,}" if m.unit == "events" else f"{m.count:,} {m.unit}"
        seconds = m.median_seconds
        rate = m.rate
        first = (
            f"{m.key} {m.label}",
            count,
            "-" if seconds is None else f"{seconds:.2f}",
            "-" if rate is None else f"{rate:,.0f}",
        )
        mine = [c for c in checks if c.row == m.key]
        if not mine:
            rows.append((*first, "", "", ""))
        for i, check in enumerate(mine):
            lead = first if i == 0 else ("", "", "", "")
            rows.append((*lead, check.formatted_value(), str(check.target or ""), check.result))
    return rows


def format_table(measurements: Iterable[Measurement], checks: Sequence[Check]) -> str:
    """:func:`table_rows` under :data:`TABLE_HEADER`, in aligned columns (counts and times right-aligned)."""
    return "\n".join(aligned([TABLE_HEADER, *table_rows(measurements, checks)], right={1, 2, 3}, rule=True))


def results_document(
    meta: dict[str, Any], measurements: Iterable[Measurement], checks: Sequence[Check]
) -> dict[str, Any]:
    """Everything the run measured, as one JSON-serialisable document."""
    results = [c.result for c in checks]
    return {
        **meta,
        "stages": {m.key: m.to_json() for m in measurements},
        "checks": [c.to_json() for c in checks],
        "summary": {
            "passed": results.count("PASS"),
            "failed": results.count("FAIL"),
            "failed_checks": [c.key for c in checks if c.result == "FAIL"],
        },
    }


TABLE_HEADER = ("stage", "events", "s (median)", "events/s", "ratio", "target", "result")
