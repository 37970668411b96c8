"""The demo's Avro pipeline, ``orders``: Avro records through a schema registry, a schema evolution, and a
record of a schema the registry did not know yet, quarantined, then readmitted once the schema is there.

The producers write as Confluent's serializer does (a zero byte, the schema's 4-byte id, the Avro body),
with the schema ``docs/examples/orders.avsc`` and then a version of it with a field added (a default: a
BACKWARD change, which the local registry enforces).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from spark_jobs import ingest, readmit, reconcile
from spark_jobs.settings import PROJECT_ROOT, Settings
from tidemark.producer import ProduceSpec, produce

# The Avro pipeline docs/avro.md declares, and the schema its producers write.
EXAMPLE = PROJECT_ROOT / "docs" / "examples" / "orders-avro-pipeline.yaml"
SCHEMA = PROJECT_ROOT / "docs" / "examples" / "orders.avsc"


def orders_entry(topic: str) -> dict[str, Any]:
    """docs/avro.md's example entry ``orders``, reading ``topic`` (its subject the default, ``<topic>-value``)."""
    import yaml

    [entry] = yaml.safe_load(EXAMPLE.read_text())
    contract = {k: v for k, v in entry["contract"].items() if k != "subject"}
    return {**entry, "topic": topic, "contract": contract}


def evolved(schema: dict) -> dict:
    """``schema`` with a field added with a default: the producers' next version."""
    return {**schema, "fields": [*schema["fields"], {"name": "channel", "type": "string", "default": "web"}]}


def declare(settings: Settings, topic: str) -> None:
    """Add ``orders`` (reading ``topic``) to the demo's pipelines file."""
    import yaml

    config = yaml.safe_load(settings.pipelines_file.read_text())
    config["pipelines"].append(orders_entry(topic))
    settings.pipelines_file.write_text(yaml.safe_dump(config, sort_keys=False))


def avro_pipeline(spark, web: Settings, run_id: str, count: int) -> bool:  # SparkSession
    """Step 9: ``orders`` beside ``web`` (in the demo's pipelines file); whether its reconcile is OK."""
    from tidemark.embedded.schema_registry import SchemaRegistry as LocalRegistry
    from tidemark.migrations import migrate_pipelines

    local = LocalRegistry(web)
    if web.schema_registry_url == local.url and not local.answers():
        print(f"   {local.start()}")
    declare(web, f"{web.topic.removesuffix('-web')}-orders")
    migrate_pipelines(web)
    orders = web.for_pipeline(web.declared("orders"))
    registry = orders.schema_registry()
    subject = orders.contract().subject
    assert subject is not None  # an Avro contract names one
    print(
        f"9. an Avro pipeline, 'orders': its records Avro in Confluent's framing, its schema the registry's {subject!r}"
    )
    v1 = json.loads(SCHEMA.read_text())
    spec = ProduceSpec(count=max(count // 10, 40), entities=6, duplicate_rate=0.03, malformed_rate=0.05, seed=20,
                       id_prefix=run_id, contract=orders.contract(), writer=(registry.register(subject, json.dumps(v1)),
                       json.dumps(v1)))  # fmt: skip
    print(f"   produced {produce(orders, spec, partitions=2).committed:,} records with version 1 ({SCHEMA.name})")
    print("   scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, orders)).replace("\n", "\n   "))
    v2 = json.dumps(evolved(v1))
    v2_id = registry.register(subject, v2)
    spec = replace(spec, seed=21, malformed_rate=0.0, writer=(v2_id, v2))
    print(f"   a new version of the schema (a field added with a default): version {registry.latest(subject).version}")
    # A producer that writes with a schema this registry does not have yet (a field of its own, named for this
    # run), with the id it will get once registered: the registry numbers new schemas from one sequence, so
    # the number after that of a schema registered now.
    digits = "".join(filter(str.isdigit, run_id))
    promo = {"name": f"promo_{digits}", "type": "string", "default": ""}
    legacy = {**evolved(v1), "fields": [*evolved(v1)["fields"], promo]}
    marker = {"type": "record", "name": f"Marker{digits}", "fields": [{"name": "x", "type": "string"}]}
    legacy_id = registry.register(f"{orders.topic}-marker-value", json.dumps(marker)) + 1
    sent = produce(orders, spec, partitions=2).committed + legacy_record(orders, legacy_id, legacy, run_id)
    print(f"   produced {sent:,} records with version 2, one of them with schema id {legacy_id}, not registered yet")
    print("   scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, orders)).replace("\n", "\n   "))
    registered = registry.register(f"{orders.topic}-legacy-value", json.dumps(legacy))
    print(f"   the legacy producer's schema is registered (id {registered}); readmit the unknown_schema records:")
    back = readmit.readmit(spark, orders, readmit.Selection(reason="unknown_schema"))
    print("   " + back.describe().replace("\n", "\n   "))
    report = reconcile.run(orders, f"{run_id}orders", lambda: spark)
    assert report is not None  # only a run without Spark at hand leaves the report to the Spark job
    print(f"   reconcile: {report.status.upper()}")
    return report.status == "ok"


def legacy_record(orders: Settings, schema_id: int, schema: dict, run_id: str) -> int:
    """One record written with ``schema`` framed as ``schema_id``; 1."""
    import io
    import struct
    from decimal import Decimal

    import fastavro
    from confluent_kafka import Producer

    customer = f"{run_id}entity-000001"
    datum = {"event_id": f"{run_id}legacy-1", "customer": {"id": customer, "tier": "gold"}, "status": "paid",
             "placed_at": datetime.now(UTC), "amount": Decimal("19.99"), "details": {"coupon": "SPRING"},
             "channel": "store"}  # fmt: skip
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), datum)
    producer = Producer(orders.kafka_client_config())
    producer.produce(
        orders.topic, key=customer.encode(), value=b"\x00" + struct.pack(">I", schema_id) + body.getvalue()
    )
    producer.flush(30)
    return 1
