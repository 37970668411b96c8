"""tidemark's ingest job: scheduled trigger-once runs and bounded backfills, one writer for both.

spark-submit entry point::

    spark-submit spark_jobs/ingest.py scheduled [--topic T] [--max-offsets-per-trigger N] [--allow-data-loss]
    spark-submit spark_jobs/ingest.py backfill (--from-time ISO --to-time ISO | --offsets P:START-END,...)
                                               [--dry-run] [--allow-data-loss]

The ``tidemark ingest`` and ``tidemark backfill`` commands call the same functions.

Scheduled runs are Structured Streaming with ``Trigger.AvailableNow``: Spark's offset write-ahead
log in the checkpoint fixes each batch's range before it is processed, so a retried batch reads
the same offsets whatever arrived since. A backfill resolves its range to offsets up front (a
recorded plan) and processes it as one bounded batch. Both hold the lake's fenced writer lock in
PostgreSQL (``spark_jobs.store.lock``), so only one run writes the sinks at a time. Before a scheduled
run's stream starts, the offsets it needs are checked against what the broker still holds
(``spark_jobs.store.retention``).
"""

from __future__ import annotations

import argparse
import logging
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs import db, jvm
from spark_jobs.checkpoint import OffsetLog
from spark_jobs.contract import SessionRules
from spark_jobs.errors import ConfigError, TidemarkError, run_job
from spark_jobs.kafka_source import read_range, stream_reader
from spark_jobs.offsets import PartitionRange, check_reachable, count_committed, watermarks
from spark_jobs.planning import BackfillPlan, describe_plan, parse_offsets, parse_partitions, plan_backfill
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.store import ledger, retention, runs
from spark_jobs.store.lock import WriterLease, check_writer_free, single_writer
from spark_jobs.writer import BatchResult, BatchWriter, Fault, recompute_sessions

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

SCHEDULED = "ingest"
BACKFILL = "backfill"


def pipeline_name(kind: str, topic: str) -> str:
    """Ledger pipeline of a topic's scheduled runs (``ingest:<topic>``) or backfills (``backfill:<topic>``)."""
    return f"{kind}:{topic}"


def _check_session_rules(spark: SparkSession, settings: Settings, lease: WriterLease, rebuild: bool) -> None:
    """Before any batch: the run's session rules must be the stored ones, or it rebuilds every session."""
    with db.transaction(settings.pipeline_dsn) as cur:
        recorded = ledger.recorded_session_rules(cur)
        if recorded is None or recorded.rules == settings.session_rules:
            return
        if not rebuild or settings.session_rules is None:  # sessions cut before are not thrown away
            raise ledger.rules_changed(recorded.rules, settings.session_rules)
    recompute_sessions(spark, settings, lease)


def streaming_ranges(
    settings: Settings, log: OffsetLog, topic: str, batch_id: int, start: retention.StartCheck
) -> list[PartitionRange]:
    """The frozen range of streaming batch ``batch_id``: previous batch's ends to this batch's ends.

    A partition no earlier batch read starts where the run's ``start`` check said; a range the
    operator acknowledged as lost to retention is left out (the ledger has it as a loss instead).
    """
    ends = log.ends(batch_id, topic)
    if ends is None:
        raise RuntimeError(f"no offset log entry for batch {batch_id} in {log.location}")
    starts = log.ends(batch_id - 1, topic) if batch_id > 0 else None
    if starts is None:
        with db.transaction(settings.pipeline_dsn) as cur:
            previous = ledger.batch_ranges(cur, pipeline_name(SCHEDULED, topic), batch_id - 1) if batch_id > 0 else []
        starts = {r.partition: r.end for r in previous if r.topic == topic}
    starts = start.first_offsets | starts
    low = {p: lo for p, (lo, _) in watermarks(settings, topic).items()} if set(ends) - set(starts) else {}
    ranges = []
    for p, end in sorted(ends.items()):
        first = start.past_loss(p, starts.get(p, low.get(p, 0)))
        ranges.append(PartitionRange(topic, p, min(first, end), end))
    return ranges


def check_retention(settings: Settings, log: OffsetLog, topic: str, allow_data_loss: bool) -> retention.StartCheck:
    """Before a scheduled run's stream starts: fail if the broker removed offsets it still needs.

    With ``allow_data_loss`` the loss is recorded in the ledger instead and the run goes on; the
    part of it inside the batches the checkpoint froze and the ledger lacks (the frozen,
    uncommitted batch; after a PostgreSQL restore, committed ones too) is left to those batches:
    they may hold some of those records (a crashed attempt wrote them), and each records as lost
    only what neither Kafka nor a record table holds. The first run of each partition records where
    it starts.
    """
    pipeline = pipeline_name(SCHEDULED, topic)
    with db.transaction(settings.pipeline_dsn) as cur:
        check = start_check(settings, cur, topic)
        if check.losses and not allow_data_loss:
            raise retention.loss_error(check.losses)
        earlier = [loss for loss in retention.recorded_losses(cur, pipeline) if not loss.during_run]
        check = replace(check, acknowledged=earlier)
        first, last = ledger.next_batch_id(cur, pipeline), log.last_frozen()
        if check.losses and last is not None and last >= first:
            check = check.left_to_unrecorded(log.starts(first, topic) or {}, log.ends(last, topic) or {})
        retention.record(cur, pipeline, topic, check, acknowledged=allow_data_loss)
    return check


def start_check(settings: Settings, cur, topic: str) -> retention.StartCheck:  # psycopg2 cursor
    """Where a scheduled run of ``topic`` starts in each partition, against what Kafka still holds."""
    pipeline = pipeline_name(SCHEDULED, topic)
    read_to, recorded = retention.positions(cur, pipeline, topic)
    return retention.check_start(pipeline, topic, watermarks(settings, topic), read_to, recorded)


def run_scheduled(
    spark: SparkSession,
    settings: Settings,
    max_offsets_per_trigger: int | None = None,
    allow_data_loss: bool = False,
    wait: bool = False,
    rebuild_sessions: bool = False,
    split_frozen_batch: bool = False,
    fault: Fault | None = None,
    unread: int | None = None,
) -> list[BatchResult]:
    """Process everything that arrived since the last run (AvailableNow), batch by batch.

    Each batch reads at most ``max_offsets_per_trigger`` records (default: the settings'
    ``TIDEMARK_MAX_OFFSETS_PER_TRIGGER``). A batch Spark froze before the cap was set, or with a
    larger one, keeps its range on every retry; ``split_frozen_batch`` lets Spark plan it again
    within the cap (see :func:`unfreeze_batch`).

    ``allow_data_loss`` acknowledges offsets Kafka's retention removed before the pipeline read
    them (otherwise such a run fails before any work; see ``spark_jobs.store.retention``).
    ``rebuild_sessions`` first recomputes every stored session when the settings' session rules
    differ from the stored ones (otherwise such a run fails). ``fault`` is for tests (see writer).
    ``unread``: the caller's :func:`runs.unread_records` of the topic, looked up here when not given.
    """
    from pyspark.errors import StreamingQueryException

    topic = settings.topic  # the pipeline's own (Settings.for_run)
    if max_offsets_per_trigger is not None and max_offsets_per_trigger < 1:
        raise ConfigError(f"max_offsets_per_trigger must be positive, got {max_offsets_per_trigger}")
    cap = max_offsets_per_trigger or settings.max_offsets_per_trigger or None
    if split_frozen_batch and cap is None:
        raise ConfigError("--split-frozen-batch needs a cap: set --max-offsets-per-trigger (records per batch)")
    checkpoint = settings.checkpoint(SCHEDULED)
    _check_checkpoint_moved(spark, settings, checkpoint)
    log = OffsetLog(spark, checkpoint)
    pipeline = pipeline_name(SCHEDULED, topic)
    recorded = runs.recorded(settings, pipeline, topic, measure_lag=True)
    # While the checks below wait on PostgreSQL and Kafka, the state of the tables a batch reads loads
    # on the other core (states_loaded_ahead); not for a run that finds nothing to read.
    unread = runs.unread_records(settings, topic) if unread is None else unread
    ahead = nullcontext() if unread == 0 else delta.states_loaded_ahead(spark, settings)
    with recorded as run, single_writer(settings, pipeline, wait) as lease, ahead:
        topic_id = ledger.verify_topic(settings, topic)  # an unknown or re-created topic fails here, before any work
        start = check_retention(settings, log, topic, allow_data_loss)
        ledger.verify_contract(settings)
        _check_session_rules(spark, settings, lease, rebuild_sessions)
        if split_frozen_batch:
            unfreeze_batch(settings, log, pipeline)
        writer = BatchWriter(
            spark,
            settings,
            lease,
            pipeline,
            lambda b: streaming_ranges(settings, log, topic, b, start),
            fault,
            scheduled=True,
            topic_id=topic_id,
            # An acknowledged loss: the stream skips removed offsets, so each batch looks for what it skipped.
            watch_losses=start.skips_removed,
        )
        run.results = writer.results
        record_committed_batches(spark, settings, log, topic, writer)
        query = (
            stream_reader(
                spark,
                settings,
                topic,
                cap and even_limit(*backlog(settings, log, topic, start), cap),
                # An acknowledged loss: Spark skips the removed offsets instead of failing on them.
                fail_on_data_loss=not start.skips_removed,
                starting_offsets=start.starting_offsets if start.first_run else None,
            )
            .load()
            .writeStream.foreachBatch(writer.write)
            .trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .queryName(f"tidemark-{SCHEDULED}-{topic}")
            .start()
        )
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            if isinstance(writer.failure, TidemarkError):  # one the user can fix: its own message, not Spark's wrapper
                raise writer.failure from None
            if writer.failure is not None:  # a bug in the batch: its own error first, Spark's wrapper as the cause
                raise writer.failure from exc
            raise
    return writer.results


def _check_checkpoint_moved(spark: SparkSession, settings: Settings, checkpoint: str) -> None:
    """Refuse a run of a pipeline whose checkpoint is still where it was before it belonged to the pipeline
    (``<root>/ingest-<topic>``, named by the topic alone): a new checkpoint there would plan batches the
    ledger has with other ranges."""
    legacy = f"{settings.checkpoint_root.rstrip('/')}/{SCHEDULED}-{settings.topic}"
    if legacy != checkpoint and not jvm.exists(spark, checkpoint) and jvm.exists(spark, f"{legacy}/offsets"):
        raise ConfigError(
            f"the scheduled checkpoint of pipeline {settings.pipeline!r} is at {legacy}, named by its topic alone; "
            f"move that folder to {checkpoint} (its pipeline's own), then run again"
        )


def backlog(settings: Settings, log: OffsetLog, topic: str, start: retention.StartCheck) -> tuple[int, int]:
    """(offsets a scheduled run's stream will plan into new batches, the topic's partitions): from
    where its last frozen batch ends (the run's start, before the first) to the ends Kafka holds now.
    Offsets retention removed since count too: Spark plans its batches over them (an acknowledged
    loss), and the batches that cover them read nothing."""
    last = log.last_frozen()
    planned_to = (log.ends(last, topic) if last is not None else None) or start.starting_offsets
    held = watermarks(settings, topic)
    return sum(max(0, high - planned_to.get(p, low)) for p, (low, high) in held.items()), len(held)


def even_limit(backlog: int, partitions: int, cap: int) -> int:
    """Spark's ``maxOffsetsPerTrigger`` that splits a ``backlog`` of records in ``partitions``
    partitions into batches of about equal size, none above ``cap``.

    Spark shares the limit among the partitions by what each has left and rounds each share down,
    so a batch reads up to ``partitions - 1`` records fewer than the limit: asked for the cap, a
    backlog of twice the cap took two full batches and a third of a few records, which pays a
    batch's whole fixed cost for them. The limit asks for an equal share of the backlog plus what the
    rounding can lose, with as few batches as keep that within the cap.
    """
    if backlog <= cap or cap < partitions:
        return cap
    batches = -(-backlog // cap)
    while -(-backlog // batches) + partitions - 1 > cap:
        batches += 1
    return -(-backlog // batches) + partitions - 1


def record_committed_batches(
    spark: SparkSession, settings: Settings, log: OffsetLog, topic: str, writer: BatchWriter
) -> None:
    """Write again the batches the checkpoint committed and the ledger lacks, and record the attempt
    of the batch it froze and did not commit (call holding the writer lock, before the stream starts).

    PostgreSQL restored from a backup taken before a batch committed loses its ledger rows, its
    attempt and its sessions, while Spark's checkpoint has committed it and no run replays it: the
    offsets would show only as lag, for ever. Each such batch is read from Kafka over the ranges the
    checkpoint froze and written as the same batch, after its attempt is recorded again (so it looks
    for what it holds in Delta, like any retry); its Delta writes carry the same transaction
    identifiers, so nothing is added twice. A batch whose starting offsets the checkpoint no longer
    holds is left to reconcile, which reports it as a gap once a later batch commits.
    """
    with db.transaction(settings.pipeline_dsn) as cur:
        recorded = ledger.next_batch_id(cur, writer.pipeline)
    for batch_id in (b for b in log.committed() if b >= recorded):
        if batch_id > recorded and log.ends(batch_id - 1, topic) is None:
            continue
        ranges = writer.ranges_for(batch_id)
        logger.warning(
            "%s: the checkpoint committed batch %d (%s) and the ledger lacks it (PostgreSQL restored from a "
            "backup?): writing it again from Kafka",
            writer.pipeline, batch_id, ", ".join(map(str, ranges)),
        )  # fmt: skip
        with db.transaction(settings.pipeline_dsn) as cur:
            ledger.record_attempt(cur, writer.pipeline, batch_id, ranges)
        # A run that acknowledged a loss reads what Kafka still holds; the batch finds the rest
        # in the record tables or records it as lost.
        read = still_held(settings, ranges) if writer.planner.watch_losses else ranges
        writer.write(read_range(spark, settings, read), batch_id)
    frozen = log.frozen_uncommitted()
    if frozen is not None and frozen >= recorded:
        # The stream retries it first. An earlier attempt may have written part of it, and a restore
        # may have lost that attempt's row, while this run may plan it over other ranges (a loss it
        # acknowledges now) and so with other Delta write ids: record the attempt again, so the
        # retry looks in Delta for what it holds.
        with db.transaction(settings.pipeline_dsn) as cur:
            ledger.record_attempt(cur, writer.pipeline, frozen, writer.ranges_for(frozen))


def still_held(settings: Settings, ranges: list[PartitionRange]) -> list[PartitionRange]:
    """``ranges`` without the offsets below their partition's low watermark: what Kafka still holds."""
    lows = {p: low for p, (low, _) in watermarks(settings, ranges[0].topic).items()} if ranges else {}
    return [replace(r, start=min(max(r.start, lows.get(r.partition, 0)), r.end)) for r in ranges]


def unfreeze_batch(settings: Settings, log: OffsetLog, pipeline: str) -> int:
    """Let Spark plan the frozen, uncommitted batch again (call holding the writer lock).

    The way out of a batch too big to finish: Spark froze its range before it ran, so every retry
    replays the same range and fails the same way. Its ``offsets`` entry is removed and the run
    plans it again within the cap. Safe because the ledger has no row for it: records an earlier
    attempt wrote stay where they are and are found as held by whichever batch reads them next.
    Returns the batch id.
    """
    batch_id = log.frozen_uncommitted()
    if batch_id is None:
        raise ConfigError(f"{log.location} has no frozen, uncommitted batch: run without --split-frozen-batch")
    with db.transaction(settings.pipeline_dsn) as cur:
        if ledger.batch_exists(cur, pipeline, batch_id):
            raise ConfigError(
                f"batch {batch_id} of {pipeline} is in the ledger already (it committed; Spark did not record "
                "that yet): run without --split-frozen-batch and it completes at once"
            )
    log.unfreeze(batch_id)
    return batch_id


@dataclass(frozen=True)
class DryRun:
    ranges: list[PartitionRange]
    records: dict[int, int]  # committed records per partition


def run_backfill(
    spark: SparkSession,
    settings: Settings,
    plan: BackfillPlan,
    wait: bool = False,
    rebuild_sessions: bool = False,
    fault: Fault | None = None,
) -> BatchResult:
    """Process ``plan`` as one bounded batch; a plan processed before is a no-op."""
    pipeline = pipeline_name(BACKFILL, plan.topic)
    recorded = runs.recorded(settings, pipeline, plan.topic, measure_lag=False)
    with recorded as run, single_writer(settings, pipeline, wait) as lease:
        topic_id = ledger.verify_topic(settings, plan.topic)
        ledger.verify_contract(settings)
        _check_session_rules(spark, settings, lease, rebuild_sessions)
        with db.transaction(settings.pipeline_dsn) as cur:
            batch_id = recorded_plan(cur, plan)
            if batch_id is None:
                batch_id = ledger.next_batch_id(cur, pipeline)
        # Offsets asked for that retention removed, skipped with --allow-data-loss: the batch covers
        # what was asked and reads what Kafka holds; of the skipped offsets it records as lost, and
        # reports, exactly those no record table holds (an earlier attempt that crashed may have
        # written some before retention removed them). A loss during the read fails it
        # (failOnDataLoss is on).
        writer = BatchWriter(
            spark, settings, lease, pipeline, lambda _: plan.asked, fault, topic_id=topic_id,
            watch_losses=bool(plan.skipped),
        )  # fmt: skip
        run.results = writer.results
        writer.write(read_range(spark, settings, plan.ranges), batch_id)
    return writer.results[-1]


def recorded_plan(cur, plan: BackfillPlan) -> int | None:
    """The batch id of an earlier backfill that asked for exactly these ranges, if any."""
    return ledger.batch_with_ranges(cur, pipeline_name(BACKFILL, plan.topic), plan.asked)


def _add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", help="topic (default: TIDEMARK_TOPIC or 'events')")
    p.add_argument(
        "--gap-minutes", type=float, help="session inactivity gap (default: TIDEMARK_SESSION_GAP_MINUTES or 30)"
    )
    p.add_argument(
        "--max-session-hours", type=float, help="maximum session length (default: TIDEMARK_SESSION_MAX_HOURS or 24)"
    )
    p.add_argument(
        "--rebuild-sessions",
        action="store_true",
        help="if the session rules changed, recompute every stored session under the new ones first",
    )
    p.add_argument("--wait", action="store_true", help="wait for a running writer instead of failing")


def add_scheduled_arguments(p: argparse.ArgumentParser) -> None:
    _add_common_arguments(p)
    p.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help="records per batch at most (default: TIDEMARK_MAX_OFFSETS_PER_TRIGGER or 500000)",
    )
    p.add_argument(
        "--split-frozen-batch",
        action="store_true",
        help="a batch too big to finish: plan the frozen, uncommitted batch again within the cap",
    )
    p.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="acknowledge offsets Kafka's retention removed before they were read: record them as lost, go on",
    )
    p.set_defaults(mode="scheduled")


def add_backfill_arguments(p: argparse.ArgumentParser) -> None:
    _add_common_arguments(p)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--offsets", help="PARTITION:START-END[,...], END exclusive")
    group.add_argument("--from-time", type=datetime.fromisoformat, help="arrival time range start (ISO-8601)")
    p.add_argument("--to-time", type=datetime.fromisoformat, help="arrival time range end (exclusive)")
    p.add_argument("--partitions", help="with a time range: only these partitions, e.g. 0,2 (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved ranges and counts only")
    p.add_argument("--allow-data-loss", action="store_true", help="skip offsets that are gone")
    p.set_defaults(mode="backfill")


def settings_for(settings: Settings, args: argparse.Namespace) -> Settings:
    """``settings`` for the run's pipeline (:meth:`Settings.for_run`: ``--topic`` must be its topic) with the
    run's flags applied (session rules: a flag turns sessions on for a pipeline without them, the other rule's
    default beside it)."""
    settings = settings.for_run(topic=args.topic)
    if args.gap_minutes is None and args.max_session_hours is None:
        return settings
    rules = settings.session_rules or SessionRules()
    gap = timedelta(minutes=args.gap_minutes) if args.gap_minutes is not None else rules.gap
    longest = timedelta(hours=args.max_session_hours) if args.max_session_hours is not None else rules.max_length
    return replace(settings, session_rules=SessionRules(gap, longest))


def check_services(settings: Settings, topic: str) -> None:
    """PostgreSQL answers, Kafka answers and has ``topic``: checked before Spark starts, one line if not."""
    db.check_reachable(settings.pipeline_dsn)
    check_reachable(settings)
    watermarks(settings, topic)  # TopicError for an unknown topic


def run_from_arguments(
    spark_factory: Callable[[int | None], SparkSession], settings: Settings, args: argparse.Namespace
) -> list[BatchResult] | BatchResult | DryRun:
    """Validate the arguments and check the services (before Spark starts), then run the job.

    ``spark_factory`` gets the SparkSession for a run of about that many records (None: unknown).
    """
    settings = settings_for(settings, args)
    topic = settings.topic
    if args.mode == "scheduled":
        check_services(settings, topic)
        ledger.verify_contract(settings)
        with runs.refusal_recorded(settings, pipeline_name(SCHEDULED, topic), topic):
            if not args.wait:
                check_writer_free(settings)
            if not args.allow_data_loss:  # the run's own check, once it holds the writer lock, says the same
                with db.transaction(settings.pipeline_dsn) as cur:
                    losses = start_check(settings, cur, topic).losses
                if losses:
                    raise retention.loss_error(losses)
        unread = runs.unread_records(settings, topic)
        return run_scheduled(
            spark_factory(unread),
            settings,
            args.max_offsets_per_trigger,
            allow_data_loss=args.allow_data_loss,
            wait=args.wait,
            rebuild_sessions=args.rebuild_sessions,
            split_frozen_batch=args.split_frozen_batch,
            unread=unread,
        )
    offsets = parse_offsets(args.offsets) if args.offsets else None
    partitions = parse_partitions(args.partitions) if args.partitions else None
    check_services(settings, topic)
    ledger.verify_contract(settings)
    plan = plan_backfill(settings, topic, offsets, args.from_time, args.to_time, args.allow_data_loss, partitions)
    if args.dry_run:  # Kafka's metadata and a count of committed records answer it: no Spark
        return DryRun(plan.ranges, {r.partition: count_committed(settings, r) for r in plan.ranges})
    if not args.wait:
        with runs.refusal_recorded(settings, pipeline_name(BACKFILL, topic), topic):
            check_writer_free(settings)
    records = sum(r.end - r.start for r in plan.ranges)
    return run_backfill(spark_factory(records), settings, plan, wait=args.wait, rebuild_sessions=args.rebuild_sessions)


def describe(result: list[BatchResult] | BatchResult | DryRun) -> str:
    """Human-readable summary of a run."""
    if isinstance(result, DryRun):
        return "dry run: nothing written. Resolved ranges:\n" + describe_plan(result.ranges, result.records)
    results = result if isinstance(result, list) else [result]
    if not results:
        return "no new records"
    lines = []
    for r in results:
        spans = ", ".join(f"p{x.partition} [{x.start}, {x.end})" for x in r.ranges)
        if r.skipped:
            lines.append(f"{r.pipeline} batch {r.batch_id}: already in the ledger, nothing written ({spans})")
        else:
            lines.append(
                f"{r.pipeline} batch {r.batch_id}: read {r.read:,} = accepted {r.accepted:,} + duplicates "
                f"{r.duplicates:,} + quarantined {r.quarantined:,}; sessions written {r.sessions_written:,}, "
                f"removed {r.sessions_deleted:,} ({spans})"
            )
            if r.producer.broken:
                lines.append(
                    f"  WARNING: the producers broke tidemark's requirements: {r.producer.describe()}. Published "
                    "session IDs of those entities may be replaced; see README, Producer requirements."
                )
        lines += [f"  {loss.describe()}" for loss in r.lost]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session

    parser = argparse.ArgumentParser(description="tidemark ingest job")
    sub = parser.add_subparsers(required=True, metavar="MODE")
    add_scheduled_arguments(sub.add_parser("scheduled", help="process what arrived since the last run"))
    add_backfill_arguments(sub.add_parser("backfill", help="re-process an offset or arrival-time range"))
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    session = lambda records: build_session(settings, f"tidemark-{args.mode}", records)  # noqa: E731
    print(describe(run_from_arguments(session, settings, args)))


if __name__ == "__main__":
    run_job(main)
