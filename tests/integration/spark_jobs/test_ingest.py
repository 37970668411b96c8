"""The ingest job against real Kafka, Spark, Delta and PostgreSQL: the invariants of docs/design.md.

Each test gets its own topic, lake, checkpoints and entity prefix; PostgreSQL is shared, so
PostgreSQL rows are always filtered by the test's entity prefix.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spark_jobs import db, dedupe, ingest
from spark_jobs.errors import DataLossError, TopicError
from spark_jobs.kafka_source import read_range
from spark_jobs.offsets import PartitionRange, ensure_topic, latest_ranges, watermarks
from spark_jobs.planning import plan_backfill
from spark_jobs.sessionize import SESSION_ID_POSTGRES_SQL, SESSION_ID_SPARK_SQL, session_id
from spark_jobs.sinks.delta import files_rewritten_since, table_versions
from spark_jobs.spark import broadcastable
from spark_jobs.store import ledger, runs
from spark_jobs.store.lock import single_writer
from tests.integration.spark_jobs.checks import (
    assert_offset_coverage,
    assert_sessions_follow_events,
    assert_settings_sinks_agree,
    assert_sinks_agree,
    crash_at,
    delta_rows,
    query,
    send,
    snapshot,
)
from tests.ports import free_port
from tidemark.producer import ProduceSpec, produce


def test_scheduled_run_then_backfills_of_the_same_range_leave_identical_sinks(spark, run, pg) -> None:
    settings, prefix = run
    # Each Kafka partition's range is read by several Spark tasks (TIDEMARK_READ_TASK_RECORDS), as
    # a large batch's is: the split must not change what a batch reads or writes.
    settings = replace(settings, read_task_records=50)
    spec = ProduceSpec(
        count=900, entities=15, duplicate_rate=0.08, late_rate=0.1, malformed_rate=0.08, seed=21, id_prefix=prefix
    )
    report = produce(settings, spec, topic=settings.topic, partitions=3)

    ranges = latest_ranges(settings, settings.topic)
    assert read_range(spark, settings, ranges).rdd.getNumPartitions() >= report.committed // 50
    results = ingest.run_scheduled(spark, settings, max_offsets_per_trigger=400)
    # Batches of about equal size under the cap: with the cap as Spark's limit, the run read 399,
    # 399 and a trailing batch of about a hundred (the limit's share per partition rounds down).
    sizes = [r.read for r in results]
    assert len(sizes) == 3 and max(sizes) <= 400 and max(sizes) - min(sizes) <= 6, sizes
    assert sum(r.read for r in results) == report.committed
    assert sum(r.duplicates for r in results) == report.produced["duplicate"]
    assert sum(r.quarantined for r in results) == sum(
        n for k, n in report.produced.items() if k.startswith("malformed")
    )
    # Batches tile the topic: each starts where the previous ended.
    for earlier, later in zip(results, results[1:], strict=False):
        assert [r.start for r in later.ranges] == [r.end for r in earlier.ranges]
    assert_offset_coverage(spark, settings, report.committed)
    first = snapshot(spark, settings, pg, prefix)
    assert_sinks_agree(first)

    plan = plan_backfill(
        settings,
        settings.topic,
        offsets={r.partition: (r.start, r.end) for r in latest_ranges(settings, settings.topic)},
    )
    versions = table_versions(spark, settings)
    backfill = ingest.run_backfill(spark, settings, plan)
    assert not backfill.skipped and backfill.read == report.committed
    assert snapshot(spark, settings, pg, prefix) == first
    assert backfill.sessions_written == 0 and backfill.sessions_deleted == 0
    assert files_rewritten_since(spark, settings, versions) == 0, "a replay of processed data rewrote Delta files"

    versions = table_versions(spark, settings)
    again = ingest.run_backfill(spark, settings, plan)
    assert again.skipped and again.batch_id == backfill.batch_id
    assert snapshot(spark, settings, pg, prefix) == first
    assert table_versions(spark, settings) == versions, "a batch already in the ledger committed to Delta"
    assert ingest.run_scheduled(spark, settings) == []


def test_a_late_record_joins_the_session_without_changing_its_id(spark, run, pg) -> None:
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1)
    entity = f"{prefix}user"
    base = datetime(2026, 3, 1, 12, tzinfo=UTC)

    def event(name: str, when: datetime) -> dict:
        return {
            "event_id": f"{prefix}{name}",
            "entity_id": entity,
            "event_type": "click",
            "event_time": when.isoformat(),
        }

    send(settings, settings.topic, [event(n, base + timedelta(minutes=i)) for i, n in enumerate("ABCD")])
    ingest.run_scheduled(spark, settings)
    before = delta_rows(spark, settings, "sessions")
    assert len(before) == 1 and before[0]["event_count"] == 4

    late_time = base - timedelta(hours=5)  # E's event time is earlier than all of them
    send(settings, settings.topic, [event("E", late_time)])
    [batch] = ingest.run_scheduled(spark, settings)
    assert batch.sessions_continued == 1, "E arrived after the session's last record: continued from its row"
    after = delta_rows(spark, settings, "sessions")
    assert len(after) == 1
    assert after[0]["session_id"] == before[0]["session_id"]
    assert after[0]["event_count"] == 5
    assert after[0]["first_event_time"].astimezone(UTC) == base  # A arrived first
    assert after[0]["last_event_time"].astimezone(UTC) == late_time  # E arrived last
    started_ms = int(after[0]["started_at"].astimezone(UTC).timestamp() * 1000)
    assert after[0]["session_id"] == session_id(entity, started_ms)
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))


def test_sessions_continued_batch_after_batch_are_what_a_cut_from_scratch_makes(spark, fresh) -> None:
    """Four scheduled runs over 12 entities whose records arrive after, within a gap of, a gap beyond, and past
    the maximum length of their last sessions, one run's records of some entities arriving before their stored
    sessions ended (read again), and a record arriving exactly at a session's last arrival: after every run,
    the sessions both sinks hold are what sessionizing all of ``events`` from scratch gives."""
    from spark_jobs.contract import SessionRules

    prefix = "cont-"  # the test's own database (its own session rules are recorded there)
    settings = replace(fresh, session_rules=SessionRules(gap=timedelta(minutes=10), max_length=timedelta(hours=1)))
    ensure_topic(settings, settings.topic, partitions=2, timestamp_type="CreateTime")
    rng = random.Random(4242)
    clock = {e: datetime(2026, 3, 1, 12, tzinfo=UTC) + timedelta(minutes=rng.randint(0, 30)) for e in range(12)}
    continued = 0
    for round_ in range(4):
        events, arrivals = [], []
        for e in rng.sample(range(12), 8):
            for i in range(rng.randint(1, 6)):
                step = rng.choice([0.0, 0.5, 3, 9.9, 10, 10.5, 25, 40])
                if round_ == 2 and i == 0 and e % 3 == 0:
                    step = -rng.choice([1, 15, 90])  # before the entity's last arrival: its events are read again
                clock[e] += timedelta(minutes=step)
                events.append({"event_id": f"{prefix}r{round_}-{e}-{i}", "entity_id": f"{prefix}e{e}",
                               "event_type": "click", "event_time": clock[e].isoformat()})  # fmt: skip
                arrivals.append(clock[e])
        send(settings, settings.topic, events, arrivals)
        continued += sum(batch.sessions_continued for batch in ingest.run_scheduled(spark, settings))
        assert_sessions_follow_events(spark, settings)
        assert_settings_sinks_agree(spark, settings, prefix)
    assert continued > 0, "no batch continued a stored session"


def test_no_session_is_continued_while_a_crashed_batch_may_have_left_its_events_without_their_sessions(
    spark, run, pg
) -> None:
    """A backfill of A crashes after its events write (events holds A, sessions does not). Before its retry, a
    backfill of B (later than A) must not continue the entity's stored session without A: it reads the events
    again, and the sessions are those of the events; the retry then finds A held and ends exact."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    entity = f"{prefix}user"
    arrivals = [datetime(2026, 4, 1, 9, tzinfo=UTC) + timedelta(minutes=m) for m in (0, 5, 9)]
    send(settings, settings.topic, [
        {"event_id": f"{prefix}{n}", "entity_id": entity, "event_type": "view", "event_time": t.isoformat()}
        for n, t in zip("SAB", arrivals, strict=True)
    ], arrivals)  # fmt: skip
    backfill = lambda start, **kw: ingest.run_backfill(  # noqa: E731
        spark, settings, plan_backfill(settings, settings.topic, offsets={0: (start, start + 1)}), **kw
    )
    assert backfill(0).sessions_continued == 0  # S: the entity's first session
    with pytest.raises(Exception, match="injected crash"):
        backfill(1, fault=crash_at("write:sessions"))  # A is in events; the session still ends at S
    b = backfill(2)
    assert_sessions_follow_events(spark, settings)  # continued, S and B alone: one event fewer than events holds
    assert b.sessions_continued == 0
    assert backfill(1).sessions_continued == 0  # the retry: A is held
    [session] = delta_rows(spark, settings, "sessions")
    assert session["event_count"] == 3
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))


def test_the_automatic_cap_sizes_batches_by_the_drivers_heap_and_the_topics_newest_records(spark, run) -> None:
    """``auto`` (the default cap) samples the newest records of each partition: their mean key and value size, and
    the driver's heap, make the cap; a run with fewer unread records than the smallest cap samples none."""
    from spark_jobs import batch_size

    settings, prefix = run
    assert settings.max_offsets_per_trigger == batch_size.AUTO
    ensure_topic(settings, settings.topic, partitions=2)
    assert batch_size.mean_record_bytes(settings, settings.topic) == batch_size.ASSUMED_RECORD_BYTES  # empty
    events = [{"event_id": f"{prefix}{i}", "entity_id": f"{prefix}u{i % 3}", "event_type": "click" + "k" * (i % 50),
               "event_time": "2026-03-01T12:00:00+00:00"} for i in range(200)]  # fmt: skip
    send(settings, settings.topic, events)
    sizes = {}
    for p, (low, high) in watermarks(settings, settings.topic).items():
        from spark_jobs.committed import committed_records

        newest = [PartitionRange(settings.topic, p, max(low, high - batch_size.SAMPLE), high)]
        sizes[p] = [len(m.key() or b"") + len(m.value() or b"") for m in committed_records(settings, newest)]
    mean = sum(map(sum, sizes.values())) / sum(map(len, sizes.values()))
    held = {p: high - low for p, (low, high) in watermarks(settings, settings.topic).items()}
    assert {p: len(s) for p, s in sizes.items()} == {p: min(n, batch_size.SAMPLE) for p, n in held.items()}
    assert batch_size.mean_record_bytes(settings, settings.topic) == pytest.approx(mean)
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    assert batch_size.auto_cap(spark, settings, settings.topic) == batch_size.cap_for(heap, 0.6, mean)
    assert batch_size.resolved(spark, settings, batch_size.AUTO, unread=200) == batch_size.SMALLEST
    [batch] = ingest.run_scheduled(spark, settings)
    assert batch.read == 200


def test_a_backfill_that_adds_missing_records_replaces_the_sessions_in_both_sinks(spark, run, pg) -> None:
    """A, B, C arrive 20 min apart; processed without B they are two sessions, with B one."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    entity = f"{prefix}user"
    arrivals = [datetime(2026, 4, 1, 9, tzinfo=UTC) + timedelta(minutes=20 * i) for i in range(3)]
    events = [
        {"event_id": f"{prefix}{n}", "entity_id": entity, "event_type": "view", "event_time": t.isoformat()}
        for n, t in zip("ABC", arrivals, strict=True)
    ]
    send(settings, settings.topic, events, arrivals)

    for offsets in ({0: (0, 1)}, {0: (2, 3)}):  # B (offset 1) is missing
        ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets=offsets))
    before = sorted(delta_rows(spark, settings, "sessions"), key=lambda r: r["started_at"])
    assert [r["event_count"] for r in before] == [1, 1]
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))

    result = ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (1, 2)}))
    assert result.sessions_deleted == 1
    after = delta_rows(spark, settings, "sessions")
    assert len(after) == 1
    assert after[0]["session_id"] == before[0]["session_id"]  # A still starts it
    assert after[0]["event_count"] == 3
    snap = snapshot(spark, settings, pg, prefix)
    assert_sinks_agree(snap)
    assert len(snap["postgres_sessions_text"]) == 1, "the absorbed session must be gone from PostgreSQL too"


@pytest.mark.parametrize("point", ["after_delta", "after_postgres"])
def test_a_crashed_run_retried_ends_exact_and_keeps_its_frozen_range(spark, run, pg, point) -> None:
    settings, prefix = run
    spec = ProduceSpec(count=300, entities=6, duplicate_rate=0.1, malformed_rate=0.05, seed=4, id_prefix=prefix)
    first = produce(settings, spec, topic=settings.topic, partitions=2)
    frozen = latest_ranges(settings, settings.topic)

    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at(point))

    # Records that arrive between the failure and the retry must not change the retried batch.
    later = produce(settings, replace(spec, seed=5, id_prefix=prefix + "later-"), topic=settings.topic)
    results = ingest.run_scheduled(spark, settings)
    assert results[0].batch_id == 0 and results[0].ranges == frozen
    assert results[0].skipped == (point == "after_postgres")
    assert_offset_coverage(spark, settings, first.committed + later.committed)
    with pg, pg.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM ledger_ranges "
            "JOIN ledger_batches USING (pipeline, batch_id, topic) WHERE topic = %s AND kafka_partition = 0",
            (settings.topic,),
        )
        (batches,) = cur.fetchone()
    assert batches == 2  # the crashed batch once, then the later records
    events = delta_rows(spark, settings, "events", "event_id")
    assert len(events) == len({r[0] for r in events}), "an event_id is accepted once"
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))
    # What `tidemark quarantine` counts per reason is what the quarantine table holds: after a crash
    # behind the quarantine's write, the retry finds those records held, and commits the count the
    # crashed attempt recorded.
    held = Counter(r[0] for r in delta_rows(spark, settings, "quarantine", "reason"))
    with pg, pg.cursor() as cur:
        cur.execute(
            "SELECT reason, sum(records)::bigint FROM quarantine_reasons WHERE pipeline = %s GROUP BY 1",
            (f"ingest:{settings.topic}",),
        )
        counted = dict(cur.fetchall())
    assert held and counted == dict(held), (counted, held)


def test_aborted_transactions_never_reach_a_sink(spark, run) -> None:
    settings, prefix = run
    # Read tasks of 37 offsets: their ends fall on aborted records and transaction markers too.
    settings = replace(settings, read_task_records=37)
    spec = ProduceSpec(count=600, entities=5, seed=9, id_prefix=prefix)
    report = produce(settings, spec, topic=settings.topic, partitions=2, transaction_size=50, abort_rate=0.4)
    assert report.aborted > 0
    results = ingest.run_scheduled(spark, settings)
    assert sum(r.read for r in results) == report.committed
    assert_offset_coverage(spark, settings, report.committed)


def test_offsets_lost_to_retention_fail_the_backfill_before_anything_is_written(spark, run, pg) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    settings, prefix = run
    produce(settings, ProduceSpec(count=200, entities=3, seed=2, id_prefix=prefix), topic=settings.topic, partitions=1)
    admin = AdminClient(settings.kafka_client_config())
    deleted = admin.delete_records([TopicPartition(settings.topic, 0, 50)])
    for future in deleted.values():
        future.result(timeout=30)

    with pytest.raises(DataLossError, match=r"offsets \[0, 50\) are no longer on the broker.*--allow-data-loss"):
        plan_backfill(settings, settings.topic, offsets={0: (0, 200)})
    with pg, pg.cursor() as cur:
        cur.execute("SELECT count(*) FROM ledger_ranges WHERE topic = %s", (settings.topic,))
        assert cur.fetchone()[0] == 0
    plan = plan_backfill(settings, settings.topic, offsets={0: (0, 200)}, allow_data_loss=True)
    assert plan.ranges[0].start == 50


def test_backfill_parameters_are_checked_before_spark_runs(run) -> None:
    settings, prefix = run
    produce(settings, ProduceSpec(count=10, entities=1, id_prefix=prefix), topic=settings.topic, partitions=1)
    now = datetime.now(UTC)
    with pytest.raises(ValueError, match="ends .* before it starts"):
        plan_backfill(settings, settings.topic, from_time=now, to_time=now - timedelta(hours=1))
    with pytest.raises(ValueError, match="beyond the last written offset"):
        plan_backfill(settings, settings.topic, offsets={0: (0, 10_000)})
    with pytest.raises(ValueError, match="has no partition 7"):
        plan_backfill(settings, settings.topic, offsets={7: (0, 1)})
    with pytest.raises(TopicError, match="does not exist"):
        plan_backfill(settings, "no-such-topic", offsets={0: (0, 1)})
    plan = plan_backfill(settings, settings.topic, from_time=now - timedelta(hours=1), to_time=now + timedelta(hours=1))
    assert [(r.start, r.end) for r in plan.ranges] == [(0, 10)]


def test_backfill_dry_run_from_the_command_line_prints_the_plan_and_writes_nothing(run, pg) -> None:
    import os
    import subprocess
    import sys

    settings, prefix = run
    produce(settings, ProduceSpec(count=40, entities=2, id_prefix=prefix), topic=settings.topic, partitions=2)
    env = os.environ | settings.to_env()
    now = datetime.now(UTC)
    command = [sys.executable, "-m", "tidemark.cli", "backfill", "--topic", settings.topic, "--dry-run"]
    hour = timedelta(hours=1)
    window = ["--from-time", (now - hour).isoformat(), "--to-time", (now + hour).isoformat()]
    done = subprocess.run(command + window, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Spark" not in done.stderr, f"a dry run needs no Spark: {done.stderr[-2000:]}"
    assert "dry run: nothing written" in done.stdout
    assert "total 40 records" in done.stdout
    assert f"{settings.topic} p0 [0, " in done.stdout and f"{settings.topic} p1 [0, " in done.stdout
    assert not os.path.exists(settings.lake_root), "a dry run created Delta tables"
    with pg, pg.cursor() as cur:
        cur.execute("SELECT count(*) FROM ledger_ranges WHERE topic = %s", (settings.topic,))
        assert cur.fetchone()[0] == 0

    bad = subprocess.run(
        [*command, "--from-time", now.isoformat(), "--to-time", (now - hour).isoformat()],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0
    assert "before it starts" in bad.stderr


def test_session_id_is_the_same_in_python_spark_and_postgres(spark, pg) -> None:
    started = datetime(2026, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    python_id = session_id("entity-ü", int(started.timestamp() * 1000))
    spark_id = spark.sql(
        f"SELECT {SESSION_ID_SPARK_SQL} FROM (SELECT 'entity-ü' AS entity_id, "
        "timestamp'2026-05-06 07:08:09.123' AS started_at)"
    ).first()[0]
    with pg, pg.cursor() as cur:
        cur.execute(
            f"SELECT {SESSION_ID_POSTGRES_SQL} FROM (SELECT 'entity-ü'::text AS entity_id, "
            "timestamptz '2026-05-06 07:08:09.123+00' AS started_at) s"
        )
        postgres_id = cur.fetchone()[0]
    assert python_id == spark_id == postgres_id


def test_a_batch_of_only_malformed_records_is_quarantined_and_recorded(spark, run, pg) -> None:
    settings, prefix = run
    spec = ProduceSpec(count=40, entities=4, malformed_rate=1.0, seed=8, id_prefix=prefix)
    report = produce(settings, spec, topic=settings.topic, partitions=2)

    results = ingest.run_scheduled(spark, settings)
    assert [(r.read, r.accepted, r.duplicates, r.quarantined) for r in results] == [(40, 0, 0, 40)]
    assert results[0].sessions_written == 0 and results[0].sessions_deleted == 0
    assert_offset_coverage(spark, settings, report.committed)
    assert delta_rows(spark, settings, "sessions") == []
    assert ingest.run_scheduled(spark, settings) == [], "the batch should be in the ledger"


def test_a_value_holding_two_events_is_quarantined_not_half_accepted(spark, run, pg) -> None:
    """A producer that packs newline-delimited events into one value: the whole value is quarantined.

    Spark's JSON parser stops after the first document, so such a value used to pass as its first
    event while the second vanished, and the counts still agreed (one record, one row).
    """
    from confluent_kafka import Producer

    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1)
    first, second = (
        {"event_id": f"{prefix}{name}", "entity_id": f"{prefix}user", "event_type": "click",
         "event_time": "2026-03-01T12:00:00+00:00"}
        for name in ("E1", "E2")
    )  # fmt: skip
    values = [json.dumps(first), json.dumps(first) + "\n" + json.dumps(second)]
    producer = Producer(settings.kafka_client_config())
    for value in values:
        producer.produce(settings.topic, key=f"{prefix}user".encode(), value=value.encode())
    assert producer.flush(30) == 0

    results = ingest.run_scheduled(spark, settings)
    assert [(r.read, r.accepted, r.quarantined) for r in results] == [(2, 1, 1)]
    quarantined = delta_rows(spark, settings, "quarantine")
    assert [(row["offset"], row["reason"], bytes(row["value"]).decode()) for row in quarantined] == [
        (1, "invalid_json: text after the JSON object", values[1])
    ]
    assert [row["event_id"] for row in delta_rows(spark, settings, "events")] == [f"{prefix}E1"]
    assert_offset_coverage(spark, settings, 2)


def test_a_backfill_of_some_partitions_reads_only_those(spark, run, pg) -> None:
    """`--offsets 1:0-40` on a three-partition topic: the other partitions are neither read nor needed."""
    settings, prefix = run
    report = produce(settings, ProduceSpec(count=120, entities=30, seed=6, id_prefix=prefix), topic=settings.topic,
                     partitions=3)  # fmt: skip
    ends = {r.partition: r.end for r in latest_ranges(settings, settings.topic)}
    assert all(end > 0 for end in ends.values()), "every partition should hold records"

    result = ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={1: (0, ends[1])}))
    assert result.read == ends[1]
    assert {r["partition"] for r in delta_rows(spark, settings, "events")} == {1}
    # By arrival time, for partitions 0 and 2 (what Airflow's Backfill passes with a run conf).
    window: dict[str, Any] = {
        "from_time": datetime.now(UTC) - timedelta(hours=1),
        "to_time": datetime.now(UTC) + timedelta(minutes=1),
    }
    plan = plan_backfill(settings, settings.topic, partitions=[0, 2], **window)
    assert [(r.partition, r.start, r.end) for r in plan.ranges] == [(0, 0, ends[0]), (2, 0, ends[2])]
    with pytest.raises(ValueError, match="has no partition 7"):
        plan_backfill(settings, settings.topic, partitions=[0, 7], **window)
    ingest.run_scheduled(spark, settings)
    assert_offset_coverage(spark, settings, report.committed)
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))


def test_a_batch_too_big_to_finish_is_planned_again_within_the_cap_and_the_topic_moves_on(spark, run, pg) -> None:
    from spark_jobs.checkpoint import OffsetLog
    from spark_jobs.errors import ConfigError

    settings, prefix = run
    spec = ProduceSpec(count=600, entities=10, duplicate_rate=0.05, malformed_rate=0.02, seed=21, id_prefix=prefix)
    report = produce(settings, spec, topic=settings.topic, partitions=2)
    ends = {r.partition: r.end for r in latest_ranges(settings, settings.topic)}
    log = OffsetLog(spark, f"{settings.checkpoint_root}/ingest-{settings.topic}")
    # A batch that cannot finish (a driver out of memory, a task timeout) fails the same way on every
    # retry: Spark froze its range before it ran. Here it fails after its Delta writes, each time.
    for _ in range(2):
        with pytest.raises(Exception, match="injected crash"):
            ingest.run_scheduled(spark, settings, fault=crash_at("after_delta"))
        assert log.frozen_uncommitted() == 0 and log.ends(0, settings.topic) == ends

    results = ingest.run_scheduled(spark, settings, max_offsets_per_trigger=200, split_frozen_batch=True)
    assert [r.batch_id for r in results] == list(range(len(results))) and len(results) >= 3
    assert all(sum(x.end - x.start for x in r.ranges) <= 200 for r in results)
    assert sum(r.read for r in results) == report.committed
    assert log.frozen_uncommitted() is None
    assert_offset_coverage(spark, settings, report.committed)
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))
    with pytest.raises(ConfigError, match="has no frozen, uncommitted batch"):
        ingest.run_scheduled(spark, settings, max_offsets_per_trigger=200, split_frozen_batch=True)


def test_a_runs_later_batches_reuse_compiled_code_and_hold_no_earlier_batchs_frames(spark, run, pg) -> None:
    """What a driver keeps from batch to batch in a long run (a backlog under a cap, the soak).

    Compiled code: Spark compiles each query's code once and keeps it in a cache; a batch compiles
    200 to 300 classes, so a cache too small for one batch makes every batch compile them all again
    (seconds per batch on 2 cores). Counted from Spark's own codegen metrics, not timed.

    Frozen frames: a batch freezes its parsed records, ranking and session changes with
    ``localCheckpoint``, whose rows stay in the block manager (the driver's heap, in local mode)
    until released. Kept, they grew the soak's driver until it ran out of heap at run 487.
    """
    settings, prefix = run
    spec = ProduceSpec(count=1_200, entities=30, duplicate_rate=0.05, malformed_rate=0.02, seed=5, id_prefix=prefix)
    produce(settings, spec, topic=settings.topic, partitions=3)
    metrics = getattr(spark._jvm.org.apache.spark.metrics.source, "CodegenMetrics$").__getattr__("MODULE$")

    def frozen_rdds() -> set[int]:
        persistent = spark.sparkContext._jsc.getPersistentRDDs().values()
        return {rdd.id() for rdd in persistent if rdd.rdd().isLocallyCheckpointed()}

    # Frames an earlier test left are not this run's (Spark's cleaner may drop them meanwhile).
    frozen_before = frozen_rdds()
    compiled, frozen = [], []  # classes compiled so far, and frames still held, at the end of each batch

    def at_batch_end(point: str) -> None:
        if point == "after_postgres":
            compiled.append(metrics.METRIC_COMPILATION_TIME().getCount())
            frozen.append(len(frozen_rdds() - frozen_before))

    results = ingest.run_scheduled(spark, settings, max_offsets_per_trigger=300, fault=at_batch_end)
    assert len(results) >= 4 and sum(r.read for r in results) == 1_200
    per_batch = [later - earlier for earlier, later in zip(compiled, compiled[1:], strict=False)]
    # The last batches differ from the ones before only in their literals (offsets, times).
    assert max(per_batch[-2:]) < 60, f"classes compiled per batch after the first: {per_batch}"
    assert frozen == [0] * len(results), f"frozen frames held at the end of each batch: {frozen}"


def test_a_batchs_dedupe_lookup_filters_stored_events_where_it_reads_them(spark, run, pg) -> None:
    """A batch looks up the stored copies of its event_ids in every events row of the horizon. A
    batch read from Kafka has no size Spark can estimate, so Spark joined it by shuffling both
    sides: every stored row of the horizon, every batch, a cost that grew with the table (the
    soak's dedupe step doubled over 1M events). A small batch's ids are broadcast instead, and the
    stored rows are filtered where they are read. Checked in the plans Spark ran, not timed."""
    settings, prefix = run
    produce(settings, ProduceSpec(count=600, entities=20, seed=8, id_prefix=prefix), topic=settings.topic, partitions=3)
    ingest.run_scheduled(spark, settings)
    store = spark._jsparkSession.sharedState().statusStore()

    def executions() -> list:
        found = store.executionsList()
        return [found.apply(i) for i in range(found.size())]

    seen = {e.executionId() for e in executions()}
    spec = ProduceSpec(count=200, entities=20, duplicate_rate=0.1, seed=9, id_prefix=prefix)
    produce(settings, spec, topic=settings.topic, partitions=3)
    [result] = ingest.run_scheduled(spark, settings)
    assert result.read == 200 and result.duplicates > 0

    # The lookup: a semi-join of the events rows (streamed, the left side) with the batch's event_ids.
    lookups = [join for e in executions() if e.executionId() not in seen for join in semi_joins_on_event_id(e)]
    assert lookups, "the batch's dedupe lookup was not among the plans Spark ran"
    shuffled = [(join, left) for join, left in lookups if join != "BroadcastHashJoin" or SHUFFLE.search(left)]
    assert not shuffled, f"the lookup shuffled the stored rows: {shuffled}"
    # A batch too large to broadcast is joined as Spark plans it; so is every batch when broadcasts are off.
    assert not broadcastable(spark, 1_000_000, dedupe.ID_ROW_BYTES)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        assert not broadcastable(spark, 200, dedupe.ID_ROW_BYTES)
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert broadcastable(spark, 200, dedupe.ID_ROW_BYTES)


SHUFFLE = re.compile(r"Exchange|ShuffleQueryStage|AQEShuffleRead|Sort")


def semi_joins_on_event_id(execution) -> list[tuple[str, str]]:
    """(join, its left child) of each semi-join on event_id in an execution's plan, as Spark's UI
    shows it (formatted: the tree of numbered nodes, then each node's details)."""
    plan = execution.physicalPlanDescription()
    tree = plan.splitlines()
    details = re.finditer(
        r"^\((\d+)\) (\w+).*\n"
        r"Left keys \[1\]: \[event_id#\d+\]\nRight keys \[1\]: \[event_id#\d+\]\nJoin type: LeftSemi",
        plan,
        re.MULTILINE,
    )
    joins = []
    for node in details:
        number, name = node.groups()
        # The node's line in the tree (the final plan's and the initial's, under adaptive execution).
        for i, line in enumerate(tree):
            if line.endswith(f"({number})") and not line.lstrip().startswith(f"({number})"):
                joins.append((name, tree[i + 1].strip()))
    return joins


def test_event_times_postgresql_cannot_store_are_quarantined_not_a_batch_that_fails_for_ever(spark, run, pg) -> None:
    """Spark parses years 0 and 10000 (in UTC) where PostgreSQL's COPY refuses them: such a record
    used to pass validation and fail the batch's COPY on every retry, blocking every entity of the
    batch. The contract's time range is what both sinks store; outside it, the record is quarantined."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1)
    times = [
        "2026-03-01T12:00:00+00:00",
        "9999-12-31T23:59:59-01:00",  # 10000-01-01 in UTC
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
        "0000-06-01T00:00:00Z",
        "9999-12-31T22:59:59-01:00",  # the last second PostgreSQL stores, in UTC
        "0001-01-01T00:00:00Z",  # the first
    ]
    # Each its own entity, so each time is its session's first and last event time in PostgreSQL.
    send(settings, settings.topic, [
        {"event_id": f"{prefix}E{i}", "entity_id": f"{prefix}user{i}", "event_type": "click", "event_time": t}
        for i, t in enumerate(times)
    ])  # fmt: skip

    results = ingest.run_scheduled(spark, settings)
    assert [(r.read, r.accepted, r.quarantined) for r in results] == [(6, 3, 3)]
    reasons = {row["offset"]: row["reason"] for row in delta_rows(spark, settings, "quarantine")}
    assert sorted(reasons) == [1, 2, 3]
    assert all(reason.startswith("bad_event_time: outside") for reason in reasons.values()), reasons
    with pg, pg.cursor() as cur:
        cur.execute("SELECT entity_id FROM sessions WHERE entity_id LIKE %s ORDER BY 1", (f"{prefix}%",))
        assert [r[0] for r in cur.fetchall()] == [f"{prefix}user{i}" for i in (0, 4, 5)]
    assert_offset_coverage(spark, settings, 6)
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))


def test_each_run_and_its_quarantine_by_reason_are_recorded_and_the_cli_shows_them(spark, fresh, tmp_path) -> None:
    """A run's numbers, the lag it left and its quarantine per reason with sample records, in
    PostgreSQL, and ``tidemark quarantine`` (the installed script) prints them without Spark."""
    from confluent_kafka import Producer

    from tests.integration.tidemark.test_errors import tidemark

    settings = fresh
    ensure_topic(settings, settings.topic, partitions=1)
    good = {"event_id": "q-1", "entity_id": "q-user", "event_type": "view", "event_time": "2026-03-01T12:00:00Z"}
    records = [
        (b"q-user", json.dumps(good).encode()),
        (b"q-user", b"{not json"),
        (b"q-user", b'{"also": not json}'),
        (b"q-user", b"\xff\xfe{}"),
        (b"someone-else", json.dumps(good | {"event_id": "q-2"}).encode()),
        (b"q-user", b'{"nul": "\x00"}'),  # a NUL in a sample would break PostgreSQL's jsonb: shown in hex
    ]
    producer = Producer(settings.kafka_client_config())
    for key, value in records:
        producer.produce(settings.topic, key=key, value=value)
    assert producer.flush(30) == 0
    # What a scheduled run will read, known before Spark starts (it picks the driver's compiler).
    assert runs.unread_records(settings, settings.topic) == 6  # no batch yet: all Kafka holds
    # At most what a job over the stored data reads (maintenance, reconcile, repair, readmit).
    assert ledger.stored_records(settings) == 0

    before = datetime.now(UTC)
    [result] = ingest.run_scheduled(spark, settings)
    assert (result.read, result.accepted, result.quarantined) == (6, 1, 5)
    assert runs.unread_records(settings, settings.topic) == 0
    assert ledger.stored_records(settings) == 6  # the quarantined records too: readmit reads them
    down = replace(settings, postgres_dsn=f"host=127.0.0.1 port={free_port()} dbname=tidemark user=tidemark")
    assert ledger.stored_records(down) is None  # the job then says what is wrong

    [run] = query(
        settings,
        """SELECT pipeline, started_by, batches, records_read, accepted, duplicates, quarantined, sessions_written,
                  started_at >= %s AND finished_at >= started_at
           FROM ingest_runs""",
        before,
    )
    assert run == (f"ingest:{settings.topic}", "cli", 1, 6, 1, 0, 5, 1, True)
    assert query(settings, "SELECT kafka_partition, processed_to, high_watermark, behind_records FROM ingest_lag") == [
        (0, 6, 6, 0)
    ]
    reasons = dict(query(settings, "SELECT reason, records FROM quarantine_reasons"))
    assert reasons == {"invalid_json": 3, "not_utf8": 1, "key_mismatch: key is not the entity_id": 1}

    env = settings.to_env()
    shown = tidemark(["quarantine"], env, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^\s*3\s+invalid_json\s+invalid_json\s+\d{4}-", shown.stdout, re.M), shown.stdout
    assert "offset 5 " in shown.stdout and "value 0x7b226e756c223a202200227d\n" in shown.stdout, shown.stdout
    assert f"{settings.topic} p0 offset 1 " in shown.stdout and 'value "{not json"' in shown.stdout
    assert 'value "{\\"also\\": not json}"' in shown.stdout and 'key "someone-else"' in shown.stdout
    one = tidemark(["quarantine", "--reason", "not_utf8", "--limit", "1"], env, tmp_path)
    assert one.returncode == 0, one.stderr
    assert "not_utf8: 1 sample record of 1, the latest first" in one.stdout, one.stdout
    assert "value 0xfffe7b7d\n" in one.stdout and "invalid_json" not in one.stdout, one.stdout
    summary = tidemark(["quarantine", "--limit", "0"], env, tmp_path)  # the table alone
    assert summary.returncode == 0, summary.stderr
    assert re.search(r"^\s*3\s+invalid_json\s+invalid_json\s+\d{4}-", summary.stdout, re.M), summary.stdout
    assert "sample record" not in summary.stdout and "offset" not in summary.stdout, summary.stdout

    # A run with nothing new is a run too: it says when the pipeline last ran.
    assert ingest.run_scheduled(spark, settings) == []
    assert query(settings, "SELECT count(*), sum(batches) FROM ingest_runs WHERE failure IS NULL") == [(2, 1)]

    # A run that fails is a run too, with its cause: one that crashes inside its batch, and one the
    # installed script refuses before Spark starts because another run holds the writer lock.
    producer.produce(settings.topic, key=b"q-user", value=json.dumps(good | {"event_id": "q-3"}).encode())
    assert producer.flush(30) == 0
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("after_delta"))
    with single_writer(settings, "ingest:another-topic"):
        busy = tidemark(["ingest"], env, tmp_path)
    assert busy.returncode == 2 and "is writing the pipeline 'events'" in busy.stderr, busy.stderr
    failed = query(settings, "SELECT batches, failure FROM ingest_runs WHERE failure IS NOT NULL ORDER BY finished_at")
    assert [batches for batches, _ in failed] == [0, 0], failed
    assert "injected crash after_delta" in failed[0][1] and "\n" not in failed[0][1], failed
    assert busy.stderr.strip().endswith(failed[1][1]), failed
    # The latest run that finished is still the one the metrics' "last successful ingest" reports.
    with db.transaction(settings.pipeline_dsn) as cur:
        [(_, _, last)] = runs.last_finished(cur)
        [newest] = runs.recent(cur, 1)
    assert newest.failure == failed[1][1] and last < newest.finished_at
