import json
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from spark_jobs.contract import MAX_VALUE_BYTES
from tidemark.producer import MALFORMED_KINDS, ProduceSpec, generate

REQUIRED = ("event_id", "entity_id", "event_type", "event_time")


def test_same_seed_gives_the_same_records() -> None:
    spec = ProduceSpec(count=500, duplicate_rate=0.1, late_rate=0.1, malformed_rate=0.1, seed=7)
    assert list(generate(spec)) == list(generate(spec))
    assert list(generate(spec)) != list(generate(ProduceSpec(count=500, seed=8)))


def test_valid_records_follow_the_message_contract() -> None:
    for record in generate(ProduceSpec(count=300, entities=10)):
        event = json.loads(record.value)
        assert all(isinstance(event[field], str) for field in REQUIRED)
        assert record.key == event["entity_id"].encode()
        assert datetime.fromisoformat(event["event_time"]).utcoffset() is not None


def test_rates_are_respected_roughly() -> None:
    kinds = Counter(
        r.kind.split(":")[0]
        for r in generate(ProduceSpec(count=20_000, duplicate_rate=0.1, late_rate=0.05, malformed_rate=0.05))
    )
    assert 1700 < kinds["duplicate"] < 2300
    assert 800 < kinds["late"] < 1200
    assert 800 < kinds["malformed"] < 1200


def test_duplicates_resend_an_earlier_event_exactly() -> None:
    seen: set[bytes] = set()
    duplicates = 0
    for record in generate(ProduceSpec(count=2000, duplicate_rate=0.2)):
        if record.kind == "duplicate":
            assert record.value in seen
            duplicates += 1
        seen.add(record.value)
    assert duplicates > 0


def test_late_records_are_earlier_than_the_entitys_previous_event() -> None:
    last: dict[str, datetime] = {}
    late = 0
    for record in generate(ProduceSpec(count=3000, entities=5, late_rate=0.2)):
        event = json.loads(record.value)
        when = datetime.fromisoformat(event["event_time"])
        if record.kind == "late":
            assert when < last[event["entity_id"]]
            late += 1
        else:
            last[event["entity_id"]] = max(last.get(event["entity_id"], when), when)
    assert late > 0


def _contract_violation(key: bytes | None, value: bytes) -> str | None:
    if key is None:
        return "null key"
    if len(value) > MAX_VALUE_BYTES:
        return "oversized"
    try:
        event = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "not json"
    if not isinstance(event, dict):
        return "not an object"
    for field in REQUIRED:
        if not isinstance(event.get(field), str):
            return f"{field} missing or not a string"
    try:
        datetime.fromisoformat(event["event_time"])
    except ValueError:
        return "bad event_time"
    return None


def test_every_malformed_kind_breaks_the_contract() -> None:
    records = [r for r in generate(ProduceSpec(count=4000, malformed_rate=0.5)) if r.kind.startswith("malformed:")]
    assert {r.kind.split(":", 1)[1] for r in records} == set(MALFORMED_KINDS)
    for record in records:
        assert _contract_violation(record.key, record.value) is not None, record.kind


def test_simulated_arrival_times_increase_by_the_step() -> None:
    from datetime import timedelta

    records = list(generate(ProduceSpec(count=5, arrival_step=timedelta(minutes=10))))
    stamps = [r.timestamp_ms for r in records]
    first = stamps[0]
    assert first is not None
    assert stamps == [first + i * 600_000 for i in range(5)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1}, "count must be >= 0"),
        ({"count": 1, "entities": 0}, "entities must be >= 1"),
        ({"count": 1, "late_rate": 1.5}, "late_rate must be between 0 and 1"),
        ({"count": 1, "late_rate": 0.6, "malformed_rate": 0.6}, "must not exceed 1"),
    ],
)
def test_bad_specs_fail_with_the_argument_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProduceSpec(**kwargs)


WEB_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["messageId", "userId", "timestamp", "event", "context"],
    "additionalProperties": False,
    "properties": {
        "messageId": {"type": "string", "minLength": 1},
        "userId": {"type": "string"},
        "timestamp": {"type": "string", "format": "date-time"},
        "event": {"type": "string", "enum": ["Page Viewed", "Order Completed"]},
        "context": {"type": "object", "required": ["page"], "properties": {"page": {"$ref": "#/$defs/page"}}},
        "properties": {"type": "object", "properties": {"revenue": {"type": "number", "minimum": 0}}},
    },
    "$defs": {
        "page": {"type": "object", "required": ["url"], "properties": {"url": {"type": "string", "format": "uri"}}}
    },
}


def web_contract(schema: dict = WEB_SCHEMA):
    from spark_jobs.pipelines import Contract

    return Contract(schema, "/messageId", "/userId", "/timestamp", "/event", "/properties", False)


def test_records_of_a_pipelines_contract_are_samples_its_schema_accepts() -> None:
    from jsonschema import Draft202012Validator, FormatChecker

    validator = Draft202012Validator(WEB_SCHEMA, format_checker=FormatChecker())
    records = list(generate(ProduceSpec(count=300, entities=10, late_rate=0.1, contract=web_contract())))
    assert records == list(generate(ProduceSpec(count=300, entities=10, late_rate=0.1, contract=web_contract())))
    for record in records:
        value = json.loads(record.value)
        assert not list(validator.iter_errors(value)), value
        assert record.key == value["userId"].encode() and value["messageId"].startswith("ev-42-")
        assert datetime.fromisoformat(value["timestamp"]).utcoffset() is not None
    assert {json.loads(r.value)["event"] for r in records} == {"Page Viewed", "Order Completed"}  # the enum's


def test_every_malformed_kind_breaks_a_pipelines_contract() -> None:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(WEB_SCHEMA)
    spec = ProduceSpec(count=4000, malformed_rate=0.5, contract=web_contract())
    records = [r for r in generate(spec) if r.kind.startswith("malformed:")]
    # Without a key rule (key_is_entity_id false) a record without a key is a good one: none is made.
    assert {r.kind.split(":", 1)[1] for r in records} == set(MALFORMED_KINDS) - {"null_key"}
    for record in records:
        if len(record.value) > MAX_VALUE_BYTES:
            continue
        try:
            value = json.loads(record.value)
        except ValueError:  # not JSON, or not UTF-8
            continue
        broken = not isinstance(value, dict) or bool(list(validator.iter_errors(value)))
        if not broken:
            broken = not isinstance(value["timestamp"], str) or "tuesday" in value["timestamp"]
        assert broken, record.kind


def test_a_contract_it_cannot_make_samples_of_is_refused_before_anything_is_sent() -> None:
    from spark_jobs.errors import ConfigError

    message_id = {"type": "string", "pattern": "^msg_[0-9a-f]{32}$"}
    patterned = {**WEB_SCHEMA, "properties": {**WEB_SCHEMA["properties"], "messageId": message_id}}
    with pytest.raises(ConfigError, match=r"cannot make sample records of this pipeline's contract \(pattern at "
                                          r"/messageId: .*\); produce its records with your own producer"):  # fmt: skip
        next(generate(ProduceSpec(count=10, contract=web_contract(schema=patterned))))
