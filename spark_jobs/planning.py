"""Backfill planning: a time or offset range resolved, before any work, to frozen per-partition ranges.

The plan is checked against the broker (unknown topic or partition, offsets not written yet or
already removed) and fails with a message that says what to fix. The Airflow side imports this
module to plan and show a backfill before Spark starts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from spark_jobs.errors import ConfigError, DataLossError
from spark_jobs.offsets import PartitionRange, first_arrival, offsets_for_time, watermarks
from spark_jobs.settings import Settings


@dataclass(frozen=True)
class BackfillPlan:
    ranges: list[PartitionRange]
    skipped: list[PartitionRange] = field(default_factory=list)  # asked for, gone, acknowledged (--allow-data-loss)

    @property
    def topic(self) -> str:
        return self.ranges[0].topic

    @property
    def asked(self) -> list[PartitionRange]:
        """The ranges asked for, the skipped part included: the batch's ranges in the ledger. Its
        read covers :attr:`ranges`; an earlier attempt may hold records of the skipped part."""
        skipped = {r.partition: r.start for r in self.skipped}
        return [replace(r, start=skipped.get(r.partition, r.start)) for r in self.ranges]


def parse_offsets(text: str) -> dict[int, tuple[int, int]]:
    """``"0:100-200,1:0-50"`` -> ``{0: (100, 200), 1: (0, 50)}`` (end exclusive)."""
    ranges: dict[int, tuple[int, int]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            partition, span = part.split(":")
            start, end = span.split("-")
            ranges[int(partition)] = (int(start), int(end))
        except ValueError:
            raise ConfigError(
                f"bad offset range {part!r}: write PARTITION:START-END, e.g. 0:100-200 (END exclusive)"
            ) from None
    if not ranges:
        raise ConfigError("no offset ranges given: write PARTITION:START-END[,...], e.g. 0:100-200")
    for number, (first, stop) in ranges.items():
        PartitionRange("-", number, first, stop)  # a negative or inverted range fails here, saying which
    return ranges


def plan_backfill(
    settings: Settings,
    topic: str,
    offsets: Mapping[int, tuple[int, int]] | None = None,
    from_time: datetime | None = None,
    to_time: datetime | None = None,
    allow_data_loss: bool = False,
    partitions: Collection[int] | None = None,
) -> BackfillPlan:
    """Resolve a backfill to frozen per-partition ranges, checking them against the broker.

    Either ``offsets`` or a ``[from_time, to_time)`` arrival-time range, the latter over every
    partition or over ``partitions``. Fails before any work with a message that says what to fix.
    """
    # The parameters alone first: nothing is asked of the broker for a request that cannot work.
    _check_request(topic, offsets, from_time, to_time, partitions)
    held = watermarks(settings, topic)  # TopicError for an unknown topic
    unknown = sorted(set(partitions or ()) - set(held))
    if unknown:
        raise ConfigError(f"topic {topic!r} has no partition {unknown[0]} (it has {sorted(held)})")
    by_time = offsets is None
    if offsets is None:
        assert from_time is not None and to_time is not None  # _check_request
        offsets = _offsets_for_times(settings, topic, held, from_time, to_time)
        if partitions is not None:
            offsets = {p: span for p, span in offsets.items() if p in set(partitions)}
    ranges, skipped = [], []
    for partition, (start, end) in sorted(offsets.items()):
        first, gone = _retained_start(topic, held, partition, start, end, allow_data_loss)
        if gone is not None:
            skipped.append(gone)
        if by_time and first == held[partition][0] > 0 and not allow_data_loss:
            assert from_time is not None
            _check_time_range_retained(settings, topic, partition, first, from_time)
        ranges.append(PartitionRange(topic, partition, first, end))
    return BackfillPlan(ranges, skipped)


def _check_request(
    topic: str,
    offsets: Mapping[int, tuple[int, int]] | None,
    from_time: datetime | None,
    to_time: datetime | None,
    partitions: Collection[int] | None,
) -> None:
    """A backfill request that cannot work, whatever the broker holds: one line that says what to fix."""
    if (offsets is None) == (from_time is None and to_time is None):
        raise ConfigError("give either offsets or a time range (from and to), not both and not neither")
    if offsets is None:
        if from_time is None or to_time is None:
            raise ConfigError("a time range needs both --from-time and --to-time")
        if from_time.tzinfo is None or to_time.tzinfo is None:
            raise ConfigError("times must carry a UTC offset, e.g. 2026-01-01T00:00:00+00:00")
        if to_time <= from_time:
            raise ConfigError(f"the range ends ({to_time.isoformat()}) before it starts ({from_time.isoformat()})")
    else:
        if partitions is not None:
            raise ConfigError("partitions go with a time range; offsets name their partitions already")
        for partition, (start, end) in offsets.items():
            PartitionRange(topic, partition, start, end)
    if partitions is not None and not partitions:
        raise ConfigError("no partitions given: name at least one, e.g. 0,2")


def _retained_start(
    topic: str, held: Mapping[int, tuple[int, int]], partition: int, start: int, end: int, allow_data_loss: bool
) -> tuple[int, PartitionRange | None]:
    """Where the range [start, end) of ``partition`` can start given what the broker ``held`` holds, and the
    part of it retention removed (skipped, when ``allow_data_loss`` acknowledges it; else refused)."""
    if partition not in held:
        raise ConfigError(f"topic {topic!r} has no partition {partition} (it has {sorted(held)})")
    low, high = held[partition]
    if end > high:
        raise ConfigError(
            f"partition {partition}: end offset {end} is beyond the last written offset (high watermark {high})"
        )
    if start >= low:
        return start, None
    if not allow_data_loss:
        raise DataLossError(
            f"partition {partition}: offsets [{start}, {low}) are no longer on the broker (retention or "
            f"deletion); the earliest available is {low}. Start at {low}, or pass --allow-data-loss "
            "(allow_data_loss in the DAG's form) to skip what is gone."
        )
    return min(low, end), PartitionRange(topic, partition, start, min(low, end))


def _check_time_range_retained(settings: Settings, topic: str, partition: int, low: int, from_time: datetime) -> None:
    """A time range starting at the first retained offset may have lost records: offset lookups by time
    see only what retention kept. Arrival times grow with offsets, so the removed records arrived at
    or before the first kept one: if that is not before the range's start, some may be in the range.
    """
    kept = first_arrival(settings, topic, partition, low)
    if kept is not None and kept < from_time:
        return
    held = f"first record still held (offset {low}) arrived at {kept.isoformat()}" if kept else "holds no record"
    later = "" if kept is None else f" after {kept.isoformat()}"
    raise DataLossError(
        f"partition {partition}: offsets [0, {low}) are no longer on the broker (retention or deletion) and may hold "
        f"records of the range: the partition's {held}, not before the range starts ({from_time.isoformat()}). "
        f"Start the range{later}, or pass --allow-data-loss "
        "(allow_data_loss in the DAG's form) to process what is left."
    )


def _offsets_for_times(
    settings: Settings,
    topic: str,
    held: Mapping[int, tuple[int, int]],
    from_time: datetime,
    to_time: datetime,
) -> dict[int, tuple[int, int]]:
    starts, ends = offsets_for_time(settings, topic, from_time, held), offsets_for_time(settings, topic, to_time, held)
    return {p: (starts[p], max(starts[p], ends[p])) for p in held}


def describe_plan(ranges: list[PartitionRange], records: Mapping[int, int]) -> str:
    """One line per partition range with its committed-record count, then the total."""
    lines = [
        f"  {r.topic} p{r.partition} [{r.start}, {r.end}): {records.get(r.partition, 0):,} committed records"
        for r in ranges
    ]
    lines.append(f"  total {sum(records.get(r.partition, 0) for r in ranges):,} records")
    return "\n".join(lines)


def parse_partitions(text: str) -> list[int]:
    """``"0,2"`` -> ``[0, 2]``."""
    try:
        partitions = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise ConfigError(f"bad partitions {text!r}: write partition numbers separated by commas, e.g. 0,2") from None
    if not partitions:
        raise ConfigError("no partitions given: name at least one, e.g. 0,2")
    return partitions


def offsets_argument(ranges: list[PartitionRange]) -> str:
    """``0:100-200,1:0-50``: the form :func:`parse_offsets` reads (``--offsets``)."""
    return ",".join(f"{r.partition}:{r.start}-{r.end}" for r in ranges)
