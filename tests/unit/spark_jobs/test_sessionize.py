import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs.contract import SessionRules
from spark_jobs.planning import parse_offsets, parse_partitions
from spark_jobs.sessionize import session_id, split_sessions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def minutes(*offsets: float) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


def test_a_gap_longer_than_the_limit_starts_a_new_session() -> None:
    assert split_sessions(minutes(0, 10, 40, 71, 75), SessionRules(gap=timedelta(minutes=30))) == [0, 0, 0, 1, 1]


def test_a_gap_of_exactly_the_limit_continues_the_session() -> None:
    assert split_sessions(minutes(0, 30), SessionRules(gap=timedelta(minutes=30))) == [0, 0]


def test_maximum_length_cuts_a_busy_session() -> None:
    rules = SessionRules(gap=timedelta(minutes=30), max_length=timedelta(hours=1))
    # Every 20 minutes for 2.5 hours: never a gap, cut at each hour from the session start.
    assert split_sessions(minutes(0, 20, 40, 60, 80, 100, 120, 140), rules) == [0, 0, 0, 1, 1, 1, 2, 2]


def test_session_id_is_the_documented_formula() -> None:
    started_ms = int(T0.timestamp() * 1000)
    expected = hashlib.sha256(f"entity-1|{started_ms}".encode()).hexdigest()[:32]
    assert session_id("entity-1", started_ms) == expected
    assert len(expected) == 32
    assert session_id("entity-1", started_ms + 1) != expected


def test_rules_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="gap must be positive"):
        SessionRules(gap=timedelta(0))
    with pytest.raises(ValueError, match="shorter than the gap"):
        SessionRules(gap=timedelta(hours=2), max_length=timedelta(hours=1))


def test_offsets_argument_parses_and_rejects_bad_input() -> None:
    assert parse_offsets("0:100-200, 2:0-5") == {0: (100, 200), 2: (0, 5)}
    with pytest.raises(ValueError, match="write PARTITION:START-END"):
        parse_offsets("0:100")
    with pytest.raises(ValueError, match="no offset ranges"):
        parse_offsets(" , ")


def test_partitions_argument_parses_and_rejects_bad_input() -> None:
    assert parse_partitions(" 2,0, 2") == [0, 2]
    with pytest.raises(ValueError, match="separated by commas"):
        parse_partitions("0-2")
    with pytest.raises(ValueError, match="name at least one"):
        parse_partitions(" , ")
