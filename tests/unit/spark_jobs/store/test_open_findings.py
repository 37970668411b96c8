"""Which earlier findings a run closes, finds again, or carries over (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from spark_jobs.store.findings import CHANGED, Gap, RangeCheck, SessionDifference, SessionsSummary, finding_key
from spark_jobs.store.open_findings import OpenFinding, follow_up
from spark_jobs.store.report import Report

T0 = datetime(2026, 11, 26, tzinfo=UTC)
SAME = SessionsSummary(10, 99)
RANGE = {"kind": "range", "outcome": "missing", "pipeline": "ingest:t", "batch_id": 3, "topic": "t", "partition": 0,
         "start": 10, "end": 20}  # fmt: skip
GAP = {"kind": "gap", "pipeline": "ingest:t", "topic": "t", "partition": 1, "start": 5, "end": 9, "after_batch": 1,
       "before_batch": 3}  # fmt: skip
EVENTS = {"kind": "sessions_events", "entity_count": 1, "session_count": 1, "sessions": {"e1": ["s1"]}}


def opened(finding_id: int, finding: dict) -> OpenFinding:
    return OpenFinding(finding_id, cast(str, finding_key(finding)), finding, "found", T0)  # every one here is kept open


def report(checks=(), gaps=(), differences=(), used_spark=True, postgres=SAME) -> Report:
    return Report("now", list(checks), list(gaps), SAME, postgres, list(differences), used_spark=used_spark)


def check(sink_records: int) -> RangeCheck:
    """The range of RANGE checked again against its verification (10 rows)."""
    return RangeCheck("ingest:t", 3, "t", 0, 10, 20, sink_records, 1, CHANGED, None, None, 10, 1)


def test_a_run_that_checked_nothing_closes_nothing() -> None:
    earlier = [opened(1, RANGE), opened(2, EVENTS)]
    follow = follow_up(earlier, report(used_spark=False), None)
    assert [f.finding_id for f, _ in follow.carried] == [1, 2] and not follow.closed and follow.open_count == 2


def test_a_range_checked_again_closes_when_it_matches_and_is_seen_again_when_it_does_not() -> None:
    [(closed, why)] = follow_up([opened(1, RANGE)], report([check(10)]), None).closed
    assert closed.finding_id == 1 and why == "checked again: fixed"
    assert (
        follow_up([opened(1, RANGE)], report([check(10)]), "r0").closed[0][1] == "the repair's re-check found it fixed"
    )
    follow = follow_up([opened(1, RANGE)], report([check(9)]), None)
    assert [f.finding_id for f, _ in follow.seen] == [1] and not follow.opened and follow.open_count == 1


def test_a_range_expired_since_stays_open_for_an_operator() -> None:
    # Retention removed its start and it was never verified: nothing to count it against.
    follow = follow_up(
        [opened(1, RANGE)], report([RangeCheck("ingest:t", 3, "t", 0, 10, 20, 9, 1, "new", None, 15)]), "r0"
    )
    [(f, finding)] = follow.carried
    assert f.finding_id == 1 and finding["outcome"] == "expired" and finding["was"] == "missing"


def test_gaps_and_sessions_between_the_sinks_close_when_a_run_no_longer_finds_them() -> None:
    sinks = {"kind": "sessions_totals", "delta": 10, "delta_checksum": 1, "postgres": 9, "postgres_checksum": 2}
    earlier = [opened(1, GAP), opened(2, sinks)]
    assert len(follow_up(earlier, report(used_spark=False), None).closed) == 2
    still = follow_up(earlier, report(gaps=[Gap("ingest:t", "t", 1, 5, 9, 1, 3)], postgres=SessionsSummary(9, 2)), None)
    assert sorted(f.finding_id for f, _ in still.seen) == [1, 2] and not still.opened


def test_sessions_that_differ_from_events_close_on_a_run_with_spark_or_on_a_repair_when_not_all_were_named() -> None:
    assert follow_up([opened(1, EVENTS)], report(used_spark=True), None).closed
    unnamed = opened(1, {**EVENTS, "entity_count": 20_000})
    assert follow_up([unnamed], report(used_spark=True), None).carried
    assert follow_up([unnamed], report(used_spark=True), "r0").closed
    again = follow_up([opened(1, EVENTS)], report(differences=[SessionDifference.of("events", [("e1", "s1")])]), None)
    assert [f.finding_id for f, _ in again.seen] == [1]


def test_what_is_not_kept_open_has_no_key() -> None:
    assert finding_key({**RANGE, "outcome": "expired"}) is None
    assert finding_key({"kind": "lag", "topic": "t", "partition": 0}) is None
    assert finding_key(RANGE) == "range ingest:t 3 t 0" and finding_key(GAP) == "gap ingest:t t 1 5 9"
