"""Anchors and the session comparison on small Spark frames (no Kafka, no Delta, no PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs import dedupe, session_changes
from spark_jobs.contract import TABLE_SCHEMAS, SessionRules
from spark_jobs.sessionize import session_id, sessionize

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RULES = SessionRules()  # gap 30 min


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def micros(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000)


def events(spark, rows: list[tuple[int, float, str]]):
    """(offset, minutes after T0, entity_id) rows; each its own event_id."""
    return spark.createDataFrame(
        [("t", 0, o, at(m), f"e{o}", entity, "click", at(m), None) for o, m, entity in rows], TABLE_SCHEMAS["events"]
    )


def sessions(spark, rows: list[tuple[str, float, float, int]]):
    """(entity_id, start minute, end minute, event count) stored sessions."""
    return spark.createDataFrame(
        [
            (
                session_id(entity, int(at(start).timestamp() * 1000)),
                entity,
                at(start),
                at(end),
                at(start),
                at(end),
                count,
                (end - start) * 60.0,
            )
            for entity, start, end, count in rows
        ],
        TABLE_SCHEMAS["sessions"],
    )


def test_the_anchor_is_the_start_of_a_session_a_new_record_can_join(spark_session) -> None:
    stored = sessions(spark_session, [("a", 0, 10, 2), ("b", 0, 10, 2)])
    # a: 25 minutes after its session ended (within the gap); b: 45 minutes after (beyond it).
    ranked = dedupe.rank(events(spark_session, [(5, 35, "a"), (6, 55, "b")]), events(spark_session, []))
    anchors = session_changes.touched(session_changes.entities(ranked, stored, RULES)).selectExpr(
        "entity_id", "unix_micros(anchor) AS us"
    )
    # Compared as epoch microseconds: collected timestamps come back naive, in the driver's time zone.
    assert {r["entity_id"]: r["us"] for r in anchors.collect()} == {"a": micros(at(0)), "b": micros(at(55))}


def test_compare_labels_inserted_updated_deleted_and_unchanged_sessions(spark_session) -> None:
    # Stored: a [0, 10] with 2 events and a [20, 25] with 1; c [0, 0] with 1.
    stored = sessions(spark_session, [("a", 0, 10, 2), ("a", 20, 25, 1), ("c", 0, 0, 1)])
    # Recomputed for a: one session [0, 25] with 4 events (a record at minute 15 joined both);
    # c: unchanged; d: new.
    events_now = events(
        spark_session,
        [(0, 0, "a"), (1, 10, "a"), (2, 15, "a"), (3, 25, "a"), (4, 0, "c"), (5, 0, "d")],
    )
    recomputed = sessionize(events_now.select(*session_changes.SESSIONIZE_COLUMNS), RULES)
    anchors = spark_session.createDataFrame(
        [("a", at(0)), ("c", at(0)), ("d", at(0))], "entity_id string, anchor timestamp"
    )
    compared = session_changes.compare(recomputed, stored, anchors).collect()
    ops = {(r["session_id"], r["op"]) for r in compared}
    a_first = session_id("a", int(at(0).timestamp() * 1000))
    a_second = session_id("a", int(at(20).timestamp() * 1000))
    c = session_id("c", int(at(0).timestamp() * 1000))
    d = session_id("d", int(at(0).timestamp() * 1000))
    assert ops == {(a_first, "update"), (a_second, "delete"), (c, "same"), (d, "insert")}
    # What a batch observes as it freezes the comparison: the counts, and the IDs its write names.
    [counted] = (
        session_changes.compare(recomputed, stored, anchors).agg(*session_changes.op_counts(with_ids=True)).collect()
    )
    assert (counted["changed"], counted["inserted"]) == (2, 1)
    assert sorted(counted["written"]) == sorted([a_first, a_second, d])
    surviving = session_changes.surviving(session_changes.compare(recomputed, stored, anchors)).collect()
    assert {r["session_id"]: r["event_count"] for r in surviving} == {a_first: 4, c: 1, d: 1}


def test_stored_sessions_before_the_anchor_are_left_alone(spark_session) -> None:
    stored = sessions(spark_session, [("a", 0, 10, 2)])
    recomputed = sessionize(events(spark_session, [(9, 120, "a")]).select(*session_changes.SESSIONIZE_COLUMNS), RULES)
    anchors = spark_session.createDataFrame([("a", at(120))], "entity_id string, anchor timestamp")
    ops = [r["op"] for r in session_changes.compare(recomputed, stored, anchors).collect()]
    assert ops == ["insert"], "the session before the anchor must be neither compared nor deleted"


def test_a_takeover_touches_the_entity_that_loses_the_event(spark_session) -> None:
    # e1 is stored for entity a; an earlier copy of e1 arrives for entity b.
    stored_events = spark_session.createDataFrame(
        [("t", 0, 0, at(10), "e1", "a", "click", at(10), None)], TABLE_SCHEMAS["events"]
    )
    batch = spark_session.createDataFrame(
        [("t", 0, 1, at(0), "e1", "b", "click", at(0), None)], TABLE_SCHEMAS["events"]
    )
    ranked = dedupe.rank(batch, stored_events)
    stored = sessions(spark_session, [("a", 10, 10, 1)])
    anchors = session_changes.touched(session_changes.entities(ranked, stored, RULES)).selectExpr(
        "entity_id", "unix_micros(anchor) AS us"
    )
    assert {r["entity_id"]: r["us"] for r in anchors.collect()} == {"a": micros(at(10)), "b": micros(at(0))}


def test_a_takeover_committed_by_an_earlier_attempt_still_anchors_the_displaced_entity(spark_session) -> None:
    """Retry after the takeover of e1 committed: events holds B's copy (replayed), duplicates A's."""
    schema = TABLE_SCHEMAS["duplicates"]
    stored_events = events(spark_session, [(2, 0, "B")]).selectExpr("topic", "partition", "offset", "arrival_time",
                                                                    "'e1' AS event_id", "entity_id", "event_type",
                                                                    "event_time", "properties")  # fmt: skip
    duplicates = spark_session.createDataFrame([("t", 0, 0, at(10), "e1", "A")], schema)
    ranked = dedupe.rank(stored_events, stored_events)  # the batch's record, as events holds it
    displaced = dedupe.copies_in(duplicates, stored_events)
    stored = sessions(spark_session, [("A", 11, 11, 1), ("B", 0, 0, 1)])
    anchors = session_changes.touched(session_changes.entities(ranked, stored, RULES, displaced)).selectExpr(
        "entity_id", "unix_micros(anchor)"
    )
    assert {r[0]: r[1] for r in anchors.collect()} == {"A": micros(at(10)), "B": micros(at(0))}
    without = session_changes.touched(session_changes.entities(ranked, stored, RULES)).select("entity_id").collect()
    assert [r[0] for r in without] == ["B"], "without the duplicates row, A would be left stale in PostgreSQL"


def test_an_entity_whose_new_records_all_follow_its_last_session_continues_it_without_reading_events(
    spark_session,
) -> None:
    """a: new records after its last session ended (within the gap): that session is carried, its anchor its
    start, no event read again. b: a new record before its last session ended (a backfill): read again from
    the open sessions' start. c: nothing stored. d: a gap after its last session: nothing carried, nothing read.
    e: a record the table holds already (a retry): read again. Without continuing, every one is read again, a
    from its first open session's start."""
    stored = sessions(spark_session, [("a", 0, 10, 2), ("a", 15, 20, 3), ("b", 0, 10, 2), ("d", 0, 10, 2),
                                      ("e", 0, 10, 2)])  # fmt: skip
    stored_events = events(spark_session, [(50, 10, "e")])
    batch = events(spark_session, [(5, 35, "a"), (6, 40, "a"), (7, 5, "b"), (8, 3, "c"), (9, 90, "d"), (50, 10, "e")])
    ranked = dedupe.rank(batch, stored_events)

    def decided(continuing: bool) -> dict[str, tuple]:
        rows = session_changes.entities(ranked, stored, RULES, continuing=continuing).selectExpr(
            "entity_id", "unix_micros(anchor) AS us", "reread", "carried.event_count AS carried"
        )
        return {r["entity_id"]: (r["us"], r["reread"], r["carried"]) for r in rows.collect()}

    assert decided(True) == {
        "a": (micros(at(15)), False, 3),
        "b": (micros(at(0)), True, None),
        "c": (micros(at(3)), False, None),
        "d": (micros(at(90)), False, None),
        "e": (micros(at(0)), True, None),
    }
    assert {e: (us, reread) for e, (us, reread, _) in decided(False).items()} == {
        "a": (micros(at(0)), True), "b": (micros(at(0)), True), "c": (micros(at(3)), True),
        "d": (micros(at(90)), True), "e": (micros(at(0)), True),
    }  # fmt: skip
