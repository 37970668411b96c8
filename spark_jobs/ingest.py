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
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs import batch_size, db, streaming
from spark_jobs.checkpoint import OffsetLog
from spark_jobs.committed import count_each
from spark_jobs.contract import SessionRules
from spark_jobs.errors import ConfigError, run_job
from spark_jobs.kafka_source import read_range
from spark_jobs.offsets import PartitionRange, check_reachable, watermarks
from spark_jobs.planning import BackfillPlan, describe_plan, parse_offsets, parse_partitions, plan_backfill
from spark_jobs.rebuild import recompute_sessions
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.store import ledger, retention, runs, stored_rules
from spark_jobs.store.lock import WriterLease, check_writer_free, single_writer
from spark_jobs.store.runs import BatchResult
from spark_jobs.writer import BatchWriter, Fault

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession


def _check_session_rules(spark: SparkSession, settings: Settings, lease: WriterLease, rebuild: bool) -> None:
    """Before any batch: the run's session rules must be the stored ones, or it rebuilds every session."""
    with db.transaction(settings.pipeline_dsn) as cur:
        recorded = stored_rules.recorded_session_rules(cur)
        if recorded is None or recorded.rules == settings.session_rules:
            return
        if not rebuild or settings.session_rules is None:  # sessions cut before are not thrown away
            raise stored_rules.rules_changed(recorded.rules, settings.session_rules)
    recompute_sessions(spark, settings, lease)


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
    within the cap (see :func:`spark_jobs.streaming.unfreeze_batch`).

    ``allow_data_loss`` acknowledges offsets Kafka's retention removed before the pipeline read
    them (otherwise such a run fails before any work; see ``spark_jobs.store.retention``).
    ``rebuild_sessions`` first recomputes every stored session when the settings' session rules
    differ from the stored ones (otherwise such a run fails). ``fault`` is for tests (see writer).
    ``unread``: the caller's :func:`runs.unread_records` of the topic, looked up here when not given.
    """
    topic = settings.topic  # the pipeline's own (Settings.for_run)
    cap = _cap(settings, max_offsets_per_trigger, split_frozen_batch)
    checkpoint = settings.checkpoint(ledger.SCHEDULED)
    streaming.check_checkpoint_moved(spark, settings, checkpoint)
    log = OffsetLog(spark, checkpoint)
    pipeline = ledger.pipeline_name(ledger.SCHEDULED, topic)
    recorded = runs.recorded(settings, pipeline, topic, measure_lag=True)
    # While the checks below wait on PostgreSQL and Kafka, the state of the tables a batch reads loads
    # on the other core (states_loaded_ahead); not for a run that finds nothing to read.
    unread = runs.unread_records(settings, topic) if unread is None else unread
    ahead = nullcontext() if unread == 0 else delta.states_loaded_ahead(spark, settings)
    with recorded as run, single_writer(settings, pipeline, wait) as lease, ahead:
        topic_id = ledger.verify_topic(settings, topic)  # an unknown or re-created topic fails here, before any work
        begin = streaming.check_retention(settings, log, topic, allow_data_loss)
        stored_rules.verify_contract(settings)
        _check_session_rules(spark, settings, lease, rebuild_sessions)
        if split_frozen_batch:
            streaming.unfreeze_batch(settings, log, pipeline)
        writer = BatchWriter(
            spark,
            settings,
            lease,
            pipeline,
            lambda b: streaming.streaming_ranges(settings, log, topic, b, begin),
            fault,
            scheduled=True,
            topic_id=topic_id,
            # An acknowledged loss: the stream skips removed offsets, so each batch looks for what it skipped.
            watch_losses=begin.skips_removed,
        )
        run.results = writer.results
        streaming.record_committed_batches(spark, settings, log, topic, writer)
        sized = batch_size.resolved(spark, settings, cap, unread)
        streaming.await_stream(streaming.start(spark, settings, log, begin, writer, sized, checkpoint), writer)
    return writer.results


def _cap(settings: Settings, max_offsets_per_trigger: int | None, split_frozen_batch: bool) -> int | str | None:
    """The run's records per batch at most (None: no cap): the caller's, else the settings' (``auto`` is sized
    when the run starts reading: :func:`spark_jobs.batch_size.resolved`)."""
    if max_offsets_per_trigger is not None and max_offsets_per_trigger < 1:
        raise ConfigError(f"max_offsets_per_trigger must be positive, got {max_offsets_per_trigger}")
    cap = max_offsets_per_trigger or settings.max_offsets_per_trigger or None
    if split_frozen_batch and cap is None:
        raise ConfigError("--split-frozen-batch needs a cap: set --max-offsets-per-trigger (records per batch)")
    return cap


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
    pipeline = ledger.pipeline_name(ledger.BACKFILL, plan.topic)
    recorded = runs.recorded(settings, pipeline, plan.topic, measure_lag=False)
    with recorded as run, single_writer(settings, pipeline, wait) as lease:
        topic_id = ledger.verify_topic(settings, plan.topic)
        stored_rules.verify_contract(settings)
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
    return ledger.batch_with_ranges(cur, ledger.pipeline_name(ledger.BACKFILL, plan.topic), plan.asked)


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
        help="records per batch at most (default: TIDEMARK_MAX_OFFSETS_PER_TRIGGER, auto: as the driver holds)",
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
        stored_rules.verify_contract(settings)
        with runs.refusal_recorded(settings, ledger.pipeline_name(ledger.SCHEDULED, topic), topic):
            if not args.wait:
                check_writer_free(settings)
            if not args.allow_data_loss:  # the run's own check, once it holds the writer lock, says the same
                with db.transaction(settings.pipeline_dsn) as cur:
                    losses = streaming.start_check(settings, cur, topic).losses
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
    stored_rules.verify_contract(settings)
    plan = plan_backfill(settings, topic, offsets, args.from_time, args.to_time, args.allow_data_loss, partitions)
    if args.dry_run:  # Kafka's metadata and a count of committed records answer it: no Spark
        counts = count_each(settings, plan.ranges)
        return DryRun(plan.ranges, {r.partition: n for r, n in zip(plan.ranges, counts, strict=True)})
    if not args.wait:
        with runs.refusal_recorded(settings, ledger.pipeline_name(ledger.BACKFILL, topic), topic):
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
