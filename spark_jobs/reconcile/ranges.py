"""Reconcile's ledger ranges: which are due, what the record tables hold in each, and against what.

A range never verified is compared with the committed records Kafka holds; a verified one with
the count and checksum it was verified with (:func:`compare_ranges`). The counting reads each
record table once with data skipping on offsets (:func:`range_counts`); a rotating share of the
verified ranges is re-checked every run (:func:`rotation_share`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs.committed import count_each
from spark_jobs.contract import COORDINATES, RECORD_TABLES
from spark_jobs.offsets import merged_spans, watermarks
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.sinks.delta_log import union
from spark_jobs.store.findings import MOVED, NEW, RangeCheck
from spark_jobs.store.verified import LedgerRange, Verified, key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def reason_to_check(r: LedgerRange, verified: dict[tuple[str, int, str, int], Verified], reason: str) -> str:
    """Why ``r`` is checked: ``new`` (never verified), ``moved`` (a recorded batch moved rows of it
    since: its checksum is no baseline), else ``reason``."""
    v = verified.get(key(r))
    return NEW if v is None else MOVED if v.moved_by else reason


def rotation_share(
    ranges: list[LedgerRange],
    verified: dict[tuple[str, int, str, int], Verified],
    previous_at: datetime | None,
    now: datetime,
    settings: Settings,
) -> list[LedgerRange]:
    """The verified ranges whose turn it is: all not re-checked for a whole period, and the oldest
    ``n * elapsed / period`` others, so that the re-checks spread over the period."""
    period = timedelta(days=settings.reverify_days)
    settled = (r for r in ranges if key(r) in verified and not verified[key(r)].moved_by)
    candidates = sorted(settled, key=lambda r: verified[key(r)].checked_at)
    if not candidates:
        return []
    elapsed = (now - previous_at) if previous_at else timedelta(0)
    share = math.floor(len(candidates) * min(1.0, elapsed / period))
    overdue = sum(verified[key(r)].checked_at <= now - period for r in candidates)
    return candidates[: max(share, overdue)]


def ranges_holding(spark: SparkSession, coordinates: DataFrame, ranges: list[LedgerRange]) -> list[LedgerRange]:
    """The ``ranges`` that hold at least one of ``coordinates``."""
    from pyspark.sql import functions as F

    if not ranges:
        return []
    keyed = _ranges_frame(spark, ranges)
    hit = (
        coordinates.join(
            F.broadcast(keyed),
            (F.col("topic") == F.col("r_topic"))
            & (F.col("partition") == F.col("r_partition"))
            & (F.col("offset") >= F.col("r_start"))
            & (F.col("offset") < F.col("r_end")),
        )
        .select("i")
        .distinct()
        .collect()
    )
    return [ranges[row["i"]] for row in sorted(hit, key=lambda row: row["i"])]


def _ranges_frame(spark: SparkSession, ranges: list[LedgerRange]) -> DataFrame:
    return spark.createDataFrame(
        [(i, r.range.topic, r.range.partition, r.range.start, r.range.end) for i, r in enumerate(ranges)],
        "i int, r_topic string, r_partition int, r_start long, r_end long",
    )


def range_counts(
    spark: SparkSession, tables: dict[str, DataFrame], ranges: list[LedgerRange]
) -> list[tuple[int, int, int]]:
    """(rows, checksum, distinct offsets) of events + duplicates + quarantine inside each range
    (order of ``ranges``).

    The checksum sums a hash of each row with its table's name, so a row that changed, moved to
    another table or appears twice changes it; fewer distinct offsets than rows means an offset is
    held more than once (which a count alone misses when another offset is missing). Only files
    whose offset statistics overlap the ranges are read (the filter is on the merged spans per partition).
    """
    from pyspark.sql import functions as F

    if not ranges:
        return []
    spans = merged_spans([r.range for r in ranges])
    hashed = [
        tables[name]
        .alias("t")
        .where(delta.range_filter(spans, "t"))
        .select(*COORDINATES, F.xxhash64(F.lit(name), *tables[name].columns).alias("h"))
        for name in RECORD_TABLES
    ]
    rows = union(hashed[1:], hashed[0])
    counted = (
        rows.join(
            F.broadcast(_ranges_frame(spark, ranges)),
            (F.col("topic") == F.col("r_topic"))
            & (F.col("partition") == F.col("r_partition"))
            & (F.col("offset") >= F.col("r_start"))
            & (F.col("offset") < F.col("r_end")),
        )
        .groupBy("i")
        .agg(
            F.count("*").alias("n"),
            F.sum(F.col("h").cast("decimal(38,0)")).alias("checksum"),
            F.count_distinct("offset").alias("offsets"),  # one range: one topic and partition
        )
        .collect()
    )
    by_index = {row["i"]: (int(row["n"]), int(row["checksum"]), int(row["offsets"])) for row in counted}
    return [by_index.get(i, (0, 0, 0)) for i in range(len(ranges))]


def compare_ranges(
    settings: Settings,
    to_check: list[tuple[LedgerRange, str]],
    counts: list[tuple[int, int, int]],
    verified: dict[tuple[str, int, str, int], Verified],
) -> list[RangeCheck]:
    """A :class:`RangeCheck` per range of ``to_check`` (with its reason) and its ``counts``: a new
    range against Kafka's committed records, a verified one against its verification."""
    lows: dict[str, dict[int, int]] = {}
    for r, reason in to_check:
        if reason == NEW and r.range.topic not in lows:
            lows[r.range.topic] = {k: lo for k, (lo, _) in watermarks(settings, r.range.topic).items()}
    # A new range whose start retention removed is expired, not counted; the others in one read.
    new = [r.range for r, reason in to_check if reason == NEW]
    countable = [p for p in new if lows[p.topic].get(p.partition, 0) <= p.start]
    kafka = dict(zip(countable, count_each(settings, countable), strict=True))
    checks = []
    for (r, reason), (n, checksum, offsets) in zip(to_check, counts, strict=True):
        p = r.range
        measured = RangeCheck(
            pipeline=r.pipeline, batch_id=r.batch_id, topic=p.topic, partition=p.partition, start=p.start,
            end=p.end, sink_records=n, sink_checksum=checksum, sink_offsets=offsets, reason=reason,
        )  # fmt: skip
        if reason == NEW:
            low = lows[p.topic].get(p.partition, 0)
            checks.append(replace(measured, kafka_records=kafka.get(p, 0 if p.size == 0 else None), low_watermark=low))
        else:
            v = verified[key(r)]
            checks.append(replace(measured, verified_records=v.records, verified_checksum=v.checksum))
    return checks
