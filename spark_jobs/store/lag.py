"""How far a pipeline is behind Kafka: per partition, the high watermark against the furthest
processed offset, and how long ago the oldest record not processed yet arrived.

Scheduled runs record it when they finish (:mod:`spark_jobs.store.runs`), reconcile with every run
(:mod:`spark_jobs.store.history`); both measure it here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs.offsets import first_arrival, watermarks
from spark_jobs.settings import Settings
from spark_jobs.store.findings import Lag
from spark_jobs.store.verified import LedgerRange

if TYPE_CHECKING:
    from collections.abc import Mapping


def measure_lag(settings: Settings, ranges: list[LedgerRange], now: datetime) -> list[Lag]:
    """Per partition of every topic the ledger holds: Kafka's high watermark against the furthest
    processed offset, and how long ago the oldest record not processed yet arrived."""
    processed: dict[str, dict[int, int]] = {}
    for r in ranges:
        ends = processed.setdefault(r.range.topic, {})
        ends[r.range.partition] = max(ends.get(r.range.partition, 0), r.range.end)
    return lag_behind(settings, processed, now)


def lag_behind(
    settings: Settings, processed: dict[str, dict[int, int]], now: datetime, timeout_s: float = 10.0
) -> list[Lag]:
    """:func:`measure_lag` from the furthest processed offset per topic and partition (``timeout_s``: per request
    to Kafka)."""
    lags = []
    for topic, ends in sorted(processed.items()):
        for partition, done, high in unprocessed(ends, watermarks(settings, topic, timeout_s)):
            oldest = first_arrival(settings, topic, partition, done, timeout_s) if done < high else None
            behind = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
            lags.append(Lag(topic, partition, high, done, oldest, behind))
    return lags


def unprocessed(ends: Mapping[int, int], held: Mapping[int, tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(partition, processed to, high watermark)`` per partition Kafka holds (``held``: low and high
    watermarks), from the furthest processed offsets ``ends``: a partition no batch processed, or
    whose processed records retention removed since, starts at its low watermark."""
    return [(partition, max(ends.get(partition, low), low), high) for partition, (low, high) in sorted(held.items())]
