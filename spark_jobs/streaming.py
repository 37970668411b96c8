"""A scheduled run's stream, around Spark's: each batch's frozen ranges, the checks before it starts,
the batch size, and the batches Spark committed that the ledger lacks.

Spark's offset write-ahead log in the checkpoint (:class:`~spark_jobs.checkpoint.OffsetLog`) fixes
each batch's range before it is processed; :func:`streaming_ranges` reads it back as the batch's
ranges. Before the stream starts, the offsets the run needs are checked against what the broker
still holds (:func:`check_retention`), batches the checkpoint committed and the ledger lacks are
written again (:func:`record_committed_batches`), and the per-batch limit is chosen so that the
backlog splits into batches of about equal size (:func:`even_limit`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from spark_jobs import db, jvm
from spark_jobs.checkpoint import OffsetLog
from spark_jobs.errors import ConfigError, TidemarkError
from spark_jobs.kafka_source import read_range, stream_reader
from spark_jobs.offsets import PartitionRange, watermarks
from spark_jobs.settings import Settings
from spark_jobs.store import ledger, retention
from spark_jobs.writer import BatchWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

logger = logging.getLogger(__name__)


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
            pipeline = ledger.pipeline_name(ledger.SCHEDULED, topic)
            previous = ledger.batch_ranges(cur, pipeline, batch_id - 1) if batch_id > 0 else []
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
    pipeline = ledger.pipeline_name(ledger.SCHEDULED, topic)
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
    pipeline = ledger.pipeline_name(ledger.SCHEDULED, topic)
    read_to, recorded = retention.positions(cur, pipeline, topic)
    return retention.check_start(pipeline, topic, watermarks(settings, topic), read_to, recorded)


def check_checkpoint_moved(spark: SparkSession, settings: Settings, checkpoint: str) -> None:
    """Refuse a run of a pipeline whose checkpoint is still where it was before it belonged to the pipeline
    (``<root>/ingest-<topic>``, named by the topic alone): a new checkpoint there would plan batches the
    ledger has with other ranges."""
    legacy = f"{settings.checkpoint_root.rstrip('/')}/{ledger.SCHEDULED}-{settings.topic}"
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


def start(
    spark: SparkSession,
    settings: Settings,
    log: OffsetLog,
    begin: retention.StartCheck,
    writer: BatchWriter,
    cap: int | None,
    checkpoint: str,
) -> StreamingQuery:
    """Start the run's stream: ``AvailableNow`` over what Kafka holds, each batch written by ``writer``."""
    topic = settings.topic
    return (
        stream_reader(
            spark,
            settings,
            topic,
            cap and even_limit(*backlog(settings, log, topic, begin), cap),
            # An acknowledged loss: Spark skips the removed offsets instead of failing on them.
            fail_on_data_loss=not begin.skips_removed,
            starting_offsets=begin.starting_offsets if begin.first_run else None,
        )
        .load()
        .writeStream.foreachBatch(writer.write)
        .trigger(availableNow=True)
        .option("checkpointLocation", checkpoint)
        .queryName(f"tidemark-{ledger.SCHEDULED}-{topic}")
        .start()
    )


def await_stream(query: StreamingQuery, writer: BatchWriter) -> None:
    """Wait for the stream to process everything; a batch's own error, not Spark's wrapper of it."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination()
    except StreamingQueryException as exc:
        if isinstance(writer.failure, TidemarkError):  # one the user can fix: its own message, not Spark's wrapper
            raise writer.failure from None
        if writer.failure is not None:  # a bug in the batch: its own error first, Spark's wrapper as the cause
            raise writer.failure from exc
        raise
