"""An Avro pipeline's contract: what its entry may say in the pipelines file, and the reader schema a run
checks it against (spark_jobs.avro.reader_problems); no service involved."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from spark_jobs import pipelines_file
from spark_jobs.avro import reader_problems
from spark_jobs.pipelines import Column, Contract, contract_change
from tests.unit.spark_jobs.test_pipelines import problems, write
from tidemark.demo_avro import orders_entry

ENTRY: dict[str, Any] = orders_entry("shop.orders")  # docs/avro.md's example, its subject the default
CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "fields": [{"name": "id", "type": "string"}, {"name": "tier", "type": "string"}],
}
READER: dict[str, Any] = {
    "type": "record",
    "name": "OrderEvent",
    "namespace": "shop",
    "fields": [
        {"name": "event_id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "customer", "type": CUSTOMER},
        {"name": "billed_to", "type": ["null", "shop.Customer"], "default": None},  # a named type used again
        {"name": "status", "type": ["null", {"type": "enum", "name": "Status", "symbols": ["placed", "paid"]}]},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2}},
        {"name": "details", "type": {"type": "map", "values": "string"}},
    ],
}


def contract(folder: Path, **changes: Any) -> Contract:
    """The contract of :data:`ENTRY` with ``changes``, as the pipelines file in ``folder`` declares it."""
    config = {"pipelines": [{**ENTRY, "contract": {**ENTRY["contract"], **changes}}]}
    (pipeline,) = pipelines_file.load(write(folder, config))
    return pipeline.contract


def test_an_avro_entry_names_its_subject_by_the_topic_unless_it_names_one(tmp_path: Path) -> None:
    declared = contract(tmp_path)
    assert (declared.format, declared.subject, declared.schema, declared.schema_version) == (
        "avro", "shop.orders-value", {}, None
    )  # fmt: skip
    assert declared.columns == (
        Column("amount", "/amount", "decimal(18,2)"), Column("customer_tier", "/customer/tier", "string")
    )  # fmt: skip
    assert contract(tmp_path, subject="orders-v2").subject == "orders-v2"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        ({"schema": {"type": "object"}}, "contract.schema: an Avro pipeline's schema is its subject's in the schema "
         "registry (`subject`, default <topic>-value); remove `schema`"),
        ({"format": "protobuf"}, "contract.format: must be json (the default) or avro"),
        ({"subject": "orders value"}, "contract.subject: must be a schema registry subject: printable characters, "
         "no spaces, at most 255"),
        ({"subject": "orders-value\n"}, "contract.subject: must be a schema registry subject: printable characters, "
         "no spaces, at most 255"),
        ({"columns": {"event_id": "string"}}, "contract.columns.event_id: 'event_id' is a column every events table "
         "has; pick another field"),
    ],
)  # fmt: skip
def test_what_an_avro_entry_may_not_say_is_one_line(tmp_path: Path, changes: dict, line: str) -> None:
    config = {"pipelines": [{**ENTRY, "contract": {**ENTRY["contract"], **changes}}]}
    assert problems(tmp_path, config) == [f"pipelines.yaml: pipeline 'orders': {line}"]


def test_a_json_entry_needs_a_schema_and_names_no_subject(tmp_path: Path) -> None:
    json_entry = {k: v for k, v in ENTRY["contract"].items() if k != "format"}
    assert problems(tmp_path, {"pipelines": [{**ENTRY, "contract": json_entry}]}) == [
        "pipelines.yaml: pipeline 'orders': contract.schema is missing: a JSON Schema of the value (or format: avro)"
    ]
    named = {**json_entry, "schema": {"type": "object"}, "subject": "x"}
    assert problems(tmp_path, {"pipelines": [{**ENTRY, "contract": named}]}) == [
        "pipelines.yaml: pipeline 'orders': contract.subject: a subject names an Avro schema; add format: avro, "
        "or remove it"
    ]


def test_a_reader_schema_with_the_contracts_fields_fits_it(tmp_path: Path) -> None:
    assert list(reader_problems(contract(tmp_path), READER)) == []


@pytest.mark.parametrize(
    ("field", "type_", "problem"),
    [
        ("customer", "string", ["entity_id '/customer/id' is not a field of the schema",
                                "the typed column customer_tier ('/customer/tier') is not a field of the schema"]),
        ("event_id", ["null", "string"], "event_id '/event_id' may be null; a record needs its event_id"),
        ("event_id", "long", "event_id '/event_id' is long; it must be string"),
        ("placed_at", {"type": "long", "logicalType": "local-timestamp-millis"},
         "event_time '/placed_at' is long; it must be string or timestamp"),
        ("status", ["string", "int"], "event_type '/status' is a union of int/string; it must be string"),
        ("details", "string", "properties '/details' is not a record or map field of the schema"),
        ("amount", None, "the typed column amount ('/amount') is not a field of the schema"),
    ],
)  # fmt: skip
def test_a_reader_schema_that_cannot_give_a_role_or_column_is_named(
    tmp_path: Path, field: str, type_: Any, problem: str | list[str]
) -> None:
    fields = [
        {**f, "type": type_} if f["name"] == field else f
        for f in READER["fields"]
        if not (f["name"] == field and type_ is None)
    ]
    expected = problem if isinstance(problem, list) else [problem]
    assert list(reader_problems(contract(tmp_path), {**READER, "fields": fields})) == expected


def test_a_reader_schema_that_is_not_a_record_is_refused_first(tmp_path: Path) -> None:
    assert list(reader_problems(contract(tmp_path), "string")) == ["the schema is not a record"]


def test_a_new_reader_version_is_a_compatible_change_and_another_format_is_not(tmp_path: Path) -> None:
    v1 = replace(contract(tmp_path), schema=READER, schema_version=1)
    v2 = replace(v1, schema={**READER, "fields": [*READER["fields"], {"name": "x", "type": "int", "default": 0}]},
                 schema_version=2)  # fmt: skip
    change = contract_change(v1.document(), v2)
    assert change.compatible and change.what == ["the reader schema, version 2 of 'shop.orders-value'"]
    as_json = replace(v1, format="json", subject=None, schema_version=None, schema={"type": "object"})
    moved = contract_change(v1.document(), as_json)
    assert not moved.compatible and "the format changed from avro to json" in moved.what


def test_samples_of_an_avro_pipeline_are_framed_records_of_its_writer_schema_with_the_roles(tmp_path: Path) -> None:
    import io
    import json
    import struct

    import fastavro

    from tidemark.avro_records import UNKNOWN_SCHEMA_ID
    from tidemark.producer import ProduceSpec, generate

    spec = ProduceSpec(count=300, entities=5, malformed_rate=0.1, duplicate_rate=0.05, seed=7,
                       contract=contract(tmp_path), writer=(42, json.dumps(READER)))  # fmt: skip
    records = list(generate(spec))
    assert records == list(generate(spec)), "seeded: the same spec, the same records"
    kinds = {r.kind for r in records}
    assert {"valid", "duplicate", "malformed:not_avro", "malformed:unknown_schema", "malformed:bad_avro"} <= kinds
    parsed = fastavro.parse_schema(READER)
    for r in records:
        if r.kind == "malformed:not_avro":
            assert r.value[:1] != b"\x00"
            continue
        assert r.value[0] == 0
        schema_id = struct.unpack(">I", r.value[1:5])[0]
        assert schema_id == (UNKNOWN_SCHEMA_ID if r.kind == "malformed:unknown_schema" else 42)
        body = io.BytesIO(r.value[5:])
        if r.kind == "malformed:bad_avro":
            with pytest.raises(EOFError):
                fastavro.schemaless_reader(body, parsed, parsed)
            continue
        datum = cast("dict[str, Any]", fastavro.schemaless_reader(body, parsed, parsed))
        assert body.read() == b"" and r.key == datum["customer"]["id"].encode()
        assert datum["status"] in ("placed", "paid") and datum["placed_at"].year == 2026
        assert str(datum["event_id"]).count("-") == 4  # a uuid field holds a uuid made from the event id


def test_a_registry_failure_inside_a_task_becomes_one_line_and_nothing_else_does() -> None:
    from spark_jobs.avro import registry_failure

    wrapped = (
        "An error occurred while calling o123.localCheckpoint.\n: org.apache.spark.SparkException: Job aborted: "
        "java.lang.IllegalStateException: the schema registry at http://reg:8081/apis/ccompat/v7/ does not answer "
        "(java.net.ConnectException)\n\tat io.tidemark.contract.RegistrySchemas.fetch(RegistrySchemas.java:57)"
    )
    failure = registry_failure(RuntimeError(wrapped))
    assert failure is not None and "\n" not in str(failure)
    assert str(failure).startswith("the schema registry at http://reg:8081/apis/ccompat/v7/ does not answer while")
    answered = registry_failure(RuntimeError("x: the schema registry at http://r/ answered HTTP 503 for schema id 7"))
    assert answered is not None and "answered HTTP 503 for schema id 7" in str(answered)
    assert registry_failure(RuntimeError("Job aborted: java.lang.OutOfMemoryError")) is None
