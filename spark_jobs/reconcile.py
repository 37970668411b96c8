"""Reconciliation: does every committed Kafka record sit in exactly one sink, and do the sessions hold?

spark-submit entry point (the ``tidemark_reconcile`` DAG's Spark task)::

    spark-submit spark_jobs/reconcile.py --run-id RUN_ID

``tidemark reconcile`` runs the same :func:`run` without Airflow. One run:

1. **Snapshot.** Under the lake lock (exclusive, for as long as it takes to list four Delta logs and
   open a PostgreSQL snapshot) it fixes the Delta table versions and a ``REPEATABLE READ``
   transaction; every batch holds that lock shared while it commits, so the snapshot sees each
   batch in both sinks or in neither. Everything after reads that snapshot: writers go on.
2. **What to check.** Ledger ranges never verified (``new``), verified ranges whose rows a commit
   touched since the previous run (``changed``: the Delta log says which files), and a rotating
   share of the rest, so that every verified range is re-checked within ``TIDEMARK_REVERIFY_DAYS``.
   ``land`` ranges are not checked (``raw_events`` is not a record table).
3. **No Spark when nothing is new.** No range to check, the Delta versions those of the previous
   run and PostgreSQL's sessions equal to the Delta sessions that run summarised: the run ends
   there, without starting Spark.
4. **Counts.** Per range, the rows of ``events`` + ``duplicates`` + ``quarantine`` (count and
   checksum, read with data skipping on offsets) against the committed records Kafka holds (new
   ranges; a range whose start retention removed is *expired*, not a mismatch) or against what the
   range held when it was verified (re-checks).
5. **Freshness.** Per partition, how far the sinks are behind Kafka (offsets, and minutes since the
   oldest record not processed yet arrived); past ``TIDEMARK_LAG_ALERT_MINUTES`` the run is
   ``lagging`` and alerts.
6. **Sessions.** Delta against PostgreSQL (count and checksum; on a difference, per-bucket
   checksums narrow it down to the named sessions), and Delta against a recompute from ``events``
   for the entities of the checked ranges and of every commit since the previous run.
7. **Record.** ``reconcile_runs`` (the report and its findings), ``reconcile_ranges`` (per range),
   ``verified_ranges`` (count and checksum at verification).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs import db, ledger
from spark_jobs.contract import COORDINATES, RECORD_TABLES, SESSION_COLUMNS, TABLE_SCHEMAS, SessionRules
from spark_jobs.findings import (
    CHANGED,
    NEW,
    ROTATION,
    Gap,
    Lag,
    LedgerEntry,
    RangeCheck,
    Report,
    SessionDifference,
    SessionsSummary,
    find_gaps,
)
from spark_jobs.lock import lake_snapshot
from spark_jobs.offsets import PartitionRange, check_reachable, count_committed, first_arrival, watermarks
from spark_jobs.retention import Loss, recorded_losses
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
from spark_jobs.spark import FrozenFrames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NOT_CHECKED = ("land",)  # pipelines whose ranges land in other tables
SESSION_BUCKET = "substr(md5(entity_id), 1, 2)"  # 256 buckets, the same text in Spark SQL and PostgreSQL


@dataclass(frozen=True)
class LedgerRange:
    pipeline: str
    batch_id: int
    range: PartitionRange


@dataclass(frozen=True)
class Verified:
    records: int
    checksum: int
    checked_at: datetime


@dataclass
class Snapshot:
    """What one run checks: the Delta versions and the ledger as of the lake lock, and the previous run."""

    versions: dict[str, int] | None  # None: not readable without Spark (a remote lake)
    ranges: list[LedgerRange]
    verified: dict[tuple[str, int, str, int], Verified]
    previous_versions: dict[str, int] | None
    previous_delta_sessions: SessionsSummary | None
    previous_at: datetime | None
    postgres_sessions: SessionsSummary
    now: datetime
    previous_buckets: dict[str, tuple[int, int]] | None = None  # Delta sessions per entity bucket, then
    to_check: list[tuple[LedgerRange, str]] = field(default_factory=list)


def key(r: LedgerRange) -> tuple[str, int, str, int]:
    return (r.pipeline, r.batch_id, r.range.topic, r.range.partition)


# ---------------------------------------------------------------------------------------------
# Delta versions without Spark


def log_version(table_path: str) -> int | None:
    """The latest commit version of a local Delta table (-1 when it has none), None for remote paths."""
    local = re.sub(r"^file:(//)?", "", table_path)
    if "://" in local:
        return None
    log = Path(local) / "_delta_log"
    if not log.is_dir():
        return -1
    versions = [int(p.name[:20]) for p in log.iterdir() if re.fullmatch(r"\d{20}\.json", p.name)]
    return max(versions, default=-1)


def local_versions(settings: Settings) -> dict[str, int] | None:
    found = {name: log_version(settings.table_path(name)) for name in TABLE_SCHEMAS}
    return None if any(v is None for v in found.values()) else found  # type: ignore[return-value]


def spark_versions(spark: SparkSession, settings: Settings) -> dict[str, int]:
    delta.ensure_tables(spark, settings)
    return delta.table_versions(spark, settings)


# ---------------------------------------------------------------------------------------------
# The run


def run(
    settings: Settings,
    run_id: str,
    spark_factory: Callable[[], SparkSession] | None,
    repair_of: str | None = None,
) -> Report | None:
    """Reconcile once and record the outcome under ``run_id``.

    With ``spark_factory`` None (the Airflow task that runs before Spark), returns None when the
    run needs Spark, having recorded nothing: the Spark job then runs it in full.
    """
    if not run_id:
        raise ValueError("a reconcile run needs a run id (Airflow passes its run_id)")
    conn = db.connect(settings.postgres_dsn)
    try:
        check_reachable(settings)
        spark = None
        if local_versions(settings) is None:  # a remote lake: only Spark reads its log
            if spark_factory is None:
                return None
            spark = spark_factory()
        conn.set_session(isolation_level="REPEATABLE READ")
        cur = conn.cursor()
        with lake_snapshot(settings):
            held_from = time.perf_counter()
            versions = spark_versions(spark, settings) if spark is not None else local_versions(settings)
            cur.execute("SELECT now()")  # the PostgreSQL snapshot is fixed at the first query
            now = cur.fetchone()[0]
        held = time.perf_counter() - held_from
        snapshot = _read_snapshot(cur, settings, versions, now)
        lags = measure_lag(settings, snapshot.ranges, now)
        buckets = snapshot.previous_buckets  # Delta sessions per entity bucket, as of this run
        if not snapshot.to_check and _nothing_changed(snapshot):
            report = Report(
                run_id, [], [], snapshot.previous_delta_sessions, snapshot.postgres_sessions, used_spark=False
            )
        else:
            if spark is None:
                if spark_factory is None:
                    conn.rollback()
                    return None
                spark = spark_factory()
            with FrozenFrames(spark) as frozen:
                report, buckets = _check_with_spark(spark, settings, cur, snapshot, run_id, frozen)
        gaps, losses = _ledger_findings(cur)
        report = replace(
            report,
            gaps=gaps,
            losses=losses,
            lags=lags,
            lag_alert_seconds=settings.lag_alert_minutes * 60,
            snapshot_seconds=held,
        )
        _record(cur, report, snapshot, buckets, repair_of)
        conn.commit()
        return report
    finally:
        conn.close()


def _nothing_changed(s: Snapshot) -> bool:
    return (
        s.previous_versions is not None
        and s.previous_versions == s.versions
        and s.previous_delta_sessions == s.postgres_sessions
    )


def _read_snapshot(cur, settings: Settings, versions: dict[str, int] | None, now: datetime) -> Snapshot:
    cur.execute(
        """SELECT l.pipeline, l.batch_id, l.topic, l.kafka_partition, l.start_offset, l.end_offset
           FROM ledger_ranges AS l WHERE l.pipeline <> ALL(%s)
           ORDER BY l.topic, l.kafka_partition, l.start_offset, l.pipeline, l.batch_id""",
        (list(NOT_CHECKED),),
    )
    ranges = [LedgerRange(p, b, PartitionRange(t, k, s, e)) for p, b, t, k, s, e in cur.fetchall()]
    cur.execute(
        """SELECT pipeline, batch_id, topic, kafka_partition, sink_records, sink_checksum, checked_at
           FROM verified_ranges"""
    )
    verified = {(p, b, t, k): Verified(int(n), int(c), at) for p, b, t, k, n, c, at in cur.fetchall()}
    cur.execute(
        """SELECT delta_versions, delta_sessions, delta_sessions_checksum, counted_at, delta_session_buckets
           FROM reconcile_runs
           WHERE status IN ('ok', 'mismatch') AND delta_versions IS NOT NULL
           ORDER BY counted_at DESC LIMIT 1"""
    )
    row = cur.fetchone()
    previous_versions, previous_sessions, previous_at, previous_buckets = None, None, None, None
    if row is not None:
        previous_versions, previous_at = row[0], row[3]
        previous_sessions = SessionsSummary(int(row[1]), int(row[2]))
        if row[4] is not None:
            previous_buckets = {b: (int(n), int(c)) for b, (n, c) in row[4].items()}
    snapshot = Snapshot(
        versions=versions,
        ranges=ranges,
        verified=verified,
        previous_versions=previous_versions,
        previous_delta_sessions=previous_sessions,
        previous_at=previous_at,
        postgres_sessions=SessionsSummary(*postgres.sessions_summary(cur)),
        now=now,
        previous_buckets=previous_buckets,
    )
    snapshot.to_check = [(r, NEW) for r in ranges if key(r) not in verified]
    snapshot.to_check += [(r, ROTATION) for r in rotation_share(ranges, verified, previous_at, now, settings)]
    return snapshot


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
    candidates = sorted((r for r in ranges if key(r) in verified), key=lambda r: verified[key(r)].checked_at)
    if not candidates:
        return []
    elapsed = (now - previous_at) if previous_at else timedelta(0)
    share = math.floor(len(candidates) * min(1.0, elapsed / period))
    overdue = sum(verified[key(r)].checked_at <= now - period for r in candidates)
    return candidates[: max(share, overdue)]


def measure_lag(settings: Settings, ranges: list[LedgerRange], now: datetime) -> list[Lag]:
    """Per partition of every topic the ledger holds: Kafka's high watermark against the furthest
    processed offset, and how long ago the oldest record not processed yet arrived."""
    processed: dict[str, dict[int, int]] = {}
    for r in ranges:
        ends = processed.setdefault(r.range.topic, {})
        ends[r.range.partition] = max(ends.get(r.range.partition, 0), r.range.end)
    lags = []
    for topic, ends in sorted(processed.items()):
        for partition, (low, high) in sorted(watermarks(settings, topic).items()):
            done = max(ends.get(partition, low), low)
            oldest = first_arrival(settings, topic, partition, done) if done < high else None
            behind = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
            lags.append(Lag(topic, partition, high, done, oldest, behind))
    return lags


def _ledger_findings(cur) -> tuple[list[Gap], list[Loss]]:
    """What the ledger alone shows: gaps between scheduled batches, and acknowledged retention losses."""
    losses = recorded_losses(cur)
    cur.execute(
        "SELECT pipeline, batch_id, topic, kafka_partition, start_offset, end_offset FROM ledger_ranges "
        "WHERE pipeline <> ALL(%s)",
        (list(NOT_CHECKED),),
    )
    return find_gaps((LedgerEntry(*r) for r in cur.fetchall()), losses), losses


# ---------------------------------------------------------------------------------------------
# The Spark part


def _at(spark: SparkSession, settings: Settings, name: str, version: int) -> DataFrame:
    """Table ``name`` as of ``version`` (the run's snapshot); an empty frame before the table exists."""
    if version < 0:
        return spark.createDataFrame([], TABLE_SCHEMAS[name])
    return spark.read.format("delta").option("versionAsOf", version).load(settings.table_path(name))


def _check_with_spark(
    spark: SparkSession,
    settings: Settings,
    cur,
    snapshot: Snapshot,
    run_id: str,
    frozen: FrozenFrames,
) -> tuple[Report, dict[str, tuple[int, int]]]:
    """The full check at the snapshot's versions; the report and Delta sessions' buckets."""
    versions = snapshot.versions
    tables = {name: _at(spark, settings, name, versions[name]) for name in TABLE_SCHEMAS}
    touched = _touched_since(spark, settings, snapshot.previous_versions, versions, frozen)
    to_check = list(snapshot.to_check)
    listed = {key(r) for r, _ in to_check}
    if touched.coordinates is not None:
        changed = _ranges_holding(spark, touched.coordinates, [r for r in snapshot.ranges if key(r) not in listed])
        to_check += [(r, CHANGED) for r in changed]
    elif snapshot.previous_versions is not None and snapshot.previous_versions != versions:
        to_check += [(r, CHANGED) for r in snapshot.ranges if key(r) not in listed]  # the log is gone: all
    counts = range_counts(spark, tables, [r for r, _ in to_check])
    checks = _compare_ranges(settings, to_check, counts, snapshot.verified)

    buckets = _sessions_buckets(tables["sessions"], snapshot.previous_buckets, touched)
    delta_sessions = SessionsSummary(sum(n for n, _ in buckets.values()), sum(c for _, c in buckets.values()))
    differences = []
    if delta_sessions != snapshot.postgres_sessions:
        pairs = sessions_differing_from_postgres(tables["sessions"], buckets, cur)
        differences.append(SessionDifference.of("sinks", pairs))
    rules = ledger.stored_session_rules(cur) or settings.session_rules
    anchored = frozen.freeze(_anchors_to_recompute(tables, [r.range for r, _ in to_check], touched, rules))
    checked = anchored.count()
    if checked:
        pairs = sessions_differing_from_events(tables["events"], tables["sessions"], anchored, rules, frozen)
        if pairs:
            differences.append(SessionDifference.of("events", pairs))
    report = Report(run_id, checks, [], delta_sessions, snapshot.postgres_sessions, differences, checked)
    return report, buckets


@dataclass(frozen=True)
class Touched:
    """What commits after the previous run touched, read from the files they added and removed.

    ``coordinates`` (record tables) and ``times`` (``entity_id``, ``arrival_time``: events' arrival
    times and sessions' starts) cover every row of those files; None when unknown (a first run, or a
    log that was cleaned up). ``sessions_added`` / ``sessions_removed`` are the session rows the
    commits added and removed for good, for updating the previous run's checksums: from the change
    data feed, which also gives ``times`` the changed sessions only; without it, the rows of the
    files added and removed, None when they cannot be trusted (deletion vectors, or a removed file
    already vacuumed).
    """

    coordinates: DataFrame | None
    times: DataFrame | None
    sessions_added: DataFrame | None = None
    sessions_removed: DataFrame | None = None


def _touched_since(
    spark: SparkSession,
    settings: Settings,
    previous: dict[str, int] | None,
    versions: dict[str, int],
    frozen: FrozenFrames,
) -> Touched:
    """What the commits after ``previous`` touched, from the Delta log's add and remove actions."""
    from pyspark.sql import functions as F

    if previous is None:
        return Touched(None, None)
    coordinates, times = [], []
    sessions_added = sessions_removed = spark.createDataFrame([], TABLE_SCHEMAS["sessions"])
    for name in TABLE_SCHEMAS:
        start, end = previous.get(name, -1), versions[name]
        if end <= start:
            continue
        path = settings.table_path(name)
        files = _changed_files(spark, path, start, end)
        # An added file VACUUM deleted already (compacted into another since): what it touched is
        # unknown, so everything is checked.
        if files is None or not _all_exist(spark, path, files.added | files.changes):
            return Touched(None, None)
        changes = _session_changes(spark, path, start, end, frozen) if name == "sessions" else None
        if changes is not None:
            times.append(changes.select("entity_id", F.col("started_at").alias("arrival_time")))
            sessions_added = changes.where("_change_type IN ('insert', 'update_postimage')").select(*SESSION_COLUMNS)
            sessions_removed = changes.where("_change_type IN ('delete', 'update_preimage')").select(*SESSION_COLUMNS)
            continue
        # A removed file that is gone had its rows rewritten into an added file or deleted (a deleted
        # row's range is still re-checked by rotation).
        gone = {p for p in files.removed if not _all_exist(spark, path, [p])}
        rows = _read_files(spark, path, files.added | (files.removed - gone), TABLE_SCHEMAS[name])
        if name in RECORD_TABLES:
            coordinates.append(rows.select(*COORDINATES))
        if name == "events":
            times.append(rows.select("entity_id", "arrival_time"))
        if name == "sessions":
            times.append(rows.select("entity_id", F.col("started_at").alias("arrival_time")))
            if files.exact and not gone - files.added:
                sessions_added = _read_files(spark, settings.table_path(name), files.added - files.removed,
                                             TABLE_SCHEMAS[name])  # fmt: skip
                sessions_removed = _read_files(spark, settings.table_path(name), files.removed - files.added,
                                               TABLE_SCHEMAS[name])  # fmt: skip
            else:
                sessions_added = sessions_removed = None
    empty_coordinates = spark.createDataFrame([], "topic string, partition int, offset long")
    empty_times = spark.createDataFrame([], "entity_id string, arrival_time timestamp")
    return Touched(
        _union(coordinates, empty_coordinates).distinct(),
        _union(times, empty_times).where(F.col("entity_id").isNotNull()),
        sessions_added,
        sessions_removed,
    )


def _union(frames: list[DataFrame], empty: DataFrame) -> DataFrame:
    result = empty
    for frame in frames:
        result = result.unionByName(frame)
    return result


@dataclass(frozen=True)
class ChangedFiles:
    added: set[str]
    removed: set[str]
    exact: bool  # no deletion vectors: a file's rows are all live or all gone
    changes: set[str]  # change data files (a change data feed's updates and deletes)


def _changed_files(spark: SparkSession, table_path: str, after: int, upto: int) -> ChangedFiles | None:
    """The data files commits ``after < v <= upto`` added and removed (None: part of the log is gone)."""
    root = table_path.rstrip("/")
    logs = [f"{root}/_delta_log/{v:020d}.json" for v in range(after + 1, upto + 1)]
    if not _all_exist(spark, root, logs):
        return None
    actions = spark.read.json(logs)
    found: dict[str, set[str]] = {"add": set(), "remove": set()}
    exact = True
    for kind in found:
        if kind not in actions.columns:
            continue
        fields = actions.schema[kind].dataType.fieldNames()
        columns = [f"{kind}.path"] + ([f"{kind}.deletionVector IS NOT NULL"] if "deletionVector" in fields else [])
        # dataChange false: a compaction's rewrite (maintenance), the same rows in other files.
        changed = f"{kind}.path IS NOT NULL" + (f" AND {kind}.dataChange" if "dataChange" in fields else "")
        for row in actions.where(changed).selectExpr(*columns).collect():
            found[kind].add(row[0])
            exact = exact and not (len(row) > 1 and row[1])
    changes = set()
    if "cdc" in actions.columns:
        changes = {row[0] for row in actions.where("cdc.path IS NOT NULL").select("cdc.path").collect()}
    return ChangedFiles(found["add"], found["remove"], exact, changes)


def _session_changes(spark: SparkSession, path: str, after: int, upto: int, frozen: FrozenFrames) -> DataFrame | None:
    """The sessions rows that commits ``after < v <= upto`` inserted, updated (before and after) and
    deleted, from the table's change data feed (``_change_type``); None when a commit in that range
    recorded none (a table from before the feed was on: maintenance turns it on)."""
    from pyspark.errors import AnalysisException

    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", after + 1)
        .option("endingVersion", upto)
        .load(path)
    )
    try:
        return frozen.freeze(changes)
    except AnalysisException as e:
        if "DELTA_MISSING_CHANGE_DATA" not in str(e):
            raise
        return None


def _absolute(root: str, path: str) -> str:
    from urllib.parse import unquote

    return path if "://" in path or path.startswith("/") else f"{root.rstrip('/')}/{unquote(path)}"


def _read_files(spark: SparkSession, table_path: str, paths: set[str], schema: str) -> DataFrame:
    """The rows of data files ``paths`` of a table (the raw files: deleted rows included)."""
    if not paths:
        return spark.createDataFrame([], schema)
    files = [_absolute(table_path, p) for p in sorted(paths)]
    # A file VACUUM deletes while this reads is skipped, as one gone before (see _touched_since).
    return spark.read.schema(schema).option("ignoreMissingFiles", "true").parquet(*files)


def _all_exist(spark: SparkSession, root: str, paths: set[str] | list[str]) -> bool:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for p in paths:
        path = jvm.org.apache.hadoop.fs.Path(_absolute(root, p))
        if not path.getFileSystem(conf).exists(path):
            return False
    return True


def _ranges_holding(spark: SparkSession, coordinates: DataFrame, ranges: list[LedgerRange]) -> list[LedgerRange]:
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


def range_counts(spark: SparkSession, tables: dict[str, DataFrame], ranges: list[LedgerRange]) -> list[tuple[int, int]]:
    """(rows, checksum) of events + duplicates + quarantine inside each range (order of ``ranges``).

    The checksum sums a hash of each row with its table's name, so a row that changed, moved to
    another table or appears twice changes it. Only files whose offset statistics overlap the
    ranges are read (the filter is on the merged spans per partition).
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
    rows = _union(hashed[1:], hashed[0])
    counted = (
        rows.join(
            F.broadcast(_ranges_frame(spark, ranges)),
            (F.col("topic") == F.col("r_topic"))
            & (F.col("partition") == F.col("r_partition"))
            & (F.col("offset") >= F.col("r_start"))
            & (F.col("offset") < F.col("r_end")),
        )
        .groupBy("i")
        .agg(F.count("*").alias("n"), F.sum(F.col("h").cast("decimal(38,0)")).alias("checksum"))
        .collect()
    )
    by_index = {row["i"]: (int(row["n"]), int(row["checksum"])) for row in counted}
    return [by_index.get(i, (0, 0)) for i in range(len(ranges))]


def merged_spans(ranges: list[PartitionRange]) -> list[PartitionRange]:
    """``ranges`` merged per partition where they overlap or touch (a short filter for data skipping)."""
    merged: list[PartitionRange] = []
    for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.start)):
        last = merged[-1] if merged else None
        if last and (last.topic, last.partition) == (r.topic, r.partition) and r.start <= last.end:
            merged[-1] = PartitionRange(r.topic, r.partition, last.start, max(last.end, r.end))
        else:
            merged.append(r)
    return merged


def _compare_ranges(
    settings: Settings,
    to_check: list[tuple[LedgerRange, str]],
    counts: list[tuple[int, int]],
    verified: dict[tuple[str, int, str, int], Verified],
) -> list[RangeCheck]:
    lows: dict[str, dict[int, int]] = {}
    checks = []
    for (r, reason), (n, checksum) in zip(to_check, counts, strict=True):
        p = r.range
        base = dict(
            pipeline=r.pipeline, batch_id=r.batch_id, topic=p.topic, partition=p.partition, start=p.start,
            end=p.end, sink_records=n, sink_checksum=checksum, reason=reason,
        )  # fmt: skip
        if reason == NEW:
            if p.topic not in lows:
                lows[p.topic] = {k: lo for k, (lo, _) in watermarks(settings, p.topic).items()}
            low = lows[p.topic].get(p.partition, 0)
            kafka = count_committed(settings, p) if low <= p.start or p.size == 0 else None
            checks.append(RangeCheck(**base, kafka_records=kafka, low_watermark=low))
        else:
            v = verified[key(r)]
            checks.append(RangeCheck(**base, verified_records=v.records, verified_checksum=v.checksum))
    return checks


def sessions_differing_from_postgres(
    sessions: DataFrame, delta_buckets: dict[str, tuple[int, int]], cur
) -> list[tuple[str, str]]:
    """(entity_id, session_id) of the sessions that differ between Delta and PostgreSQL.

    Per-bucket counts and checksums first (Delta's are given; one aggregate in PostgreSQL); only
    the buckets that differ are compared row by row.
    """
    cur.execute(f"SELECT {SESSION_BUCKET}, count(*), {postgres.SESSIONS_CHECKSUM} FROM sessions GROUP BY 1")
    postgres_buckets = {b: (int(n), int(c)) for b, n, c in cur.fetchall()}
    differing = sorted(b for b in delta_buckets.keys() | postgres_buckets.keys()
                       if delta_buckets.get(b) != postgres_buckets.get(b))  # fmt: skip
    if not differing:
        return []
    in_delta = {
        row["session_id"]: (row["entity_id"], row["h"])
        for row in sessions.where(f"{SESSION_BUCKET} IN ({', '.join(repr(b) for b in differing)})")
        .selectExpr("session_id", "entity_id", f"substr(sha2({delta.SESSION_ROW_TEXT}, 256), 1, 15) AS h")
        .toLocalIterator()
    }
    cur.execute(
        f"""SELECT session_id, entity_id,
                   substr(encode(sha256(convert_to({postgres.SESSION_ROW_TEXT}, 'UTF8')), 'hex'), 1, 15)
            FROM sessions WHERE {SESSION_BUCKET} = ANY(%s)""",
        (differing,),
    )
    in_postgres = {session_id: (entity, h) for session_id, entity, h in cur.fetchall()}
    pairs = set()
    for session_id in in_delta.keys() | in_postgres.keys():
        a, b = in_delta.get(session_id), in_postgres.get(session_id)
        if a != b:
            pairs |= {(side[0], session_id) for side in (a, b) if side is not None}
    return sorted(pairs)


def _delta_buckets(sessions: DataFrame) -> dict[str, tuple[int, int]]:
    """Per bucket of entities: (rows, checksum) of a sessions frame."""
    from pyspark.sql import functions as F

    rows = (
        sessions.withColumn("b", F.expr(SESSION_BUCKET))
        .groupBy("b")
        .agg(F.count("*").alias("n"), F.expr(delta.SESSIONS_CHECKSUM).alias("c"))
        .collect()
    )
    return {row["b"]: (int(row["n"]), int(row["c"])) for row in rows}


def _sessions_buckets(
    sessions: DataFrame, previous: dict[str, tuple[int, int]] | None, touched: Touched
) -> dict[str, tuple[int, int]]:
    """Delta sessions' per-bucket (rows, checksum) at this run's version.

    From the previous run's buckets plus the rows of the files added since, minus those of the
    files removed (both checksums are sums over rows), when that is exact; else by reading the table.
    """
    if previous is None or touched.sessions_added is None or touched.sessions_removed is None:
        return _delta_buckets(sessions)
    buckets = dict(previous)
    for sign, frame in ((1, touched.sessions_added), (-1, touched.sessions_removed)):
        for b, (n, c) in _delta_buckets(frame).items():
            n0, c0 = buckets.get(b, (0, 0))
            buckets[b] = (n0 + sign * n, c0 + sign * c)
    return {b: v for b, v in buckets.items() if v != (0, 0)}


def _anchors_to_recompute(
    tables: dict[str, DataFrame], ranges: list[PartitionRange], touched: Touched, rules: SessionRules
) -> DataFrame:
    """``(entity_id, anchor)``: whose sessions to recompute from events, and from when.

    The entities with events in the checked ranges (from those events' arrival), and those in any
    events or sessions file a commit touched since the previous run (from the rows' times); on a
    first run, every entity from its first event. Sessions before an anchor were checked before.
    """
    from pyspark.sql import functions as F

    from spark_jobs.session_changes import anchors_from

    events = tables["events"]
    frames = []
    if ranges:
        in_ranges = events.alias("t").where(delta.range_filter(merged_spans(ranges), "t"))
        frames.append(in_ranges.select("entity_id", "arrival_time"))
    if touched.times is not None:
        frames.append(touched.times)
    if not frames:
        return events.sparkSession.createDataFrame([], "entity_id string, anchor timestamp")
    times = _union(frames[1:], frames[0]).where(F.col("entity_id").isNotNull())
    return anchors_from(times, tables["sessions"], rules)


def sessions_differing_from_events(
    events: DataFrame, sessions: DataFrame, anchored: DataFrame, rules: SessionRules, frozen: FrozenFrames
) -> list[tuple[str, str]]:
    """(entity_id, session_id) where Delta ``sessions`` differ from a recompute of the ``anchored``
    entities' events, each from its anchor on (files before the earliest anchor are skipped)."""
    from pyspark.sql import functions as F

    from spark_jobs.session_changes import SESSIONIZE_COLUMNS
    from spark_jobs.sessionize import sessionize

    earliest = anchored.agg(F.min(F.unix_micros("anchor"))).first()[0]
    named = F.broadcast(anchored)
    since = events.where(F.col("arrival_time") >= F.timestamp_micros(F.lit(earliest)))
    recomputed = sessionize(
        since.join(named, "entity_id").where("arrival_time >= anchor").select(*SESSIONIZE_COLUMNS), rules, frozen
    )
    stored = (
        sessions.where(F.col("started_at") >= F.timestamp_micros(F.lit(earliest)))
        .join(named, "entity_id")
        .where("started_at >= anchor")
    )
    r = recomputed.selectExpr("session_id", "entity_id", f"{delta.SESSION_ROW_TEXT} AS row").alias("r")
    s = stored.selectExpr("session_id", "entity_id", f"{delta.SESSION_ROW_TEXT} AS row").alias("s")
    differing = (
        r.join(s, F.col("r.session_id") == F.col("s.session_id"), "full_outer")
        .where("NOT (r.row <=> s.row)")
        .select(
            F.coalesce("r.entity_id", "s.entity_id").alias("entity_id"),
            F.coalesce("r.session_id", "s.session_id").alias("session_id"),
        )  # fmt: skip
        .collect()
    )
    return sorted((row["entity_id"], row["session_id"]) for row in differing)


# ---------------------------------------------------------------------------------------------
# Recording


def _record(
    cur,
    report: Report,
    snapshot: Snapshot,
    buckets: dict[str, tuple[int, int]] | None,
    repair_of: str | None,
) -> None:
    """Write (or, for a retried task, rewrite) this run's rows, and what it verified."""
    run_id = report.run_id
    cur.execute("DELETE FROM reconcile_runs WHERE run_id = %s", (run_id,))
    cur.execute(
        """INSERT INTO reconcile_runs (run_id, counted_at, finished_at, status, delta_sessions,
                                       delta_sessions_checksum, postgres_sessions, postgres_sessions_checksum,
                                       ranges_checked, ranges_mismatched, gaps, report, delta_versions, used_spark,
                                       entities_checked, findings, repair_of, alert, snapshot_seconds,
                                       delta_session_buckets)
           VALUES (%s, %s, clock_timestamp(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        (
            run_id,
            snapshot.now,
            report.status,
            report.delta_sessions.count,
            report.delta_sessions.checksum,
            report.postgres_sessions.count,
            report.postgres_sessions.checksum,
            len(report.checks),
            len(report.mismatched),
            json.dumps([g.as_dict() for g in report.gaps]),
            report.summary(),
            json.dumps(snapshot.versions),
            report.used_spark,
            report.entities_checked,
            json.dumps(report.findings()),
            repair_of,
            None if report.ok else report.alert(),
            report.snapshot_seconds,
            None if buckets is None else json.dumps({b: [n, str(c)] for b, (n, c) in sorted(buckets.items())}),
        ),
    )
    cur.executemany(
        """INSERT INTO reconcile_ranges (run_id, pipeline, batch_id, topic, kafka_partition, start_offset,
                                         end_offset, sink_records, sink_checksum, kafka_records, matches, reason,
                                         outcome)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (
                run_id,
                c.pipeline,
                c.batch_id,
                c.topic,
                c.partition,
                c.start,
                c.end,
                c.sink_records,
                c.sink_checksum,
                c.kafka_records,
                c.matches,
                c.reason,
                c.outcome,
            )  # fmt: skip
            for c in report.checks
        ],
    )
    cur.executemany(
        """INSERT INTO reconcile_lag (run_id, topic, kafka_partition, high_watermark, processed_to, behind_records,
                                      oldest_unprocessed, behind_seconds)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (
                run_id,
                g.topic,
                g.partition,
                g.high_watermark,
                g.processed_to,
                g.behind_records,
                g.oldest_unprocessed,
                g.behind_seconds,
            )  # fmt: skip
            for g in report.lags
        ],
    )
    cur.executemany(
        """INSERT INTO verified_ranges (pipeline, batch_id, topic, kafka_partition, start_offset, end_offset,
                                        sink_records, sink_checksum, verified_by)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (pipeline, batch_id, topic, kafka_partition) DO UPDATE SET checked_at = now()""",
        [
            (c.pipeline, c.batch_id, c.topic, c.partition, c.start, c.end, c.sink_records, c.sink_checksum, run_id)
            for c in report.checks
            if c.matches
        ],
    )


def stored_report(settings: Settings, run_id: str | None = None) -> tuple[str, str, str] | None:
    """(run_id, status, report) of ``run_id``, or of the latest run."""
    conn = db.connect(settings.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
            if run_id:
                cur.execute("SELECT run_id, status, report FROM reconcile_runs WHERE run_id = %s", (run_id,))
            else:
                cur.execute("SELECT run_id, status, report FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1")
            return cur.fetchone()
    finally:
        conn.close()


def new_run_id(prefix: str = "cli") -> str:
    return f"{prefix}__{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session

    parser = argparse.ArgumentParser(description="tidemark reconciliation")
    parser.add_argument("--run-id", required=True, help="the reconcile run (Airflow's run_id)")
    parser.add_argument("--repair-of", help="the run a repair re-checks")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    report = run(settings, args.run_id, lambda: build_session(settings, "tidemark-reconcile"), args.repair_of)
    # The run is recorded; a finding is the verdict task's to report (and alert on), not a job failure.
    print(report.summary())


if __name__ == "__main__":
    main()
