"""The lake's single writer, fenced (spark_jobs.store.lock), against real PostgreSQL, Kafka, Spark and Delta.

The lock can be lost while its run goes on (an idle timeout, a failover or a pooler closes the
connection that holds it): here an operator's ``pg_terminate_backend`` does it mid-run, while a run
of another topic waits for the lock. The first run must not commit once the second took over, and
the lake must end as if the two had run one after the other.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace

import pytest

from spark_jobs import ingest
from spark_jobs.db import connect
from spark_jobs.errors import WriterBusy, WriterFenced
from spark_jobs.offsets import latest_ranges
from spark_jobs.planning import plan_backfill
from spark_jobs.store.lock import WRITER_KEY, single_writer
from spark_jobs.store.runs import BatchResult
from tests.integration.spark_jobs.checks import (
    assert_offset_coverage,
    assert_sessions_follow_events,
    assert_settings_sinks_agree,
    assert_sinks_agree,
    delta_rows,
    fail_over,
    query,
    snapshot,
    take_over_inside,
    until,
    waiting_for_the_lock,
)
from tidemark.producer import ProduceSpec, produce

# The backend that holds the writer lock (an advisory lock on hashtext(WRITER_KEY), a bigint key).
HOLDER = """SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
            AND objid = (hashtext(%s)::bigint & 4294967295)::oid"""


def terminate_lock_holder(settings) -> None:
    (pid,) = query(settings, HOLDER, WRITER_KEY)[0]
    query(settings, "SELECT pg_terminate_backend(%s)", pid)


def test_a_second_writer_is_refused_whatever_topic_it_writes(spark, run) -> None:
    settings, prefix = run
    produce(settings, ProduceSpec(count=20, entities=2, id_prefix=prefix), topic=settings.topic, partitions=1)
    plan = plan_backfill(settings, settings.topic, offsets={0: (0, 20)})
    with single_writer(settings, "ingest:another-topic"):
        with pytest.raises(WriterBusy, match=r"run \(ingest:another-topic on .*\) is writing the pipeline 'events'"):
            ingest.run_backfill(spark, settings, plan)
        with pytest.raises(WriterBusy):
            ingest.run_scheduled(spark, settings)
    assert not ingest.run_backfill(spark, settings, plan).skipped


def test_a_run_that_ends_releases_the_writer_lock_before_it_returns(run, pg) -> None:
    """A retry started the moment a failed run returns must get the lock (found by the model test:
    closing the connection alone frees the lock only once the server has handled the disconnect)."""
    settings, _ = run
    pg.autocommit = True
    with pg.cursor() as cur:
        for _ in range(100):
            with pytest.raises(RuntimeError), single_writer(settings, "a run that fails"):
                raise RuntimeError("the run failed")
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (WRITER_KEY,))  # at once, on an open connection
            assert cur.fetchone()[0], "the lock was still held after the run returned"
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", (WRITER_KEY,))


def test_a_writer_that_lost_its_lock_cannot_commit_and_the_waiting_run_takes_over(spark, run, pg) -> None:
    settings, prefix = run
    other = replace(settings, topic=f"{settings.topic}-b")
    spec = ProduceSpec(count=200, entities=4, duplicate_rate=0.1, malformed_rate=0.05, seed=11, id_prefix=prefix)
    first = produce(settings, spec, topic=settings.topic, partitions=2)
    # The same events in a second topic: every event_id of it is in both, so the two runs compete
    # for the same events rows and the same entities' sessions.
    second = produce(settings, spec, topic=other.topic, partitions=1)
    frozen = latest_ranges(settings, settings.topic)

    waiting: list[list[BatchResult] | BaseException] = []

    def second_run() -> None:
        try:
            waiting.append(ingest.run_scheduled(spark, other, wait=True))
        except BaseException as exc:  # reported by the assertions below
            waiting.append(exc)

    thread = threading.Thread(target=second_run)

    def lose_the_lock_then_let_the_other_run(point: str) -> None:
        if point != "planned" or thread.is_alive() or waiting:
            return
        thread.start()
        until(lambda: waiting_for_the_lock(settings), "the second run waits for the lock")
        terminate_lock_holder(settings)  # this run's lock: it plans on, unaware
        thread.join(timeout=600)
        assert waiting, "the second run did not finish while the first one had lost its lock"

    with pytest.raises(WriterFenced, match=rf"lost the writer lock .* ingest:{other.topic} on .* took it over"):
        ingest.run_scheduled(spark, settings, fault=lose_the_lock_then_let_the_other_run)
    assert not isinstance(waiting[0], BaseException), f"the waiting run failed: {waiting[0]!r}"
    assert [r.batch_id for r in waiting[0]] == [0] and not waiting[0][0].skipped
    assert query(settings, "SELECT count(*) FROM ledger_batches WHERE pipeline = %s", f"ingest:{settings.topic}") == [
        (0,)
    ], "the fenced run committed its batch"

    # Run again, the first run resumes its frozen batch; the result is that of two runs in a row.
    results = ingest.run_scheduled(spark, settings)
    assert results[0].batch_id == 0 and results[0].ranges == frozen and not results[0].skipped
    assert_offset_coverage(spark, settings, first.committed + second.committed)
    events = delta_rows(spark, settings, "events", "event_id")
    assert len(events) == len({r[0] for r in events}), "an event_id is accepted once across both topics"
    assert_sessions_follow_events(spark, settings)
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))


def test_a_writer_whose_lock_connection_was_closed_stops_before_its_next_batch(spark, run) -> None:
    """Nobody took over, but the lock is gone (an idle timeout, a pooler): the batch is not committed."""
    settings, prefix = run
    produce(settings, ProduceSpec(count=50, entities=3, seed=3, id_prefix=prefix), topic=settings.topic, partitions=1)

    def lose_the_lock(point: str) -> None:
        if point == "planned":
            terminate_lock_holder(settings)

    with pytest.raises(WriterFenced, match="its PostgreSQL connection was closed"):
        ingest.run_scheduled(spark, settings, fault=lose_the_lock)
    assert query(settings, "SELECT count(*) FROM ledger_batches WHERE pipeline = %s", f"ingest:{settings.topic}") == [
        (0,)
    ]
    results = ingest.run_scheduled(spark, settings)
    assert [(r.batch_id, r.read, r.skipped) for r in results] == [(0, 50, False)]


def test_the_lock_survives_idle_timeouts_and_its_heartbeat_notices_a_lost_connection(run) -> None:
    settings, _ = run
    # A server or role that closes idle sessions after 1 s: the lock's connection turns that off.
    idle = replace(settings, postgres_dsn=settings.postgres_dsn + " options='-c idle_session_timeout=1000'")
    with single_writer(replace(idle, writer_heartbeat_seconds=0.2), "a long run") as lease:
        time.sleep(2.5)
        assert not lease.lost.is_set()
        assert query(settings, HOLDER, WRITER_KEY) == [(lease.backend_pid,)]
        terminate_lock_holder(settings)
        until(lease.lost.is_set, "the heartbeat notices the lock's connection is gone", timeout=10)


def test_a_writer_that_lost_its_lease_inside_its_delta_writes_adds_nothing_the_next_writer_added(spark, run) -> None:
    """A PostgreSQL failover while a writer is inside its Delta writes: both of its backends die, the
    waiting run takes over and commits the batch, then the old driver wakes up and writes on. Its
    writes must add no row the new writer added (Delta's transaction identifiers make each write of a
    batch happen once), whatever it passed before it slept."""
    settings, prefix = run
    spec = ProduceSpec(count=60, entities=4, duplicate_rate=0.1, malformed_rate=0.05, seed=21, id_prefix=prefix)
    produced = produce(settings, spec, topic=settings.topic, partitions=1)
    plan = plan_backfill(settings, settings.topic, offsets={0: (0, produced.committed)})
    asleep, wake = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    def sleep_inside_the_events_write(point: str) -> None:
        if point == "write:events" and not asleep.is_set():
            asleep.set()
            wake.wait(600)

    def backfill(name: str, **kwargs) -> threading.Thread:
        def work() -> None:
            try:
                outcomes[name] = ingest.run_backfill(spark, settings, plan, **kwargs)
            except BaseException as exc:  # reported by the assertions below
                outcomes[name] = exc

        thread = threading.Thread(target=work)
        thread.start()
        return thread

    old = backfill("old", fault=sleep_inside_the_events_write)
    until(asleep.is_set, "the old writer sleeps inside its Delta writes")
    new = backfill("new", wait=True)
    until(lambda: waiting_for_the_lock(settings), "the new writer waits for the lock")
    fail_over(settings)  # every backend of the old writer dies (the lock's, the lake lock's, the batch's)
    new.join(timeout=600)
    assert not isinstance(outcomes["new"], BaseException), f"the new writer failed: {outcomes['new']!r}"
    wake.set()
    old.join(timeout=600)
    assert isinstance(outcomes["old"], BaseException), "the old writer committed after it lost its lease"

    assert_offset_coverage(spark, settings, produced.committed)
    assert query(
        settings, "SELECT records_read FROM ledger_batches WHERE pipeline = %s", f"backfill:{settings.topic}"
    ) == [(produced.committed,)]
    assert_sessions_follow_events(spark, settings)
    assert_settings_sinks_agree(spark, settings, prefix)


def test_a_fenced_writers_batch_that_a_backfill_took_over_is_in_the_tables_once_after_its_retry(spark, run, pg) -> None:
    """A failover inside a scheduled batch's ``events`` write; a backfill of the same offsets takes over and
    commits; the fenced writer's write in flight adds nothing (the backfill committed the same identifier
    first), and the scheduled run's retry of the batch neither."""
    settings, prefix = run
    report = produce(settings, ProduceSpec(count=20, entities=5, seed=5, id_prefix=prefix), topic=settings.topic,
                     partitions=1)  # fmt: skip
    plan = plan_backfill(settings, settings.topic, offsets={0: (0, 20)})
    backfill = lambda: ingest.run_backfill(spark, settings, plan, wait=True)  # noqa: E731
    fault, taken = take_over_inside(settings, "write:events", backfill)

    with pytest.raises(WriterFenced):
        ingest.run_scheduled(spark, settings, fault=fault)
    assert not isinstance(taken[0], BaseException), f"the backfill failed: {taken[0]!r}"
    assert (taken[0].read, taken[0].accepted) == (20, 20)

    [retry] = ingest.run_scheduled(spark, settings)
    assert (retry.read, retry.accepted + retry.duplicates + retry.quarantined) == (20, 20), retry
    assert_offset_coverage(spark, settings, report.committed)
    offsets = [r[0] for r in delta_rows(spark, settings, "events", "offset")]
    assert len(offsets) == len(set(offsets)), "an offset is in events twice"
    assert_sessions_follow_events(spark, settings)
    with contextlib.closing(connect(settings.pipeline_dsn)) as pg:  # the failover ended every connection before
        assert_sinks_agree(snapshot(spark, settings, pg, prefix))
