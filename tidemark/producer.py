"""Synthetic events that follow a pipeline's contract, and the bad records producers send.

Without a contract the records are today's ``events`` (spark_jobs.contract). With a pipeline's
contract (``tidemark produce --pipeline NAME``) each value is a sample of its JSON Schema
(``tidemark.records`` makes a record's value, good or bad); a schema whose samples it cannot make
valid (a ``pattern`` it cannot satisfy, say) is refused before anything is sent.
:func:`generate` is pure and seeded: the same :class:`ProduceSpec` always yields the same records.
:func:`produce` writes them to Kafka keyed by ``entity_id``, optionally in transactions of which
some are aborted.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs.errors import ConfigError
from spark_jobs.offsets import ensure_topic
from spark_jobs.settings import Settings
from tidemark.avro_records import AvroSampler
from tidemark.records import EVENT_TYPES, MALFORMED_KINDS, Sampler, malformed_event, today_event

if TYPE_CHECKING:
    from spark_jobs.pipelines import Contract


@dataclass(frozen=True)
class ProduceSpec:
    """What to produce. Rates are fractions of ``count`` in [0, 1]."""

    count: int
    entities: int = 100
    skew: float = 0.0  # fraction of records that go to the hottest 1% of entities
    duplicate_rate: float = 0.0  # records that resend an earlier event (same event_id)
    late_rate: float = 0.0  # records whose event time is before the entity's previous event
    malformed_rate: float = 0.0  # records of one of MALFORMED_KINDS
    seed: int = 42
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    # When set, each record carries this simulated arrival time (ms) as its Kafka timestamp; the
    # topic must use CreateTime. Consecutive records are this far apart.
    arrival_step: timedelta | None = None
    id_prefix: str = ""  # prefixes event_ids and entity_ids, to keep separate runs distinct
    contract: Contract | None = None  # a pipeline's contract; None: today's events
    writer: tuple[int, str] | None = None  # an Avro pipeline's: the writer schema's registry id and text

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ConfigError(f"count must be >= 0, got {self.count}")
        if self.entities < 1:
            raise ConfigError(f"entities must be >= 1, got {self.entities}")
        for name in ("skew", "duplicate_rate", "late_rate", "malformed_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be between 0 and 1, got {value}")
        if self.duplicate_rate + self.late_rate + self.malformed_rate > 1.0:
            raise ConfigError("duplicate_rate + late_rate + malformed_rate must not exceed 1")


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes
    kind: str  # "valid", "late", "duplicate" or "malformed:<kind>"
    timestamp_ms: int | None = None


@dataclass
class ProduceReport:
    topic: str
    produced: Counter[str] = field(default_factory=Counter)  # by kind, committed records only
    aborted: int = 0

    @property
    def committed(self) -> int:
        return sum(self.produced.values())


def generate(spec: ProduceSpec) -> Iterator[Record]:
    """The records of ``spec``, in production order. Deterministic for a given spec."""
    rng = random.Random(spec.seed)
    sampler = sampler_of(spec)
    hot = max(1, spec.entities // 100)
    clocks: dict[int, datetime] = {}
    sent: list[tuple[bytes, bytes]] = []  # valid records that a duplicate may resend
    key: bytes | None  # None: a malformed record without a key
    arrival = spec.start
    for i in range(spec.count):
        entity_index = rng.randrange(hot) if rng.random() < spec.skew else rng.randrange(spec.entities)
        entity = f"{spec.id_prefix}entity-{entity_index:06d}"
        # Each entity's event clock moves forward by seconds to ~45 minutes.
        clock = clocks.get(entity_index, spec.start + timedelta(seconds=entity_index))
        clock += timedelta(seconds=rng.choice((5, 30, 90, 300, 900, 2700)))
        clocks[entity_index] = clock
        timestamp_ms = int(arrival.timestamp() * 1000) if spec.arrival_step else None
        if spec.arrival_step:
            arrival += spec.arrival_step

        roll = rng.random()
        if roll < spec.duplicate_rate and sent:
            key, value = sent[rng.randrange(len(sent))]
            yield Record(key, value, "duplicate", timestamp_ms)
            continue
        roll -= spec.duplicate_rate
        event_time, kind = clock, "valid"
        if roll < spec.late_rate:
            event_time, kind = clock - timedelta(hours=rng.randint(1, 48)), "late"
        event_id = f"{spec.id_prefix}ev-{spec.seed}-{i:09d}"
        if sampler is None:
            event = today_event(event_id, entity, rng.choice(EVENT_TYPES), event_time, rng)
        else:
            event = sampler.value(event_id, entity, event_time, rng)
        roll -= spec.late_rate
        if 0 <= roll < spec.malformed_rate:
            kinds = MALFORMED_KINDS if sampler is None else sampler.kinds
            malformed = kinds[rng.randrange(len(kinds))]
            if sampler is None:
                key, value = malformed_event(malformed, event, rng)
            else:
                key, value = sampler.malformed(malformed, event, entity, rng)
            yield Record(key, value, f"malformed:{malformed}", timestamp_ms)
            continue
        key = entity.encode()
        value = json.dumps(event, separators=(",", ":")).encode() if sampler is None else sampler.encode(event)
        if sampler is not None and i < Sampler.CHECKED:
            sampler.check(event)
        sent.append((key, value))
        yield Record(key, value, kind, timestamp_ms)


def sampler_of(spec: ProduceSpec) -> Sampler | None:
    """The sampler of ``spec``'s contract (None: today's events); an Avro contract's writes with ``spec.writer``."""
    if spec.contract is not None and spec.contract.avro:
        if spec.writer is None:
            raise ConfigError("an Avro pipeline's samples need its writer schema (the registry's id and text)")
        return AvroSampler(spec.contract, *spec.writer)
    return Sampler.of(spec.contract)


def produce(
    settings: Settings,
    spec: ProduceSpec,
    topic: str | None = None,
    partitions: int = 3,
    transaction_size: int = 0,
    abort_rate: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
) -> ProduceReport:
    """Write ``generate(spec)`` to ``topic`` (created if missing).

    With ``transaction_size > 0`` records go in transactions of that many, each aborted with
    probability ``abort_rate``; aborted records are counted in ``report.aborted`` only.
    """
    _check_transactions(transaction_size, abort_rate)
    topic = topic or settings.topic
    ensure_topic(settings, topic, partitions, "CreateTime" if spec.arrival_step else "LogAppendTime")
    sender = Sender(settings, spec, topic, transaction_size, abort_rate)
    for n, record in enumerate(generate(spec), start=1):
        sender.send(record)
        if progress and (n % 50_000 == 0 or n == spec.count):
            progress(n, spec.count)
    return sender.close()


def _check_transactions(transaction_size: int, abort_rate: float) -> None:
    """Refuse transactions of a negative size, an abort rate out of [0, 1], or aborts without transactions."""
    if transaction_size < 0:
        raise ConfigError(f"transaction_size must be >= 0, got {transaction_size}")
    if not 0.0 <= abort_rate <= 1.0:
        raise ConfigError(f"abort_rate must be between 0 and 1, got {abort_rate}")
    if abort_rate and not transaction_size:
        raise ConfigError("abort_rate needs transaction_size > 0 (aborts only exist in transactions)")


def producer_config(spec: ProduceSpec, transaction_size: int) -> dict[str, object]:
    """The producer's configuration: idempotent, Java's partitioner; transactional when ``transaction_size``."""
    config: dict[str, object] = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        "message.max.bytes": 2 * 1024 * 1024,
        # Java's partitioner: an entity's records land where every Java producer puts them (README,
        # Producer requirements); librdkafka's default (consistent_random, CRC32) would not.
        "partitioner": "murmur2_random",
    }
    if transaction_size:
        config["transactional.id"] = f"tidemark-produce-{spec.seed}-{spec.id_prefix}"
    return config


class Sender:
    """One producer of ``topic``'s records: in transactions of ``transaction_size`` records, each aborted with
    probability ``abort_rate``, or (size 0) without; what it sent is counted in :attr:`report`."""

    def __init__(self, settings: Settings, spec: ProduceSpec, topic: str, transaction_size: int, abort_rate: float):
        from confluent_kafka import Producer

        self.producer = Producer(settings.kafka_client_config(**producer_config(spec, transaction_size)))
        self.topic = topic
        self.transaction_size = transaction_size
        self.abort_rate = abort_rate
        self.abort_rng = random.Random(spec.seed + 1)
        self.report = ProduceReport(topic)
        self.pending: Counter[str] = Counter()  # the open transaction's records, by kind
        self.failures: list[str] = []
        if transaction_size:
            self.producer.init_transactions(30)

    def on_delivery(self, err: object, _msg: object) -> None:  # confluent-kafka's callback signature
        if err is not None:
            self.failures.append(str(err))

    def send(self, record: Record) -> None:
        """Send ``record``, in the open transaction (begun if none is), and finish it when it is full."""
        if self.transaction_size and not self.pending:
            self.producer.begin_transaction()
        while True:
            try:
                # timestamp 0: librdkafka stamps the record with the time it is sent
                timestamp = record.timestamp_ms if record.timestamp_ms is not None else 0
                self.producer.produce(
                    self.topic, key=record.key, value=record.value, on_delivery=self.on_delivery, timestamp=timestamp
                )
                break
            except BufferError:
                self.producer.poll(0.1)  # local queue full: let it drain
        self.producer.poll(0)
        if self.transaction_size:
            self.pending[record.kind] += 1
            if sum(self.pending.values()) >= self.transaction_size:
                self.finish_transaction()
        else:
            self.report.produced[record.kind] += 1

    def finish_transaction(self) -> None:
        """Commit the open transaction, or abort it (with probability ``abort_rate``)."""
        if self.abort_rng.random() < self.abort_rate:
            # Deliver first: the aborted records then really sit in the log (as in production), and
            # librdkafka does not race the abort against in-flight AddPartitionsToTxn
            # (confluentinc/librdkafka#4849, INVALID_TXN_STATE).
            self.producer.flush(60)
            self.producer.abort_transaction(60)
            self.report.aborted += sum(self.pending.values())
        else:
            self.producer.commit_transaction(60)
            self.report.produced.update(self.pending)
        self.pending.clear()

    def close(self) -> ProduceReport:
        """Finish the last transaction, wait for every record's delivery (60 s at most), and report."""
        if self.transaction_size and self.pending:
            self.finish_transaction()
        remaining = self.producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} records were not delivered to {self.topic} within 60 s")
        if self.failures:
            raise RuntimeError(f"{len(self.failures)} records were not delivered to {self.topic}: {self.failures[0]}")
        return self.report


def print_progress(done: int, total: int) -> None:
    print(f"\r  produced {done:,}/{total:,} ({100 * done // max(total, 1)}%)", end="", file=sys.stderr)
    if done == total:
        print(file=sys.stderr)
