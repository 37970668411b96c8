"""The message contract and the shape of every sink table, in one place.

Kafka key: ``entity_id``. Value: a JSON object with ``event_id``, ``entity_id``, ``event_type``
(strings, required), ``event_time`` (ISO-8601 with a UTC offset, required) and ``properties`` (an
object, optional). The arrival time is the Kafka record timestamp. A record is identified by its
coordinates (topic, partition, offset); every committed record lands in exactly one of the record
tables (``events``, ``duplicates``, ``quarantine``). See docs/design.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from spark_jobs.errors import ConfigError

# The largest value accepted; larger ones are quarantined as "oversized".
MAX_VALUE_BYTES = 64 * 1024
# The longest entity_id accepted, in UTF-8 bytes: PostgreSQL indexes it (a btree row must stay
# under about 2.7 KB). Longer ones, and ones with a NUL character (PostgreSQL text cannot hold
# one), are quarantined. Any other character, tabs and newlines included, is ordinary text.
MAX_ENTITY_ID_BYTES = 1024
# The event times both sinks store, in UTC: Spark parses years 0 and 10000 (``9999-12-31T23:59:59-01:00``
# is 10000-01-01 in UTC), and PostgreSQL's COPY refuses what Spark writes for them. Outside, quarantined.
EARLIEST_EVENT_TIME_US = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
LATEST_EVENT_TIME_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z

COORDINATES = ("topic", "partition", "offset")
EVENT_COLUMNS = (
    *COORDINATES,
    "arrival_time",
    "event_id",
    "entity_id",
    "event_type",
    "event_time",
    "properties",
)
# What a batch's rows carry beside the events' columns while it is written (the record, its check,
# its ranking: dedupe.RANK_COLUMNS; a MERGE's op): a contract's typed column takes none of these names.
WORKING_COLUMNS = (
    "key",
    "value",
    "quarantine_reason",
    "timestamp_type",
    "previous_arrival",
    "checked",
    "event_ts",
    "properties_variant",
    "in_batch",
    "rank",
    "has_stored",
    "stored_here",
    "new",
    "loser",
    "op",
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
# The Delta tables (names and DDL column lists). PostgreSQL's `sessions` mirrors `sessions` (sql/).
TABLE_SCHEMAS = {
    "events": "topic string, partition int, offset long, arrival_time timestamp, event_id string, "
    "entity_id string, event_type string, event_time timestamp, properties string",
    "duplicates": "topic string, partition int, offset long, arrival_time timestamp, event_id string, entity_id string",
    "quarantine": "topic string, partition int, offset long, arrival_time timestamp, key binary, value binary, "
    "reason string",
    "sessions": "session_id string, entity_id string, started_at timestamp, ended_at timestamp, "
    "first_event_time timestamp, last_event_time timestamp, event_count long, duration_seconds double",
}
# Where each committed record lands: exactly one of these, once.
RECORD_TABLES = ("events", "duplicates", "quarantine")


@dataclass(frozen=True)
class SessionRules:
    """How sessions are cut: a new one after ``gap`` of inactivity or once one is ``max_length`` long."""

    gap: timedelta = timedelta(minutes=30)
    max_length: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        if self.gap <= timedelta(0):
            raise ConfigError(f"session gap must be positive, got {self.gap}")
        if self.max_length < self.gap:
            raise ConfigError(f"maximum session length {self.max_length} is shorter than the gap {self.gap}")

    # Every comparison of times against the rules is in microseconds (Spark's and PostgreSQL's unit),
    # exactly: a gap of 7.5 s is 7,500,000 everywhere, never 7 s in one place and 7.5 in another.
    @property
    def gap_us(self) -> int:
        return self.gap // timedelta(microseconds=1)

    @property
    def max_length_us(self) -> int:
        return self.max_length // timedelta(microseconds=1)
