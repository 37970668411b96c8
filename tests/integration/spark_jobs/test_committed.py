"""Kafka's committed records counted back, against the real broker: what reconcile checks each new range
against, and a dry run its plan's ranges."""

from __future__ import annotations

import time

import pytest

from spark_jobs import committed, offsets
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings

pytestmark = pytest.mark.integration


def produce_numbered(settings: Settings, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    assert offsets.ensure_topic(settings, topic, partitions=partitions)
    producer = Producer(settings.kafka_client_config())
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"record {i}".encode(), partition=p)
    assert producer.flush(30) == 0


def test_counting_a_range_stops_at_its_last_record_without_waiting_out_a_poll(stack: Settings, topic: str) -> None:
    """Reconcile counts each new range's committed records, and a dry run each planned range's: a count that
    waited a second for a full batch of records it cannot get cost a reconcile of a day's ranges minutes."""
    produce_numbered(stack, topic, partitions=1, per_partition=12)
    bounds = ((0, 12), (0, 5), (5, 12), (3, 4), (11, 12))
    ranges = [PartitionRange(topic, 0, start, end) for start, end in bounds]
    started = time.monotonic()
    assert [committed.count_committed(stack, r) for r in ranges] == [12, 5, 7, 1, 1]
    # Five consumers' set-up is a few tenths of a second; a wait of a second a count would be five.
    assert time.monotonic() - started < 2.5


def test_ranges_are_counted_with_one_consumer_a_round_each_as_alone(stack: Settings, topic: str, monkeypatch) -> None:
    """A reconcile's new ranges are a partition's batches one after the other: counted in one read of each
    partition (a consumer's set-up a range added minutes to a day's reconcile), each range's count the
    same as counted alone, whether ranges touch, overlap (a takeover's and its batch's), leave a gap
    (read in a second round), are empty, or run past the partition's end."""
    import confluent_kafka

    produce_numbered(stack, topic, partitions=2, per_partition=20)
    bounds = {0: [(0, 5), (5, 9), (9, 15), (12, 14), (14, 14), (18, 25)], 1: [(0, 20), (3, 8), (8, 8)]}
    ranges = [PartitionRange(topic, p, start, end) for p, spans in bounds.items() for start, end in spans]
    alone = [committed.count_committed(stack, r) for r in ranges]
    assert alone == [5, 4, 6, 2, 0, 2, 20, 5, 0]

    consumers = []

    def counted(*args, **kwargs):
        consumers.append(args)
        return real(*args, **kwargs)

    real = confluent_kafka.Consumer
    monkeypatch.setattr(confluent_kafka, "Consumer", counted)
    shuffled = ranges[::-1]  # any order: the counts come back in the ranges' order
    assert committed.count_each(stack, shuffled) == alone[::-1]
    # Partition 0's [0, 15) and [18, 25) are apart: two rounds; partition 1's ranges are one span.
    assert len(consumers) == 2
