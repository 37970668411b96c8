"""The Avro contract check on real Spark: Confluent-framed records decoded in the JVM with the writer
schema their id names, resolved to the reader schema, logical types exact; each way a value cannot be
read has its own reason."""

from __future__ import annotations

import io
import json
import struct
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pytest

from spark_jobs import jvm
from spark_jobs.contract import MAX_ENTITY_ID_BYTES, MAX_VALUE_BYTES
from tests.unit.spark_jobs.test_validation import kafka_rows

DECIMAL_18_2 = {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2}


def order(*extra: dict, amount: dict | None = None) -> dict:
    return {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "customer", "type": "string"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["placed", "paid"]}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {
                "name": "amount",
                "type": amount or {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2},
            },
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
            {"name": "ratio", "type": "double"},
            {"name": "ref", "type": {"type": "fixed", "name": "Ref", "size": 16, "logicalType": "uuid"}},
            *extra,
        ],
    }


V1 = order()
V2 = order({"name": "channel", "type": "string", "default": "web"})  # a field added with a default
SCALE_3 = order(amount={"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 3})
ID_AS_LONG = {**V1, "fields": [{"name": "id", "type": "long"}, *V1["fields"][1:]]}
WRITERS = {1: V1, 2: V2, 3: SCALE_3, 4: ID_AS_LONG}
ROLES = ("/id", "/customer", "/kind", "/at")


def framed(schema_id: int, schema: dict, record: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


REF = uuid.UUID("0f5e2c1a-9b7d-4e3f-8a6b-1c2d3e4f5a6b")


def record(**changes) -> dict:
    at = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    base = {"id": "o-1", "customer": "c-7", "kind": "paid", "at": at, "amount": Decimal("12.30"),
            "day": date(2026, 3, 1), "ratio": 0.1, "ref": REF.bytes}  # fmt: skip
    return base | changes


def checked(
    spark, reader: tuple[int, dict], values: dict[int, bytes | None], columns=("/amount", "/day", "/ref")
) -> dict:
    name = f"avro_check_{reader[0]}_{len(columns)}"
    writers = {schema_id: json.dumps(schema) for schema_id, schema in WRITERS.items()}
    rules = jvm.RecordRules(ROLES, None, tuple(columns), True, MAX_VALUE_BYTES, MAX_ENTITY_ID_BYTES)
    jvm.register_avro_check(spark, name, writers, (reader[0], json.dumps(reader[1])), rules)
    raw = kafka_rows(spark, {offset: (b"c-7", value) for offset, value in values.items()})
    return {
        row["offset"]: row["checked"] for row in raw.selectExpr("offset", f"{name}(key, value) AS checked").collect()
    }


def test_a_record_is_read_with_its_writer_schema_and_its_logical_types_exactly(spark_session) -> None:
    rows = checked(spark_session, (1, V1), {0: framed(1, V1, record()), 1: framed(2, V2, record(channel="app"))})
    for offset in (0, 1):  # the newer writer's added field is dropped by the older reader
        row = rows[offset]
        assert row["reason"] is None and row["late_reason"] is None, row
        assert (row["event_id"], row["entity_id"], row["event_type"]) == ("o-1", "c-7", "paid")
        assert row["event_time"] == "2026-03-01T12:00:00.123456Z"
        assert row["columns"] == ["12.30", '"2026-03-01"', f'"{REF}"']  # the decimal's digits, never a double


def test_an_older_writer_is_read_with_the_readers_default(spark_session) -> None:
    rows = checked(spark_session, (2, V2), {0: framed(1, V1, record())}, columns=("/channel",))
    assert rows[0]["reason"] is None and rows[0]["columns"] == ['"web"'], rows[0]


def test_each_value_that_cannot_be_read_gets_its_reason(spark_session) -> None:
    good = framed(1, V1, record())
    values = {
        0: b'{"id": "o-1"}',  # JSON on an Avro topic: no framing
        1: b"\x00\x00\x00",  # too short for a schema id
        2: framed(99, V1, record()),  # an id the registry does not know
        3: good[:-4],  # truncated
        4: good + b"\x00",  # bytes after the record
        5: framed(3, SCALE_3, record(amount=Decimal("12.300"))),  # a decimal's scale changed: Avro would misread it
        6: framed(4, ID_AS_LONG, record(id=42)),  # a type the reader cannot resolve
        7: None,
        8: b"\x00" + struct.pack(">I", 1) + b"\xff" * (MAX_VALUE_BYTES),
        # A corrupt length of a gigabyte in a value of a few bytes: refused, not allocated.
        9: b"\x00" + struct.pack(">I", 1) + b"\x80\x80\x80\x80\x08o-1",
    }
    rows = checked(spark_session, (1, V1), values)
    reasons = {offset: rows[offset]["reason"] for offset in values}
    assert reasons[0].startswith("not_avro: ") and reasons[1].startswith("not_avro: "), reasons
    assert reasons[2] == "unknown_schema: schema id 99 is not in the registry"
    assert reasons[3].startswith("bad_avro: the body does not decode with schema id 1"), reasons[3]
    assert reasons[4] == "bad_avro: bytes after the record (schema id 1)"
    assert reasons[5].startswith("incompatible_schema: schema id 3 cannot be read as the reader schema (version 1)")
    assert "decimal(18,3) is read as decimal(18,2) at /amount" in reasons[5], reasons[5]
    assert reasons[6].startswith("incompatible_schema: schema id 4 "), reasons[6]
    assert reasons[7] == "null_value"
    assert reasons[8].startswith("oversized: "), reasons[8]
    assert reasons[9].startswith("bad_avro: the body does not decode with schema id 1 (SystemLimitException: "), (
        reasons[9]
    )


@pytest.mark.parametrize(
    "changes, reason", [({"id": ""}, "missing_field: id is empty"), ({"customer": "\0"}, "bad_entity_id")]
)
def test_the_roles_are_checked_as_a_json_records_are(spark_session, changes, reason) -> None:
    rows = checked(spark_session, (1, V1), {0: framed(1, V1, record(**changes))})
    assert rows[0]["reason"].startswith(reason), rows[0]
