"""Kafka topics and offsets: create the topic, read watermarks, freeze per-partition ranges.

A range is decided *before* a batch is processed and recorded with it (DESIGN invariant 2), so a
replay reads exactly the same records whatever arrived since.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from spark_jobs.settings import Settings


class TopicError(RuntimeError):
    """A topic is missing or misconfigured; the message says what to fix."""


@dataclass(frozen=True, order=True)
class PartitionRange:
    """Offsets [start, end) of one partition of one topic."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        if self.start < 0:
            raise ValueError(f"start offset must be >= 0, got {self.start} for partition {self.partition}")
        if self.end < self.start:
            raise ValueError(f"partition {self.partition}: end offset {self.end} is before start offset {self.start}")

    @property
    def size(self) -> int:
        """Offsets spanned; with transactions or compaction the records in it can be fewer."""
        return self.end - self.start


def spark_offsets(ranges: list[PartitionRange]) -> tuple[str, str]:
    """``startingOffsets`` / ``endingOffsets`` JSON for Spark's Kafka source."""
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    return json.dumps(starting), json.dumps(ending)


def admin_client(settings: Settings):  # -> confluent_kafka.admin.AdminClient
    from confluent_kafka.admin import AdminClient

    return AdminClient(settings.kafka_client_config())


def ensure_topic(settings: Settings, topic: str, partitions: int = 3, timestamp_type: str = "LogAppendTime") -> bool:
    """Create ``topic`` if it does not exist; returns True when it was created now."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    if timestamp_type not in ("LogAppendTime", "CreateTime"):
        raise ValueError(f"timestamp_type must be LogAppendTime or CreateTime, got {timestamp_type!r}")
    admin = admin_client(settings)
    if topic in admin.list_topics(timeout=10).topics:
        return False
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config={"message.timestamp.type": timestamp_type})])
    try:
        futures[topic].result(timeout=30)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
        return False
    return True


def watermarks(settings: Settings, topic: str) -> Mapping[int, tuple[int, int]]:
    """``{partition: (low, high)}``: the offsets the broker holds for each partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings.kafka_client_config(**{"group.id": "tidemark-planner", "enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise TopicError(
                f"topic {topic!r} does not exist on {settings.bootstrap_servers}. Check the topic name "
                "(TIDEMARK_TOPIC) or create it, e.g. with `tidemark produce`."
            )
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in sorted(info.partitions)
        }
    finally:
        consumer.close()


def latest_ranges(settings: Settings, topic: str) -> list[PartitionRange]:
    """Everything the broker holds now: [low watermark, high watermark) per partition."""
    return [PartitionRange(topic, p, low, high) for p, (low, high) in watermarks(settings, topic).items()]
