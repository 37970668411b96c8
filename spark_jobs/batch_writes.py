"""A batch plan's Delta writes: one commit per table, in an order that any subset of commits survives.

A plan places only records no table held when it was made, so its writes append them (a blind
append needs no table state). Each write carries the batch's transaction identifier for its table
(:func:`batch_write_id`): a table that committed it once skips it after that, so the same plan
written again, or the same batch planned by a writer that took over while this one still wrote,
adds nothing twice (docs/design.md, "Fenced, idempotent Delta writes"). The writer's fence runs
before each write and fails when the run lost its lease.

A takeover removes a row from ``events`` that only ``duplicates`` will hold, and the next attempt
of the batch can only find it there: so with takeovers ``events`` is written after ``quarantine``
and the displaced rows' copies committed (an insert-only MERGE: an earlier attempt may have moved
them already). The batch's own later copies go to ``duplicates`` after ``events``: a duplicate is
never held while no table holds the copy it is a duplicate of (that copy may be gone from Kafka
before the next attempt). ``sessions`` is written with them, once the record tables hold every
record its sessions are made of: the next attempt finds those records held and recomputes their
entities' sessions even when retention removed them from Kafka in between. Readmitted records
leave ``quarantine`` last, once another record table holds each of them. Any subset of these
commits, followed by another attempt (planned afresh), ends as one clean run (docs/design.md,
"Partial commits and retries"). An attempt that can no longer finish an earlier attempt's move
(``plan.unmoved``, see :mod:`spark_jobs.moves`) deletes its leftover ``duplicates`` copies in the
``duplicates`` step, before that table's write.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from spark_jobs import moves
from spark_jobs.offsets import PartitionRange
from spark_jobs.sinks import delta

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.batch_plan import BatchPlan

Write = Callable[[], None]
T = TypeVar("T")


@dataclass(frozen=True)
class Writes:
    """Where a batch's writes go and what runs before each: ``path(table)``, ``write_id(write)`` (its
    transaction identifier), ``guard(table, write)`` (the write behind the fence and the fault hook),
    and the ``fence`` itself (run again before a second write inside one guarded step)."""

    spark: SparkSession
    path: Callable[[str], str]
    write_id: Callable[[str], delta.WriteId]
    guard: Callable[[str, Write], Write]
    fence: Write


def stages(plan: BatchPlan, w: Writes) -> list[list[Write]]:
    """The plan's writes in stages: the writes of one stage may commit in any order (they run side by
    side); a stage starts once the one before it committed."""
    first, events = _before_events(plan, w), _events(plan, w)
    ordered = [first + events] if plan.takeovers is None else [first, events]
    return [*ordered, _after_events(plan, w), _leaving_quarantine(plan, w)]


def _before_events(plan: BatchPlan, w: Writes) -> list[Write]:
    """``quarantine``, and the displaced rows' copies into ``duplicates`` (after what an earlier attempt's
    unfinished move left there is deleted)."""
    first: list[Write] = []
    if plan.quarantine is not None:
        invalid = plan.quarantine
        write_quarantine = lambda: delta.append(invalid, w.path("quarantine"), w.write_id("quarantine"))  # noqa: E731
        first.append(w.guard("quarantine", write_quarantine))
    moving: list[Write] = []  # run in order, one step
    if plan.unmoved:
        unmoved, since = moves.rows_of(w.spark, plan.unmoved), min(row[3] for row in plan.unmoved)
        moving.append(lambda: delta.delete_rows(w.spark, w.path("duplicates"), unmoved, since))
    if plan.displaced_copies is not None:  # an earlier attempt may have moved some of them already
        displaced = plan.displaced_copies
        moving.append(
            lambda: delta.insert_new(
                w.spark, w.path("duplicates"), displaced, plan.duplicates_span, w.write_id("duplicates:displaced")
            )
        )
    if moving:

        def move_duplicates() -> None:
            for write in moving:
                write()

        first.append(w.guard("duplicates", move_duplicates))
    return first


def _events(plan: BatchPlan, w: Writes) -> list[Write]:
    """``events``: the new event_ids appended, then the takeovers' MERGE."""
    if plan.first_arrivals is None and plan.takeovers is None:
        return []

    def write_events() -> None:
        if plan.first_arrivals is not None:
            delta.append(plan.first_arrivals, w.path("events"), w.write_id("events"))
        if plan.takeovers is not None:
            w.fence()
            delta.take_over(
                w.spark, w.path("events"), plan.takeovers, _planned(plan.displaced, "takeovers' displaced rows"),
                _planned(plan.takeovers_since_us, "takeovers' earliest arrival"), w.write_id("events:takeovers"),
            )  # fmt: skip

    return [w.guard("events", write_events)]


def _after_events(plan: BatchPlan, w: Writes) -> list[Write]:
    """Once ``events`` holds the copies they are later copies of: ``duplicates``; and ``sessions``."""
    after: list[Write] = []
    if plan.duplicates is not None:
        later = plan.duplicates
        write_later = lambda: delta.append(later, w.path("duplicates"), w.write_id("duplicates"))  # noqa: E731
        after.append(w.guard("duplicates", write_later))
    c = plan.sessions
    if c is not None and (c.changed or c.inserted):

        def write_sessions() -> None:
            delta.apply_session_changes(
                w.spark, w.path("sessions"), c.compared, c.changed, c.inserted, c.earliest_us, w.write_id("sessions"),
                written_ids=c.written_ids,
            )  # fmt: skip

        after.append(w.guard("sessions", write_sessions))
    return after


def _leaving_quarantine(plan: BatchPlan, w: Writes) -> list[Write]:
    """Last, once another record table holds each of them: readmitted records leave ``quarantine``."""
    if plan.readmitted is None:
        return []
    readmitted, since = plan.readmitted, plan.readmitted_since_us

    def leave() -> None:
        since_us = _planned(since, "readmitted records' earliest arrival")
        delta.delete_rows(w.spark, w.path("quarantine"), readmitted, since_us)

    return [w.guard("quarantine:readmitted", leave)]


def _planned(value: T | None, what: str) -> T:
    """What a plan holds whenever a write of it reads it (with takeovers, their displaced rows and earliest
    arrival; with readmitted records, their earliest arrival): a plan without it is a bug, said before the write."""
    if value is None:
        raise ValueError(f"the batch's plan has no {what}")
    return value


def batch_key(pipeline: str, batch_id: int, ranges: list[PartitionRange], scope: str = "") -> str:
    """What names one batch's notes (``moves``) and the writes of a readmit's or a repair's batch: the pipeline,
    the batch, its ranges (a batch id planned again over other ranges writes afresh) and the ``scope`` (the
    records a readmit brings back; a repair's id: every repair rewrites what it cleared)."""
    return f"tidemark/{pipeline}/{batch_id}/{_ranges_digest(ranges)}{'/' + scope if scope else ''}"


def _ranges_digest(ranges: list[PartitionRange]) -> str:
    spans = ",".join(f"{r.topic}/{r.partition}/{r.start}-{r.end}" for r in sorted(ranges))
    return hashlib.sha256(spans.encode()).hexdigest()[:16]


# The kinds of batch (the ledger pipeline's prefix: spark_jobs.store.ledger's SCHEDULED and BACKFILL) that land a
# range's records from Kafka: a scheduled batch and a backfill of the same ranges write the same records.
LANDING = ("ingest", "backfill")


def batch_write_id(
    pipeline: str, batch_id: int, ranges: list[PartitionRange], write: str, scope: str = ""
) -> delta.WriteId:
    """The Delta transaction identifier of one write (``write``: a table; ``events`` has two) of a batch of the
    ledger ``pipeline`` (``ingest:<topic>``, ...).

    A batch that lands records follows from what it writes, not from the run that writes it: a scheduled
    batch and a backfill over the same ranges share one identifier per table whatever their batch ids, so
    whichever commits a table's write first, the other's is skipped, even a write already in flight when
    its writer lost the lease (a failover, and the backfill took over). A readmit's batch is named by
    :func:`batch_key` with the records it brings back as ``scope`` (:func:`spark_jobs.readmit.records_scope`),
    so a readmit that finishes another's batch shares its names too; a repair's, with the repair's id
    (each repair rewrites what it cleared)."""
    if pipeline.split(":", 1)[0] in LANDING and not scope:
        return delta.WriteId(f"tidemark/land/{_ranges_digest(ranges)}/{write}", 0)
    return delta.WriteId(f"{batch_key(pipeline, batch_id, ranges, scope)}/{write}", batch_id)
