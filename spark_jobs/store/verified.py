"""What reconcile verified, and what a reconcile run starts from: ``verified_ranges`` and ``range_moves``.

A ledger range (:class:`LedgerRange`) once checked is verified with its count and checksum
(:class:`Verified`); a batch that moves rows of a verified range (a takeover, a readmit, a repair)
marks it moved first (:func:`mark_moved`), so that its next check takes the new checksum as the
baseline. :func:`read_snapshot` reads, in one transaction, everything a run compares against.
Every function takes a psycopg2 cursor: the caller opens the transaction
(``spark_jobs.db.transaction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spark_jobs.offsets import PartitionRange
from spark_jobs.store.findings import MOVED, RangeCheck

NOT_CHECKED = ("land",)  # pipelines whose ranges land in other tables


@dataclass(frozen=True)
class LedgerRange:
    pipeline: str
    batch_id: int
    range: PartitionRange


@dataclass(frozen=True)
class Verified:
    records: int
    checksum: int
    checked_at: datetime
    moved_by: frozenset[tuple[str, int]] = frozenset()  # (pipeline, batch_id) of batches that moved rows of it


def key(r: LedgerRange) -> tuple[str, int, str, int]:
    return (r.pipeline, r.batch_id, r.range.topic, r.range.partition)


def verified_ranges(cur) -> dict[tuple[str, int, str, int], Verified]:
    """The count and checksum each verified range was verified with, and the batches that moved
    rows of it since (:func:`mark_moved`), by :func:`ranges.key`."""
    cur.execute(
        """SELECT v.pipeline, v.batch_id, v.topic, v.kafka_partition, v.sink_records, v.sink_checksum, v.checked_at,
                  coalesce(array_agg(ARRAY[m.moved_by_pipeline, m.moved_by_batch::text])
                           FILTER (WHERE m.moved_by_pipeline IS NOT NULL), '{}')
           FROM verified_ranges AS v
           LEFT JOIN range_moves AS m USING (pipeline, batch_id, topic, kafka_partition)
           GROUP BY 1, 2, 3, 4, 5, 6, 7"""
    )
    return {
        (p, b, t, k): Verified(int(n), int(c), at, frozenset((mp, int(mb)) for mp, mb in moves))
        for p, b, t, k, n, c, at, moves in cur.fetchall()
    }


def mark_moved(cur, spans: list[PartitionRange], pipeline: str, batch_id: int) -> None:
    """Mark the verified ranges that hold rows at ``spans`` as moved by ``pipeline``'s batch
    ``batch_id`` (call before the batch's first Delta write, in a transaction that commits then):
    reconcile re-checks them by count and offsets and takes their new checksum as the baseline."""
    cur.executemany(
        """INSERT INTO range_moves (pipeline, batch_id, topic, kafka_partition, moved_by_pipeline, moved_by_batch)
           SELECT pipeline, batch_id, topic, kafka_partition, %s, %s FROM verified_ranges
           WHERE topic = %s AND kafka_partition = %s AND start_offset < %s AND end_offset > %s
           ON CONFLICT DO NOTHING""",
        [(pipeline, batch_id, s.topic, s.partition, s.end, s.start) for s in spans],
    )


def record(
    cur,
    run_id: str,
    checks: list[RangeCheck],
    baselines: dict[tuple[str, int, str, int], Verified],
    committed: set[tuple[str, int]],
) -> None:
    """What run ``run_id`` verified: a range whose content is a baseline (:attr:`RangeCheck.baseline`)
    becomes verified with its count and checksum; a moved range that matched takes its new checksum as
    the baseline, and its marks go once the batch that set each is ``committed`` (all its Delta writes
    were in the run's snapshot)."""
    cur.executemany(
        """INSERT INTO verified_ranges (pipeline, batch_id, topic, kafka_partition, start_offset, end_offset,
                                        sink_records, sink_checksum, verified_by)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (pipeline, batch_id, topic, kafka_partition) DO UPDATE SET checked_at = now()""",
        [
            (c.pipeline, c.batch_id, c.topic, c.partition, c.start, c.end, c.sink_records, c.sink_checksum, run_id)
            for c in checks
            if c.baseline and c.reason != MOVED
        ],
    )
    # Ranges recorded batches moved rows of: what they hold now is the baseline. A mark goes once
    # the batch that set it is in the snapshot's ledger (all its Delta writes are in the snapshot).
    moved = [c for c in checks if c.matches and c.reason == MOVED]
    cur.executemany(
        """UPDATE verified_ranges SET sink_records = %s, sink_checksum = %s, verified_by = %s, checked_at = now()
           WHERE pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s""",
        [(c.sink_records, c.sink_checksum, run_id, c.pipeline, c.batch_id, c.topic, c.partition) for c in moved],
    )
    cur.executemany(
        """DELETE FROM range_moves WHERE pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s
           AND moved_by_pipeline = %s AND moved_by_batch = %s""",
        [
            (c.pipeline, c.batch_id, c.topic, c.partition, mp, mb)
            for c in moved
            for mp, mb in baselines[(c.pipeline, c.batch_id, c.topic, c.partition)].moved_by
            if (mp, mb) in committed
        ],
    )


def forget(cur, keys: list[tuple[str, int, str, int]]) -> None:
    """Forget the verification of the ranges ``keys`` (:func:`key`): an operator acknowledged what they hold,
    and their next check sets a new baseline."""
    cur.executemany(
        "DELETE FROM verified_ranges WHERE pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s",
        keys,
    )
