"""Kafka's committed records read back: reconcile counts its new ranges with them, a dry run its plan's,
the ``auto`` batch cap samples their size, the bench drains a topic.

Read with ``read_committed`` and counted record by record: offset arithmetic (``end - start``) over-counts,
as transaction markers and aborted records take offsets and compaction leaves gaps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from spark_jobs.errors import DataLossError
from spark_jobs.offsets import PartitionRange, merged_spans
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from confluent_kafka import Message

POLL_S = 0.05  # the longest a read of committed records waits for a batch of them to fill


def count_committed(settings: Settings, r: PartitionRange, timeout_s: float = 60.0) -> int:
    """Committed records in ``r``, counted by reading with ``read_committed``.

    Offset arithmetic (``end - start``) over-counts: transaction markers and aborted records take
    offsets, and compaction leaves gaps. The count stops at the first record at or past ``end``
    or at the partition's end (its last stable offset).
    """
    return sum(1 for _ in committed_records(settings, [r], timeout_s))


def committed_records(
    settings: Settings, ranges: list[PartitionRange], timeout_s: float = 60.0, group_id: str = "tidemark-reconcile"
) -> Iterator[Message]:
    """Every committed record of ``ranges`` (``read_committed``), read with one consumer, each partition in
    offset order. A partition's read stops at its range's end or at the partition's end (its last stable
    offset). A start the broker no longer holds is a :class:`DataLossError`; no record for ``timeout_s``
    seconds a ``TimeoutError``."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    # Keyed as a message names its partition (the client's types leave its topic and partition optional).
    wanted: dict[tuple[str | None, int | None], PartitionRange] = {(r.topic, r.partition): r for r in ranges if r.size}
    if not wanted:
        return
    consumer = Consumer(
        settings.kafka_client_config(
            **{
                "group.id": group_id,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.max.bytes": 16 * 1024 * 1024,
                # A start the broker no longer holds is an error, not a silent jump to the end.
                "auto.offset.reset": "error",
            }
        )
    )
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in wanted.values()])
        left, heard = dict(wanted), time.monotonic()
        while left:
            # A batch is returned when full or when the wait ends, so the wait is short: a range's
            # last records (or its partition's end) would otherwise wait it out every read.
            messages = consumer.consume(num_messages=10_000, timeout=POLL_S)
            if not messages:
                if time.monotonic() - heard >= timeout_s:
                    reading = ", ".join(str(r) for r in left.values())
                    raise TimeoutError(f"no records from {reading} for {timeout_s:.0f} s; is the broker up?")
                continue
            heard = time.monotonic()
            for message in messages:
                where = (message.topic(), message.partition())
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        left.pop(where, None)
                        continue
                    if error.code() == KafkaError._AUTO_OFFSET_RESET:
                        gone = wanted.get(where, ranges[0])
                        raise DataLossError(f"{gone}: offset {gone.start} is no longer on the broker (retention)")
                    raise KafkaException(error)
                r = left.get(where)
                if r is None or _offset(message) >= r.end:
                    left.pop(where, None)
                    continue
                yield message
                if _offset(message) >= r.end - 1:
                    left.pop(where, None)
    finally:
        consumer.close()


def _offset(record: Message) -> int:
    """The offset of a record a consumer returned (an error event has none, a record always has one)."""
    offset = record.offset()
    if offset is None:
        raise TypeError("a Kafka record without an offset")
    return offset


def count_each(settings: Settings, ranges: list[PartitionRange], timeout_s: float = 60.0) -> list[int]:
    """:func:`count_committed` of each of ``ranges`` (in their order), with one consumer a round rather
    than one a range: a partition's ranges that overlap or touch are one span, read once (a reconcile's
    new ranges are a partition's batches one after the other); a partition with spans apart from each
    other has its next span read in the next round."""
    counts = [0] * len(ranges)
    for spans in _spans_by_round([(i, r) for i, r in enumerate(ranges) if r.size]):
        # Keyed as a message names its partition (the client's types leave its topic and partition optional).
        tallies: dict[tuple[str | None, int | None], _Tally] = {
            (span.topic, span.partition): _Tally([(i, ranges[i]) for i in members]) for span, members in spans
        }
        for message in committed_records(settings, [span for span, _ in spans], timeout_s):
            tallies[(message.topic(), message.partition())].add(_offset(message))
        for tally in tallies.values():
            for i, n in tally.counts():
                counts[i] = n
    return counts


def _spans_by_round(indexed: list[tuple[int, PartitionRange]]) -> list[list[tuple[PartitionRange, list[int]]]]:
    """Each partition's ranges merged into spans where they overlap or touch (:func:`merged_spans`), with the
    indexes of the ranges each holds; round k holds each partition's k-th span."""
    spans: dict[tuple[str, int], list[tuple[PartitionRange, list[int]]]] = {}
    for span in merged_spans([r for _, r in indexed]):
        members = [
            i for i, r in indexed
            if (r.topic, r.partition) == (span.topic, span.partition) and span.start <= r.start and r.end <= span.end
        ]  # fmt: skip
        spans.setdefault((span.topic, span.partition), []).append((span, members))
    depth = max((len(v) for v in spans.values()), default=0)
    return [[v[k] for v in spans.values() if k < len(v)] for k in range(depth)]


class _Tally:
    """Counts of a span's records between each two of its ranges' bounds; a range's count is the sum
    over the pieces it covers (ranges of a span may overlap: a takeover's range and its batch's)."""

    def __init__(self, ranges: list[tuple[int, PartitionRange]]) -> None:
        self.ranges = ranges  # with their indexes in the caller's list
        self.bounds = sorted({b for _, r in ranges for b in (r.start, r.end)})
        self.pieces = [0] * len(self.bounds)
        self._at = 0

    def add(self, offset: int) -> None:  # offsets arrive in order within a partition
        while self._at + 1 < len(self.bounds) and offset >= self.bounds[self._at + 1]:
            self._at += 1
        self.pieces[self._at] += 1

    def counts(self) -> list[tuple[int, int]]:
        """Each range's index and count."""
        index = {b: k for k, b in enumerate(self.bounds)}
        return [(i, sum(self.pieces[index[r.start] : index[r.end]])) for i, r in self.ranges]
