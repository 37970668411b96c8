"""Quarantine by reason: what each batch quarantined, counted per reason, with a few sample records.

The quarantine Delta table holds every invalid record with its raw key and value. Beside it, each
batch that quarantines records writes, per reason, the count and up to :data:`SAMPLES` records
(coordinates, key and value cut to :data:`SAMPLE_CHARS` characters) into PostgreSQL's
``quarantine_reasons``, in the transaction of its ledger row: the tidemark page and ``tidemark
quarantine`` read them without starting Spark, and a batch counted once is summarized once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SAMPLES = 3  # per batch and reason
SAMPLE_CHARS = 200
# A reason is "<code>: <what and where>"; the codes are stable whatever the contract says (the check's own).
REASON_CODES = (
    "null_key", "null_value", "oversized", "not_utf8", "invalid_json", "not_an_object", "missing_field", "wrong_type",
    "bad_entity_id", "key_mismatch", "bad_event_time", "schema",
)  # fmt: skip
# An Avro value's own (io.tidemark.contract.AvroCheck), before the codes above: no framing, an id the registry does
# not know, a writer schema the reader cannot resolve, a body that does not decode.
AVRO_REASON_CODES = ("not_avro", "unknown_schema", "incompatible_schema", "bad_avro")
# SQL: whether the reason of ``q`` is selected by ``%(reason)s`` (:func:`selects`); NULL selects every reason.
SELECTS_SQL = """(%(reason)s IS NULL OR q.reason = %(reason)s OR split_part(q.reason, ':', 1) = %(reason)s
                  OR (strpos(%(reason)s, ':') > 0 AND starts_with(q.reason, %(reason)s)))"""


def reason_code(reason: str) -> str:
    """The code of a quarantine ``reason``: the text before its first ``:`` (``schema``, ``missing_field``, ...)."""
    return reason.split(":", 1)[0]


def selects(wanted: str, reason: str) -> bool:
    """Whether ``--reason wanted`` selects the quarantine ``reason``: its whole text, its code, or the start of its
    text from the code's ``:`` on (``schema: enum at /status`` selects every enum reason at /status)."""
    return reason == wanted or reason_code(reason) == wanted or (":" in wanted and reason.startswith(wanted))


@dataclass(frozen=True)
class Sample:
    topic: str
    partition: int
    offset: int
    arrival_time: str  # ISO-8601, UTC
    key: str | None  # None: the record had no key
    value: str | None  # cut to SAMPLE_CHARS characters
    key_hex: bool = False  # the key is not UTF-8 or holds a NUL: its first bytes in hex
    value_hex: bool = False  # the same for the value: its first SAMPLE_CHARS / 2 bytes in hex

    def describe(self) -> str:
        return (
            f"{self.topic} p{self.partition} offset {self.offset} ({self.arrival_time}): "
            f"key {_shown(self.key, self.key_hex)}, value {_shown(self.value, self.value_hex)}"
        )


def _shown(text: str | None, hex_bytes: bool) -> str:
    if text is None:
        return "(null)"
    return f"0x{text}" if hex_bytes else json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True)
class ReasonCount:
    reason: str
    records: int
    samples: list[Sample]


def _readable(column: str) -> str:
    """SQL: a binary column as text a person can read, cut short (hex when it is not UTF-8)."""
    return (
        f"CASE WHEN {_is_hex(column)} THEN lower(hex(substring({column}, 1, {SAMPLE_CHARS // 2}))) "
        f"ELSE left(cast({column} AS string), {SAMPLE_CHARS}) END"
    )


def _is_hex(column: str) -> str:
    """SQL: whether a sample shows ``column`` in hex: bytes that are not UTF-8, or text with a NUL
    character (which PostgreSQL's jsonb cannot hold: such a sample would fail its batch for ever)."""
    text = f"cast({column} AS string)"
    return f"coalesce(NOT is_valid_utf8({text}) OR contains({text}, chr(0)), false)"


def summarize(quarantined: DataFrame) -> list[ReasonCount]:
    """Per reason of ``quarantined`` (topic, partition, offset, arrival_time, key, value, reason):
    the count and the first :data:`SAMPLES` records by coordinates. One Spark job."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_reason = Window.partitionBy("reason")
    first = by_reason.orderBy("topic", "partition", "offset")
    rows = (
        quarantined.select(
            "reason",
            F.count(F.lit(1)).over(by_reason).alias("records"),
            F.row_number().over(first).alias("n"),
            "topic",
            "partition",
            "offset",
            F.date_format(
                F.to_utc_timestamp("arrival_time", F.current_timezone()), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
            ).alias("arrival_time"),
            F.expr(_readable("key")).alias("key"),
            F.expr(_readable("value")).alias("value"),
            F.expr(_is_hex("key")).alias("key_hex"),
            F.expr(_is_hex("value")).alias("value_hex"),
        )
        .where(F.col("n") <= SAMPLES)
        .collect()
    )
    counts: dict[str, ReasonCount] = {}
    for r in sorted(rows, key=lambda r: (r["reason"], r["n"])):
        sample = Sample(
            r["topic"],
            r["partition"],
            r["offset"],
            r["arrival_time"],
            r["key"],
            r["value"],
            r["key_hex"],
            r["value_hex"],
        )
        counts.setdefault(r["reason"], ReasonCount(r["reason"], r["records"], [])).samples.append(sample)
    return list(counts.values())


def record_attempt(
    cur,  # psycopg2 cursor
    pipeline: str,
    batch_id: int,
    reasons: list[ReasonCount],
    readmitted: list[tuple[str, int]],
    held_quarantined: int,
) -> None:
    """With a batch's attempt, before its first Delta write: what it quarantines per reason (its
    :func:`summarize`) and, for a readmit, how many records of each reason it brings back. Each in
    place of what an earlier attempt of the batch recorded, when this attempt has any: one that finds
    none (an earlier attempt wrote its quarantine, or moved its records out of it, then crashed) leaves
    the earlier attempt's, which :func:`record` then counts.

    But an attempt that quarantines nothing while ``quarantine`` holds none of the batch's records
    (``held_quarantined``, of the plan) forgets the earlier attempt's quarantine counts: that attempt
    crashed before its quarantine write, and retention removed the invalid records since (they are
    lost, not quarantined). A quarantine write is one append, so a retry finds all of them or none."""
    if reasons or not held_quarantined:
        cur.execute("DELETE FROM quarantine_attempts WHERE pipeline = %s AND batch_id = %s", (pipeline, batch_id))
    if reasons:
        cur.executemany(
            """INSERT INTO quarantine_attempts (pipeline, batch_id, reason, records, samples)
               VALUES (%s, %s, %s, %s, %s)""",
            [(pipeline, batch_id, r.reason, r.records, json.dumps([s.__dict__ for s in r.samples])) for r in reasons],
        )
    if readmitted:
        cur.execute("DELETE FROM readmit_attempts WHERE pipeline = %s AND batch_id = %s", (pipeline, batch_id))
        cur.executemany(
            "INSERT INTO readmit_attempts (pipeline, batch_id, reason, records) VALUES (%s, %s, %s, %s)",
            [(pipeline, batch_id, reason, records) for reason, records in readmitted],
        )


def record(cur, pipeline: str, batch_id: int) -> None:  # psycopg2 cursor
    """In the batch's ledger transaction: what its attempts recorded (:func:`record_attempt`) becomes
    what it quarantined and brought back (``quarantine_reasons``, ``readmitted_reasons``), in one statement."""
    cur.execute(
        """WITH quarantined AS (
                DELETE FROM quarantine_attempts WHERE pipeline = %(pipeline)s AND batch_id = %(batch_id)s RETURNING *
           ), readmitted AS (
                DELETE FROM readmit_attempts WHERE pipeline = %(pipeline)s AND batch_id = %(batch_id)s RETURNING *
           ), kept AS (
                INSERT INTO quarantine_reasons (pipeline, batch_id, reason, records, samples)
                SELECT pipeline, batch_id, reason, records, samples FROM quarantined
           )
           INSERT INTO readmitted_reasons (pipeline, batch_id, reason, records)
           SELECT pipeline, batch_id, reason, records FROM readmitted""",
        {"pipeline": pipeline, "batch_id": batch_id},
    )


@dataclass(frozen=True)
class ReasonTotal:
    reason: str
    records: int
    first_at: datetime  # commit time of the first batch that quarantined one
    last_at: datetime


def totals(cur, reason: str | None = None) -> list[ReasonTotal]:
    """Per reason (those ``reason`` :func:`selects`, or every one), over every committed batch: records still
    quarantined (those a readmit brought back are not), first and last time seen; most records first."""
    cur.execute(
        f"""WITH back AS (SELECT reason, sum(records) AS records FROM readmitted_reasons GROUP BY 1)
           SELECT q.reason, (sum(q.records) - coalesce(max(back.records), 0))::bigint AS left_over,
                  min(b.committed_at), max(b.committed_at)
           FROM quarantine_reasons AS q JOIN ledger_batches AS b USING (pipeline, batch_id)
           LEFT JOIN back USING (reason)
           WHERE {SELECTS_SQL}
           GROUP BY 1 HAVING sum(q.records) > coalesce(max(back.records), 0) ORDER BY 2 DESC, 1""",
        {"reason": reason},
    )
    return [ReasonTotal(*row) for row in cur.fetchall()]


def over_time(cur, days: int) -> list[tuple]:
    """Records quarantined per day and reason over the last ``days`` days: (day, reason, records), oldest first."""
    cur.execute(
        """SELECT date_trunc('day', b.committed_at), q.reason, sum(q.records)::bigint
           FROM quarantine_reasons AS q JOIN ledger_batches AS b USING (pipeline, batch_id)
           WHERE b.committed_at >= now() - %s * interval '1 day'
           GROUP BY 1, 2 ORDER BY 1, 2""",
        (days,),
    )
    return cur.fetchall()


def latest_samples(cur, reason: str, limit: int) -> list[Sample]:
    """The latest ``limit`` sample records kept for ``reason``, newest batch first."""
    cur.execute(
        """SELECT s.sample
           FROM quarantine_reasons AS q JOIN ledger_batches AS b USING (pipeline, batch_id),
                jsonb_array_elements(q.samples) WITH ORDINALITY AS s(sample, n)
           WHERE q.reason = %s
           ORDER BY b.committed_at DESC, q.batch_id DESC, s.n
           LIMIT %s""",
        (reason, limit),
    )
    return [Sample(**row[0]) for row in cur.fetchall()]
