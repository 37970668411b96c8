"""Exactly once at the edges, against real Kafka, Spark/Delta and PostgreSQL.

Each test builds the smallest topic that reaches one edge (a backfill ahead of a scheduled run, a
takeover across entities, a driver in a daylight-saving time zone, a change of session rules) and
then checks the invariants: every committed offset in exactly one record table, once; Delta
sessions equal to PostgreSQL's and to a from-scratch sessionization of ``events``.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs import ingest, validation
from spark_jobs.contract import SessionRules
from spark_jobs.errors import SessionRulesChanged
from spark_jobs.offsets import ensure_topic
from spark_jobs.planning import plan_backfill
from tests.integration.spark_jobs.checks import (
    assert_offset_coverage,
    assert_sessions_follow_events,
    assert_sinks_agree,
    crash_at,
    delta_rows,
    dump_postgres,
    query,
    restore_postgres,
    send,
    snapshot,
)


def event(prefix: str, name: str, entity: str, when: datetime) -> dict:
    return {"event_id": f"{prefix}{name}", "entity_id": f"{prefix}{entity}", "event_type": "click",
            "event_time": when.isoformat()}  # fmt: skip


def assert_exact(spark, settings, pg, prefix: str, committed: int) -> None:
    assert_offset_coverage(spark, settings, committed)
    assert_sessions_follow_events(spark, settings)
    assert_sinks_agree(snapshot(spark, settings, pg, prefix))


def test_a_backfill_ahead_of_the_scheduled_run_leaves_each_duplicate_once(spark, run, pg) -> None:
    """E1@0, X@1, E1@2: a backfill of [1, 3) accepts E1@2; the scheduled run then finds E1@0 earlier."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1)
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    e1 = event(prefix, "E1", "user", t)
    send(settings, settings.topic, [e1, event(prefix, "X", "user", t), e1])

    ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (1, 3)}))
    ingest.run_scheduled(spark, settings)

    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [2]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [0, 1]
    assert_exact(spark, settings, pg, prefix, committed=3)


def test_a_takeover_by_a_copy_of_another_entity_moves_the_event_between_sessions(spark, run, pg) -> None:
    """The earlier copy of E1 carries entity B: A's session must lose the event, B's gain it."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    send(settings, settings.topic, [event(prefix, "E1", "A", t), event(prefix, "E2", "A", t)],
         [t + timedelta(minutes=10), t + timedelta(minutes=11)])  # fmt: skip
    ingest.run_scheduled(spark, settings)
    send(settings, settings.topic, [event(prefix, "E1", "B", t)], [t])  # arrived (by its clock) first
    ingest.run_scheduled(spark, settings)

    counts = {r["entity_id"]: r["event_count"] for r in delta_rows(spark, settings, "sessions")}
    assert counts == {f"{prefix}A": 1, f"{prefix}B": 1}
    assert_exact(spark, settings, pg, prefix, committed=3)


@pytest.fixture
def berlin_time():
    """The driver's local time zone is Europe/Berlin for this test (daylight saving time ends 2026-10-25 01:00Z)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_driver_in_a_daylight_saving_time_zone_recomputes_across_the_clock_change(
    spark, run, pg, berlin_time
) -> None:
    """Arrivals at 00:10Z and 00:40Z (02:10 and 02:40 CEST), then 01:05Z (02:05 CET): one session of three."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    change = datetime(2026, 10, 25, 1, tzinfo=UTC)
    first = [change - timedelta(minutes=50), change - timedelta(minutes=20)]
    send(settings, settings.topic, [event(prefix, f"E{i}", "user", a) for i, a in enumerate(first)], first)
    ingest.run_scheduled(spark, settings)
    later = change + timedelta(minutes=5)
    send(settings, settings.topic, [event(prefix, "E9", "user", later)], [later])
    ingest.run_scheduled(spark, settings)

    assert [r["event_count"] for r in delta_rows(spark, settings, "sessions")] == [3]
    assert_exact(spark, settings, pg, prefix, committed=3)


def test_a_gap_with_a_fraction_of_a_second_joins_a_record_to_the_session_it_continues(spark, database, topic) -> None:
    """A 7.5 s gap: a record 7.3 s after a stored session's last one continues it. The lookup of the
    stored session a batch continues cut the gap to whole seconds (7 s) where sessionize did not, so
    the record started a session of its own, which a recompute from ``events`` does not have."""
    from spark_jobs.db import transaction

    home = database.home / "runs" / f"subsecond-{uuid.uuid4().hex[:8]}"
    settings = replace(
        database, lake_root=str(home / "lake"), checkpoint_root=str(home / "checkpoints"), topic=topic,
        session_rules=SessionRules(gap=timedelta(seconds=7.5), max_length=timedelta(hours=1)),
    )  # fmt: skip
    ensure_topic(settings, topic, partitions=1, timestamp_type="CreateTime")
    prefix = "subsecond-"
    t = datetime(2026, 5, 1, 8, tzinfo=UTC)
    first = [t, t + timedelta(seconds=5)]
    send(settings, topic, [event(prefix, f"E{i}", "user", a) for i, a in enumerate(first)], first)
    ingest.run_scheduled(spark, settings)
    later = t + timedelta(seconds=12.3)
    send(settings, topic, [event(prefix, "E2", "user", later)], [later])
    ingest.run_scheduled(spark, settings)

    assert [r["event_count"] for r in delta_rows(spark, settings, "sessions")] == [3]
    with transaction(settings.postgres_dsn) as cur:
        cur.execute("SELECT event_count FROM sessions")
        assert [r[0] for r in cur.fetchall()] == [3]
    assert_sessions_follow_events(spark, settings)


def test_other_session_rules_are_refused_until_the_sessions_are_rebuilt(spark, database, topic) -> None:
    """The rules are recorded with the sessions; a run with others fails first, or rebuilds on request."""
    from spark_jobs.db import fetch_one, transaction

    home = database.home / "runs" / f"rules-{uuid.uuid4().hex[:8]}"
    settings = replace(database, lake_root=str(home / "lake"), checkpoint_root=str(home / "checkpoints"), topic=topic)
    ensure_topic(settings, topic, partitions=1, timestamp_type="CreateTime")
    prefix = "rules-"
    t = datetime(2026, 5, 1, 8, tzinfo=UTC)
    arrivals = [t, t + timedelta(minutes=20), t + timedelta(minutes=40)]  # 20-minute pauses
    send(settings, topic, [event(prefix, f"E{i}", "user", a) for i, a in enumerate(arrivals)], arrivals)
    ingest.run_scheduled(spark, settings)
    assert [r["event_count"] for r in delta_rows(spark, settings, "sessions")] == [3]

    narrow = replace(settings, session_rules=SessionRules(gap=timedelta(minutes=10)))
    send(settings, topic, [event(prefix, "E3", "user", t + timedelta(minutes=45))], [t + timedelta(minutes=45)])
    with pytest.raises(SessionRulesChanged, match=r"gap 30 min.*gap 10 min.*--rebuild-sessions"):
        ingest.run_scheduled(spark, narrow)
    assert len(delta_rows(spark, settings, "events")) == 3, "a refused run wrote nothing"

    ingest.run_scheduled(spark, narrow, rebuild_sessions=True)
    assert sorted(r["event_count"] for r in delta_rows(spark, settings, "sessions")) == [1, 1, 2]
    assert_sessions_follow_events(spark, narrow)
    with transaction(settings.postgres_dsn) as cur:
        cur.execute("SELECT count(*) FROM sessions")
        assert fetch_one(cur)[0] == 3
        cur.execute("SELECT DISTINCT session_gap_seconds FROM ledger_batches ORDER BY 1")
        assert [r[0] for r in cur.fetchall()] == [600.0, 1800.0]
        cur.execute("SELECT reason FROM session_rules ORDER BY changed_at")
        assert [r[0] for r in cur.fetchall()] == ["first batch", "rebuild"]


def test_hostile_entity_ids_round_trip_into_postgresql_or_are_quarantined(spark, run, pg) -> None:
    """Tabs, newlines, backslashes, quotes and `\\N` are ordinary text; NUL and over-long ids are quarantined."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1)
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    hostile = ["tab\there", "line\nbreak", "\\N", "a\\1b", 'quote"comma,', "back\\", "ü-ß"]
    rejected = {"nul\x00byte": "entity_id contains a NUL character", "x" * 2000: "entity_id is longer than"}
    names = [*hostile, *rejected]
    send(settings, settings.topic, [event(prefix, f"E{i}", name, t) for i, name in enumerate(names)])

    results = ingest.run_scheduled(spark, settings)
    assert [(r.accepted, r.quarantined) for r in results] == [(len(hostile), len(rejected))]
    reasons = sorted(r["reason"] for r in delta_rows(spark, settings, "quarantine"))
    for reason, expected in zip(reasons, sorted(rejected.values()), strict=True):
        assert expected in reason
    with pg, pg.cursor() as cur:
        cur.execute("SELECT entity_id FROM sessions WHERE entity_id LIKE %s", (prefix + "%",))
        assert sorted(r[0] for r in cur.fetchall()) == sorted(prefix + n for n in hostile)
    assert_exact(spark, settings, pg, prefix, committed=len(names))
    assert ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, len(names))}))
    assert_exact(spark, settings, pg, prefix, committed=len(names))


def test_a_createtime_topic_keeps_records_whose_timestamps_are_older_than_any_retention(run) -> None:
    """Simulated arrival times can be months old; time-based retention would delete them between runs."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    settings, _ = run
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    resource = ConfigResource("topic", settings.topic)
    admin = AdminClient(settings.kafka_client_config())  # kept alive until the answer arrives
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "-1"
    assert configs["message.timestamp.type"].value == "CreateTime"


TAKEOVER_BATCH_POINTS = ["write:quarantine", "write:duplicates", "write:events", "write:sessions", "after_delta"]


def send_takeover_batch(spark, settings, prefix: str) -> None:
    """Offsets 0-1 (E1, E2 of A at T+10, T+11 min) ingested; then, not ingested: offset 2, E1 of B
    stamped T (a takeover across entities), offsets 3-4 a new E3 twice, offset 5 malformed."""
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    send(settings, settings.topic, [event(prefix, "E1", "A", t), event(prefix, "E2", "A", t)],
         [t + timedelta(minutes=10), t + timedelta(minutes=11)])  # fmt: skip
    ingest.run_scheduled(spark, settings)
    malformed = {"event_id": f"{prefix}M", "entity_id": f"{prefix}B"}  # no event_type, no event_time
    second = [event(prefix, "E1", "B", t), event(prefix, "E3", "B", t), event(prefix, "E3", "B", t), malformed]
    send(settings, settings.topic, second, [t, t + timedelta(minutes=1), t + timedelta(minutes=2), t])


@pytest.mark.parametrize("point", TAKEOVER_BATCH_POINTS)
def test_a_batch_whose_writes_fail_part_way_ends_as_one_clean_run_when_retried(spark, run, pg, point) -> None:
    """A batch with a takeover across entities, a new event twice and a malformed record fails at
    ``point`` (the other tables' writes commit), then runs again: every record in one table, once.

    The takeover is the hard part: it removes a row from ``events`` that only ``duplicates`` keeps.
    """
    settings, prefix = run
    send_takeover_batch(spark, settings, prefix)

    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at(point))
    ingest.run_scheduled(spark, settings)

    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [1, 2, 3]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [0, 4]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "quarantine")) == [5]
    counts = {r["entity_id"]: r["event_count"] for r in delta_rows(spark, settings, "sessions")}
    assert counts == {f"{prefix}A": 1, f"{prefix}B": 2}
    assert_exact(spark, settings, pg, prefix, committed=6)


def ingest_kind(run_kind: str) -> str:
    return {"scheduled": "ingest", "backfill": "backfill"}[run_kind]


@pytest.mark.parametrize("run_kind", ["scheduled", "backfill"])
def test_a_batch_of_invalid_records_only_retried_after_its_delta_writes_counts_each_once(
    spark, run, pg, run_kind
) -> None:
    """A batch whose records are all invalid crashes once its Delta writes committed (quarantine holds them,
    the ledger does not): the retry finds every record it reads held, so none is fresh, and counts each once.
    Model seed 60025 found the retry failing inside Spark, reading the fresh records' totals from an
    observation that no row had passed through."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    malformed = [{"event_id": f"{prefix}M{i}", "entity_id": f"{prefix}B"} for i in range(2)]  # no type, no time
    send(settings, settings.topic, malformed, [t, t + timedelta(seconds=1)])
    plan = plan_backfill(settings, settings.topic, offsets={0: (0, 2)})

    def work(fault=None) -> None:
        if run_kind == "scheduled":
            ingest.run_scheduled(spark, settings, fault=fault)
        else:
            ingest.run_backfill(spark, settings, plan, fault=fault)

    with pytest.raises(Exception, match="injected crash"):
        work(crash_at("after_delta"))
    work()

    assert sorted(r["offset"] for r in delta_rows(spark, settings, "quarantine")) == [0, 1]
    batches = query(
        settings,
        "SELECT records_read, quarantined, accepted FROM ledger_batches WHERE pipeline = %s",
        f"{ingest_kind(run_kind)}:{settings.topic}",
    )
    assert batches == [(2, 2, 0)]
    assert_offset_coverage(spark, settings, committed=2)  # no event: no session to compare


def test_delta_is_searched_for_held_records_only_where_postgresql_says_a_batch_may_have_written(
    spark, run, pg, monkeypatch
) -> None:
    """Scheduled batches over new offsets skip the Delta scan; a retry after a crash (its attempt is
    recorded) and a backfill (always) scan, and end exact."""
    from spark_jobs.sinks import delta

    settings, prefix = run
    scanned: list[list[tuple[int, int]]] = []
    held = delta.held

    def watched(spark_, settings_, ranges):
        scanned.append([(r.start, r.end) for r in ranges])
        return held(spark_, settings_, ranges)

    monkeypatch.setattr(delta, "held", watched)
    send_takeover_batch(spark, settings, prefix)  # the first run: offsets [0, 2)
    assert scanned == []
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("write:events"))
    assert scanned == []  # a first attempt: nothing overlaps [2, 6) yet
    attempts = "SELECT start_offset, end_offset FROM write_attempts WHERE topic = %s ORDER BY 1"
    with pg, pg.cursor() as cur:
        cur.execute(attempts, (settings.topic,))
        assert cur.fetchall() == [(0, 2), (2, 6)]
    ingest.run_scheduled(spark, settings)  # the retry overlaps the failed attempt's range
    assert scanned == [[(2, 6)]]
    with pg, pg.cursor() as cur:
        cur.execute(attempts, (settings.topic,))
        assert cur.fetchall() == [(0, 2), (2, 6)]  # kept: they, not the ledger, say where records may be
    ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (1, 4)}))
    assert scanned[-1] == [(1, 4)]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [1, 2, 3]
    assert_exact(spark, settings, pg, prefix, committed=6)


def test_records_a_failed_batch_wrote_before_attempts_were_recorded_are_found_held(spark, run, pg) -> None:
    """An upgrade: a batch failed part way under a version that recorded no attempts. The first
    batch after it sets the topic's write floor from the record tables and finds what they hold."""
    settings, prefix = run
    send_takeover_batch(spark, settings, prefix)
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("write:events"))  # quarantine, displaced copy in
    with pg, pg.cursor() as cur:  # what the older version left: no attempt, no floor
        cur.execute("DELETE FROM write_attempts WHERE topic = %s", (settings.topic,))
        cur.execute("DELETE FROM write_floors WHERE lake_root = %s", (settings.lake_root,))
    ingest.run_scheduled(spark, settings)

    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [1, 2, 3]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [0, 4]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "quarantine")) == [5]
    assert_exact(spark, settings, pg, prefix, committed=6)
    with pg, pg.cursor() as cur:
        cur.execute("SELECT topic, below_offset FROM write_floors WHERE lake_root = %s", (settings.lake_root,))
        assert cur.fetchall() == [(settings.topic, 6)]  # quarantine held offset 5


def test_a_replay_after_a_validation_change_leaves_every_record_in_the_table_it_is_in(
    spark, run, pg, monkeypatch
) -> None:
    """A record quarantined before and valid now stays quarantined; an accepted one stays accepted."""
    settings, prefix = run
    ensure_topic(settings, settings.topic, partitions=1)
    t = datetime(2026, 3, 1, 12, tzinfo=UTC)
    send(settings, settings.topic, [event(prefix, "E0", "L" * 1500, t), event(prefix, "E1", "S" * 900, t)])
    ingest.run_scheduled(spark, settings)
    assert [r["offset"] for r in delta_rows(spark, settings, "quarantine")] == [0]

    monkeypatch.setattr(validation, "MAX_ENTITY_ID_BYTES", 2000)  # offset 0 would be valid now
    ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, 2)}))
    assert_exact(spark, settings, pg, prefix, committed=2)
    monkeypatch.setattr(validation, "MAX_ENTITY_ID_BYTES", 800)  # offset 1 would be quarantined now
    ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (1, 2)}))
    assert_exact(spark, settings, pg, prefix, committed=2)
    assert [r["offset"] for r in delta_rows(spark, settings, "events")] == [1]


def test_a_blind_retry_of_every_delta_write_of_a_batch_writes_nothing_twice(spark, run, pg) -> None:
    """A lost commit acknowledgement answered by running the same plan's writes again (no re-planning).

    The MERGEs are idempotent by their conditions; the writer knows the plan, and writes its appends
    again as insert-only MERGEs, which skip what the first write committed.
    """
    from spark_jobs.contract import TABLE_SCHEMAS
    from spark_jobs.kafka_source import read_range
    from spark_jobs.offsets import PartitionRange
    from spark_jobs.sinks.delta import fingerprint
    from spark_jobs.store.lock import single_writer
    from spark_jobs.writer import BatchWriter

    settings, prefix = run
    send_takeover_batch(spark, settings, prefix)

    ranges = [PartitionRange(settings.topic, 0, 2, 6)]
    with single_writer(settings, "blind-retry") as lease:
        writer = BatchWriter(spark, settings, lease, "blind-retry", lambda _: ranges)
        plan = writer.planner.plan(read_range(spark, settings, ranges), 0, ranges)
        assert plan.first_arrivals is not None and plan.takeovers is not None and plan.quarantine is not None
        writer.write_delta(plan)
        once = {name: fingerprint(spark, settings, name) for name in TABLE_SCHEMAS}
        writer.write_delta(plan)
    assert {name: fingerprint(spark, settings, name) for name in TABLE_SCHEMAS} == once
    assert_offset_coverage(spark, settings, 6)
    assert_sessions_follow_events(spark, settings)


def test_a_batch_retried_after_postgresql_was_restored_from_a_dump_taken_mid_batch_writes_nothing_twice(
    spark, fresh, tmp_path
) -> None:
    """PostgreSQL restored to a dump taken while a batch was planned: its attempt row is gone, so the
    retry cannot know that the batch's Delta writes committed. It must add nothing twice all the same."""
    from spark_jobs.db import connect
    from tidemark.producer import ProduceSpec, produce

    settings, prefix = fresh, "restored-"
    spec = ProduceSpec(count=60, entities=4, duplicate_rate=0.1, malformed_rate=0.05, seed=31, id_prefix=prefix)
    produced = produce(settings, spec, topic=settings.topic, partitions=1)
    dump = tmp_path / "tidemark.sql"

    def dump_when_planned_then_crash_after_delta(point: str) -> None:
        if point == "planned":
            dump_postgres(settings, dump)
        crash_at("after_delta")(point)

    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=dump_when_planned_then_crash_after_delta)
    restore_postgres(settings, dump)
    assert query(settings, "SELECT count(*) FROM write_attempts") == [(0,)], "the restore did not go back"

    [result] = ingest.run_scheduled(spark, settings)
    assert (result.batch_id, result.read) == (0, produced.committed)
    pg = connect(settings.postgres_dsn)
    try:
        assert_exact(spark, settings, pg, prefix, committed=produced.committed)
    finally:
        pg.close()


def test_batches_the_checkpoint_committed_after_a_backup_are_recorded_again_by_the_next_run(
    spark, fresh, tmp_path
) -> None:
    """PostgreSQL restored to a dump taken between two batches of a run that then completed: Spark's
    checkpoint has committed the second batch, so no run will replay it, while the ledger, the
    attempts and PostgreSQL's sessions lack it. The next run must record it again, adding nothing to
    Delta twice, and reconcile must then find everything accounted for."""
    from spark_jobs import reconcile
    from spark_jobs.db import connect
    from tidemark.producer import ProduceSpec, produce

    settings, prefix = fresh, "unrecorded-"
    spec = ProduceSpec(count=40, entities=3, duplicate_rate=0.1, malformed_rate=0.05, seed=47, id_prefix=prefix)
    produced = produce(settings, spec, topic=settings.topic, partitions=2)
    dump = tmp_path / "tidemark.sql"

    def dump_after_the_first_batch(point: str, batches=[0]) -> None:  # noqa: B006 (a counter)
        if point == "after_postgres":
            batches[0] += 1
            if batches[0] == 1:
                dump_postgres(settings, dump)

    first = ingest.run_scheduled(spark, settings, max_offsets_per_trigger=25, fault=dump_after_the_first_batch)
    assert [r.batch_id for r in first] == [0, 1]
    restore_postgres(settings, dump)
    assert query(settings, "SELECT batch_id FROM ledger_batches") == [(0,)], "the restore did not go back"

    again = ingest.run_scheduled(spark, settings)
    assert [(r.batch_id, r.read, r.skipped) for r in again] == [(1, first[1].read, False)]
    assert query(settings, "SELECT batch_id FROM ledger_batches ORDER BY 1") == [(0,), (1,)]
    pg = connect(settings.postgres_dsn)
    try:
        assert_exact(spark, settings, pg, prefix, committed=produced.committed)
    finally:
        pg.close()
    report = reconcile.run(settings, "after-the-restore", lambda: spark)
    assert report.ok, report.summary()
