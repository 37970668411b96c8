"""Spark's sessionize against the Python reference rules, on data with every kind of boundary."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs import jvm
from spark_jobs.contract import TABLE_SCHEMAS, SessionRules
from spark_jobs.sessionize import SESSION_COLUMNS, session_id, sessionize, split_sessions
from spark_jobs.spark import FrozenFrames
from tests.integration.spark_jobs.checks import stages_run


def reference_sessions(rows: list[tuple], rules: SessionRules) -> set[tuple]:
    """Sessions by the Python rules: rows are (entity_id, arrival_time, partition, offset, event_time)."""
    sessions = set()
    for entity in {r[0] for r in rows}:
        ordered = sorted((r for r in rows if r[0] == entity), key=lambda r: (r[1], r[2], r[3]))
        numbers = split_sessions([r[1] for r in ordered], rules)
        for number in sorted(set(numbers)):
            members = [r for r, n in zip(ordered, numbers, strict=True) if n == number]
            started, ended = members[0][1], members[-1][1]
            sessions.add(
                (
                    session_id(entity, int(started.timestamp() * 1000)),
                    entity,
                    started,
                    ended,
                    members[0][4],
                    members[-1][4],
                    len(members),
                    (ended - started).total_seconds(),
                )
            )
    return sessions


def random_rows(seed: int) -> list[tuple]:
    """(entity_id, arrival_time, partition, offset, event_time) of 25 entities with every kind of boundary."""
    generator = random.Random(seed)
    base = datetime(2026, 2, 1, tzinfo=UTC)
    rows = []
    for e in range(25):
        clock = base + timedelta(minutes=generator.randint(0, 600))
        for i in range(generator.randint(1, 60)):
            # mostly short steps (long bursts cut by max_length), sometimes a long pause, some ties
            step = generator.choice([0, 0.001, 5, 10, 20, 29.99, 30, 31, 45, 240])
            clock += timedelta(minutes=step)
            event_time = clock - timedelta(minutes=generator.randint(0, 300))  # late, out of order
            rows.append((f"entity-{e}", clock, generator.randint(0, 2), i, event_time))
    return rows


def spark_sessions(spark, rows: list[tuple], rules: SessionRules, frozen: FrozenFrames | None) -> tuple[set, str]:
    """sessionize's sessions of ``rows``, and its optimized plan."""
    df = spark.createDataFrame(
        [(entity, arrival, "t", *rest) for entity, arrival, *rest in rows],
        "entity_id string, arrival_time timestamp, topic string, partition int, offset long, event_time timestamp",
    )
    result = sessionize(df, rules, frozen)
    sessions = {
        tuple(r[c].astimezone(UTC) if isinstance(r[c], datetime) else r[c] for c in SESSION_COLUMNS)
        for r in result.collect()
    }
    return sessions, jvm.plan(result, "optimized")


@pytest.mark.parametrize("freeze", [False, True], ids=["lazy", "frozen"])
def test_spark_sessions_equal_the_python_reference(spark_session, freeze: bool) -> None:
    rules = SessionRules(gap=timedelta(minutes=30), max_length=timedelta(hours=2))
    rows = random_rows(7)
    with FrozenFrames(spark_session) as frozen:
        actual, plan = spark_sessions(spark_session, rows, rules, frozen if freeze else None)
    expected = reference_sessions(rows, rules)
    assert any(n > 1 for *_, n, _ in expected), "the data should have multi-record sessions"
    unlimited = SessionRules(gap=rules.gap, max_length=timedelta(days=1000))
    assert len(reference_sessions(rows, unlimited)) < len(expected), "the data should hit the maximum length"
    assert actual == expected
    assert "Generate" in plan, "long bursts are cut by the fold's starts, exploded"


@pytest.mark.parametrize("seed", [3, 19, 23])
def test_a_continued_session_is_what_a_cut_from_scratch_makes(spark_session, seed: int) -> None:
    """Each entity's rows cut in two at a random point between two arrivals: the first part's sessions by
    the reference, then sessionize of the second part continuing the first part's last session from its
    row alone must give every session from that one's start on exactly as a cut of all the rows does,
    long bursts (carried across the cut) and gaps at the cut included."""
    rules = SessionRules(gap=timedelta(minutes=30), max_length=timedelta(hours=2))
    rows, rng = random_rows(seed), random.Random(seed)
    before, after = [], []
    for entity in sorted({r[0] for r in rows}):
        ordered = sorted((r for r in rows if r[0] == entity), key=lambda r: (r[1], r[2], r[3]))
        cuts = [i for i in range(1, len(ordered)) if ordered[i][1] > ordered[i - 1][1]]
        cut = rng.choice(cuts) if cuts else len(ordered)
        before += ordered[:cut]
        after += ordered[cut:]
    carried: dict[str, tuple] = {}  # per entity, its last session of the first part
    for session in reference_sessions(before, rules):
        if session[1] not in carried or session[2] > carried[session[1]][2]:
            carried[session[1]] = session
    whole = reference_sessions(rows, rules)
    expected = {s for s in whole if s[2] >= carried[s[1]][2]}
    assert any(s not in reference_sessions(before, rules) for s in expected if s[2] == carried[s[1]][2]), (
        "some carried session should be extended"
    )
    frame = spark_session.createDataFrame(
        [(entity, arrival, "t", *rest) for entity, arrival, *rest in after],
        "entity_id string, arrival_time timestamp, topic string, partition int, offset long, event_time timestamp",
    )
    stored = spark_session.createDataFrame(list(carried.values()), TABLE_SCHEMAS["sessions"])
    with FrozenFrames(spark_session) as frozen:
        result = sessionize(frame, rules, frozen, carried=stored).collect()
    actual = {
        tuple(r[c].astimezone(UTC) if isinstance(r[c], datetime) else r[c] for c in SESSION_COLUMNS) for r in result
    }
    assert actual == expected


def test_frozen_sessions_plan_no_cut_of_long_bursts_when_there_is_none(spark_session) -> None:
    """The usual batch has no burst as long as the maximum length: with its burst summaries frozen,
    sessionize leaves the cut out of the plan (it would read every record again), and its sessions
    are still the reference's."""
    rules = SessionRules(gap=timedelta(minutes=30), max_length=timedelta(days=30))
    rows = random_rows(11)
    expected = reference_sessions(rows, rules)
    assert any(n > 1 for *_, n, _ in expected), "the data should have multi-record sessions"
    with FrozenFrames(spark_session) as frozen:
        actual, plan = spark_sessions(spark_session, rows, rules, frozen)
        _, lazy_plan = spark_sessions(spark_session, rows, rules, None)
    assert actual == expected
    assert "Generate" not in plan
    assert "Generate" in lazy_plan, "without frozen summaries the cut is planned whatever the data"


def test_a_batch_compares_only_the_stored_sessions_its_anchors_can_reach(spark_session, tmp_path) -> None:
    """The sessions table holds all of history; the comparison must not read it all every batch.

    Delta skips a file when its statistics say no session in it started at or after the batch's
    earliest anchor (sessions are written in time order).
    """
    from spark_jobs.contract import TABLE_SCHEMAS
    from spark_jobs.session_changes import compare
    from spark_jobs.sinks import delta, delta_tables

    path = str(tmp_path / "sessions")
    delta_tables.create_table(spark_session, path, TABLE_SCHEMAS["sessions"])

    def sessions(start: datetime, entities: int) -> list[tuple]:
        ms = int(start.timestamp() * 1000)
        return [(session_id(f"e{i}", ms), f"e{i}", start, start, start, start, 1, 0.0) for i in range(entities)]

    old, recent = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    for rows in (sessions(old, 1000), sessions(recent, 10)):  # months apart, one file each
        spark_session.createDataFrame(rows, TABLE_SCHEMAS["sessions"]).coalesce(1).write.format("delta").mode(
            "append"
        ).save(path)
    stored = delta.table(spark_session, path).toDF()  # the snapshot is loaded before the count starts
    recomputed = spark_session.createDataFrame(sessions(recent, 10), TABLE_SCHEMAS["sessions"])
    anchors = spark_session.createDataFrame(
        [(f"e{i}", recent) for i in range(10)], "entity_id string, anchor timestamp"
    )
    earliest_us = int(recent.timestamp() * 1_000_000)

    compared, ran = stages_run(
        spark_session, "compare-reads", lambda: compare(recomputed, stored, anchors, earliest_us).collect()
    )
    assert [row["op"] for row in compared] == ["same"] * 10
    read = sum(stage.inputRecords() for stage in ran)
    assert read < 100, f"{read} stored rows read for 10 sessions: the months-old file was not skipped"


def test_records_of_two_topics_at_the_same_time_partition_and_offset_order_by_topic(spark_session) -> None:
    """Arrival order breaks ties by topic, partition and offset, as dedupe does: without the topic,
    two topics' records of an entity at the same millisecond, partition and offset came in whatever
    order Spark read them, and the session's first and last event times changed from run to run."""
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    rows = [("b", "u1", at, 0, 5, at - timedelta(hours=2)), ("a", "u1", at, 0, 5, at - timedelta(hours=1))]
    schema = "topic string, entity_id string, arrival_time timestamp, partition int, offset long, event_time timestamp"
    for ordered in (rows, rows[::-1]):
        [session] = sessionize(spark_session.createDataFrame(ordered, schema).coalesce(1), SessionRules()).collect()
        first, last = session["first_event_time"].astimezone(UTC), session["last_event_time"].astimezone(UTC)
        assert (first, last) == (at - timedelta(hours=1), at - timedelta(hours=2)), ordered
