"""The runs of the ingest job: what each did and how long it took, and the lag each left behind.

Every ingest or backfill run writes one ``ingest_runs`` row when it ends (a run that found nothing
new too: it says when the pipeline last ran), and a scheduled run that finished the lag per
partition it left (``ingest_lag``), so the tidemark page draws lag from every run and not only from
reconcile's. A run that fails records its cause in the row (``failure``) beside the batches it
committed before it failed; those stay in the ledger.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from spark_jobs import db
from spark_jobs.errors import TidemarkError
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings
from spark_jobs.store import producers, retention
from spark_jobs.store.findings import Lag
from spark_jobs.store.lag import lag_behind, unprocessed
from spark_jobs.store.verified import NOT_CHECKED


@dataclass(frozen=True)
class BatchResult:
    """What one batch did: its ranges, where its records went, its sessions, and how long each step took."""

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
    lost: list[retention.Loss] = field(default_factory=list)  # offsets retention removed before the batch read them
    sessions_continued: int = 0  # entities whose last stored session the batch continued from its row


# Who started the run, as the Airflow operator sets it ("airflow <dag_id> <run_id>"); "cli" otherwise.
STARTED_BY = "TIDEMARK_STARTED_BY"


@dataclass(frozen=True)
class Run:
    run_id: str
    pipeline: str
    topic: str
    started_by: str
    started_at: datetime
    finished_at: datetime
    batches: int
    records_read: int
    accepted: int
    duplicates: int
    quarantined: int
    sessions_written: int
    sessions_removed: int
    failure: str | None = None  # why the run failed (one line); None: it finished

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def records_per_second(self) -> float:
        return self.records_read / self.seconds if self.seconds > 0 else 0.0


def summarize(pipeline: str, topic: str, started_at: datetime, results: list[BatchResult]) -> Run:
    """The run of ``results`` (the batches it committed; those already in the ledger do not count)."""
    done = [r for r in results if not r.skipped]
    return Run(
        run_id=str(uuid.uuid4()),
        pipeline=pipeline,
        topic=topic,
        started_by=os.environ.get(STARTED_BY) or "cli",
        started_at=started_at,
        finished_at=datetime.now(UTC),
        batches=len(done),
        records_read=sum(r.read for r in done),
        accepted=sum(r.accepted for r in done),
        duplicates=sum(r.duplicates for r in done),
        quarantined=sum(r.quarantined for r in done),
        sessions_written=sum(r.sessions_written for r in done),
        sessions_removed=sum(r.sessions_deleted for r in done),
    )


@dataclass
class RunInProgress:
    """A run being recorded: its writer's results list, once the run has a writer; or, for a run whose batches
    re-read records a table holds (a readmit), ``counted``: what it read, accepted and quarantined itself."""

    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    results: list[BatchResult] = field(default_factory=list)
    counted: tuple[int, int, int] | None = None  # records read, accepted, quarantined
    skip: bool = False  # nothing to record (a dry run)

    def summary(self, pipeline: str, topic: str) -> Run:
        run = summarize(pipeline, topic, self.started_at, self.results)
        if self.counted is None:
            return run
        read, accepted, quarantined = self.counted
        return replace(run, records_read=read, accepted=accepted, duplicates=0, quarantined=quarantined)


@contextmanager
def recorded(settings: Settings, pipeline: str, topic: str, measure_lag: bool) -> Iterator[RunInProgress]:
    """Record the run of the ``with`` block in ``ingest_runs`` when it ends: what its batches did, or,
    when it raises, its cause (the batches committed before it failed count). Recording a failure
    never hides it: when PostgreSQL cannot take the row either, the run's own error goes on."""
    run = RunInProgress()
    try:
        yield run
    except Exception as exc:
        record_failure(settings, pipeline, topic, run, exc)
        raise
    if not run.skip:
        record(settings, run.summary(pipeline, topic), measure_lag)


@contextmanager
def refusal_recorded(settings: Settings, pipeline: str, topic: str) -> Iterator[None]:
    """A run the ``with`` block refuses before Spark starts (a busy writer, records retention removed)
    is a failed run like one that fails later: recorded with its cause, and nothing when it goes on."""
    run = RunInProgress()
    try:
        yield
    except TidemarkError as exc:
        record_failure(settings, pipeline, topic, run, exc)
        raise


def record_failure(settings: Settings, pipeline: str, topic: str, run: RunInProgress, exc: Exception) -> None:
    """Record ``run`` as failed with ``exc``'s one line, or nothing when PostgreSQL cannot take it (the
    caller raises ``exc``: the run's own error is the one the user sees)."""
    failed = replace(run.summary(pipeline, topic), failure=failure_line(exc))
    with suppress(Exception):
        record(settings, failed, measure_lag=False)


def failure_line(exc: Exception) -> str:
    """One line for a failed run: tidemark's message for what a user can fix, else the error's type and
    first line (a bug: the traceback is in the job's log); no secret, at most 500 characters."""
    from spark_jobs.secrets import redact

    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if not isinstance(exc, TidemarkError):  # a bug: its type first
        first = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    line = redact(first)
    return line if len(line) <= 500 else line[:499] + "…"


def unread_records(settings: Settings, topic: str) -> int | None:
    """About how many records of ``topic`` a scheduled run will read: what Kafka holds beyond the
    furthest offset the ledger says a batch processed (all it holds before the first batch). None
    when PostgreSQL or Kafka does not answer: the run itself then says what is wrong."""
    import psycopg2

    from spark_jobs.offsets import watermarks

    try:
        with db.transaction(settings.pipeline_dsn) as cur:
            ends = processed_to(cur, topic)
        held = watermarks(settings, topic)
    except (TidemarkError, psycopg2.Error):
        return None
    return sum(max(0, high - done) for _, done, high in unprocessed(ends, held))


def processed_to(cur, topic: str) -> dict[int, int]:  # psycopg2 cursor
    """Per partition of ``topic``: the end of the furthest range a batch processed."""
    cur.execute(
        """SELECT kafka_partition, max(end_offset) FROM ledger_ranges
           WHERE topic = %s AND pipeline <> ALL(%s) GROUP BY 1""",
        (topic, list(NOT_CHECKED)),
    )
    return dict(cur.fetchall())


@dataclass(frozen=True)
class LagNow:
    """How far a pipeline's sinks are behind Kafka at ``measured_at``, per partition of its topic; ``problem``
    (then no ``lags``): why Kafka could not say."""

    measured_at: datetime
    lags: list[Lag] = field(default_factory=list)
    problem: str | None = None


def lag_now(settings: Settings, timeout_s: float = 2.0) -> LagNow:
    """The pipeline's lag now (the page and the metrics): Kafka's end offsets against the furthest offsets its
    batches processed, and the age of the oldest record not processed yet. It grows while ingest is stalled,
    where a run's sample would stay as it was. A Kafka that does not answer within ``timeout_s`` (per request)
    is a ``problem``, said as such; the database's errors are raised."""
    from confluent_kafka import KafkaException

    now = datetime.now(UTC)
    with db.transaction(settings.pipeline_dsn) as cur:
        ends = processed_to(cur, settings.topic)
    try:
        return LagNow(now, lag_behind(settings, {settings.topic: ends}, now, timeout_s))
    except (TidemarkError, KafkaException) as exc:
        return LagNow(now, problem=f"Kafka unreachable: {exc}")


def record(settings: Settings, run: Run, measure_lag: bool) -> list[Lag]:
    """Write ``run``, with the lag it left when ``measure_lag`` (a scheduled run); returns that lag."""
    with db.transaction(settings.pipeline_dsn) as cur:
        ends = processed_to(cur, run.topic)
    lags = lag_behind(settings, {run.topic: ends}, run.finished_at) if measure_lag and ends else []
    with db.transaction(settings.pipeline_dsn) as cur:
        cur.execute(
            """INSERT INTO ingest_runs (run_id, pipeline, topic, started_by, started_at, finished_at, batches,
                                        records_read, accepted, duplicates, quarantined, sessions_written,
                                        sessions_removed, failure)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            (
                run.run_id, run.pipeline, run.topic, run.started_by, run.started_at, run.finished_at, run.batches,
                run.records_read, run.accepted, run.duplicates, run.quarantined, run.sessions_written,
                run.sessions_removed, run.failure,
            ),
        )  # fmt: skip
        cur.executemany(
            """INSERT INTO ingest_lag (run_id, topic, kafka_partition, high_watermark, processed_to, behind_records,
                                       oldest_unprocessed, behind_seconds)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
            [
                (run.run_id, g.topic, g.partition, g.high_watermark, g.processed_to, g.behind_records,
                 g.oldest_unprocessed, g.behind_seconds)
                for g in lags
            ],
        )  # fmt: skip
    return lags


def recent(cur, limit: int) -> list[Run]:
    """The latest ``limit`` runs, newest first."""
    cur.execute(
        """SELECT run_id, pipeline, topic, started_by, started_at, finished_at, batches, records_read, accepted,
                  duplicates, quarantined, sessions_written, sessions_removed, failure
           FROM ingest_runs ORDER BY finished_at DESC LIMIT %s""",
        (limit,),
    )
    return [Run(*row) for row in cur.fetchall()]


def last_finished(cur) -> list[tuple]:
    """Per pipeline: (pipeline, topic, when its latest run that did not fail finished)."""
    cur.execute(
        "SELECT pipeline, topic, max(finished_at) FROM ingest_runs WHERE failure IS NULL GROUP BY 1, 2 ORDER BY 1, 2"
    )
    return cur.fetchall()
