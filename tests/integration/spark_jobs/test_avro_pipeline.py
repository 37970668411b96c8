"""An Avro pipeline beside a JSON one, against real Kafka, Spark/Delta, PostgreSQL and a real schema registry.

The producers are Confluent's own serializer (``AvroSerializer``, which registers its schema under
``<topic>-value``) and, for the records no serializer writes, hand-framed bytes. The pipeline ``orders``
reads its reader schema from the registry when a run starts, decodes each record with the writer schema
its id names, quarantines each kind of unreadable record with its reason, follows a schema evolution, and
readmits a record of a schema registered after it arrived; the JSON pipeline ``events`` runs beside it.
"""

from __future__ import annotations

import http.server
import io
import json
import struct
import threading
import urllib.request
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml

from spark_jobs import ingest, readmit, reconcile
from spark_jobs.offsets import ensure_topic
from spark_jobs.schema_registry import RegistryUnavailable, SchemaRegistry
from spark_jobs.settings import Settings
from tests.integration.spark_jobs.checks import (
    assert_offset_coverage,
    assert_sessions_follow_events,
    assert_settings_sinks_agree,
    delta_rows,
    query,
    send,
)
from tests.ports import free_port
from tidemark.demo_avro import SCHEMA, evolved, orders_entry
from tidemark.migrations import migrate_pipelines

SHIPPED = Path(__file__).resolve().parents[3] / "pipelines.yaml"
ORDER_V1: dict[str, Any] = json.loads(SCHEMA.read_text())
ORDER_V2 = evolved(ORDER_V1)  # a field added with a default: the registry's second version of the subject
# The event id as a number: a writer schema the reader cannot resolve.
ORDER_LONG_ID = {**ORDER_V1, "fields": [{"name": "event_id", "type": "long"}, *ORDER_V1["fields"][1:]]}


def marker_schema(prefix: str) -> dict[str, Any]:
    """A schema of the test's own, new to the registry."""
    return {"type": "record", "name": f"Marker_{prefix.strip('-')}", "fields": [{"name": "x", "type": "string"}]}


def legacy_schema(prefix: str) -> dict[str, Any]:
    """A schema no subject of the registry has yet (an older producer's, with fields the reader does not know;
    one named for the test, as the local registry keeps its schemas from one test session to the next)."""
    own = {"name": f"coupon_{prefix.strip('-')}", "type": ["null", "string"], "default": None}
    return {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"]}, own]}


@pytest.fixture
def pipelines(fresh: Settings, registry, tmp_path: Path) -> tuple[Settings, Settings]:
    """Settings of the JSON pipeline ``events`` and the Avro pipeline ``orders``, declared in one file."""
    config = yaml.safe_load(SHIPPED.read_text())
    config["pipelines"][0]["topic"] = fresh.topic
    entry = orders_entry(f"orders-{uuid.uuid4().hex[:8]}")
    config["pipelines"].append({**entry, "sessions": {"gap_minutes": 30, "max_hours": 24}})
    path = tmp_path / "pipelines.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = replace(fresh, pipelines_file=path)
    events, orders = (settings.for_pipeline(p) for p in settings.pipelines())
    migrate_pipelines(settings)
    return events, orders


def order(prefix: str, i: int, at: datetime, **changes: Any) -> dict[str, Any]:
    return {
        "event_id": f"{prefix}o{i}",
        "customer": {"id": f"{prefix}c{i % 2}", "tier": "gold" if i % 2 else "basic"},
        "status": "placed",
        "placed_at": at + timedelta(minutes=i),
        "amount": Decimal(f"{1000 + i}.05"),
        "details": {"sku": f"sku-{i}"},
    } | changes


def serialized(settings: Settings, schema: dict, records: list[dict]) -> list[tuple[bytes, bytes]]:
    """(key, value) of ``records`` as Confluent's serializer writes them (registering ``schema``)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": settings.schema_registry_url, "timeout": 30})
    # Confluent's TopicNameStrategy (<topic>-value): the client's default asks the registry for "associations"
    # first, an API Apicurio answers 404 to, and a request of it once waited for ever.
    serializer = AvroSerializer(client, json.dumps(schema), conf={"subject.name.strategy.type": "TOPIC"})
    context = SerializationContext(settings.topic, MessageField.VALUE)
    return [(r["customer"]["id"].encode(), serializer(r, context)) for r in records]


def framed(schema_id: int, schema: dict, record: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_client_config())
    for key, value in records:
        producer.produce(settings.topic, key=key, value=value)
    assert producer.flush(30) == 0


def test_an_avro_pipeline_beside_a_json_one_quarantines_evolves_and_readmits_exactly(spark, pipelines) -> None:
    events, orders = pipelines
    prefix = f"a{uuid.uuid4().hex[:6]}-"
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    ensure_topic(events, events.topic, partitions=1)
    ensure_topic(orders, orders.topic, partitions=2)
    send(events, events.topic, [
        {"event_id": f"{prefix}e{i}", "entity_id": f"{prefix}u{i % 2}", "event_type": "click",
         "event_time": (at + timedelta(minutes=i)).isoformat()} for i in range(4)
    ])  # fmt: skip
    registry = orders.schema_registry()
    good = serialized(orders, ORDER_V1, [order(prefix, i, at) for i in range(6)])
    copy = serialized(orders, ORDER_V1, [order(prefix, 2, at, status="paid")])  # event id o2 again: a duplicate
    long_id = registry.register(f"{orders.topic}-long-value", json.dumps(ORDER_LONG_ID))
    key = f"{prefix}c0".encode()
    v1_body = framed(1, ORDER_V1, order(prefix, 9, at))[5:]
    produce(orders, [
        *good, *copy,
        (key, json.dumps(order(prefix, 7, at), default=str).encode()),  # not_avro: a JSON value
        (key, b"\x00" + struct.pack(">I", 999_999) + v1_body),  # unknown_schema: an id no registry gave
        (key, framed(long_id, ORDER_LONG_ID, {**order(prefix, 8, at), "event_id": 8})),  # incompatible_schema
        (key, good[0][1][:-4]),  # bad_avro: the body cut short
    ])  # fmt: skip

    ingest.run_scheduled(spark, events)
    ingest.run_scheduled(spark, orders)

    rows = {r["event_id"]: r for r in delta_rows(spark, orders, "events")}
    assert sorted(rows) == sorted(f"{prefix}o{i}" for i in range(6))
    first = rows[f"{prefix}o1"]
    # Logical types exact: the decimal as written, the timestamp to the millisecond, the enum's symbol.
    assert first["amount"] == Decimal("1001.05") and first["customer_tier"] == "gold"
    assert first["event_time"].astimezone(UTC) == at + timedelta(minutes=1)  # Spark returns local time
    assert first["entity_id"] == f"{prefix}c1" and first["event_type"] == "placed"
    assert json.loads(first["properties"]) == {"sku": "sku-1"}
    assert [r["event_id"] for r in delta_rows(spark, orders, "duplicates")] == [f"{prefix}o2"]
    reasons = sorted(r["reason"].split(":")[0] for r in delta_rows(spark, orders, "quarantine"))
    assert reasons == ["bad_avro", "incompatible_schema", "not_avro", "unknown_schema"]
    assert len(delta_rows(spark, events, "events")) == 4 and delta_rows(spark, events, "quarantine") == []
    # The batch recorded the contract it checked with: the subject's version 1 as the reader schema.
    (document,) = query(orders, "SELECT document FROM contracts")[0]
    assert (document["format"], document["subject"], document["schema_version"]) == (
        "avro", f"{orders.topic}-value", 1
    )  # fmt: skip

    # A schema evolution: a field added with a default, registered by the producer as version 2. The next
    # run reads with version 2; records of version 1 still come in (the field takes its default). Beside
    # them, a legacy producer's record of a schema not registered yet. The registry numbers new schemas
    # from one sequence (a schema registered again takes a number too): a new schema registered now
    # shows where it is, and the schema registered next, the legacy one, will take the number after.
    evolved = serialized(orders, ORDER_V2, [order(prefix, i, at, channel="app") for i in (11, 12)])
    older = serialized(orders, ORDER_V1, [order(prefix, 13, at)])
    legacy_id = registry.register(f"{orders.topic}-marker-value", json.dumps(marker_schema(prefix))) + 1
    assert registry.schema(legacy_id) is None
    legacy = framed(legacy_id, legacy_schema(prefix), order(prefix, 10, at, coupon="SPRING"))
    produce(orders, [*evolved, *older, (key, legacy)])
    ingest.run_scheduled(spark, orders)
    assert len(delta_rows(spark, orders, "events")) == 9 and len(delta_rows(spark, orders, "quarantine")) == 5
    versions = query(orders, "SELECT document->>'schema_version', change FROM contracts ORDER BY adopted_at")
    assert [v for v, _ in versions] == ["1", "2"] and "version 2" in versions[1][1], versions

    # The legacy producer's schema is registered (under its own subject): its record is readmitted, the
    # record of an id no registry gave stays where it is.
    assert registry.register(f"{orders.topic}-legacy-value", json.dumps(legacy_schema(prefix))) == legacy_id
    outcome = readmit.readmit(spark, orders, readmit.Selection(reason="unknown_schema"))
    assert outcome.back == 1, outcome
    assert f"{prefix}o10" in {r["event_id"] for r in delta_rows(spark, orders, "events")}
    left = [r["reason"].split(":")[0] for r in delta_rows(spark, orders, "quarantine")]
    assert sorted(left) == ["bad_avro", "incompatible_schema", "not_avro", "unknown_schema"]

    for settings, committed in ((events, 4), (orders, 15)):
        assert_offset_coverage(spark, settings, committed)
        assert_sessions_follow_events(spark, settings)
        assert_settings_sinks_agree(spark, settings, prefix)
        report = reconcile.run(settings, f"check-{settings.pipeline}", lambda: spark)
        assert report is not None and report.status == "ok", report.findings()


def test_an_avro_run_whose_registry_does_not_answer_fails_before_any_write(spark, pipelines) -> None:
    _, orders = pipelines
    ensure_topic(orders, orders.topic, partitions=1)
    produce(orders, serialized(orders, ORDER_V1, [order("s-", 0, datetime.now(UTC))]))
    silent = replace(orders, schema_registry_url=f"http://127.0.0.1:{free_port()}/apis/ccompat/v7")
    with pytest.raises(RegistryUnavailable, match="does not answer"):
        ingest.run_scheduled(spark, silent)
    assert query(orders, "SELECT count(*) FROM ledger_batches") == [(0,)]
    assert query(orders, "SELECT count(*) FROM write_attempts") == [(0,)]


class WriterSchemasDown(http.server.BaseHTTPRequestHandler):
    """A registry whose subjects answer (the run resolves its reader schema) but whose schemas by id do not: the
    outage strikes after the run started, when its tasks ask for their records' writer schemas."""

    upstream = ""

    def do_GET(self) -> None:
        if "/schemas/ids/" in self.path:
            self.send_error(503, "down")
            return
        with urllib.request.urlopen(self.upstream + self.path.split("/apis/ccompat/v7", 1)[1], timeout=10) as answer:
            body = answer.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_registry_outage_inside_a_batch_fails_it_in_one_line_before_any_write(spark, pipelines) -> None:
    _, orders = pipelines
    ensure_topic(orders, orders.topic, partitions=1)
    produce(orders, serialized(orders, ORDER_V1, [order("o-", 0, datetime.now(UTC))]))
    handler = type("Handler", (WriterSchemasDown,), {"upstream": orders.schema_registry_url})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        flaky = replace(orders, schema_registry_url=f"http://127.0.0.1:{server.server_port}/apis/ccompat/v7")
        with pytest.raises(RegistryUnavailable) as failed:
            ingest.run_scheduled(spark, flaky)
    finally:
        server.shutdown()
    line = str(failed.value)
    assert "\n" not in line and f"127.0.0.1:{server.server_port}" in line and "answered HTTP 503" in line, line
    assert "nothing of the batch was written" in line, line
    assert query(orders, "SELECT count(*) FROM ledger_batches") == [(0,)]
    assert not (Path(orders.table_path("events")) / "_delta_log" / "00000000000000000001.json").exists()
    [batch] = ingest.run_scheduled(spark, orders)  # the registry answers again: the batch is read whole
    assert (batch.read, batch.accepted) == (1, 1)


def test_an_avro_run_refuses_a_reader_schema_without_the_contracts_fields(spark, pipelines) -> None:
    _, orders = pipelines
    no_customer = {**ORDER_V1, "fields": [f for f in ORDER_V1["fields"] if f["name"] != "customer"]}
    SchemaRegistry(orders.schema_registry_url).register(f"{orders.topic}-value", json.dumps(no_customer))
    ensure_topic(orders, orders.topic, partitions=1)
    with pytest.raises(Exception, match=r"entity_id '/customer/id' is not a field of the schema"):
        ingest.run_scheduled(spark, orders)
    assert query(orders, "SELECT count(*) FROM ledger_batches") == [(0,)]


def test_tidemark_produce_writes_an_avro_pipelines_records_and_its_run_accounts_for_each(
    spark, pipelines, tmp_path: Path
) -> None:
    """The user's path: `tidemark produce --pipeline orders --schema orders.avsc` registers the schema under the
    pipeline's subject and writes samples of it (and each unreadable kind); a run puts each where it belongs."""
    import re

    from tests.integration.tidemark.test_errors import tidemark

    _, orders = pipelines
    schema_file = tmp_path / "orders.avsc"
    schema_file.write_text(json.dumps(ORDER_V1))
    args = ["produce", "--pipeline", "orders", "--schema", str(schema_file), "--count", "80", "--entities", "4"]
    result = tidemark([*args, "--malformed-rate", "0.15", "--partitions", "1"], orders.to_env(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    produced = dict((kind, int(n)) for kind, n in re.findall(r"([a-z_:]+) (\d+)", result.stdout.split("(")[-1]))
    assert orders.schema_registry().latest(f"{orders.topic}-value").version == 1

    ingest.run_scheduled(spark, orders)
    reasons = Counter(r["reason"].split(":")[0] for r in delta_rows(spark, orders, "quarantine"))
    assert reasons == {kind.split(":")[1]: n for kind, n in produced.items() if kind.startswith("malformed:")}
    assert set(reasons) <= {"not_avro", "unknown_schema", "bad_avro"} and sum(reasons.values()) > 0
    assert len(delta_rows(spark, orders, "events")) == produced["valid"]
    assert_offset_coverage(spark, orders, 80)
    assert_settings_sinks_agree(spark, orders, "")
