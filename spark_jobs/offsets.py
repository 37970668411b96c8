"""Kafka topics and offsets: create the topic, read watermarks, freeze per-partition ranges.

A range is decided *before* a batch is processed and recorded with it (docs/design.md, invariant 2), so a
replay reads exactly the same records whatever arrived since.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs.errors import ConfigError, ServiceUnavailable, TopicError
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka.admin import AdminClient
    from pyspark.sql import DataFrame


@dataclass(frozen=True, order=True)
class PartitionRange:
    """Offsets [start, end) of one partition of one topic."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ConfigError(f"partition must be >= 0, got {self.partition}")
        if self.start < 0:
            raise ConfigError(f"start offset must be >= 0, got {self.start} for partition {self.partition}")
        if self.end < self.start:
            raise ConfigError(f"partition {self.partition}: end offset {self.end} is before start offset {self.start}")

    def __str__(self) -> str:
        return f"topic {self.topic} partition {self.partition} offsets [{self.start}, {self.end})"

    @property
    def size(self) -> int:
        """Offsets spanned; with transactions or compaction the records in it can be fewer."""
        return self.end - self.start

    def overlaps(self, other: PartitionRange) -> bool:
        return (self.topic, self.partition) == (other.topic, other.partition) and (
            self.start < other.end and other.start < self.end
        )


def spark_offsets(ranges: list[PartitionRange]) -> tuple[str, str]:
    """``startingOffsets`` / ``endingOffsets`` JSON for Spark's Kafka source."""
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    return json.dumps(starting), json.dumps(ending)


def admin_client(settings: Settings) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    # confluent-kafka's stub types AdminClient's configuration without the `logger` object it documents
    # (and Producer and Consumer take): the configuration is the one they get.
    return AdminClient(settings.kafka_client_config())  # type: ignore[arg-type]


def ensure_topic(settings: Settings, topic: str, partitions: int = 3, timestamp_type: str = "LogAppendTime") -> bool:
    """Create ``topic`` if it does not exist; returns True when it was created now.

    A ``CreateTime`` topic is one whose producer sets arrival times (simulated ones, for demos,
    tests and benchmarks); it gets no time-based retention, because the broker would otherwise
    delete records whose timestamps are older than ``retention.ms``, between runs, while they are
    still to be read.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    if timestamp_type not in ("LogAppendTime", "CreateTime"):
        raise ConfigError(f"timestamp_type must be LogAppendTime or CreateTime, got {timestamp_type!r}")
    admin = admin_client(settings)
    if topic in admin.list_topics(timeout=10).topics:
        return False
    config = {"message.timestamp.type": timestamp_type}
    if timestamp_type == "CreateTime":
        config["retention.ms"] = "-1"
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])
    try:
        futures[topic].result(timeout=30)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
        return False
    return True


def check_reachable(settings: Settings, timeout_s: float = 10.0) -> None:
    """Kafka accepts a connection and tidemark's credentials; otherwise one line, at once.

    Without it the first Kafka client to try keeps retrying (and logging each retry) until its
    timeout, and a Spark job starts before anything fails.
    """
    import socket
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException

    where = settings.bootstrap_servers
    failures = []
    for server in filter(None, (s.strip() for s in where.split(","))):
        host, _, port = server.split("://")[-1].rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s / 2):
                break
        except (OSError, ValueError) as exc:
            failures.append(getattr(exc, "strerror", None) or str(exc))
    else:
        raise ServiceUnavailable(
            f"cannot reach Kafka at {where} ({'; '.join(sorted(set(failures)))}). Start it with `tidemark up`, "
            "or fix TIDEMARK_KAFKA_BOOTSTRAP_SERVERS (the Airflow connection tidemark_kafka)."
        )
    errors: list = []
    quiet = {"group.id": "tidemark-planner", "enable.auto.commit": False, "error_cb": errors.append, "log_level": 0}
    consumer = Consumer(settings.kafka_client_config(**quiet))
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                consumer.list_topics(timeout=0.5)
                return
            except KafkaException:
                consumer.poll(0.1)  # serves error_cb
            denied = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
            refused = [e for e in errors if e.code() in denied]
            if refused:
                raise ServiceUnavailable(
                    f"Kafka at {where} refused tidemark's credentials: {refused[0].str()}. Fix the SASL/SSL options "
                    "of the Airflow connection tidemark_kafka (TIDEMARK_KAFKA_OPT_* outside Airflow)."
                )
    finally:
        consumer.close()
    last = f": {errors[-1].str()}" if errors else ""
    raise ServiceUnavailable(
        f"Kafka at {where} accepts connections but did not answer within {timeout_s:.0f} s{last}. Check the "
        "security options of the Airflow connection tidemark_kafka (TIDEMARK_KAFKA_OPT_* outside Airflow)."
    )


def watermarks(settings: Settings, topic: str, timeout_s: float = 10.0) -> Mapping[int, tuple[int, int]]:
    """``{partition: (low, high)}``: the offsets the broker holds for each partition of ``topic``. A topic
    created a moment ago may be missing from the broker's metadata for :data:`NEW_TOPIC_WAIT_S` at most,
    and its partitions may have no leader yet: both are asked again, the leaders until ``timeout_s`` has
    passed. A broker that does not answer within that is :class:`ServiceUnavailable`."""
    from confluent_kafka import Consumer

    consumer = Consumer(settings.kafka_client_config(**{"group.id": "tidemark-planner", "enable.auto.commit": False}))
    deadline = time.monotonic() + timeout_s
    unknown_until = time.monotonic() + min(NEW_TOPIC_WAIT_S, timeout_s)
    try:
        while True:
            try:
                held, not_yet = _watermarks_once(consumer, settings, topic, max(deadline - time.monotonic(), 0.1))
            except TopicError:
                if time.monotonic() >= unknown_until:
                    raise
                held, not_yet = None, "the broker does not name the topic yet"
            if held is not None:
                return held
            if time.monotonic() >= deadline:
                raise ServiceUnavailable(
                    f"Kafka at {settings.bootstrap_servers} gave no offsets of {topic!r} within {timeout_s:g} s: "
                    f"{not_yet}"
                )
            time.sleep(LEADER_WAIT_S)
    finally:
        consumer.close()


LEADER_WAIT_S = 0.1  # between two asks for a partition's leader after the broker named none
# How long a topic the broker does not name may be one created a moment ago: a broker answers
# CreateTopics once its controller has the topic, and names it in metadata a little later.
NEW_TOPIC_WAIT_S = 2.0


def _watermarks_once(
    consumer: Consumer, settings: Settings, topic: str, timeout_s: float
) -> tuple[Mapping[int, tuple[int, int]] | None, str]:
    """The watermarks, or None and why not yet (a partition without a leader: ask again)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise ServiceUnavailable(
            f"Kafka at {settings.bootstrap_servers} did not answer: {exc.args[0].str()}. Is it up, and are "
            "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS and the TIDEMARK_KAFKA_OPT_* security options right?"
        ) from None
    info = metadata.topics.get(topic)
    if info is None or not info.partitions or (info.error is not None and not _leaderless(info.error)):
        raise TopicError(
            f"topic {topic!r} does not exist on {settings.bootstrap_servers}. Check the topic name "
            "(TIDEMARK_TOPIC) or create it, e.g. with `tidemark produce`."
        )
    leaderless = [
        p
        for p, part in info.partitions.items()
        if part.leader < 0 or (part.error is not None and _leaderless(part.error))
    ]
    if info.error is not None or leaderless:
        return None, f"partitions {sorted(leaderless) or sorted(info.partitions)} have no leader yet"
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
            for p in sorted(info.partitions)
        }, ""
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if _leaderless(error):
            return None, error.str()
        raise ServiceUnavailable(
            f"Kafka at {settings.bootstrap_servers} gave no offsets of {topic!r} within {timeout_s:g} s: {error.str()}"
        ) from None


def _leaderless(error: KafkaError) -> bool:
    """Whether ``error`` says a partition has no leader (yet), as a topic just created has for a moment."""
    from confluent_kafka import KafkaError

    return error.code() in (KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION)


def topic_id(settings: Settings, topic: str) -> str | None:
    """Kafka's id of the topic named ``topic`` (None from a broker that gives none)."""
    from confluent_kafka import KafkaException, TopicCollection

    admin = admin_client(settings)
    try:
        [future] = admin.describe_topics(TopicCollection([topic]), request_timeout=10).values()
        described = future.result()
    except KafkaException as exc:
        raise TopicError(f"Kafka at {settings.bootstrap_servers} could not describe topic {topic!r}: {exc}") from None
    return None if described.topic_id is None else str(described.topic_id)


def offsets_for_time(
    settings: Settings, topic: str, when: datetime, held: Mapping[int, tuple[int, int]] | None = None
) -> dict[int, int]:
    """Per partition, the first offset whose (arrival) timestamp is at or after ``when``.

    A partition with no such record gets its high watermark, so ``[from, to)`` ranges built from
    two calls never reach past what the broker holds. ``held`` is :func:`watermarks`' answer.
    """
    from confluent_kafka import Consumer, TopicPartition

    held = watermarks(settings, topic) if held is None else held
    consumer = Consumer(settings.kafka_client_config(**{"group.id": "tidemark-planner", "enable.auto.commit": False}))
    try:
        millis = int(when.timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(topic, p, millis) for p in held], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else held[tp.partition][1] for tp in found}


def first_arrival(settings: Settings, topic: str, partition: int, offset: int, timeout_s: float = 10.0):
    """Arrival time (the record timestamp, UTC) of the first committed record at or after ``offset``; None if none."""
    from datetime import UTC

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        settings.kafka_client_config(
            **{
                "group.id": "tidemark-reconcile",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        for message in consumer.consume(num_messages=1, timeout=timeout_s):
            if message.error() is None:
                return datetime.fromtimestamp(message.timestamp()[1] / 1000, tz=UTC)
        return None
    finally:
        consumer.close()


def latest_ranges(settings: Settings, topic: str) -> list[PartitionRange]:
    """Everything the broker holds now: [low watermark, high watermark) per partition."""
    return [PartitionRange(topic, p, low, high) for p, (low, high) in watermarks(settings, topic).items()]


def merged_spans(ranges: list[PartitionRange]) -> list[PartitionRange]:
    """``ranges`` merged per partition where they overlap or touch (a short filter for data skipping)."""
    merged: list[PartitionRange] = []
    for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.start)):
        last = merged[-1] if merged else None
        if last and (last.topic, last.partition) == (r.topic, r.partition) and r.start <= last.end:
            merged[-1] = PartitionRange(r.topic, r.partition, last.start, max(last.end, r.end))
        else:
            merged.append(r)
    return merged


def consecutive_offsets(records: DataFrame) -> list[PartitionRange]:
    """The runs of consecutive offsets ``records`` hold, per topic and partition (one small job):
    in a stream that skips removed offsets, what lies between them may have been skipped."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_offset = Window.partitionBy("topic", "partition").orderBy("offset")
    runs = (
        records.select("topic", "partition", "offset")
        .withColumn("run", F.col("offset") - F.row_number().over(by_offset))
        .groupBy("topic", "partition", "run")
        .agg(F.min("offset").alias("first"), F.max("offset").alias("last"))
        .collect()
    )
    return sorted(PartitionRange(r["topic"], r["partition"], r["first"], r["last"] + 1) for r in runs)
