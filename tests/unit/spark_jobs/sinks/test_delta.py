"""The Delta sink on its own: local Spark and a temporary lake, no Kafka and no PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.offsets import PartitionRange
from spark_jobs.sinks import delta, delta_tables

T0 = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


@pytest.fixture
def lake(settings, tmp_path):
    """Settings whose lake is a fresh temporary folder."""
    return replace(settings, lake_root=str(tmp_path / "lake"))


def events(spark, rows: list[tuple[str, int, int, str]]):
    """``events`` rows from (topic, partition, offset, event_id)."""
    return spark.createDataFrame(
        [(t, p, o, T0, e, "u1", "click", T0, None) for t, p, o, e in rows], TABLE_SCHEMAS["events"]
    )


def test_ensure_tables_creates_the_missing_tables_once(spark_session, lake) -> None:
    assert sorted(delta_tables.ensure_tables(spark_session, lake)) == sorted(TABLE_SCHEMAS)
    assert delta_tables.ensure_tables(spark_session, lake) == []
    versions = delta.table_versions(spark_session, lake)
    assert versions == dict.fromkeys(TABLE_SCHEMAS, 0)
    for name, schema in TABLE_SCHEMAS.items():
        columns = delta.table(spark_session, lake.table_path(name)).toDF().columns
        assert columns == [column.split(" ")[0] for column in schema.split(", ")]


def test_insert_new_adds_only_what_the_table_lacks_and_commits_nothing_when_it_has_all(spark_session, lake) -> None:
    delta_tables.ensure_tables(spark_session, lake)
    path = lake.table_path("events")
    delta.append(events(spark_session, [("a", 0, 0, "e0"), ("a", 0, 1, "e1")]), path)
    batch = events(spark_session, [("a", 0, 1, "e1"), ("a", 0, 2, "e2")])

    delta.insert_new(spark_session, path, batch)
    after_first = delta.table(spark_session, path).history(1).first()["version"]
    delta.insert_new(spark_session, path, batch)  # a retry of the same write

    stored = sorted(r["offset"] for r in delta.table(spark_session, path).toDF().collect())
    assert stored == [0, 1, 2]
    assert delta.table(spark_session, path).history(1).first()["version"] == after_first


def test_held_names_the_tables_holding_records_of_the_ranges(spark_session, lake) -> None:
    delta_tables.ensure_tables(spark_session, lake)
    delta.append(events(spark_session, [("a", 0, o, f"e{o}") for o in range(5)]), lake.table_path("events"))
    duplicates = spark_session.createDataFrame([("a", 0, 7, T0, "e1", "u1")], TABLE_SCHEMAS["duplicates"])
    delta.append(duplicates, lake.table_path("duplicates"))

    def held(r: PartitionRange) -> list[tuple]:
        return sorted(tuple(row) for row in delta.held(spark_session, lake, [r]).collect())

    in_a = [("a", 0, 3, "events"), ("a", 0, 4, "events"), ("a", 0, 7, "duplicates")]
    assert held(PartitionRange("a", 0, 3, 10)) == in_a
    assert held(PartitionRange("a", 1, 0, 10)) == []
    assert held(PartitionRange("b", 0, 0, 10)) == []
    assert delta.offset_floor(spark_session, lake, "a") == 8
    assert delta.offset_floor(spark_session, lake, "b") == 0


def test_a_takeover_moves_the_stored_copy_out_in_one_commit_and_again_changes_nothing(spark_session, lake) -> None:
    delta_tables.ensure_tables(spark_session, lake)
    path = lake.table_path("events")
    delta.append(events(spark_session, [("a", 0, 5, "e1")]), path)
    winners = events(spark_session, [("a", 1, 0, "e1")])
    displaced = spark_session.createDataFrame([("a", 0, 5)], "topic string, partition int, offset long")
    since_us = int(T0.timestamp() * 1_000_000)

    delta.take_over(spark_session, path, winners, displaced, since_us)
    first = delta.fingerprint(spark_session, lake, "events")
    delta.take_over(spark_session, path, winners, displaced, since_us)

    rows = [(r["partition"], r["offset"]) for r in delta.table(spark_session, path).toDF().collect()]
    assert rows == [(1, 0)]
    assert delta.fingerprint(spark_session, lake, "events") == first


def test_range_filter_selects_exactly_the_half_open_ranges(spark_session) -> None:
    rows = events(spark_session, [(t, p, o, "e") for t in ("a", "b") for p in (0, 1) for o in range(6)])
    ranges = [PartitionRange("a", 0, 2, 4), PartitionRange("b", 1, 5, 6)]
    picked = sorted((r["topic"], r["partition"], r["offset"]) for r in delta.within(rows, ranges).collect())
    assert picked == [("a", 0, 2), ("a", 0, 3), ("b", 1, 5)]


def session(sid: str, count: int) -> tuple:
    return (sid, "u1", T0, T0, T0, T0, count, 0.0)


@pytest.mark.parametrize(
    ("replaced_at_most", "written_ids"),
    [(0, None), (10, None), (10, ["s1", "s2", "s5"])],
    ids=["merge", "replace", "replace-observed-ids"],
)
def test_session_changes_are_one_commit_and_the_same_again_keeps_the_rows(
    spark_session, lake, replaced_at_most, written_ids
):
    """Updates, deletes and inserts in one commit, by a MERGE (many changes) or by replacing the named
    sessions (few; their IDs collected, or as the comparison observed them); either way the unchanged
    sessions stay, and the same answer again keeps the rows."""
    delta_tables.ensure_tables(spark_session, lake)
    path = lake.table_path("sessions")
    stored = [session("s1", 1), session("s2", 1), session("s3", 1), session("s4", 1)]
    delta.append(spark_session.createDataFrame(stored, TABLE_SCHEMAS["sessions"]), path)
    compared = spark_session.createDataFrame(
        [(*session("s1", 2), "update"), ("s2", *[None] * 7, "delete"), (*session("s3", 1), "same"),
         (*session("s5", 1), "insert")],
        f"{TABLE_SCHEMAS['sessions']}, op string",
    )  # fmt: skip
    expected = {("s1", 2), ("s3", 1), ("s4", 1), ("s5", 1)}

    def table() -> set:
        return {(r.session_id, r.event_count) for r in delta.table(spark_session, path).toDF().collect()}

    for _ in range(2):
        before = delta.table(spark_session, path).history(1).first()["version"]
        delta.apply_session_changes(
            spark_session, path, compared, 2, 1, replaced_at_most=replaced_at_most, written_ids=written_ids
        )
        assert table() == expected
        assert delta.table(spark_session, path).history(1).first()["version"] == before + 1


def test_a_tables_state_loaded_ahead_is_what_its_next_reader_and_writer_use(spark_session, lake) -> None:
    from pathlib import Path

    from spark_jobs.jvm import load_table_state, newest_query_ids

    def executions(work) -> int:
        before, _ = newest_query_ids(spark_session)
        work()
        return newest_query_ids(spark_session)[0] - before

    path = lake.table_path("events")
    with delta.states_loaded_ahead(spark_session, lake, ("events",)):  # no table yet: nothing, and no error
        pass
    assert not Path(path).exists()
    delta_tables.ensure_tables(spark_session, lake)

    def append(offset: int) -> None:
        events(spark_session, [("t", 0, offset, f"e{offset}")]).write.format("delta").mode("append").save(path)

    # A new version's state is computed by whoever asks first (an idempotent write asks for its
    # transaction versions): one Spark execution at least.
    append(1)
    assert executions(lambda: load_table_state(spark_session, path)) >= 1
    # Loaded ahead, the next reader and writer of that version find it computed.
    append(2)
    with delta.states_loaded_ahead(spark_session, lake, ("events",)):
        pass
    assert executions(lambda: load_table_state(spark_session, path)) == 0
