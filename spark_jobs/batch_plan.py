"""A batch's plan: everything it will write, computed from the batch and the tables before any write.

:class:`BatchPlanner` makes the plan that :class:`spark_jobs.writer.BatchWriter` then writes: the
records parsed and validated, records a record table holds already left where they are, the rest
ranked by ``event_id`` against the stored events (``dedupe``), and the touched entities' sessions
recomputed from their anchors on and compared with the stored ones (``session_changes``). A plan's
frames are frozen, so the writes cannot change what it says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_jobs import dedupe, moves, offsets, session_changes
from spark_jobs.contract import COORDINATES, TABLE_SCHEMAS, SessionRules
from spark_jobs.held import held_records
from spark_jobs.offsets import PartitionRange
from spark_jobs.session_changes import SessionChanges
from spark_jobs.sessionize import sessionize
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.spark import FrozenFrames, broadcastable, run_both
from spark_jobs.store import ledger, producers, quarantine
from spark_jobs.store.quarantine import ReasonCount
from spark_jobs.validation import parse_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.pipelines import Contract

log = logging.getLogger(__name__)
Cursor = Any  # a psycopg2 cursor


class Stopwatch:
    """Seconds per step of a batch, for its profile."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


@dataclass(frozen=True)
class _Read:
    """The batch as read: parsed and validated (frozen), and what the tables hold of its ranges."""

    parsed: DataFrame  # every record no table holds yet, with its quarantine reason or parsed fields
    summary: dict  # over every record read: totals, the earliest valid arrival, the producer checks
    held_in: dict[str, int]  # per record table, how many of the batch's records it holds already
    read_spans: list[PartitionRange]
    fresh_totals: dict | None  # with records held: the fresh records' totals (fresh, invalid)

    @property
    def invalid(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.parsed.where("quarantine_reason IS NOT NULL").select(
            *COORDINATES, "arrival_time", "key", "value", F.col("quarantine_reason").alias("reason")
        )


@dataclass(frozen=True)
class _Ranked:
    ranked: DataFrame  # the candidates ranked by event_id (frozen)
    counts: dedupe.DedupeCounts
    replayed: DataFrame | None  # the stored events of the batch's own records (a replay)
    totals: dict  # the fresh records' totals: fresh, invalid


@dataclass(frozen=True)
class BatchPlan:
    """One batch's writes, computed before any of them (:meth:`BatchPlanner.plan`); the frames are frozen."""

    pipeline: str
    batch_id: int
    ranges: list[PartitionRange]
    counts: ledger.BatchCounts  # where the batch's records are after it
    held: int  # records of its ranges a record table held already (an earlier attempt's, or a replay's)
    held_quarantined: int  # of those, how many ``quarantine`` held
    quarantine: DataFrame | None  # records no table held that are invalid
    quarantine_reasons: list[ReasonCount]  # the quarantine's count and samples per reason
    duplicates: DataFrame | None  # later copies from the batch, appended after events
    displaced_copies: DataFrame | None  # the stored rows the takeovers displace, inserted before events
    duplicates_span: str  # bounds the displaced copies' MERGE to the losers' offsets
    first_arrivals: DataFrame | None  # new event_ids, appended to events
    takeovers: DataFrame | None  # earlier copies of stored event_ids, inserted into events
    displaced: DataFrame | None  # coordinates of the stored events rows the takeovers move to duplicates
    takeovers_since_us: int | None  # earliest arrival of a takeover, bounds the takeover MERGE
    moved: list[PartitionRange]  # per partition, the offsets of the displaced rows (first to last)
    moving: list[moves.Moved]  # the displaced rows, written down before the first write (``moves``)
    unmoved: list[moves.Moved]  # rows an earlier attempt began to move that stay events rows
    read_spans: list[PartitionRange]  # runs of consecutive offsets read or held (only when watching for losses)
    readmitted: DataFrame | None  # a readmit's records (coordinates), deleted from quarantine last
    readmitted_since_us: int | None  # their earliest arrival, bounds that delete
    readmitted_reasons: list[tuple[str, int]]  # per reason they were quarantined with: how many
    sessions: SessionChanges | None  # None: the pipeline cuts no sessions
    session_rows: DataFrame | None  # PostgreSQL: the touched entities' sessions from their anchors on (frozen)
    anchor_rows: DataFrame | None  # (entity_id, anchor) of the touched entities (frozen)


class BatchPlanner:
    """Plans the batches of one writer.

    ``scheduled``: the batches read offsets past what the pipeline read before (a scheduled run),
    so PostgreSQL may tell that nothing in them is held yet (:meth:`held`). A backfill or a
    repair, which re-reads on purpose (and repairs what the ledger may have lost), always searches Delta.
    ``created_lake``: the writer created the record tables, so they hold nothing written before
    attempts were recorded (``ledger.write_floor``). ``on_ledger(work)`` runs ``work(cursor)`` in a
    PostgreSQL transaction of its own. ``rewrites``: a repair's batches, which write again records
    a committed batch counted already (:meth:`uncounted`).
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        contract: Contract,
        pipeline: str,
        rules: SessionRules | None,
        frozen: FrozenFrames,
        on_ledger: Callable[[Callable[[Cursor], Any]], Any],
        scheduled: bool,
        created_lake: bool,
        watch_losses: bool = False,
        readmitting: DataFrame | None = None,
        rewrites: bool = False,
    ) -> None:
        self.spark, self.settings, self.pipeline, self.rules = spark, settings, pipeline, rules
        self.readmitting = readmitting  # (coordinates, arrival_time, reason) of a readmit's records
        self.contract = contract  # the pipeline's, from its file; read once a run
        self.frozen = frozen
        self._on_ledger = on_ledger
        self.scheduled, self.created_lake, self.watch_losses = scheduled, created_lake, watch_losses
        self.rewrites = rewrites

    def _read(self, name: str) -> DataFrame:
        return delta.table(self.spark, self.settings.table_path(name)).toDF()

    def plan(
        self,
        batch_df: DataFrame,
        batch_id: int,
        ranges: list[PartitionRange],
        clock: Stopwatch | None = None,
        moved_before: list[moves.Moved] | None = None,
    ) -> BatchPlan:
        """Everything the batch writes, from the batch and the tables as they are now; nothing is written.

        A record of the batch that a record table holds already (a replay, or an earlier attempt of
        this batch) stays where it is: only records no table holds are validated, quarantined or
        ranked as new. Those ``events`` holds take part in the ranking as the stored copies they are.
        ``moved_before``: the rows earlier attempts of the batch set out to move (``moves``); those
        this plan does not move again and both tables hold are its ``unmoved``.

        The Spark jobs, in order: the records parsed and validated (materialised, the only read of
        Kafka); the records the tables hold already (materialised and counted, and only when
        PostgreSQL says a batch may have written there: :meth:`held`; the others' totals are then
        observed as the ranking reads them); the batch's
        totals and producer checks (one aggregate); the ranking against stored events within the
        dedupe horizon (materialised) and its counts; the touched entities with their anchors
        (materialised) and their summary; the recomputed sessions compared with the stored ones
        (materialised) and their counts; beside the sessions, in a thread of its own, the
        quarantined records' count and samples per reason (one job, when the batch quarantines any).
        """
        clock = clock or Stopwatch()
        read = self._read_batch(batch_df, ranges)
        clock.lap("parse")
        ranked = self._rank(read, ranges)
        clock.lap("dedupe")
        changes, quarantine_reasons = self._sessions_and_reasons(read, ranked, ranges)
        checks = self._producer_checks(read.summary, changes, batch_id)
        plan = self._assemble(batch_id, ranges, read, ranked, changes, quarantine_reasons, checks, moved_before)
        clock.lap("sessions")
        return plan

    def _read_batch(self, batch_df: DataFrame, ranges: list[PartitionRange]) -> _Read:
        """The batch parsed and validated (frozen: the only read of Kafka), its summary, and the records
        of its ranges the tables hold already."""
        from pyspark.sql import functions as F

        # Read and validated once. Only quarantined records keep their raw key and value.
        quarantined_flag = F.col("quarantine_reason").isNotNull()
        parsed = parse_records(batch_df, self.contract, self.settings.schema_registry())
        parsed = parsed.select(
            *[F.when(quarantined_flag, F.col(c)).alias(c) if c in ("key", "value") else c for c in parsed.columns]
        )
        # Over every record read, those a table holds already too, counted as they are frozen: the
        # producer checks and the earliest valid arrival (the dedupe horizon is measured from it);
        # and, when nothing is held, the fresh records' totals.
        parsed, summary = self.frozen.freeze_counted(
            producers.with_previous_arrival(parsed),
            F.count(F.lit(1)).alias("fresh"),
            F.count("quarantine_reason").alias("invalid"),
            F.unix_micros(F.min(F.when(~quarantined_flag, F.col("arrival_time")))).alias("earliest_us"),
            *producers.aggregates(),
            keep=parsed.columns,
        )
        held, held_in = self.held(ranges)
        # What the batch has of its ranges: read from Kafka, or held (an earlier attempt wrote it
        # before retention removed it from Kafka).
        had = parsed if held is None else parsed.select(*COORDINATES).unionByName(held.select(*COORDINATES)).distinct()
        read_spans = offsets.consecutive_offsets(had) if self.watch_losses else []
        fresh_totals = None  # with records held: the others' totals, counted as they are frozen
        # With records held, those no table holds (the fresh ones) are frozen apart and counted as they are
        # frozen. Observed only as the ranking read them, their totals came back empty when the ranking's plan
        # passed none of their rows (model seed 60025: a retried batch whose records were all invalid and
        # held), and the batch failed for ever. A batch that read nothing (retention removed its records
        # while the run read them, model seed 8805) has no fresh record: its totals are the read's, both 0.
        if held is not None and held_in and summary["fresh"]:
            parsed, fresh_totals = self.frozen.freeze_counted(
                parsed.join(held.select(*COORDINATES), list(COORDINATES), "left_anti"),
                F.count(F.lit(1)).alias("fresh"),
                F.count("quarantine_reason").alias("invalid"),
            )
        return _Read(parsed, summary, held_in, read_spans, fresh_totals)

    def _rank(self, read: _Read, ranges: list[PartitionRange]) -> _Ranked:
        """The batch's valid records ranked by ``event_id`` against the stored events (and the stored
        copies of its own records ``events`` holds), frozen before the writes change the tables it read."""
        events = self._read("events")
        replayed = delta.within(events, ranges) if read.held_in.get("events") else None
        candidates = read.parsed.where("quarantine_reason IS NULL").select(*self.contract.event_columns)
        if replayed is not None:
            candidates = candidates.unionByName(replayed)
        horizon = self.settings.dedupe_horizon_us
        earliest = read.summary["earliest_us"]
        since = None if horizon is None or earliest is None else earliest - horizon
        # The batch has at most as many candidates as records: few enough, its ids are broadcast.
        broadcast_ids = broadcastable(self.spark, read.summary["fresh"], dedupe.ID_ROW_BYTES)
        ranked, observed = self.frozen.freeze_counted(
            dedupe.rank(candidates, events, since, broadcast_ids), *dedupe.aggregates()
        )
        totals = read.summary if read.fresh_totals is None else read.fresh_totals
        return _Ranked(ranked, dedupe.DedupeCounts(**observed), replayed, totals)

    def _sessions_and_reasons(
        self, read: _Read, ranked: _Ranked, ranges: list[PartitionRange]
    ) -> tuple[SessionChanges | None, list[ReasonCount]]:
        """The touched entities' session changes, and the quarantine's count and samples per reason."""
        # A takeover an earlier attempt of this batch committed moved the displaced row to
        # duplicates; its entity still needs its sessions in PostgreSQL.
        replayed = ranked.replayed
        displaced = None if replayed is None else dedupe.copies_in(self._read("duplicates"), replayed)

        def sessions() -> SessionChanges | None:
            rules = self.rules
            return None if rules is None else self._session_changes(rules, ranked.ranked, displaced, ranked.counts)

        # Neither the sessions' changes nor the quarantine's summary needs the other: when the batch
        # quarantines records, the summary runs beside the sessions in a thread of its own (each is a
        # chain of short Spark queries whose planning keeps a core of the driver busy).
        if ranked.totals["invalid"]:
            uncounted = self.uncounted(read.invalid, ranges)
            return run_both(sessions, lambda: quarantine.summarize(uncounted))
        return sessions(), []

    def _producer_checks(
        self, summary: dict, changes: SessionChanges | None, batch_id: int
    ) -> producers.ProducerChecks:
        checks = producers.ProducerChecks(
            changes.entities_in_many_partitions if changes else 0,
            summary["not_log_append_time"],
            summary["time_went_back"],
        )
        if checks.broken:
            log.warning(
                "%s batch %s breaks the producer requirements: %s (README, Producer requirements)",
                self.pipeline, batch_id, checks.describe(),
            )  # fmt: skip
        return checks

    def _readmitted(self) -> tuple[int | None, list[tuple[str, int]]]:
        """A readmit's records: their earliest arrival, and how many per reason they were quarantined with."""
        from pyspark.sql import functions as F

        if self.readmitting is None:
            return None, []
        by_reason = self.readmitting.groupBy("reason").agg(
            F.count(F.lit(1)).alias("n"), F.unix_micros(F.min("arrival_time")).alias("since")
        )
        rows = by_reason.collect()
        return min((r["since"] for r in rows), default=None), sorted((r["reason"], r["n"]) for r in rows)

    def _assemble(
        self,
        batch_id: int,
        ranges: list[PartitionRange],
        read: _Read,
        ranked: _Ranked,
        changes: SessionChanges | None,
        quarantine_reasons: list[ReasonCount],
        checks: producers.ProducerChecks,
        moved_before: list[moves.Moved] | None,
    ) -> BatchPlan:
        counts, totals, held_in, rows = ranked.counts, ranked.totals, read.held_in, ranked.ranked
        displaced_rows = dedupe.displaced(rows) if counts.takeovers else None
        moving = sorted((r[0], r[1], r[2], r[3]) for r in counts.displaced)
        unmoved = moves.unfinished(self.spark, self.settings, moved_before or [], set(moving))
        readmitted_since_us, readmitted_reasons = self._readmitted()
        return BatchPlan(
            pipeline=self.pipeline,
            batch_id=batch_id,
            ranges=ranges,
            held=sum(held_in.values()),
            held_quarantined=held_in.get("quarantine", 0),
            counts=ledger.BatchCounts(
                read=totals["fresh"] + sum(held_in.values()),
                accepted=counts.accepted,
                duplicates=counts.duplicates + held_in.get("duplicates", 0),
                quarantined=totals["invalid"] + held_in.get("quarantine", 0),
                producer=checks,
            ),
            quarantine=delta.in_files(read.invalid, totals["invalid"]) if totals["invalid"] else None,
            quarantine_reasons=quarantine_reasons,
            duplicates=delta.in_files(dedupe.later_copies(rows), counts.later_copies) if counts.later_copies else None,
            displaced_copies=dedupe.displaced_copies(rows) if counts.takeovers else None,
            duplicates_span=f"t.offset >= {counts.losers_from} AND t.offset <= {counts.losers_to}",
            first_arrivals=delta.in_files(dedupe.first_arrivals(rows), counts.first_arrivals)
            if counts.first_arrivals
            else None,
            takeovers=dedupe.takeovers(rows) if counts.takeovers else None,
            displaced=displaced_rows,
            moved=moves.moved_spans(moving),
            moving=moving,
            unmoved=unmoved,
            read_spans=read.read_spans,
            takeovers_since_us=counts.takeovers_since_us,
            readmitted=None if self.readmitting is None else self.readmitting.select(*COORDINATES),
            readmitted_since_us=readmitted_since_us,
            readmitted_reasons=readmitted_reasons,
            sessions=changes,
            session_rows=session_changes.surviving(changes.compared) if changes else None,
            anchor_rows=changes.anchors if changes else None,
        )

    def held(self, ranges: list[PartitionRange]) -> tuple[DataFrame | None, dict[str, int]]:
        """The records of ``ranges`` a record table holds already (:func:`spark_jobs.held.held_records`)."""
        return held_records(
            self.spark, self.settings, self.frozen, ranges, self._on_ledger,
            scheduled=self.scheduled, created_lake=self.created_lake, readmitting=self.readmitting,
        )  # fmt: skip

    def uncounted(self, invalid: DataFrame, ranges: list[PartitionRange]) -> DataFrame:
        """The batch's ``invalid`` records that its quarantine reasons count: all of them, but for a
        repair's batch only those no committed batch counted already. A repair clears a changed
        range and quarantines its invalid records again; the batch that first quarantined them still
        counts them (``quarantine.totals``), so they must not count twice."""
        if not self.rewrites:
            return invalid
        counted = self._on_ledger(lambda cur: ledger.counted_ranges(cur, ranges))
        return invalid.where(f"NOT ({delta.range_filter(counted)})") if counted else invalid

    def _continuing(self) -> bool:
        """Whether the batch may continue stored sessions from their rows: where they are those of the stored
        events (not a repair's batch, which rewrites damaged ranges; no attempt unfinished: docs/design.md)."""
        if not self.settings.continue_sessions or self.rewrites:
            return False
        return not self._on_ledger(lambda cur: ledger.any_unfinished_attempt(cur, self.settings.topic))

    def _session_changes(
        self, rules: SessionRules, ranked: DataFrame, displaced: DataFrame | None, counts: dedupe.DedupeCounts
    ) -> SessionChanges:
        from pyspark.sql import functions as F

        sessions = self._read("sessions")
        since = counts.touched_since_us if displaced is None else None
        entities, summary = self.frozen.freeze_counted(
            session_changes.entities(ranked, sessions, rules, displaced, since, self._continuing()),
            F.unix_micros(F.min("anchor")).alias("earliest"),  # UTC micros, never a local time
            F.unix_micros(F.min(F.when(F.col("reread"), F.col("anchor")))).alias("earliest_reread"),
            F.count_if(F.col("carried").isNotNull()).alias("continued"),
            F.count_if(F.col("partitions") > 1).alias("many_partitions"),
        )
        anchors = session_changes.touched(entities)
        earliest = summary["earliest"]
        if earliest is None:  # no valid record in the batch changes an entity's events
            none = self.spark.createDataFrame([], f"{TABLE_SCHEMAS['sessions']}, op string")
            return SessionChanges(anchors, none, 0, 0, summary["many_partitions"])
        # Only the entities that cannot continue their last stored session read their stored events again.
        events = session_changes.events_since_anchors(
            self._read("events"), ranked, session_changes.touched(entities.where("reread")),
            summary["earliest_reread"], has_takeovers=counts.takeovers > 0,
        )  # fmt: skip
        carried = session_changes.carried(entities) if summary["continued"] else None
        compared, ops = self.frozen.freeze_counted(
            session_changes.compare(sessionize(events, rules, self.frozen, carried), sessions, anchors, earliest),
            *session_changes.op_counts(with_ids=True),
        )
        changed, inserted, written, many = ops["changed"], ops["inserted"], ops["written"], summary["many_partitions"]
        return SessionChanges(anchors, compared, changed, inserted, many, earliest, written, summary["continued"])
