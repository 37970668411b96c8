"""Synthetic events that follow a pipeline's contract, and the bad records producers send.

Without a contract the records are today's ``events`` (spark_jobs.contract). With a pipeline's
contract (``tidemark produce --pipeline NAME``) each value is a sample of its JSON Schema: required
properties always, others often, values of each declared type, enum, format and bound, with the
roles (event id, entity id, event time, event type) at their pointers; a schema whose samples it
cannot make valid (a ``pattern`` it cannot satisfy, say) is refused before anything is sent.
:func:`generate` is pure and seeded: the same :class:`ProduceSpec` always yields the same records.
:func:`produce` writes them to Kafka keyed by ``entity_id``, optionally in transactions of which
some are aborted.
"""

from __future__ import annotations

import copy
import json
import math
import random
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spark_jobs.contract import MAX_VALUE_BYTES
from spark_jobs.errors import ConfigError
from spark_jobs.offsets import ensure_topic
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from spark_jobs.pipelines import Contract

EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase", "search")
MALFORMED_KINDS = (
    "invalid_json",
    "not_an_object",
    "missing_field",
    "wrong_type",
    "bad_event_time",
    "not_utf8",
    "null_key",
    "oversized",
)


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


def _event(event_id: str, entity: str, event_type: str, event_time: datetime, rng: random.Random) -> dict:
    return {
        "event_id": event_id,
        "entity_id": entity,
        "event_type": event_type,
        "event_time": event_time.isoformat(timespec="milliseconds"),
        "properties": {"page": f"/p/{rng.randrange(50)}", "value": rng.randrange(1000)},
    }


def _malformed(kind: str, event: dict, rng: random.Random) -> tuple[bytes | None, bytes]:
    key = event["entity_id"].encode()
    if kind == "invalid_json":
        return key, json.dumps(event).encode()[:-7]
    if kind == "not_an_object":
        return key, json.dumps([event["event_id"], event["entity_id"]]).encode()
    if kind == "missing_field":
        broken = dict(event)
        del broken[rng.choice(("event_id", "entity_id", "event_type", "event_time"))]
        return key, json.dumps(broken).encode()
    if kind == "wrong_type":
        return key, json.dumps({**event, "event_type": 12345}).encode()
    if kind == "bad_event_time":
        return key, json.dumps({**event, "event_time": "last tuesday"}).encode()
    if kind == "not_utf8":
        return key, b'{"event_id": "\xff\xfe\xfd"}'
    if kind == "null_key":
        return None, json.dumps(event).encode()
    if kind == "oversized":
        return key, json.dumps({**event, "properties": {"blob": "x" * (MAX_VALUE_BYTES + 1024)}}).encode()
    raise ConfigError(f"unknown malformed kind {kind!r}")


class Sampler:
    """Sample values of a pipeline's contract: its JSON Schema's shapes, with the roles at their pointers."""

    CHECKED = 20  # the first records are validated against the schema: a schema it cannot satisfy fails at once

    def __init__(self, contract: Contract) -> None:
        self.contract = contract

    @classmethod
    def of(cls, contract: Contract | None) -> Sampler | None:
        from spark_jobs.pipelines import EVENTS_CONTRACT

        return None if contract is None or contract == EVENTS_CONTRACT else cls(contract)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The malformed kinds this contract can have: without a key rule a record without a key is a good one."""
        return (
            MALFORMED_KINDS if self.contract.key_is_entity_id else tuple(k for k in MALFORMED_KINDS if k != "null_key")
        )

    def value(self, event_id: str, entity: str, event_time: datetime, rng: random.Random) -> dict:
        c = self.contract
        value = self._sample(c.schema, rng, 0)
        value = value if isinstance(value, dict) else {}
        _put(value, c.event_id, event_id)
        _put(value, c.entity_id, entity)
        _put(value, c.event_time, event_time.isoformat(timespec="milliseconds"))
        if c.event_type:
            node = self._node(c.event_type)
            _put(value, c.event_type, rng.choice(node.get("enum") or EVENT_TYPES))
        return value

    def malformed(self, kind: str, value: dict, entity: str, rng: random.Random) -> tuple[bytes | None, bytes]:
        """A record of ``kind`` (:data:`MALFORMED_KINDS`) made from the good ``value``."""
        c, key = self.contract, entity.encode()
        if kind == "missing_field":
            broken = copy.deepcopy(value)
            _put(broken, rng.choice([c.event_id, c.entity_id, c.event_time]), None, delete=True)
            return key, json.dumps(broken).encode()
        if kind == "wrong_type":
            broken = copy.deepcopy(value)
            _put(broken, c.event_id, 12345)
            return key, json.dumps(broken).encode()
        if kind == "bad_event_time":
            broken = copy.deepcopy(value)
            _put(broken, c.event_time, "last tuesday")
            return key, json.dumps(broken).encode()
        if kind == "oversized":
            return key, json.dumps({**value, "blob": "x" * (MAX_VALUE_BYTES + 1024)}).encode()
        if kind == "not_an_object":
            return key, json.dumps([entity, entity]).encode()
        if kind == "null_key":
            return None, json.dumps(value).encode()
        if kind == "not_utf8":
            return key, b'{"id": "\xff\xfe\xfd"}'
        if kind == "invalid_json":
            return key, json.dumps(value).encode()[:-7]
        raise ConfigError(f"unknown malformed kind {kind!r}")

    def check(self, value: dict) -> None:
        """Refuse a schema whose samples it cannot make valid, naming the rule."""
        from jsonschema import Draft202012Validator, FormatChecker

        validator = Draft202012Validator(self.contract.schema, format_checker=FormatChecker())
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))), None)
        if error is not None:
            where = "/" + "/".join(str(p) for p in error.absolute_path)
            raise ConfigError(
                f"cannot make sample records of this pipeline's contract ({error.validator} at {where}: "
                f"{error.message[:120]}); produce its records with your own producer"
            )

    def _node(self, pointer: str) -> dict:
        from spark_jobs.contract_schema import declared

        return dict(declared(self.contract.schema, pointer) or {})

    def _sample(self, node: Any, rng: random.Random, depth: int) -> Any:
        from spark_jobs.contract_schema import resolve

        if not isinstance(node, dict) or depth > 8:
            return None
        node = dict(resolve(self.contract.schema, node))
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return rng.choice(node["enum"])
        types = node.get("type", "object" if "properties" in node else "string")
        types = [types] if isinstance(types, str) else [t for t in types if t != "null"] or ["null"]
        kind = types[0]
        if kind == "object":
            required = set(node.get("required", ()))
            return {
                name: self._sample(child, rng, depth + 1)
                for name, child in node.get("properties", {}).items()
                if name in required or rng.random() < 0.7
            }
        if kind == "array":
            return [self._sample(node.get("items", {}), rng, depth + 1) for _ in range(max(node.get("minItems", 1), 1))]
        if kind in ("integer", "number"):
            low = node.get("minimum", node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else 0)
            high = node.get("maximum", node["exclusiveMaximum"] - 1 if "exclusiveMaximum" in node else low + 1000)
            if kind == "integer":
                return rng.randint(math.ceil(low), max(math.ceil(low), math.floor(high)))
            return min(max(round(low + (high - low) * rng.random(), 2), low), high)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "null":
            return None
        return _string(node, rng)


def _string(node: dict, rng: random.Random) -> str:
    """A string of ``node``'s format and length (a ``pattern`` it does not try to satisfy: :meth:`Sampler.check`)."""
    fmt = node.get("format")
    if fmt == "date-time":
        return datetime(2026, 1, 1, tzinfo=UTC).isoformat(timespec="milliseconds")
    if fmt == "date":
        return "2026-01-01"
    if fmt == "email":
        return f"user{rng.randrange(1000)}@example.com"
    if fmt == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    if fmt in ("uri", "iri"):
        return f"https://example.com/p/{rng.randrange(50)}"
    text = f"s{rng.randrange(10_000)}"
    text = text.ljust(node.get("minLength", 1), "x")
    return text[: node["maxLength"]] if "maxLength" in node else text


def _put(value: dict, pointer: str, item: Any, delete: bool = False) -> None:
    """Set (or delete) ``pointer`` of ``value``, making the objects on its way."""
    from spark_jobs.contract_schema import tokens

    *path, last = tokens(pointer)
    for token in path:
        nxt = value.get(token)
        if not isinstance(nxt, dict):
            nxt = value[token] = {}
        value = nxt
    if delete:
        value.pop(last, None)
    else:
        value[last] = item


def generate(spec: ProduceSpec) -> Iterator[Record]:
    """The records of ``spec``, in production order. Deterministic for a given spec."""
    rng = random.Random(spec.seed)
    sampler = Sampler.of(spec.contract)
    hot = max(1, spec.entities // 100)
    clocks: dict[int, datetime] = {}
    sent: list[tuple[bytes, bytes]] = []  # valid records that a duplicate may resend
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
            event = _event(event_id, entity, rng.choice(EVENT_TYPES), event_time, rng)
        else:
            event = sampler.value(event_id, entity, event_time, rng)
        roll -= spec.late_rate
        if 0 <= roll < spec.malformed_rate:
            kinds = MALFORMED_KINDS if sampler is None else sampler.kinds
            malformed = kinds[rng.randrange(len(kinds))]
            if sampler is None:
                key, value = _malformed(malformed, event, rng)
            else:
                key, value = sampler.malformed(malformed, event, entity, rng)
            yield Record(key, value, f"malformed:{malformed}", timestamp_ms)
            continue
        key, value = entity.encode(), json.dumps(event, separators=(",", ":")).encode()
        if sampler is not None and i < Sampler.CHECKED:
            sampler.check(event)
        sent.append((key, value))
        yield Record(key, value, kind, timestamp_ms)


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
    from confluent_kafka import Producer

    if transaction_size < 0:
        raise ConfigError(f"transaction_size must be >= 0, got {transaction_size}")
    if not 0.0 <= abort_rate <= 1.0:
        raise ConfigError(f"abort_rate must be between 0 and 1, got {abort_rate}")
    if abort_rate and not transaction_size:
        raise ConfigError("abort_rate needs transaction_size > 0 (aborts only exist in transactions)")
    topic = topic or settings.topic
    ensure_topic(settings, topic, partitions, "CreateTime" if spec.arrival_step else "LogAppendTime")

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
    producer = Producer(settings.kafka_client_config(**config))
    abort_rng = random.Random(spec.seed + 1)
    report = ProduceReport(topic)
    pending: Counter[str] = Counter()
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:  # confluent-kafka callback signature
        if err is not None:
            failures.append(str(err))

    if transaction_size:
        producer.init_transactions(30)

    def finish_transaction() -> None:
        if abort_rng.random() < abort_rate:
            # Deliver first: the aborted records then really sit in the log (as in production), and
            # librdkafka does not race the abort against in-flight AddPartitionsToTxn
            # (confluentinc/librdkafka#4849, INVALID_TXN_STATE).
            producer.flush(60)
            producer.abort_transaction(60)
            report.aborted += sum(pending.values())
        else:
            producer.commit_transaction(60)
            report.produced.update(pending)
        pending.clear()

    for n, record in enumerate(generate(spec), start=1):
        if transaction_size and not pending:
            producer.begin_transaction()
        while True:
            try:
                kwargs = {"timestamp": record.timestamp_ms} if record.timestamp_ms is not None else {}
                producer.produce(topic, key=record.key, value=record.value, on_delivery=on_delivery, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let it drain
        producer.poll(0)
        if transaction_size:
            pending[record.kind] += 1
            if sum(pending.values()) >= transaction_size:
                finish_transaction()
        else:
            report.produced[record.kind] += 1
        if progress and (n % 50_000 == 0 or n == spec.count):
            progress(n, spec.count)
    if transaction_size and pending:
        finish_transaction()
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered to {topic} within 60 s")
    if failures:
        raise RuntimeError(f"{len(failures)} records were not delivered to {topic}: {failures[0]}")
    return report


def print_progress(done: int, total: int) -> None:
    print(f"\r  produced {done:,}/{total:,} ({100 * done // max(total, 1)}%)", end="", file=sys.stderr)
    if done == total:
        print(file=sys.stderr)
