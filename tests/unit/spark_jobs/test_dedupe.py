"""First-arrival ranking on small Spark frames (no Kafka, no Delta, no PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs import dedupe, jvm
from spark_jobs.contract import TABLE_SCHEMAS

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def events(spark, rows: list[tuple[int, int, str, str]]):
    """(offset, minutes after T0, event_id, entity_id) rows of partition 0 of topic 't'."""
    return spark.createDataFrame(
        [
            ("t", 0, offset, T0 + timedelta(minutes=minutes), event_id, entity, "click", T0, None)
            for offset, minutes, event_id, entity in rows
        ],
        TABLE_SCHEMAS["events"],
    )


def offsets(df) -> list[int]:
    return sorted(row["offset"] for row in df.collect())


def losers(ranked) -> list[int]:
    """The duplicates rows a batch implies: its later copies (written after events) and the stored
    rows its takeovers displace (written before), never the same record in both."""
    later, displaced = offsets(dedupe.later_copies(ranked)), offsets(dedupe.displaced_copies(ranked))
    assert not set(later) & set(displaced), (later, displaced)
    return sorted(later + displaced)


@pytest.fixture
def rank(spark_session):
    def run(batch: list[tuple], stored: list[tuple]):
        ranked = dedupe.rank(events(spark_session, batch), events(spark_session, stored)).cache()
        return ranked, dedupe.count(ranked)

    return run


def test_the_first_arrival_in_a_batch_wins_and_later_copies_are_duplicates(rank) -> None:
    ranked, counts = rank([(0, 0, "e1", "a"), (1, 1, "e2", "a"), (2, 2, "e1", "a")], [])
    assert offsets(dedupe.first_arrivals(ranked)) == [0, 1]
    assert losers(ranked) == [2]
    assert (counts.accepted, counts.duplicates, counts.first_arrivals, counts.takeovers) == (2, 1, 2, 0)
    assert (counts.losers_from, counts.losers_to) == (2, 2)


def test_a_replayed_record_is_neither_new_nor_a_duplicate(rank) -> None:
    ranked, counts = rank([(0, 0, "e1", "a")], [(0, 0, "e1", "a")])
    assert offsets(dedupe.first_arrivals(ranked)) == []
    assert losers(ranked) == []
    assert (counts.accepted, counts.duplicates, counts.losers) == (1, 0, 0)


def test_a_later_copy_of_a_stored_event_is_a_duplicate(rank) -> None:
    ranked, counts = rank([(3, 5, "e1", "a")], [(0, 0, "e1", "a")])
    assert losers(ranked) == [3]
    assert (counts.accepted, counts.duplicates, counts.first_arrivals, counts.takeovers) == (0, 1, 0, 0)


def test_an_earlier_copy_found_later_takes_over_the_stored_row(rank) -> None:
    # CreateTime topics: offset 1 arrived (by its timestamp) before the stored offset 0.
    ranked, counts = rank([(1, 0, "e1", "a")], [(0, 10, "e1", "a")])
    assert offsets(dedupe.takeovers(ranked)) == [1]
    assert losers(ranked) == [0], "the displaced stored row becomes a duplicate"
    assert offsets(dedupe.displaced_copies(ranked)) == [0] and offsets(dedupe.later_copies(ranked)) == []
    assert (counts.accepted, counts.duplicates, counts.first_arrivals, counts.takeovers) == (1, 0, 0, 1)
    # The displaced row, as the batch writes it down before its first write (``moves``).
    displaced = dedupe.displaced(ranked).selectExpr("topic", "partition", "offset", "unix_micros(arrival_time)")
    assert [tuple(r) for r in counts.displaced] == [tuple(r) for r in displaced.collect()]
    assert [r[2] for r in counts.displaced] == [0]


def test_ties_in_arrival_time_are_broken_by_partition_then_offset(rank) -> None:
    ranked, _ = rank([(7, 0, "e1", "a"), (4, 0, "e1", "a")], [])
    assert offsets(dedupe.first_arrivals(ranked)) == [4]
    assert losers(ranked) == [7]


def test_a_stored_record_replayed_beside_an_earlier_copy_is_one_duplicate(rank) -> None:
    # Stored: e1@2 (a backfill ran ahead). The batch replays e1@2 and brings e1@0, which arrived first.
    ranked, counts = rank(
        [(0, 0, "e1", "a"), (1, 0, "x", "a"), (2, 0, "e1", "a")], [(1, 0, "x", "a"), (2, 0, "e1", "a")]
    )
    assert offsets(dedupe.takeovers(ranked)) == [0]
    assert losers(ranked) == [2], "offset 2 is one duplicate row, not two"
    assert offsets(dedupe.displaced_copies(ranked)) == [2], "stored: moved before the events write"
    assert (counts.accepted, counts.duplicates) == (2, 1)


# The dedupe horizon: only stored copies that arrived at or after ``stored_since_us`` are looked up.
DAY_MINUTES = 24 * 60


def since(minutes: int) -> int:
    """Epoch microseconds ``minutes`` after T0."""
    return int((T0 + timedelta(minutes=minutes)).timestamp() * 1_000_000)


def test_a_copy_beyond_the_horizon_is_a_new_event(spark_session) -> None:
    stored = [(0, 0, "e1", "a")]
    batch = [(1, 40 * DAY_MINUTES, "e1", "a")]
    ranked = dedupe.rank(events(spark_session, batch), events(spark_session, stored), since(10 * DAY_MINUTES))
    counts = dedupe.count(ranked)
    assert offsets(dedupe.first_arrivals(ranked)) == [1]
    assert (counts.accepted, counts.duplicates, counts.losers) == (1, 0, 0)


def test_a_stored_copy_behind_an_older_stored_copy_stays_an_event(spark_session) -> None:
    # Both generations are events rows (the second arrived beyond the first's horizon). A batch that
    # sees both (a backfill of old ranges) adds a third copy: only that one is a duplicate.
    stored = [(0, 0, "e1", "a"), (1, 40 * DAY_MINUTES, "e1", "a")]
    batch = [(2, 41 * DAY_MINUTES, "e1", "a")]
    ranked = dedupe.rank(events(spark_session, batch), events(spark_session, stored), since(-DAY_MINUTES))
    counts = dedupe.count(ranked)
    assert losers(ranked) == [2]
    assert offsets(dedupe.displaced(ranked)) == []
    assert (counts.accepted, counts.duplicates, counts.takeovers) == (0, 1, 0)


def test_a_replayed_second_generation_stays_an_event(spark_session) -> None:
    stored = [(0, 0, "e1", "a"), (1, 40 * DAY_MINUTES, "e1", "a")]
    ranked = dedupe.rank(events(spark_session, stored[1:]), events(spark_session, stored), since(-DAY_MINUTES))
    counts = dedupe.count(ranked)
    assert losers(ranked) == []
    assert (counts.accepted, counts.duplicates, counts.first_arrivals) == (1, 0, 0)


def test_an_earlier_copy_displaces_every_stored_copy_it_sees(spark_session) -> None:
    stored = [(0, 10, "e1", "a"), (1, 40 * DAY_MINUTES, "e1", "a")]
    batch = [(2, 0, "e1", "b")]
    ranked = dedupe.rank(events(spark_session, batch), events(spark_session, stored), since(-DAY_MINUTES))
    counts = dedupe.count(ranked)
    assert offsets(dedupe.takeovers(ranked)) == [2]
    assert offsets(dedupe.displaced(ranked)) == [0, 1]
    assert losers(ranked) == [0, 1]
    assert counts.takeovers_since_us == since(0)


def test_the_lookup_reads_only_the_stored_columns_the_ranking_uses(spark_session, tmp_path) -> None:
    # The lookup reads every stored row within the horizon; the payload columns are most of its bytes.
    events(spark_session, [(0, 10, "e1", "a")]).write.parquet(str(tmp_path / "events"))
    stored = spark_session.read.parquet(str(tmp_path / "events"))
    ranked = dedupe.rank(events(spark_session, [(1, 0, "e1", "b")]), stored)
    plan = jvm.plan(ranked)
    scans = [line.split("FileScan parquet [")[1].split("]")[0] for line in plan.splitlines() if "FileScan" in line]
    assert len(scans) == 1, plan
    assert sorted(column.split("#")[0] for column in scans[0].split(",")) == [
        "arrival_time", "entity_id", "event_id", "offset", "partition", "topic",
    ]  # fmt: skip
    assert offsets(dedupe.takeovers(ranked)) == [1]
    assert [tuple(row)[:3] for row in dedupe.displaced(ranked).collect()] == [("t", 0, 0)]


def test_the_ranking_sorts_its_rows_once(spark_session) -> None:
    # Every window of the ranking partitions by event_id; the copies of one record are found as
    # peers in arrival order, so no second sort by coordinates is planned.
    ranked = dedupe.rank(events(spark_session, [(1, 0, "e1", "b")]), events(spark_session, [(0, 10, "e1", "a")]))
    plan = jvm.plan(ranked)
    window_sorts = [line for line in plan.splitlines() if " Sort [" in line and "offset" in line]
    assert len(window_sorts) == 1, plan  # the lookup's semi-join sorts by event_id alone
    assert offsets(dedupe.takeovers(ranked)) == [1]
