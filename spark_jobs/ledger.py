"""The per-batch ledger in PostgreSQL: which frozen ranges a pipeline processed, with its counts.

Writers call :func:`record_batch` on the cursor of the transaction that carries the batch's own
Postgres writes, so both commit or neither does (DESIGN invariant 5).
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_jobs.offsets import PartitionRange


@dataclass(frozen=True)
class BatchCounts:
    read: int
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0


def connect(dsn: str):  # -> psycopg2 connection
    """A psycopg2 connection; an unreachable server is a clear error, not a traceback."""
    import psycopg2

    try:
        return psycopg2.connect(dsn, connect_timeout=10)
    except psycopg2.OperationalError as exc:
        raise ConnectionError(
            f"cannot connect to PostgreSQL ({dsn!r}): {str(exc).strip()}. Start it with `tidemark up` "
            "or fix TIDEMARK_POSTGRES_DSN."
        ) from None


def batch_exists(cur, pipeline: str, batch_id: int) -> bool:  # noqa: ANN001 - psycopg2 cursor
    cur.execute("SELECT 1 FROM ledger_batches WHERE pipeline = %s AND batch_id = %s", (pipeline, batch_id))
    return cur.fetchone() is not None


def batch_ranges(cur, pipeline: str, batch_id: int) -> list[PartitionRange]:  # noqa: ANN001
    cur.execute(
        """SELECT topic, kafka_partition, start_offset, end_offset FROM ledger_ranges
           WHERE pipeline = %s AND batch_id = %s ORDER BY topic, kafka_partition""",
        (pipeline, batch_id),
    )
    return [PartitionRange(*row) for row in cur.fetchall()]


def next_batch_id(cur, pipeline: str) -> int:  # noqa: ANN001
    cur.execute("SELECT coalesce(max(batch_id) + 1, 0) FROM ledger_batches WHERE pipeline = %s", (pipeline,))
    return int(cur.fetchone()[0])


def record_batch(
    cur,  # noqa: ANN001
    pipeline: str,
    batch_id: int,
    ranges: list[PartitionRange],
    counts: BatchCounts,
) -> None:
    """Insert the ledger rows of one batch (call inside the batch's transaction)."""
    topics = {r.topic for r in ranges}
    if len(topics) != 1:
        raise ValueError(f"a batch reads exactly one topic, got {sorted(topics) or 'none'}")
    cur.execute(
        """INSERT INTO ledger_batches
               (pipeline, batch_id, topic, records_read, accepted, duplicates, quarantined)
           VALUES (%s, %s, %s, %s, %s, %s, %s)""",
        (
            pipeline,
            batch_id,
            topics.pop(),
            counts.read,
            counts.accepted,
            counts.duplicates,
            counts.quarantined,
        ),
    )
    cur.executemany(
        """INSERT INTO ledger_ranges (pipeline, batch_id, topic, kafka_partition, start_offset, end_offset)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        [(pipeline, batch_id, r.topic, r.partition, r.start, r.end) for r in ranges],
    )
