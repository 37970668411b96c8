"""Synthetic records of an Avro pipeline: samples of a writer schema in Confluent's wire format, and the ways an
Avro record cannot be read (``tidemark produce --pipeline NAME`` for a pipeline of ``format: avro``).

A sample has a value of each field's type (logical types included: a decimal of its scale, a timestamp, a
date, a uuid), the first branch of a union that is not null, and the roles at their pointers; it is framed
with the writer schema's id (a zero byte, the 4-byte id, the Avro body) as Confluent's serializer frames it.
"""

from __future__ import annotations

import io
import json
import random
import struct
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from spark_jobs.errors import ConfigError
from spark_jobs.pipelines import Contract
from tidemark.records import EVENT_TYPES, Sampler, _put

# An id no registry gives (Confluent's ids are positive 32-bit integers, counted up from 1).
UNKNOWN_SCHEMA_ID = 2**31 - 1


class AvroSampler(Sampler):
    """Samples of ``writer`` (its registry id and schema text) with ``contract``'s roles, framed for Kafka."""

    CHECKED = 0  # fastavro refuses a datum that does not fit the schema as it writes it

    def __init__(self, contract: Contract, schema_id: int, schema: str) -> None:
        import fastavro

        super().__init__(contract)
        self.schema_id = schema_id
        self.schema = json.loads(schema)
        self.parsed = fastavro.parse_schema(self.schema)
        self.named: dict[str, Any] = self.parsed.get("__named_schemas", {}) if isinstance(self.parsed, dict) else {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("not_avro", "unknown_schema", "bad_avro")

    def value(self, event_id: str, entity: str, event_time: datetime, rng: random.Random) -> dict:
        c = self.contract
        value = self._sample(self.parsed, rng, 0)
        if not isinstance(value, dict):
            raise ConfigError("the pipeline's Avro schema is not a record; register a record schema")
        _put(value, c.event_id, self._role(c.event_id, event_id))
        _put(value, c.entity_id, self._role(c.entity_id, entity))
        at = self._field(c.event_time)
        _put(value, c.event_time, event_time if _logical(at) else event_time.isoformat(timespec="milliseconds"))
        if c.event_type:
            symbols = (self._resolve(self._field(c.event_type)) or {}).get("symbols") or EVENT_TYPES
            _put(value, c.event_type, rng.choice(symbols))
        return value

    def encode(self, value: dict) -> bytes:
        return self._framed(self.schema_id, value)

    def malformed(self, kind: str, value: dict, entity: str, rng: random.Random) -> tuple[bytes | None, bytes]:
        key = entity.encode()
        if kind == "not_avro":
            return key, json.dumps(value, default=str).encode()
        if kind == "unknown_schema":
            return key, self._framed(UNKNOWN_SCHEMA_ID, value)
        if kind == "bad_avro":  # the body one byte short
            return key, self._framed(self.schema_id, value)[:-1]
        raise ConfigError(f"unknown malformed kind {kind!r}")

    def check(self, value: dict) -> None:
        """fastavro checks each datum as it writes it."""

    def _framed(self, schema_id: int, value: dict) -> bytes:
        import fastavro

        body = io.BytesIO()
        try:
            fastavro.schemaless_writer(body, self.parsed, value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"cannot make sample records of this pipeline's Avro schema ({str(exc)[:120]}); produce its records "
                "with your own producer"
            ) from None
        return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()

    def _role(self, pointer: str, text: str) -> str:
        """A role's value: ``text``, or a uuid made from it where the field is a uuid."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, text)) if _logical(self._field(pointer)) == "uuid" else text

    def _resolve(self, node: Any) -> Any:
        node = self.named.get(node, node) if isinstance(node, str) else node
        if isinstance(node, list):  # a union: its first branch that is not null
            return next((self._resolve(b) for b in node if b != "null"), "null")
        return node

    def _field(self, pointer: str) -> Any:
        """The schema of the field at ``pointer`` (unions resolved to their first branch that is not null)."""
        from spark_jobs.contract_schema import tokens

        node: Any = self._resolve(self.parsed)
        for token in tokens(pointer):
            fields = {f["name"]: f["type"] for f in node.get("fields", [])} if isinstance(node, dict) else {}
            node = self._resolve(fields.get(token))
        return node

    def _sample(self, node: Any, rng: random.Random, depth: int) -> Any:
        node = self._resolve(node)
        logical = _logical(node)
        if logical:
            return _logical_sample(node, logical, rng)
        kind = node.get("type") if isinstance(node, dict) else node
        if kind in ("record", "error"):
            return {f["name"]: self._sample(f["type"], rng, depth + 1) for f in node["fields"]}
        if kind == "enum":
            return rng.choice(node["symbols"])
        if kind == "array":
            return [self._sample(node["items"], rng, depth + 1) for _ in range(rng.randint(0, 2) if depth < 6 else 0)]
        if kind == "map":
            return {f"k{i}": self._sample(node["values"], rng, depth + 1) for i in range(1 if depth < 6 else 0)}
        if kind == "fixed":
            return bytes(rng.getrandbits(8) for _ in range(node["size"]))
        if isinstance(kind, (dict, list)):
            return self._sample(kind, rng, depth)
        return _primitive(kind, rng)


def _logical(node: Any) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


def _logical_sample(node: dict, logical: str, rng: random.Random) -> Any:
    if logical == "decimal":
        scale = node.get("scale", 0)
        return Decimal(rng.randrange(10**6)).scaleb(-scale)
    if logical.startswith("timestamp") or logical.startswith("local-timestamp"):
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(86_400))
    if logical == "date":
        return date(2026, 1, 1) + timedelta(days=rng.randrange(365))
    if logical.startswith("time"):
        return time(rng.randrange(24), rng.randrange(60))
    if logical == "uuid":
        made = uuid.UUID(int=rng.getrandbits(128))
        return made.bytes if node.get("type") == "fixed" else str(made)  # fastavro writes a fixed uuid from bytes
    return _primitive(node.get("type"), rng)


def _primitive(kind: Any, rng: random.Random) -> Any:
    samples = {
        "null": None,
        "boolean": rng.random() < 0.5,
        "int": rng.randrange(1000),
        "long": rng.randrange(10**6),
        "float": round(rng.random() * 100, 2),
        "double": round(rng.random() * 100, 2),
        "bytes": bytes(rng.getrandbits(8) for _ in range(4)),
        "string": f"s{rng.randrange(1000)}",
    }
    if kind not in samples:
        raise ConfigError(f"cannot make sample records of the Avro type {kind!r}; produce with your own producer")
    return samples[kind]
