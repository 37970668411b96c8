"""The per-batch ledger in PostgreSQL: which frozen ranges a pipeline processed, with its counts.

Writers call :func:`record_batch` on the cursor of the transaction that carries the batch's own
Postgres writes, so both commit or neither does (docs/design.md, "Exactly-once PostgreSQL effect").
Each batch records its attempt first (:func:`record_attempt`); the topic it read is checked against
the ranges recorded (:func:`check_topic`). The rules the stored data was built with are
:mod:`spark_jobs.store.stored_rules`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs.contract import SessionRules
from spark_jobs.errors import LedgerConflict, TopicRecreated
from spark_jobs.offsets import PartitionRange
from spark_jobs.store.producers import ProducerChecks

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class BatchCounts:
    read: int
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0
    producer: ProducerChecks = field(default_factory=ProducerChecks)  # what broke the producer requirements


def batch_exists(cur, pipeline: str, batch_id: int) -> bool:  # psycopg2 cursor
    cur.execute("SELECT 1 FROM ledger_batches WHERE pipeline = %s AND batch_id = %s", (pipeline, batch_id))
    return cur.fetchone() is not None


def batch_ranges(cur, pipeline: str, batch_id: int) -> list[PartitionRange]:
    cur.execute(
        """SELECT topic, kafka_partition, start_offset, end_offset FROM ledger_ranges
           WHERE pipeline = %s AND batch_id = %s ORDER BY topic, kafka_partition""",
        (pipeline, batch_id),
    )
    return [PartitionRange(*row) for row in cur.fetchall()]


def batch_with_ranges(cur, pipeline: str, ranges: list[PartitionRange]) -> int | None:
    """The id of ``pipeline``'s batch that read exactly ``ranges`` (one topic), if there is one."""
    topic = ranges[0].topic if ranges else None
    cur.execute(
        """SELECT batch_id FROM ledger_ranges WHERE pipeline = %s AND topic = %s
           GROUP BY batch_id
           HAVING array_agg(ARRAY[kafka_partition, start_offset, end_offset] ORDER BY kafka_partition)
                  = %s::bigint[][]""",
        (pipeline, topic, [[r.partition, r.start, r.end] for r in sorted(ranges)]),
    )
    row = cur.fetchone()
    return None if row is None else int(row[0])


def lock_batches(cur) -> None:
    """Hold new ledger batches back until this transaction ends (a batch's commit checks that its id
    is still free, and nobody can take it in between)."""
    cur.execute("LOCK TABLE ledger_batches IN SHARE ROW EXCLUSIVE MODE")


def topics(cur) -> list[str]:
    """Every topic the ledger has ranges of."""
    cur.execute("SELECT DISTINCT topic FROM ledger_ranges ORDER BY 1")
    return [row[0] for row in cur.fetchall()]


def next_batch_id(cur, pipeline: str) -> int:
    cur.execute("SELECT coalesce(max(batch_id) + 1, 0) FROM ledger_batches WHERE pipeline = %s", (pipeline,))
    return int(cur.fetchone()[0])


def unfinished_attempts(cur, pipeline: str) -> list[tuple[int, list[PartitionRange]]]:
    """(batch_id, ranges) of ``pipeline``'s attempts that no ledger batch committed, by batch id."""
    cur.execute(
        """SELECT a.batch_id, a.topic, a.kafka_partition, a.start_offset, a.end_offset
           FROM write_attempts AS a
           WHERE a.pipeline = %s
             AND NOT EXISTS (SELECT 1 FROM ledger_batches AS b
                             WHERE b.pipeline = a.pipeline AND b.batch_id = a.batch_id)
           ORDER BY a.batch_id, a.kafka_partition""",
        (pipeline,),
    )
    batches: dict[int, list[PartitionRange]] = {}
    for batch_id, topic, partition, start, end in cur.fetchall():
        batches.setdefault(batch_id, []).append(PartitionRange(topic, partition, start, end))
    return sorted(batches.items())


def any_unfinished_attempt(cur, topic: str) -> bool:
    """Whether an attempt of any writer of ``topic`` (scheduled, backfill, readmit, repair) has no committed batch:
    it may have written ``events`` without ``sessions`` (the stored sessions may lag the stored events)."""
    cur.execute(
        """SELECT EXISTS (SELECT 1 FROM write_attempts AS a
                          WHERE a.topic = %s
                            AND NOT EXISTS (SELECT 1 FROM ledger_batches AS b
                                            WHERE b.pipeline = a.pipeline AND b.batch_id = a.batch_id))""",
        (topic,),
    )
    return bool(cur.fetchone()[0])


def record_batch(
    cur,
    pipeline: str,
    batch_id: int,
    ranges: list[PartitionRange],
    counts: BatchCounts,
    rules: SessionRules | None = None,
    topic_id: str | None = None,
    contract_digest: str | None = None,
) -> None:
    """Insert the ledger rows of one batch (call inside the batch's transaction); ``rules`` it
    sessionized with, ``topic_id`` the id of the topic it read (:func:`check_topic`), ``contract_digest``
    the contract its records were checked with (:func:`spark_jobs.store.stored_rules.check_contract`)."""
    topics = {r.topic for r in ranges}
    if len(topics) != 1:
        raise ValueError(f"a batch reads exactly one topic, got {sorted(topics) or 'none'}")
    offsets = sum(r.size for r in ranges)
    if counts.read > offsets:
        # Records read twice (a writer that lost its lease beside the one that took over): the
        # ledger would call a doubled range exact.
        raise LedgerConflict(
            f"batch {batch_id} of {pipeline} counted {counts.read:,} records in {offsets:,} offsets "
            f"({', '.join(map(str, ranges))}): a record was read twice. Nothing of this batch was committed; "
            "run `tidemark reconcile` before running it again."
        )
    cur.execute(
        """INSERT INTO ledger_batches
               (pipeline, batch_id, topic, records_read, accepted, duplicates, quarantined,
                session_gap_seconds, session_max_seconds,
                entities_in_many_partitions, not_log_append_time, time_went_back, contract_digest)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        (
            pipeline,
            batch_id,
            topics.pop(),
            counts.read,
            counts.accepted,
            counts.duplicates,
            counts.quarantined,
            rules.gap.total_seconds() if rules else None,
            rules.max_length.total_seconds() if rules else None,
            counts.producer.entities_in_many_partitions,
            counts.producer.not_log_append_time,
            counts.producer.time_went_back,
            contract_digest,
        ),
    )
    cur.executemany(
        """INSERT INTO ledger_ranges (pipeline, batch_id, topic, kafka_partition, start_offset, end_offset, topic_id)
           VALUES (%s, %s, %s, %s, %s, %s, %s)""",
        [(pipeline, batch_id, r.topic, r.partition, r.start, r.end, topic_id) for r in ranges],
    )


def check_topic(cur, topic: str, topic_id: str | None, held: Mapping[int, tuple[int, int]]) -> None:
    """Fail unless the topic named ``topic`` (id ``topic_id``, ``{partition: (low, high)}`` offsets
    ``held``) is the one the ledger's ranges were read from: a topic deleted and created again
    starts its offsets at 0, so its records would take the old records' coordinates."""
    what_to_do = (
        "Nothing was read or written. The sinks keep the old topic's records under its name: produce the "
        "new records to a topic of another name and point TIDEMARK_TOPIC (or --topic) at it (README, "
        "'A topic deleted and created again')."
    )
    if topic_id is not None:
        cur.execute(
            "SELECT topic_id FROM ledger_ranges WHERE topic = %s AND topic_id IS NOT NULL AND topic_id <> %s LIMIT 1",
            (topic, topic_id),
        )
        row = cur.fetchone()
        if row is not None:
            raise TopicRecreated(
                f"topic {topic!r} was deleted and created again: the ledger's ranges were read from topic id "
                f"{row[0]}, the topic of that name now has id {topic_id} and its offsets started again at 0. "
                + what_to_do
            )
    cur.execute("SELECT kafka_partition, max(end_offset) FROM ledger_ranges WHERE topic = %s GROUP BY 1", (topic,))
    for partition, read_to in sorted(cur.fetchall()):
        high = held.get(partition, (0, 0))[1]
        if high < read_to:
            raise TopicRecreated(
                f"topic {topic!r} was deleted and created again, or truncated: partition {partition} ends at offset "
                f"{high}, below offset {read_to} the ledger read up to. " + what_to_do
            )


def verify_topic(settings, topic: str, held: Mapping[int, tuple[int, int]] | None = None) -> str | None:
    """:func:`check_topic` against the broker now (``held``: its watermarks, if read already); the
    topic's id, for the ledger rows of the run."""
    from spark_jobs import db
    from spark_jobs.offsets import topic_id, watermarks

    held = watermarks(settings, topic) if held is None else held
    current = topic_id(settings, topic)
    with db.transaction(settings.pipeline_dsn) as cur:
        check_topic(cur, topic, current, held)
    return current


def record_attempt(cur, pipeline: str, batch_id: int, ranges: list[PartitionRange]) -> None:
    """Record that the batch may write records in ``ranges`` (commit before its first Delta write).

    The rows stay when the batch commits: they, not the ledger (which a repair or a restored
    backup may lack rows of), say where records may be, so a later batch over those ranges looks
    for held ones (:func:`may_hold`). An attempt of the same batch id over other ranges widens the row.
    """
    cur.executemany(
        """INSERT INTO write_attempts (pipeline, batch_id, topic, kafka_partition, start_offset, end_offset)
           VALUES (%s, %s, %s, %s, %s, %s)
           ON CONFLICT (pipeline, batch_id, topic, kafka_partition) DO UPDATE
               SET start_offset = least(write_attempts.start_offset, EXCLUDED.start_offset),
                   end_offset = greatest(write_attempts.end_offset, EXCLUDED.end_offset)""",
        [(pipeline, batch_id, r.topic, r.partition, r.start, r.end) for r in ranges],
    )


def write_floor(cur, lake_root: str, topic: str) -> int | None:
    """The offset below which the lake may hold records of ``topic`` that no ledger or attempt range
    covers (written before attempts were recorded); None when it was never set."""
    cur.execute("SELECT below_offset FROM write_floors WHERE lake_root = %s AND topic = %s", (lake_root, topic))
    row = cur.fetchone()
    return None if row is None else int(row[0])


def set_write_floor(cur, lake_root: str, topic: str, below_offset: int) -> None:
    cur.execute(
        """INSERT INTO write_floors (lake_root, topic, below_offset) VALUES (%s, %s, %s)
           ON CONFLICT (lake_root, topic) DO UPDATE SET below_offset = greatest(write_floors.below_offset,
                                                                               EXCLUDED.below_offset)""",
        (lake_root, topic, below_offset),
    )


def may_hold(cur, ranges: list[PartitionRange], floor: int) -> bool:
    """Whether the record tables may hold a record in ``ranges``: some range starts below ``floor``
    (:func:`write_floor`), or overlaps a ledger range or an attempt's range of any pipeline."""
    values = _range_values(ranges)
    if not values or any(start < floor for _, _, start, _ in values):
        return bool(values)
    ledger, ledger_params = _overlapping("ledger_ranges", "1", values)
    attempts, attempt_params = _overlapping("write_attempts", "1", values)
    cur.execute(f"SELECT EXISTS ({ledger}) OR EXISTS ({attempts})", ledger_params + attempt_params)
    return bool(cur.fetchone()[0])


def counted_ranges(cur, ranges: list[PartitionRange]) -> list[PartitionRange]:
    """The ranges of committed batches (any pipeline) that overlap ``ranges``: their records were
    counted where the batch put them (its ledger counts, its quarantine reasons)."""
    values = _range_values(ranges)
    if not values:
        return []
    sql, params = _overlapping(
        "ledger_ranges", "DISTINCT t.topic, t.kafka_partition, t.start_offset, t.end_offset", values
    )
    cur.execute(sql, params)
    return sorted(PartitionRange(*row) for row in cur.fetchall())


def _range_values(ranges: list[PartitionRange]) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.start, r.end) for r in ranges if r.end > r.start]


def _overlapping(table: str, columns: str, values: list[tuple[str, int, int, int]]) -> tuple[str, list]:
    """A query of ``columns`` of the rows of ``table`` (ledger_ranges, write_attempts) that overlap
    one of ``values`` (topic, partition, start, end), and its parameters."""
    rows = ", ".join(["(%s, %s::integer, %s::bigint, %s::bigint)"] * len(values))
    sql = f"""SELECT {columns} FROM {table} AS t
              JOIN (VALUES {rows}) AS r (topic, kafka_partition, start_offset, end_offset)
                ON t.topic = r.topic AND t.kafka_partition = r.kafka_partition
               AND t.start_offset < r.end_offset AND t.end_offset > r.start_offset"""
    return sql, [v for value in values for v in value]


# ---------------------------------------------------------------------------------------------
# What reconcile and the Airflow operators read


def checked_ranges(cur, excluded: tuple[str, ...]) -> list[tuple[str, int, PartitionRange]]:
    """(pipeline, batch_id, range) of every ledger range but those of the ``excluded`` pipelines, by
    topic, partition and start offset."""
    cur.execute(
        """SELECT l.pipeline, l.batch_id, l.topic, l.kafka_partition, l.start_offset, l.end_offset
           FROM ledger_ranges AS l WHERE l.pipeline <> ALL(%s)
           ORDER BY l.topic, l.kafka_partition, l.start_offset, l.pipeline, l.batch_id""",
        (list(excluded),),
    )
    return [(p, b, PartitionRange(t, k, s, e)) for p, b, t, k, s, e in cur.fetchall()]


def committed_batches(cur, topic: str, since: datetime) -> list[tuple]:
    """The batches of ``topic`` committed at or after ``since``, by pipeline and batch id: (pipeline,
    batch_id, records_read, accepted, duplicates, quarantined, ranges as ``partition:start-end,...``,
    entities_in_many_partitions, not_log_append_time, time_went_back)."""
    cur.execute(
        """SELECT b.pipeline, b.batch_id, b.records_read, b.accepted, b.duplicates, b.quarantined,
                  coalesce(string_agg(r.kafka_partition || ':' || r.start_offset || '-' || r.end_offset, ','
                                      ORDER BY r.kafka_partition), ''),
                  coalesce(b.entities_in_many_partitions, 0), coalesce(b.not_log_append_time, 0),
                  coalesce(b.time_went_back, 0)
           FROM ledger_batches AS b JOIN ledger_ranges AS r USING (pipeline, batch_id)
           WHERE b.topic = %s AND b.committed_at >= %s
           GROUP BY 1, 2, 3, 4, 5, 6, 8, 9, 10 ORDER BY 1, 2""",
        (topic, since),
    )
    return cur.fetchall()


def stored_records(settings) -> int | None:  # Settings
    """At most how many records a job over what the pipeline stores reads (maintenance, reconcile,
    repair, readmit): every record the ledger says its batches read. None when PostgreSQL does not
    answer, or holds no ledger yet: the job itself then says what is wrong."""
    import psycopg2

    from spark_jobs import db
    from spark_jobs.errors import TidemarkError

    try:
        with db.transaction(settings.pipeline_dsn) as cur:
            cur.execute("SELECT coalesce(sum(records_read), 0) FROM ledger_batches")
            [(records,)] = cur.fetchall()
    except (TidemarkError, psycopg2.Error):
        return None
    return int(records)


def pipeline_totals(cur) -> list[tuple]:
    """Per pipeline and topic: (pipeline, topic, batches, records read, accepted, duplicates,
    quarantined, the last batch's commit time), over every committed batch."""
    cur.execute(
        """SELECT pipeline, topic, count(*), sum(records_read), sum(accepted), sum(duplicates), sum(quarantined),
                  max(committed_at)
           FROM ledger_batches GROUP BY 1, 2 ORDER BY 1, 2"""
    )
    return cur.fetchall()


SCHEDULED = "ingest"


BACKFILL = "backfill"


def pipeline_name(kind: str, topic: str) -> str:
    """Ledger pipeline of a topic's scheduled runs (``ingest:<topic>``) or backfills (``backfill:<topic>``)."""
    return f"{kind}:{topic}"
