"""The foreachBatch writer: one frozen batch of Kafka records into Delta and PostgreSQL, exactly once.

Scheduled (streaming) runs and backfills both call :meth:`BatchWriter.write` with the
``foreachBatch`` signature ``(batch_df, batch_id)``. Per batch, in this order:

1. the ledger: a batch whose ledger row exists is a no-op (nothing is rewritten);
2. :meth:`spark_jobs.batch_plan.BatchPlanner.plan`, before any write: records a record table holds already stay where
   they are; the others are validated (invalid ones go to quarantine) and ranked by ``event_id``
   against the stored events (``dedupe``: the first arrival is the ``events`` row, the others are
   ``duplicates``); the touched entities' sessions are recomputed from their anchors on and
   compared with the stored ones (``session_changes``);
3. :meth:`BatchWriter.write_delta` (:mod:`spark_jobs.batch_writes`): only what differs, one commit per table
   (``events``: an append and a takeover MERGE); ``events`` last when the batch has a takeover;
4. ``sinks.postgres``: sessions upserted in the same transaction as the batch's ledger row.

Every write is idempotent on its own, and no write loses what the next attempt's plan needs, so a
batch that fails after any subset of its commits and is run again ends exactly as one clean run
(docs/design.md, "Partial commits and retries").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from spark_jobs import batch_writes, db, moves
from spark_jobs.avro import registry_failure
from spark_jobs.batch_plan import BatchPlan, BatchPlanner, Stopwatch
from spark_jobs.contract import RECORD_TABLES
from spark_jobs.errors import DataLossError, LedgerConflict, TidemarkError
from spark_jobs.offsets import PartitionRange, watermarks
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta_tables, postgres
from spark_jobs.spark import FrozenFrames, run_concurrently
from spark_jobs.store import ledger, quarantine, retention, stored_rules, verified
from spark_jobs.store.lock import WriterLease, batch_commit
from spark_jobs.store.runs import BatchResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


# What Spark's Kafka source says when offsets it must read are gone (failOnDataLoss on).
KAFKA_DATA_LOSS = "Some data may have been lost because they are not available in Kafka any more"


class BatchWriter:
    """Writes one batch; ``ranges_for(batch_id)`` gives the batch's frozen per-partition ranges.

    ``lease`` is the run's hold on the writer lock (``lock.single_writer``): each batch proves it
    still holds before its first write and keeps that proof until its ledger row commits.

    ``fault``, for tests only, is called with each of :data:`FAULT_POINTS` as the batch passes it.

    ``scope`` goes into the batches' Delta transaction identifiers (:func:`spark_jobs.batch_writes.batch_write_id`);
    ``topic_id``, the id of the topic the run checked it reads (``ledger.verify_topic``), into its ledger ranges.

    ``watch_losses``: the read skips offsets retention removed (a run or a backfill that
    acknowledged a loss): each batch records what it should have read but could not and no record
    table holds (``retention.lost_in_batch``).

    ``scheduled``: a scheduled run's batches, which read offsets past what the pipeline read before
    (:class:`spark_jobs.batch_plan.BatchPlanner` says what that saves).

    ``rewrites``: a repair's batches, which write ranges again from Kafka: every verified range they
    overlap is marked moved (``verified.mark_moved``), so reconcile takes what they wrote as its new
    baseline once it holds each offset once (the old baseline may predate a takeover whose mark a
    PostgreSQL restore lost).

    ``readmitting``: a readmit's batches (:mod:`spark_jobs.readmit`): the coordinates, arrival time and
    reason of the quarantined records the batch brings back. They are not held by ``quarantine`` for
    the plan, are written as any new record would be, and leave ``quarantine`` in the batch's last write.

    What a batch quarantines and brings back per reason is recorded with its attempt and counted in
    its ledger commit, also when an earlier attempt wrote the quarantine (or moved the records out of
    it) and crashed: the next attempt finds those records held and could not count them again.
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
        scope: str = "",
        topic_id: str | None = None,
        watch_losses: bool = False,
        rewrites: bool = False,
        readmitting: DataFrame | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.lease = lease
        self.pipeline = pipeline
        self.ranges_for = ranges_for
        self.rules = settings.session_rules
        self.fault = fault or (lambda point: None)
        self.scope = scope
        self.topic_id = topic_id
        self.rewrites = rewrites
        self.results: list[BatchResult] = []
        self.failure: Exception | None = None  # what the last write raised
        self._frozen = FrozenFrames(spark)  # the current batch's frames, released when it ends
        # A lake whose record tables this writer created holds nothing written before attempts
        # were recorded (ledger.write_floor).
        # The pipeline's contract, read from its file once a run: every batch checks records against it.
        self.contract = settings.run_contract()
        created = delta_tables.ensure_tables(spark, settings, self.contract)
        created_lake = set(RECORD_TABLES) <= set(created)
        if "events" not in created and self._contract_changed():
            delta_tables.add_typed_columns(spark, settings, self.contract)
        self.planner = BatchPlanner(
            spark, settings, self.contract, pipeline, self.rules, self._frozen, self._on_ledger, scheduled,
            created_lake, watch_losses, readmitting, rewrites,
        )  # fmt: skip

    def _path(self, name: str) -> str:
        return self.settings.table_path(name)

    def _contract_changed(self) -> bool:
        """Whether the contract declares typed columns and is not the one the last batch recorded:
        only then can ``events`` lack a column (the check loads the table's snapshot, so it runs only then)."""
        if not self.contract.columns:
            return False
        with db.transaction(self.settings.pipeline_dsn) as cur:
            stored = stored_rules.stored_contract(cur)
        return stored is None or stored[0] != self.contract.digest

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        """The foreachBatch function. What it raises is kept in ``failure``: Spark wraps what foreachBatch
        raises in a StreamingQueryException, and the run raises this one instead (a failure the user can
        fix in its own words, a bug with its own type and message first)."""
        try:
            self._write(batch_df, batch_id)
        except TidemarkError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            self.failure = exc
            lost_registry = registry_failure(exc)
            if lost_registry is not None:  # an Avro batch's tasks lost the registry while planning it
                self.failure = lost_registry
                raise lost_registry from None
            if KAFKA_DATA_LOSS not in str(exc):
                raise
            # Retention removed offsets of the batch while the run read it (a run that acknowledged
            # no loss reads with failOnDataLoss): nothing of the batch was written.
            self.failure = self._lost_while_reading(batch_id)
            raise self.failure from None

    def _lost_while_reading(self, batch_id: int) -> DataLossError:
        """The one-line error for a batch whose offsets (it read some, so it has ranges) retention removed."""
        ranges = self.ranges_for(batch_id)
        topic = ranges[0].topic
        held = watermarks(self.settings, topic)
        gone = ", ".join(
            f"partition {r.partition} offsets [{r.start}, {min(held[r.partition][0], r.end)})"
            for r in ranges
            if held[r.partition][0] > r.start
        )
        return DataLossError(
            f"topic {topic}: retention removed {gone or 'offsets'} while the run read them (batch {batch_id} of "
            f"{self.pipeline}); nothing of that batch was written, the batches before it are committed. If they "
            "are gone for good, run again with --allow-data-loss (allow_data_loss in the DAG's form): it records "
            "them as lost and continues"
        )

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
        clock = Stopwatch()
        batch = batch_writes.batch_key(self.pipeline, batch_id, ranges, self.scope)
        moved_before = moves.recorded(self.spark, self.settings, batch)
        plan = self.planner.plan(batch_df, batch_id, ranges, clock, moved_before)
        self.fault("planned")
        lost = []
        if self.planner.watch_losses and ranges:
            held = watermarks(self.settings, ranges[0].topic)
            lost = retention.lost_in_batch(
                self.pipeline, ranges, plan.read_spans, held, during_run=self.planner.scheduled
            )
        self._on_ledger(lambda cur: self._record_attempt(cur, plan))
        if not set(plan.moving) <= set(moved_before):  # a PostgreSQL restore must not lose them
            moves.record(self.spark, self.settings, batch, sorted(set(moved_before) | set(plan.moving)))
        # Fenced, and reconcile sees this batch in both sinks or in neither.
        with batch_commit(self.settings, self.lease) as cur:
            proving = threading.Lock()  # the Delta writes run in threads; a cursor is not thread-safe

            def fence() -> None:
                with proving:
                    self.lease.check(cur)

            self.write_delta(plan, fence)
            clock.lap("delta")
            self.fault("after_delta")
            ledger.lock_batches(cur)
            if ledger.batch_exists(cur, self.pipeline, batch_id):
                raise LedgerConflict(f"batch {batch_id} of {self.pipeline} was committed concurrently")
            stored_rules.check_session_rules(cur, self.rules)
            stored_rules.check_contract(cur, self.planner.contract, self.settings.pipeline)
            written = deleted = 0
            if plan.session_rows is not None and plan.anchor_rows is not None:
                anchors, sessions = postgres.pulled(plan.session_rows, plan.anchor_rows)
                written, deleted = postgres.upsert_sessions(cur, sessions, anchors)
            retention.record_losses(cur, lost)
            ledger.record_batch(cur, self.pipeline, batch_id, ranges, plan.counts, self.rules, self.topic_id,
                                self.planner.contract.digest)  # fmt: skip
            if plan.quarantine_reasons or plan.readmitted_reasons or plan.held:  # an earlier attempt's, or these
                quarantine.record(cur, self.pipeline, batch_id)
        clock.lap("postgres")
        if moved_before or plan.moving:
            moves.forget(self.spark, self.settings, batch)
        c = plan.counts
        return BatchResult(
            self.pipeline, batch_id, ranges, c.read, c.accepted, c.duplicates, c.quarantined, written, deleted,
            skipped=False, seconds=clock.laps, producer=c.producer, lost=lost,
            sessions_continued=plan.sessions.continued if plan.sessions else 0,
        )  # fmt: skip

    def _record_attempt(self, cur: Cursor, plan: BatchPlan) -> None:
        """Before the first Delta write: where the batch may write, and the verified ranges it moves
        rows of (committed first, so no reconcile sees a move without its mark). What the batch's commit
        would refuse (other session rules, an incompatible contract) is refused here, before any write."""
        stored_rules.refuse_other_rules(cur, self.rules)
        stored_rules.refuse_incompatible_contract(cur, self.planner.contract, self.settings.pipeline)
        ledger.record_attempt(cur, self.pipeline, plan.batch_id, plan.ranges)
        quarantine.record_attempt(
            cur, self.pipeline, plan.batch_id, plan.quarantine_reasons, plan.readmitted_reasons, plan.held_quarantined
        )
        # A repair's batch marks the ranges it rewrites beside those its takeovers move rows of
        # (a displaced row may lie outside the batch's ranges).
        verified.mark_moved(cur, plan.moved + (plan.ranges if self.rewrites else []), self.pipeline, plan.batch_id)

    def _on_ledger(self, work: Callable[[Cursor], T]) -> T:
        """``work`` in one PostgreSQL transaction of its own."""
        with db.transaction(self.settings.pipeline_dsn) as cur:
            return work(cur)

    def write_delta(self, plan: BatchPlan, fence: Callable[[], None] = lambda: None) -> None:
        """The plan's Delta writes (:mod:`spark_jobs.batch_writes`): one commit per table, each a write of its
        own :func:`~spark_jobs.batch_writes.batch_write_id`. ``fence`` runs before each write and fails when
        the run lost its lease."""
        writes = batch_writes.Writes(
            self.spark,
            self._path,
            lambda write: batch_writes.batch_write_id(plan.pipeline, plan.batch_id, plan.ranges, write, self.scope),
            lambda table, write: self._guard(table, fence, write),
            fence,
        )
        for stage in batch_writes.stages(plan, writes):
            run_concurrently(stage)

    def _guard(self, table: str, fence: Callable[[], None], write: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            fence()
            self.fault(f"write:{table}")
            write()

        return run
