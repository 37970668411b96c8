"""The message contract on real Spark: every malformed kind gets its own reason, valid records pass."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from spark_jobs.validation import parse_records
from tidemark.producer import MALFORMED_KINDS, ProduceSpec, generate

ARRIVAL = datetime(2026, 3, 1, tzinfo=UTC)


def kafka_rows(spark, records: dict[int, tuple[bytes | None, bytes]]):  # a DataFrame
    """Rows as Spark's Kafka source gives them: offset -> (key, value), one partition, one arrival."""
    return spark.createDataFrame(
        [("events", 0, offset, ARRIVAL, key, value) for offset, (key, value) in records.items()],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )


def test_each_malformed_kind_gets_its_reason_and_valid_records_pass(spark_session) -> None:
    records = list(generate(ProduceSpec(count=1500, entities=20, malformed_rate=0.4, late_rate=0.1, seed=3)))
    raw = kafka_rows(spark_session, {offset: (r.key, r.value) for offset, r in enumerate(records)})
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw).collect()}

    assert len(reasons) == len(records)  # nothing dropped
    seen = set()
    for offset, record in enumerate(records):
        reason = reasons[offset]
        if record.kind.startswith("malformed:"):
            kind = record.kind.split(":", 1)[1]
            seen.add(kind)
            assert reason is not None and reason.startswith(kind), (kind, reason)
        else:
            assert reason is None, (record.kind, reason, record.value[:200])
    assert seen == set(MALFORMED_KINDS), "every malformed kind should occur in the sample"


def test_whitespace_around_a_document_is_allowed_and_only_objects_pass(spark_session) -> None:
    body = (
        '{"event_id": "e1", "entity_id": "u1", "event_type": "click", '
        '"event_time": "2026-03-01T00:00:00+00:00", "properties": {"a": [1, 2]}}'
    )
    values = {
        0: " \t\r\n" + body + "\n",  # JSON allows this whitespace around the document
        1: ' \n[{"event_id": "e1"}]',
        2: "\t 42 ",
        3: '"a string"',
    }
    raw = kafka_rows(spark_session, {offset: (b"u1", value.encode()) for offset, value in values.items()})
    rows = {row["offset"]: row for row in parse_records(raw).collect()}

    assert rows[0]["quarantine_reason"] is None
    assert (rows[0]["event_id"], rows[0]["properties"]) == ("e1", '{"a":[1,2]}')
    assert [rows[offset]["quarantine_reason"] for offset in (1, 2, 3)] == ["not_an_object"] * 3


def test_text_after_the_object_makes_the_value_invalid_json(spark_session) -> None:
    """Spark's JSON parsers stop after the first document; a value is one document, or quarantined."""
    body = '{"event_id": "e1", "entity_id": "u1", "event_type": "click", "event_time": "2026-03-01T00:00:00+00:00"}'
    values = {
        0: body + " \n",
        1: body + "\n" + body.replace("e1", "e2"),  # two events in one value (newline-delimited)
        2: body + body,
        3: body + ", " + body,
        4: body + ",",
        5: body + " x",
        6: body + "] [" + body,  # closes the brackets a check might wrap the value in
        7: body + "} {" + body,
        8: body + ' "}"',
    }
    raw = kafka_rows(spark_session, {offset: (b"u1", value.encode()) for offset, value in values.items()})
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw).collect()}

    assert reasons[0] is None
    assert {offset: reasons[offset] for offset in values if offset} == {
        offset: "invalid_json: text after the JSON object" for offset in values if offset
    }


def test_properties_are_kept_as_the_variant_writes_them_back(spark_session) -> None:
    """What docs/design.md ("Message contract") tells producers about `properties`' numbers."""
    properties = '{"z": 2.50, "a": 1E2, "big": 123456789012345678901234567890123456789012, "huge": 1e400}'
    value = (
        '{"event_id": "e1", "entity_id": "u1", "event_type": "click", '
        f'"event_time": "2026-03-01T00:00:00+00:00", "properties": {properties}}}'
    )
    raw = kafka_rows(spark_session, {0: (b"u1", value.encode())})
    [row] = parse_records(raw).collect()

    assert row["quarantine_reason"] is None
    assert row["properties"] == '{"a":100.0,"big":1.2345678901234568E41,"huge":"Infinity","z":2.5}'


def test_empty_identifying_fields_are_missing_fields(spark_session) -> None:
    """The contract's event_id, entity_id and event_type are non-empty strings."""
    event = {"event_id": "e1", "entity_id": "u1", "event_type": "click", "event_time": "2026-03-01T00:00:00+00:00"}
    values = {0: event, 1: {**event, "event_id": ""}, 2: {**event, "entity_id": ""}, 3: {**event, "event_type": ""}}
    raw = kafka_rows(
        spark_session, {offset: (v["entity_id"].encode(), json.dumps(v).encode()) for offset, v in values.items()}
    )
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw).collect()}

    assert reasons == {
        0: None,
        1: "missing_field: event_id is empty",
        2: "missing_field: entity_id is empty",
        3: "missing_field: event_type is empty",
    }
