"""One synthetic record's value, good or bad: today's ``events``, samples of a pipeline's contract, and the
malformed kinds of each.

Without a contract a value is today's ``events`` (spark_jobs.contract). With a pipeline's contract a
:class:`Sampler` makes a sample of its JSON Schema: required properties always, others often, values of
each declared type, enum, format and bound, with the roles (event id, entity id, event time, event type)
at their pointers; it refuses a schema whose samples it cannot make valid (:meth:`Sampler.check`).
Which records come in which order, and sending them, is ``tidemark.producer``'s.
"""

from __future__ import annotations

import copy
import json
import math
import random
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.contract import MAX_VALUE_BYTES
from spark_jobs.errors import ConfigError

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


def today_event(event_id: str, entity: str, event_type: str, event_time: datetime, rng: random.Random) -> dict:
    """A value of today's ``events``."""
    return {
        "event_id": event_id,
        "entity_id": entity,
        "event_type": event_type,
        "event_time": event_time.isoformat(timespec="milliseconds"),
        "properties": {"page": f"/p/{rng.randrange(50)}", "value": rng.randrange(1000)},
    }


def malformed_event(kind: str, event: dict, rng: random.Random) -> tuple[bytes | None, bytes]:
    """A record (key, value) of ``kind`` (:data:`MALFORMED_KINDS`) made from today's ``event``."""
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
        """The sampler of a JSON ``contract`` (None: today's events; an Avro one's is ``tidemark.avro_records``')."""
        from spark_jobs.pipelines import EVENTS_CONTRACT

        return None if contract is None or contract == EVENTS_CONTRACT else cls(contract)

    def encode(self, value: dict) -> bytes:
        """A good value as the record's bytes."""
        return json.dumps(value, separators=(",", ":")).encode()

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
