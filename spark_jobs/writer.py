"""The foreachBatch writer: one frozen batch of Kafka records into Delta and PostgreSQL, exactly once.

Scheduled (streaming) runs and backfills both call :meth:`BatchWriter.write` with the
``foreachBatch`` signature ``(batch_df, batch_id)``. Per batch, in this order:

1. the ledger: a batch whose ledger row exists is a no-op (nothing is rewritten);
2. ``validation``: records are read from Kafka and validated once; invalid ones go to quarantine;
3. ``dedupe``: valid ones are ranked by ``event_id`` against the batch and the stored events: the
   first arrival is the ``events`` row, the others are ``duplicates``;
4. ``session_changes``: the touched entities' sessions are recomputed from their anchors on and
   compared with the stored ones;
5. ``sinks.delta``: the four tables are written concurrently, only what differs;
6. ``sinks.postgres``: sessions upserted in the same transaction as the batch's ledger row.

Every write is idempotent on its own, so a batch that fails anywhere and is run again ends exactly
as one clean run (docs/design.md, "Invariants").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_jobs import dedupe, ledger, session_changes
from spark_jobs.contract import COORDINATES, EVENT_COLUMNS, SESSION_COLUMNS, TABLE_SCHEMAS
from spark_jobs.errors import LedgerConflict
from spark_jobs.offsets import PartitionRange
from spark_jobs.sessionize import sessionize
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
from spark_jobs.validation import parse_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Points in a batch where a test's fault hook is called: after the Delta writes, after the
# PostgreSQL commit. A hook that raises there simulates a crash at that point.
FAULT_POINTS = ("after_delta", "after_postgres")
Fault = Callable[[str], None]


@dataclass(frozen=True)
class BatchResult:
    pipeline: str
    batch_id: int
    ranges: list[PartitionRange]
    read: int
    accepted: int
    duplicates: int
    quarantined: int
    sessions_written: int
    sessions_deleted: int
    skipped: bool  # the ledger already had this batch
    seconds: dict[str, float] = field(default_factory=dict)  # time per step, for profiling


class _Stopwatch:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


class BatchWriter:
    """Writes one batch; ``ranges_for(batch_id)`` gives the batch's frozen per-partition ranges.

    ``fault``, for tests only, is called with each of :data:`FAULT_POINTS` as the batch passes it.
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        pipeline: str,
        ranges_for: Callable[[int], list[PartitionRange]],
        fault: Fault | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.pipeline = pipeline
        self.ranges_for = ranges_for
        self.rules = settings.session_rules
        self.fault = fault or (lambda point: None)
        self.results: list[BatchResult] = []
        delta.ensure_tables(spark, settings)

    def _path(self, name: str) -> str:
        return self.settings.table_path(name)

    def _read(self, name: str) -> DataFrame:
        return delta.table(self.spark, self._path(name)).toDF()

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        """The foreachBatch function."""
        ranges = self.ranges_for(batch_id)
        conn = ledger.connect(self.settings.postgres_dsn)
        try:
            with conn, conn.cursor() as cur:
                recorded = ledger.batch_ranges(cur, self.pipeline, batch_id)
            if recorded and recorded != sorted(ranges):
                # Same batch id, different offsets: the checkpoint was reset or moved. Skipping would
                # silently drop data and re-processing would break the ledger, so stop.
                raise LedgerConflict(
                    f"the ledger has batch {batch_id} of {self.pipeline} with ranges {recorded}, but this run "
                    f"froze {sorted(ranges)}. Was the checkpoint deleted or moved? Restore it, or give this "
                    "stream a new pipeline name."
                )
            if recorded:
                self.results.append(BatchResult(self.pipeline, batch_id, ranges, 0, 0, 0, 0, 0, 0, skipped=True))
                return
            result = self._write_new_batch(conn, batch_df, batch_id, ranges)
        finally:
            conn.close()
        self.results.append(result)
        self.fault("after_postgres")

    def _write_new_batch(self, conn, batch_df: DataFrame, batch_id: int, ranges: list[PartitionRange]) -> BatchResult:  # noqa: ANN001
        from pyspark.sql import functions as F

        clock = _Stopwatch()
        # Read and validated once. Only quarantined records keep their raw key and value.
        quarantined_flag = F.col("quarantine_reason").isNotNull()
        parsed = parse_records(batch_df)
        parsed = parsed.select(
            *[F.when(quarantined_flag, F.col(c)).alias(c) if c in ("key", "value") else c for c in parsed.columns]
        ).localCheckpoint(eager=True)
        totals = parsed.agg(F.count(F.lit(1)).alias("read"), F.count("quarantine_reason").alias("quarantined")).first()
        clock.lap("parse")

        candidates = parsed.where("quarantine_reason IS NULL").select(*EVENT_COLUMNS)
        # Frozen before the writes change the tables it read.
        ranked = dedupe.rank(candidates, self._read("events")).localCheckpoint(eager=True)
        counts = dedupe.count(ranked)
        clock.lap("dedupe")

        changes = self._session_changes(ranked, has_takeovers=counts.takeovers > 0)
        session_rows = postgres.rows_as_text(session_changes.surviving(changes.compared), SESSION_COLUMNS)
        anchor_rows = postgres.rows_as_text(changes.anchors, ("entity_id", "anchor"))
        clock.lap("sessions")

        delta.run_concurrently(self._delta_writes(parsed, totals["quarantined"], ranked, counts, changes, ranges))
        clock.lap("delta")
        self.fault("after_delta")

        counts_row = ledger.BatchCounts(
            read=totals["read"],
            accepted=counts.accepted,
            duplicates=counts.duplicates,
            quarantined=totals["quarantined"],
        )
        with conn, conn.cursor() as cur:
            cur.execute("LOCK TABLE ledger_batches IN SHARE ROW EXCLUSIVE MODE")
            if ledger.batch_exists(cur, self.pipeline, batch_id):
                raise LedgerConflict(f"batch {batch_id} of {self.pipeline} was committed concurrently")
            ledger.check_session_rules(cur, self.rules)
            written, deleted = postgres.upsert_sessions(cur, session_rows, anchor_rows)
            ledger.record_batch(cur, self.pipeline, batch_id, ranges, counts_row, self.rules)
        clock.lap("postgres")
        return BatchResult(
            self.pipeline,
            batch_id,
            ranges,
            counts_row.read,
            counts_row.accepted,
            counts_row.duplicates,
            counts_row.quarantined,
            written,
            deleted,
            skipped=False,
            seconds=clock.laps,
        )

    def _session_changes(self, ranked: DataFrame, has_takeovers: bool) -> _SessionChanges:
        from pyspark.sql import functions as F

        sessions = self._read("sessions")
        anchors = session_changes.anchors(ranked, sessions, self.rules).localCheckpoint(eager=True)
        earliest = anchors.agg(F.unix_micros(F.min("anchor"))).first()[0]  # UTC micros, never a local time
        if earliest is None:  # no valid record in the batch
            none = self.spark.createDataFrame([], f"{TABLE_SCHEMAS['sessions']}, op string")
            return _SessionChanges(anchors, none, 0, 0)
        events = session_changes.events_since_anchors(self._read("events"), ranked, anchors, earliest, has_takeovers)
        compared = session_changes.compare(sessionize(events, self.rules), sessions, anchors).localCheckpoint(
            eager=True
        )
        ops = {row["op"]: row["count"] for row in compared.groupBy("op").count().collect()}
        return _SessionChanges(anchors, compared, ops.get("update", 0) + ops.get("delete", 0), ops.get("insert", 0))

    def _delta_writes(
        self,
        parsed: DataFrame,
        quarantined: int,
        ranked: DataFrame,
        counts: dedupe.DedupeCounts,
        changes: _SessionChanges,
        ranges: list[PartitionRange],
    ) -> list[Callable[[], None]]:
        """The batch's Delta writes, each idempotent on its own, so any subset that fails is completed by a retry."""
        from pyspark.sql import functions as F

        spark, path = self.spark, self._path
        writes = []
        if quarantined:
            rows = parsed.where("quarantine_reason IS NOT NULL").select(
                *COORDINATES, "arrival_time", "key", "value", F.col("quarantine_reason").alias("reason")
            )
            bound = delta.range_filter(ranges, "t")
            writes.append(lambda: delta.insert_new(spark, path("quarantine"), rows, bound))
        if counts.losers:
            span = f"t.offset >= {counts.losers_from} AND t.offset <= {counts.losers_to}"
            writes.append(lambda: delta.insert_new(spark, path("duplicates"), dedupe.losers(ranked), span))
        if counts.first_arrivals or counts.takeovers:

            def write_events() -> None:
                if counts.first_arrivals:
                    delta.append(dedupe.first_arrivals(ranked), path("events"))
                if counts.takeovers:
                    delta.replace_by_event_id(spark, path("events"), dedupe.takeovers(ranked))

            writes.append(write_events)
        if changes.changed or changes.inserted:
            writes.append(
                lambda: delta.apply_session_changes(
                    spark, path("sessions"), changes.compared, changes.changed, changes.inserted
                )
            )
        return writes


@dataclass(frozen=True)
class _SessionChanges:
    anchors: DataFrame  # (entity_id, anchor): each touched entity's sessions from here on were recomputed
    compared: DataFrame  # recomputed and stored sessions with op: insert, update, delete or same
    changed: int  # rows to update or delete
    inserted: int  # new session IDs


def rebuild_all_sessions(spark: SparkSession, settings: Settings) -> tuple[int, int]:
    """Recompute every stored session from ``events`` under ``settings.session_rules``, in both sinks.

    For a change of session rules; call it holding the writer lock. The same comparison as a batch
    writes only what differs; the new rules are recorded with PostgreSQL's sessions, so a crash
    in between leaves the old rules recorded and the rebuild is simply run again.
    Returns (sessions written, sessions removed) in PostgreSQL.
    """
    from pyspark.sql import functions as F

    delta.ensure_tables(spark, settings)
    events = delta.table(spark, settings.table_path("events")).toDF()
    sessions = delta.table(spark, settings.table_path("sessions")).toDF()
    anchors = (
        events.select("entity_id", F.col("arrival_time").alias("anchor"))
        .unionByName(sessions.select("entity_id", F.col("started_at").alias("anchor")))
        .groupBy("entity_id")
        .agg(F.min("anchor").alias("anchor"))
        .localCheckpoint(eager=True)
    )
    recomputed = sessionize(events.select(*session_changes.SESSIONIZE_COLUMNS), settings.session_rules)
    compared = session_changes.compare(recomputed, sessions, anchors).localCheckpoint(eager=True)
    ops = {row["op"]: row["count"] for row in compared.groupBy("op").count().collect()}
    delta.apply_session_changes(
        spark,
        settings.table_path("sessions"),
        compared,
        ops.get("update", 0) + ops.get("delete", 0),
        ops.get("insert", 0),
    )
    conn = ledger.connect(settings.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
            written = postgres.upsert_sessions(
                cur,
                postgres.rows_as_text(session_changes.surviving(compared), SESSION_COLUMNS),
                postgres.rows_as_text(anchors, ("entity_id", "anchor")),
            )
            ledger.record_session_rules(cur, settings.session_rules, "rebuild")
    finally:
        conn.close()
    return written
