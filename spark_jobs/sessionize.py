"""Sessions: per entity, in arrival order, split by an inactivity gap and a maximum length.

Arrival order is (Kafka timestamp, partition, offset): it never changes when records are replayed
or when a late record (earlier *event* time) shows up, so neither do session boundaries or IDs.

``session_id`` formula, the same in Python, Spark SQL and PostgreSQL::

    session_id = first 32 hex digits of SHA-256( utf8( entity_id || '|' || started_at_ms ) )

where ``started_at_ms`` is the Kafka timestamp of the session's first record in epoch
milliseconds, written in decimal. See :func:`session_id`, :data:`SESSION_ID_SPARK_SQL` and
:data:`SESSION_ID_POSTGRES_SQL`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

SESSION_ID_SPARK_SQL = "substr(sha2(concat(entity_id, '|', cast(unix_millis(started_at) AS string)), 256), 1, 32)"
SESSION_ID_POSTGRES_SQL = (
    "left(encode(sha256(convert_to(entity_id || '|' || "
    "(extract(epoch FROM started_at) * 1000)::bigint::text, 'UTF8')), 'hex'), 32)"
)

SESSION_COLUMNS = (
    "session_id",
    "entity_id",
    "started_at",
    "ended_at",
    "first_event_time",
    "last_event_time",
    "event_count",
    "duration_seconds",
)
SESSION_SCHEMA = (
    "session_id string, entity_id string, started_at timestamp, ended_at timestamp, "
    "first_event_time timestamp, last_event_time timestamp, event_count long, duration_seconds double"
)


def session_id(entity_id: str, started_at_ms: int) -> str:
    """The stable ID of the session of ``entity_id`` whose first record arrived at ``started_at_ms``."""
    return hashlib.sha256(f"{entity_id}|{started_at_ms}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SessionRules:
    gap: timedelta = timedelta(minutes=30)
    max_length: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        if self.gap <= timedelta(0):
            raise ValueError(f"session gap must be positive, got {self.gap}")
        if self.max_length < self.gap:
            raise ValueError(f"maximum session length {self.max_length} is shorter than the gap {self.gap}")


def split_sessions(arrivals: list[datetime], rules: SessionRules) -> list[int]:
    """Session number of each arrival (``arrivals`` sorted in arrival order).

    A new session starts when the gap since the previous record exceeds ``rules.gap``, or when the
    record arrives ``rules.max_length`` or more after the session's first record.
    """
    numbers: list[int] = []
    number, start, previous = -1, None, None
    for arrival in arrivals:
        if start is None or arrival - previous > rules.gap or arrival - start >= rules.max_length:
            number, start = number + 1, arrival
        numbers.append(number)
        previous = arrival
    return numbers


def _sessions_of_entity(events: pd.DataFrame, rules: SessionRules) -> pd.DataFrame:
    import pandas as pd

    events = events.sort_values(["arrival_time", "partition", "offset"], kind="mergesort")
    events["session"] = split_sessions(list(events["arrival_time"]), rules)
    grouped = events.groupby("session", sort=True)
    sessions = pd.DataFrame(
        {
            "entity_id": grouped["entity_id"].first(),
            "started_at": grouped["arrival_time"].first(),
            "ended_at": grouped["arrival_time"].last(),
            "first_event_time": grouped["event_time"].first(),
            "last_event_time": grouped["event_time"].last(),
            "event_count": grouped.size().astype("int64"),
        }
    )
    sessions["duration_seconds"] = (sessions["ended_at"] - sessions["started_at"]).dt.total_seconds()
    started_ms = sessions["started_at"].map(lambda t: int(pd.Timestamp(t).value // 1_000_000))
    sessions["session_id"] = [session_id(e, ms) for e, ms in zip(sessions["entity_id"], started_ms, strict=True)]
    return sessions[list(SESSION_COLUMNS)]


def sessionize(events: DataFrame, rules: SessionRules) -> DataFrame:
    """Accepted events (entity_id, arrival_time, partition, offset, event_time) -> sessions.

    Every event of an entity from the first one given must be present: the caller chooses where
    to start (see ``writer``), sessions before that point are not recomputed.
    """
    return (
        events.select("entity_id", "arrival_time", "partition", "offset", "event_time")
        .groupBy("entity_id")
        .applyInPandas(lambda pdf: _sessions_of_entity(pdf, rules), schema=SESSION_SCHEMA)
    )
