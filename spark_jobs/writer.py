"""The foreachBatch writer: one frozen batch of Kafka records into Delta and PostgreSQL, exactly once.

Scheduled (streaming) runs and backfills both call :meth:`BatchWriter.write` with the
``foreachBatch`` signature ``(batch_df, batch_id)``. Per batch, in this order:

1. the ledger: a batch whose ledger row exists is a no-op (nothing is rewritten);
2. :meth:`BatchWriter.plan`, before any write: records a record table holds already stay where
   they are; the others are validated (invalid ones go to quarantine) and ranked by ``event_id``
   against the stored events (``dedupe``: the first arrival is the ``events`` row, the others are
   ``duplicates``); the touched entities' sessions are recomputed from their anchors on and
   compared with the stored ones (``session_changes``);
3. :meth:`BatchWriter.write_delta`: only what differs, one commit per table (``events``: an append
   and a takeover MERGE); ``events`` last when the batch has a takeover;
4. ``sinks.postgres``: sessions upserted in the same transaction as the batch's ledger row.

Every write is idempotent on its own, and no write loses what the next attempt's plan needs, so a
batch that fails after any subset of its commits and is run again ends exactly as one clean run
(docs/design.md, "Partial commits and retries").
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from spark_jobs import db, dedupe, ledger, producers, session_changes
from spark_jobs.contract import COORDINATES, EVENT_COLUMNS, RECORD_TABLES, SESSION_COLUMNS, TABLE_SCHEMAS
from spark_jobs.errors import LedgerConflict, TidemarkError
from spark_jobs.lock import WriterLease, batch_commit
from spark_jobs.offsets import PartitionRange
from spark_jobs.sessionize import sessionize
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
from spark_jobs.spark import FrozenFrames, broadcastable
from spark_jobs.validation import parse_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")
Cursor = Any  # a psycopg2 cursor

# Points in a batch where a test's fault hook is called: once its plan is made (nothing written),
# before each table's Delta write (a hook that raises there fails that write, the other tables'
# writes may commit), after the Delta writes, after the PostgreSQL commit. A hook that raises
# simulates a crash or an error at that point.
FAULT_POINTS = (
    "planned",
    "write:quarantine",
    "write:duplicates",
    "write:events",
    "write:sessions",
    "after_delta",
    "after_postgres",
)
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
    producer: producers.ProducerChecks = field(default_factory=producers.ProducerChecks)


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

    ``lease`` is the run's hold on the writer lock (``lock.single_writer``): each batch proves it
    still holds before its first write and keeps that proof until its ledger row commits.

    ``fault``, for tests only, is called with each of :data:`FAULT_POINTS` as the batch passes it.

    ``scheduled``: the batches read offsets past what the pipeline read before (a scheduled run),
    so PostgreSQL may tell that nothing in them is held yet (:meth:`_held_counts`). A backfill or a
    repair, which re-reads on purpose (and repairs what the ledger may have lost), always searches Delta.
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        lease: WriterLease,
        pipeline: str,
        ranges_for: Callable[[int], list[PartitionRange]],
        fault: Fault | None = None,
        scheduled: bool = False,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.lease = lease
        self.pipeline = pipeline
        self.ranges_for = ranges_for
        self.rules = settings.session_rules
        self.fault = fault or (lambda point: None)
        self.scheduled = scheduled
        self.results: list[BatchResult] = []
        self.failure: TidemarkError | None = None
        self._written: set[str] = set()  # IDs of the plans write_delta was called with
        self._frozen = FrozenFrames(spark)  # the current batch's frames, released when it ends
        # A lake whose record tables this writer created holds nothing written before attempts
        # were recorded (ledger.write_floor).
        self._created_lake = set(RECORD_TABLES) <= set(delta.ensure_tables(spark, settings))

    def _path(self, name: str) -> str:
        return self.settings.table_path(name)

    def _read(self, name: str) -> DataFrame:
        return delta.table(self.spark, self._path(name)).toDF()

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        """The foreachBatch function. A failure the user can fix is kept in ``failure``: Spark wraps
        what foreachBatch raises in a StreamingQueryException, and the run raises this one instead."""
        try:
            self._write(batch_df, batch_id)
        except TidemarkError as exc:
            self.failure = exc
            raise

    def _write(self, batch_df: DataFrame, batch_id: int) -> None:
        ranges = self.ranges_for(batch_id)
        recorded = self._on_ledger(lambda cur: ledger.batch_ranges(cur, self.pipeline, batch_id))
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
        try:
            result = self._write_new_batch(batch_df, batch_id, ranges)
        finally:
            self._frozen.release()
        self.results.append(result)
        self.fault("after_postgres")

    def _write_new_batch(self, batch_df: DataFrame, batch_id: int, ranges: list[PartitionRange]) -> BatchResult:
        clock = _Stopwatch()
        plan = self.plan(batch_df, batch_id, ranges, clock)
        self.fault("planned")
        self._on_ledger(lambda cur: ledger.record_attempt(cur, self.pipeline, batch_id, ranges))
        # Fenced, and reconcile sees this batch in both sinks or in neither.
        with batch_commit(self.settings, self.lease) as cur:
            self.write_delta(plan)
            clock.lap("delta")
            self.fault("after_delta")
            cur.execute("LOCK TABLE ledger_batches IN SHARE ROW EXCLUSIVE MODE")
            if ledger.batch_exists(cur, self.pipeline, batch_id):
                raise LedgerConflict(f"batch {batch_id} of {self.pipeline} was committed concurrently")
            ledger.check_session_rules(cur, self.rules)
            written, deleted = postgres.upsert_sessions(
                cur,
                postgres.text_rows(plan.session_rows, SESSION_COLUMNS),
                postgres.text_rows(plan.anchor_rows, ("entity_id", "anchor")),
            )
            ledger.record_batch(cur, self.pipeline, batch_id, ranges, plan.counts, self.rules)
        clock.lap("postgres")
        c = plan.counts
        return BatchResult(
            self.pipeline, batch_id, ranges, c.read, c.accepted, c.duplicates, c.quarantined, written, deleted,
            skipped=False, seconds=clock.laps, producer=c.producer,
        )  # fmt: skip

    def plan(
        self, batch_df: DataFrame, batch_id: int, ranges: list[PartitionRange], clock: _Stopwatch | None = None
    ) -> BatchPlan:
        """Everything the batch writes, from the batch and the tables as they are now; nothing is written.

        A record of the batch that a record table holds already (a replay, or an earlier attempt of
        this batch) stays where it is: only records no table holds are validated, quarantined or
        ranked as new. Those ``events`` holds take part in the ranking as the stored copies they are.

        The Spark jobs, in order (a replay adds two: the held coordinates, and the fresh records' totals):
        the records parsed and validated (materialised, the only read of Kafka); which ranges the
        tables hold already (counts only, and only when PostgreSQL says a batch may have written
        there: :meth:`_held_counts`); the batch's
        totals and producer checks (one aggregate); the ranking against stored events within the
        dedupe horizon (materialised) and its counts; the touched entities with their anchors
        (materialised) and their summary; the recomputed sessions compared with the stored ones
        (materialised) and their counts.
        """
        from pyspark.sql import functions as F

        clock = clock or _Stopwatch()
        # Read and validated once. Only quarantined records keep their raw key and value.
        quarantined_flag = F.col("quarantine_reason").isNotNull()
        parsed = parse_records(batch_df)
        parsed = self._frozen.freeze(
            parsed.select(
                *[F.when(quarantined_flag, F.col(c)).alias(c) if c in ("key", "value") else c for c in parsed.columns]
            )
        )
        held_in = self._held_counts(ranges)
        # Over every record, held ones too: the producer checks and the earliest valid arrival (the
        # dedupe horizon is measured from it); and, when nothing is held, the fresh records' totals.
        summary = (
            producers.with_previous_arrival(parsed.drop("key", "value"))
            .agg(
                F.count(F.lit(1)).alias("fresh"),
                F.count("quarantine_reason").alias("invalid"),
                F.unix_micros(F.min(F.when(~quarantined_flag, F.col("arrival_time")))).alias("earliest_us"),
                *producers.aggregates(),
            )
            .first()
        )
        totals = summary
        if held_in:
            held = self._frozen.freeze(delta.held(self.spark, self.settings, ranges).select(*COORDINATES))
            parsed = parsed.join(held, list(COORDINATES), "left_anti")
            totals = parsed.agg(F.count(F.lit(1)).alias("fresh"), F.count("quarantine_reason").alias("invalid")).first()
        clock.lap("parse")

        events = self._read("events")
        replayed = delta.within(events, ranges) if held_in.get("events") else None
        candidates = parsed.where("quarantine_reason IS NULL").select(*EVENT_COLUMNS)
        if replayed is not None:
            candidates = candidates.unionByName(replayed)
        horizon = self.settings.dedupe_horizon_us
        since = None if horizon is None or summary["earliest_us"] is None else summary["earliest_us"] - horizon
        # The batch has at most as many candidates as records: few enough, its ids are broadcast.
        broadcast_ids = broadcastable(self.spark, summary["fresh"], dedupe.ID_ROW_BYTES)
        # Frozen before the writes change the tables it read.
        ranked = self._frozen.freeze(dedupe.rank(candidates, events, since, broadcast_ids))
        counts = dedupe.count(ranked)
        clock.lap("dedupe")

        # A takeover an earlier attempt of this batch committed moved the displaced row to
        # duplicates; its entity still needs its sessions in PostgreSQL.
        displaced = None if replayed is None else dedupe.copies_in(self._read("duplicates"), replayed)
        changes = self._session_changes(ranked, displaced, counts)
        checks = producers.ProducerChecks(
            changes.entities_in_many_partitions, summary["not_log_append_time"], summary["time_went_back"]
        )
        if checks.broken:
            log.warning(
                "%s batch %s breaks the producer requirements: %s (README, Producer requirements)",
                self.pipeline, batch_id, checks.describe(),
            )  # fmt: skip
        plan = BatchPlan(
            pipeline=self.pipeline,
            batch_id=batch_id,
            ranges=ranges,
            plan_id=f"{self.pipeline}:{batch_id}:{uuid.uuid4().hex}",
            counts=ledger.BatchCounts(
                read=totals["fresh"] + sum(held_in.values()),
                accepted=counts.accepted,
                duplicates=counts.duplicates + held_in.get("duplicates", 0),
                quarantined=totals["invalid"] + held_in.get("quarantine", 0),
                producer=checks,
            ),
            quarantine=delta.in_files(
                parsed.where("quarantine_reason IS NOT NULL").select(
                    *COORDINATES, "arrival_time", "key", "value", F.col("quarantine_reason").alias("reason")
                ),
                totals["invalid"],
            )
            if totals["invalid"]
            else None,
            duplicates=delta.in_files(dedupe.losers(ranked), counts.losers) if counts.losers else None,
            duplicates_span=f"t.offset >= {counts.losers_from} AND t.offset <= {counts.losers_to}",
            first_arrivals=delta.in_files(dedupe.first_arrivals(ranked), counts.first_arrivals)
            if counts.first_arrivals
            else None,
            takeovers=dedupe.takeovers(ranked) if counts.takeovers else None,
            displaced=dedupe.displaced(ranked) if counts.takeovers else None,
            takeovers_since_us=counts.takeovers_since_us,
            sessions=changes,
            session_rows=session_changes.surviving(changes.compared),
            anchor_rows=changes.anchors,
        )
        clock.lap("sessions")
        return plan

    def _on_ledger(self, work: Callable[[Cursor], T]) -> T:
        """``work`` in one PostgreSQL transaction of its own."""
        conn = db.connect(self.settings.postgres_dsn)
        try:
            with conn, conn.cursor() as cur:
                return work(cur)
        finally:
            conn.close()

    def _held_counts(self, ranges: list[PartitionRange]) -> dict[str, int]:
        """How many records in ``ranges`` each record table holds already (tables holding none left out).

        For a scheduled batch the Delta scan (``delta.held_counts``) runs only when PostgreSQL says a
        table may hold some: a range overlaps an attempt or ledger range, or starts below its topic's
        write floor. Records reach the tables only from batches that record their attempt first, so a
        batch that overlaps none of these (the usual scheduled batch) holds nothing and reads no
        Delta table. Backfills and repairs always scan.
        """
        if not any(r.end > r.start for r in ranges):
            return {}
        if not self.scheduled:
            return delta.held_counts(self.spark, self.settings, ranges)
        topic, lake = ranges[0].topic, self.settings.lake_root

        def may_hold(cur: Cursor) -> bool:
            floor = ledger.write_floor(cur, lake, topic)
            if floor is None:  # the first batch of this topic in this lake since attempts are recorded
                floor = 0 if self._created_lake else delta.offset_floor(self.spark, self.settings, topic)
                ledger.set_write_floor(cur, lake, topic, floor)
            return ledger.may_hold(cur, ranges, floor)

        return delta.held_counts(self.spark, self.settings, ranges) if self._on_ledger(may_hold) else {}

    def _session_changes(
        self, ranked: DataFrame, displaced: DataFrame | None, counts: dedupe.DedupeCounts
    ) -> _SessionChanges:
        from pyspark.sql import functions as F

        sessions = self._read("sessions")
        since = counts.touched_since_us if displaced is None else None
        entities = self._frozen.freeze(session_changes.entities(ranked, sessions, self.rules, displaced, since))
        summary = entities.agg(
            F.unix_micros(F.min("anchor")).alias("earliest"),  # UTC micros, never a local time
            F.count_if(F.col("partitions") > 1).alias("many_partitions"),
        ).first()
        anchors = session_changes.touched(entities)
        earliest = summary["earliest"]
        if earliest is None:  # no valid record in the batch changes an entity's events
            none = self.spark.createDataFrame([], f"{TABLE_SCHEMAS['sessions']}, op string")
            return _SessionChanges(anchors, none, 0, 0, summary["many_partitions"])
        events = session_changes.events_since_anchors(
            self._read("events"), ranked, anchors, earliest, has_takeovers=counts.takeovers > 0
        )
        compared = self._frozen.freeze(
            session_changes.compare(sessionize(events, self.rules, self._frozen), sessions, anchors, earliest)
        )
        ops = {row["op"]: row["count"] for row in compared.groupBy("op").count().collect()}
        return _SessionChanges(
            anchors,
            compared,
            ops.get("update", 0) + ops.get("delete", 0),
            ops.get("insert", 0),
            summary["many_partitions"],
            earliest,
        )

    def write_delta(self, plan: BatchPlan) -> None:
        """The plan's Delta writes, each idempotent on its own.

        A plan places only records no table held when it was made, so its first write appends them
        (a blind append needs no table state). The same plan written again (a lost commit
        acknowledgement answered without planning again) uses insert-only MERGEs by coordinates and
        session ID instead, which skip what the first write committed. A takeover removes a row
        from ``events`` that only ``duplicates`` will hold, and the next attempt of the batch can
        only find it there: so with takeovers ``events`` is written after the other three tables
        committed, and the displaced rows go to ``duplicates`` with an insert-only MERGE (an earlier
        attempt may have moved them already). Any subset of these commits, followed by another
        attempt (planned afresh), ends as one clean run; so does writing the same plan again (see
        docs/design.md, "Partial commits and retries").
        """
        spark, path = self.spark, self._path
        again = plan.plan_id in self._written
        self._written.add(plan.plan_id)

        def add(name: str, rows: DataFrame, merge: bool = again, bound: str | None = None) -> Callable[[], None]:
            if merge:
                return lambda: delta.insert_new(spark, path(name), rows, bound)
            return lambda: delta.append(rows, path(name))

        first: list[Callable[[], None]] = []
        if plan.quarantine is not None:
            first.append(self._guard("quarantine", add("quarantine", plan.quarantine)))
        if plan.duplicates is not None:
            merge = again or plan.takeovers is not None
            first.append(self._guard("duplicates", add("duplicates", plan.duplicates, merge, plan.duplicates_span)))
        changes = plan.sessions
        if changes.changed or changes.inserted:
            c = changes
            write_sessions = lambda: delta.apply_session_changes(  # noqa: E731
                spark, path("sessions"), c.compared, c.changed, c.inserted, c.earliest_us, merge=again
            )
            first.append(self._guard("sessions", write_sessions))
        last: list[Callable[[], None]] = []
        if plan.first_arrivals is not None or plan.takeovers is not None:
            append_first_arrivals = add("events", plan.first_arrivals) if plan.first_arrivals is not None else None

            def write_events() -> None:
                if append_first_arrivals is not None:
                    append_first_arrivals()
                if plan.takeovers is not None:
                    delta.take_over(spark, path("events"), plan.takeovers, plan.displaced, plan.takeovers_since_us)

            last.append(self._guard("events", write_events))
        if plan.takeovers is None:
            delta.run_concurrently(first + last)
        else:
            delta.run_concurrently(first)
            delta.run_concurrently(last)

    def _guard(self, table: str, write: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            self.fault(f"write:{table}")
            write()

        return run


@dataclass(frozen=True)
class _SessionChanges:
    anchors: DataFrame  # (entity_id, anchor): each touched entity's sessions from here on were recomputed
    compared: DataFrame  # recomputed and stored sessions with op: insert, update, delete or same
    changed: int  # rows to update or delete
    inserted: int  # new session IDs
    entities_in_many_partitions: int = 0  # a producer check, counted with the anchors
    earliest_us: int | None = None  # the earliest anchor: no session before it is compared or written


@dataclass(frozen=True)
class BatchPlan:
    """One batch's writes, computed before any of them (:meth:`BatchWriter.plan`); the frames are frozen."""

    pipeline: str
    batch_id: int
    ranges: list[PartitionRange]
    plan_id: str  # unique per plan: the writer knows a plan it writes again
    counts: ledger.BatchCounts  # where the batch's records are after it
    quarantine: DataFrame | None  # records no table held that are invalid
    duplicates: DataFrame | None  # later copies, from the batch and displaced stored rows
    duplicates_span: str  # bounds the duplicates MERGE to the losers' offsets
    first_arrivals: DataFrame | None  # new event_ids, appended to events
    takeovers: DataFrame | None  # earlier copies of stored event_ids, inserted into events
    displaced: DataFrame | None  # coordinates of the stored events rows the takeovers move to duplicates
    takeovers_since_us: int | None  # earliest arrival of a takeover, bounds the takeover MERGE
    sessions: _SessionChanges
    session_rows: DataFrame  # PostgreSQL: the touched entities' sessions from their anchors on (frozen)
    anchor_rows: DataFrame  # (entity_id, anchor) of the touched entities (frozen)


def rebuild_sessions(
    spark: SparkSession, settings: Settings, lease: WriterLease, entities: list[str] | None = None
) -> tuple[int, int]:
    """Recompute stored sessions from ``events`` under ``settings.session_rules``, in both sinks.

    Every entity's (a change of session rules), or only ``entities``' (a repair), under the
    writer lock's ``lease``. The same comparison as a batch writes only what differs to Delta, and
    PostgreSQL gets the entities' full recomputed sessions, so a row missing or changed in either
    sink is put back. A full rebuild records the new rules with PostgreSQL's sessions, so a crash in
    between leaves the old rules recorded and the rebuild is simply run again.
    Returns (sessions written, sessions removed) in PostgreSQL.
    """
    from pyspark.sql import functions as F

    delta.ensure_tables(spark, settings)
    with FrozenFrames(spark) as frozen:
        events = delta.table(spark, settings.table_path("events")).toDF()
        sessions = delta.table(spark, settings.table_path("sessions")).toDF()
        if entities is not None:
            named = F.broadcast(spark.createDataFrame([(e,) for e in entities], "entity_id string"))
            events, sessions = events.join(named, "entity_id"), sessions.join(named, "entity_id")
        anchors = frozen.freeze(
            events.select("entity_id", F.col("arrival_time").alias("anchor"))
            .unionByName(sessions.select("entity_id", F.col("started_at").alias("anchor")))
            .groupBy("entity_id")
            .agg(F.min("anchor").alias("anchor"))
        )
        recomputed = sessionize(events.select(*session_changes.SESSIONIZE_COLUMNS), settings.session_rules, frozen)
        compared = frozen.freeze(session_changes.compare(recomputed, sessions, anchors))
        ops = {row["op"]: row["count"] for row in compared.groupBy("op").count().collect()}
        with batch_commit(settings, lease) as cur:
            delta.apply_session_changes(
                spark,
                settings.table_path("sessions"),
                compared,
                ops.get("update", 0) + ops.get("delete", 0),
                ops.get("insert", 0),
            )
            written = postgres.upsert_sessions(
                cur,
                postgres.text_rows(session_changes.surviving(compared), SESSION_COLUMNS),
                postgres.text_rows(anchors, ("entity_id", "anchor")),
            )
            if entities is None:
                ledger.record_session_rules(cur, settings.session_rules, "rebuild")
        return written
