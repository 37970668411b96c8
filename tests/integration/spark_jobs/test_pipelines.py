"""Two pipelines in one deployment, against real Kafka, Spark/Delta and PostgreSQL: each owns its state.

The pipeline ``events`` (today's contract, the tables a deployment made before pipelines has) and a
Segment-style ``web`` (its own topic, contract, session rules, folder of the lake and PostgreSQL
schema) share one database and one lake root. Each is exact on its own, neither sees the other's
records, and each has its own writer lock: one writes while the other holds its lock.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from spark_jobs import ingest, reconcile
from spark_jobs.contract import SessionRules
from spark_jobs.errors import WriterBusy
from spark_jobs.offsets import ensure_topic
from spark_jobs.settings import Settings
from spark_jobs.store.lock import check_writer_free, single_writer
from tests.integration.spark_jobs.checks import (
    assert_offset_coverage,
    assert_sessions_follow_events,
    assert_settings_sinks_agree,
    delta_rows,
    query,
    send,
)
from tidemark.migrations import migrate_pipelines

SHIPPED = Path(__file__).resolve().parents[3] / "pipelines.yaml"

WEB: dict[str, Any] = {
    "name": "web",
    "contract": {
        "schema": {
            "type": "object",
            "required": ["messageId", "userId", "timestamp", "event"],
            "properties": {
                "messageId": {"type": "string", "minLength": 1},
                "userId": {"type": "string", "minLength": 1},
                "timestamp": {"type": "string", "format": "date-time"},
                "event": {"type": "string", "enum": ["page", "track"]},
                "properties": {"type": "object", "properties": {"revenue": {"type": "number"}}},
            },
        },
        "event_id": "/messageId",
        "entity_id": "/userId",
        "event_time": "/timestamp",
        "event_type": "/event",
        "properties": "/properties",
        "key_is_entity_id": False,
        "columns": {"properties.revenue": "decimal(18,2)"},
    },
    "sessions": {"gap_minutes": 5, "max_hours": 1},
}


@pytest.fixture
def two(fresh: Settings, tmp_path: Path) -> tuple[Settings, Settings]:
    """Settings of the pipelines ``events`` and ``web``, declared in one file, on this test's database and lake."""
    config = yaml.safe_load(SHIPPED.read_text())
    web_topic = f"web-{uuid.uuid4().hex[:8]}"
    config["pipelines"][0]["topic"] = fresh.topic
    config["pipelines"].append({**WEB, "topic": web_topic})
    path = tmp_path / "pipelines.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = replace(fresh, pipelines_file=path)
    events, web = (settings.for_pipeline(p) for p in settings.pipelines())
    # `tidemark db migrate`: the database made before had `public` migrated; web's schema is new.
    assert migrate_pipelines(settings)["public"] == []
    assert query(web, "SELECT count(*) FROM schema_migrations") == query(
        events, "SELECT count(*) FROM schema_migrations"
    )
    return events, web


def send_web(settings: Settings, records: Sequence[dict | str]) -> None:
    """Segment-style records (or raw text), keyed by an anonymous id: the key is not the entity."""
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_client_config())
    for record in records:
        value = record if isinstance(record, str) else json.dumps(record)
        producer.produce(settings.topic, key=b"anonymous-7", value=value.encode())
    assert producer.flush(30) == 0


def test_two_pipelines_each_write_their_own_tables_schema_and_ledger_and_reconcile_alone(spark, two) -> None:
    events, web = two
    prefix = f"p{uuid.uuid4().hex[:6]}-"
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    ensure_topic(events, events.topic, partitions=2)
    ensure_topic(web, web.topic, partitions=2)
    send(events, events.topic, [
        {"event_id": f"{prefix}e{i}", "entity_id": f"{prefix}user{i % 3}", "event_type": "click",
         "event_time": (t + timedelta(minutes=i)).isoformat()}
        for i in range(12)
    ])  # fmt: skip
    page = {"event": "page", "properties": {"path": "/"}}
    send_web(web, [
        # a typed column, exact as the producer wrote it (text: a Python float would round it first)
        f'{{"messageId": "{prefix}m10", "userId": "{prefix}visitor0", "timestamp": "{t.isoformat()}", '
        '"event": "track", "properties": {"revenue": 1234567890123456.78}}',
        {"messageId": f"{prefix}m11", "userId": f"{prefix}visitor0", "timestamp": t.isoformat(), "event": "track",
         "properties": {"revenue": 1e20}},  # more than decimal(18,2) holds: quarantined, naming the column
        *({"messageId": f"{prefix}m{i}", "userId": f"{prefix}visitor{i % 2}",
           "timestamp": (t + timedelta(minutes=4 * i)).isoformat(), **page} for i in range(8)),
        {"messageId": f"{prefix}m0", "userId": f"{prefix}visitor0", "timestamp": t.isoformat(), **page},  # a copy
        {"messageId": f"{prefix}m9", "userId": f"{prefix}visitor1", "timestamp": t.isoformat(), "event": "buy"},
        # today's contract is not web's: no messageId
        {"event_id": f"{prefix}x", "entity_id": f"{prefix}visitor1", "event_type": "page", "event_time": t.isoformat()},
    ])  # fmt: skip

    # While a run of events holds its writer lock, web writes (its own lock), and events' next run is refused.
    with single_writer(events, "ingest:events (held by the test)"):
        check_writer_free(web)
        with pytest.raises(WriterBusy, match="writing the pipeline 'events'"):
            ingest.run_scheduled(spark, events)
        ingest.run_scheduled(spark, web)
    ingest.run_scheduled(spark, events)

    # Each pipeline's records are in its own tables: events' at the lake root's top level, web's in its folder.
    assert web.table_path("events") == f"{events.lake_root}/web/events"
    assert len(delta_rows(spark, events, "events")) == 12
    assert {r["topic"] for name in ("events", "duplicates", "quarantine") for r in delta_rows(spark, web, name)} == {
        web.topic
    }
    web_events = {r["event_id"]: r for r in delta_rows(spark, web, "events")}
    assert sorted(web_events) == sorted(f"{prefix}m{i}" for i in (*range(8), 10))
    assert web_events[f"{prefix}m10"]["properties_revenue"] == Decimal("1234567890123456.78")
    assert web_events[f"{prefix}m1"]["properties_revenue"] is None
    assert "properties_revenue" not in delta_rows(spark, events, "events")[0]  # a column of web's events only
    assert [r["event_id"] for r in delta_rows(spark, web, "duplicates")] == [f"{prefix}m0"]
    reasons = sorted(r["reason"] for r in delta_rows(spark, web, "quarantine"))
    assert reasons[0].startswith("missing_field") and "messageId" in reasons[0], reasons
    assert reasons[1].startswith("schema: enum at /event"), reasons
    assert reasons[2] == "wrong_type: properties/revenue does not fit the column properties_revenue (decimal(18,2))"
    for settings, committed in ((events, 12), (web, 13)):
        assert_offset_coverage(spark, settings, committed)
        assert_sessions_follow_events(spark, settings)  # under each pipeline's own rules
        assert_settings_sinks_agree(spark, settings, prefix)

    # PostgreSQL: web's sessions, ledger and epoch are in its schema; events' stay in public.
    assert query(events, "SELECT DISTINCT topic FROM ledger_ranges") == [(events.topic,)]
    assert query(web, "SELECT DISTINCT topic FROM ledger_ranges") == [(web.topic,)]
    assert query(web, "SELECT DISTINCT entity_id FROM web.sessions ORDER BY 1") == [
        (f"{prefix}visitor0",), (f"{prefix}visitor1",)
    ]  # fmt: skip
    assert query(events, "SELECT count(*) FROM public.sessions WHERE entity_id LIKE %s", f"{prefix}visitor%") == [(0,)]
    gaps = query(web, "SELECT DISTINCT session_gap_seconds FROM ledger_batches")
    assert gaps == [(300.0,)]
    assert query(web, "SELECT epoch FROM writer_epochs") == [(1,)]

    # Reconcile checks one pipeline's ledger against that pipeline's tables: both are green.
    for settings in (events, web):
        report = reconcile.run(settings, f"check-{settings.pipeline}", lambda: spark)
        assert report is not None and report.status == "ok", report.findings()
        assert {c.topic for c in report.checks} == {settings.topic}


def test_a_backfill_of_one_pipeline_writes_while_the_others_scheduled_run_runs_start_to_end(spark, two) -> None:
    """web's backfill stops inside its first Delta write, its writer lock held, until a whole scheduled
    run of events has committed: the two pipelines write at the same time, and both end exact."""
    import threading

    from spark_jobs.planning import plan_backfill

    events, web = two
    prefix = f"b{uuid.uuid4().hex[:6]}-"
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    ensure_topic(events, events.topic, partitions=1)
    ensure_topic(web, web.topic, partitions=1)
    page = [{"messageId": f"{prefix}m{i}", "userId": f"{prefix}v{i % 2}", "timestamp": t.isoformat(), "event": "page"}
            for i in range(6)]  # fmt: skip
    send_web(web, page)  # not read yet: the backfill writes them
    send(events, events.topic, [
        {"event_id": f"{prefix}e{i}", "entity_id": f"{prefix}u{i % 2}", "event_type": "click",
         "event_time": t.isoformat()} for i in range(5)
    ])  # fmt: skip

    events_done, failures = threading.Event(), []

    def events_run() -> None:
        try:
            ingest.run_scheduled(spark, events)  # refused at once (WriterBusy) if web's lock were events' too
        except Exception as exc:  # reported below, with the backfill's outcome
            failures.append(exc)
        finally:
            events_done.set()

    def inside_the_backfills_write(point: str) -> None:
        if point.startswith("write:") and not events_done.is_set():
            threading.Thread(target=events_run).start()
            assert events_done.wait(300), "events' scheduled run did not finish while web's backfill wrote"

    plan = plan_backfill(web, web.topic, offsets={0: (0, 6)})
    ingest.run_backfill(spark, web, plan, fault=inside_the_backfills_write)
    assert failures == [] and events_done.is_set()
    for settings, committed in ((events, 5), (web, 6)):
        assert_offset_coverage(spark, settings, committed)
        assert_sessions_follow_events(spark, settings)
        assert_settings_sinks_agree(spark, settings, prefix)


def redeclare(web: Settings, **changes) -> None:
    """Rewrite web's entry of its pipelines file with ``changes`` to its contract (a new release of it)."""
    config = yaml.safe_load(web.pipelines_file.read_text())
    entry = next(p for p in config["pipelines"] if p["name"] == "web")
    entry["contract"] = {**entry["contract"], **changes}
    web.pipelines_file.write_text(yaml.safe_dump(config))


def test_a_compatible_contract_change_applies_from_the_next_batch_and_an_incompatible_one_fails_before_work(
    spark, two, tmp_path: Path
) -> None:
    from spark_jobs.errors import ContractChanged
    from tests.integration.tidemark.test_errors import NO_SPARK, one_line, tidemark

    events, web = two
    prefix = f"c{uuid.uuid4().hex[:6]}-"
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    ensure_topic(web, web.topic, partitions=1)

    def visit(i: int, event: str) -> dict:
        return {"messageId": f"{prefix}m{i}", "userId": f"{prefix}v", "timestamp": t.isoformat(), "event": event}

    first = web.contract()
    send_web(web, [visit(0, "page"), visit(1, "identify")])  # identify: not in the schema's enum yet
    ingest.run_scheduled(spark, web)
    assert query(web, "SELECT digest, change FROM contracts") == [(first.digest, "first batch")]
    assert query(web, "SELECT contract_digest FROM ledger_batches") == [(first.digest,)]
    assert len(delta_rows(spark, web, "quarantine")) == 1

    # Compatible: an enum relaxed, a new optional field and its typed column. The next batch is checked
    # with it and records it; events gets the column (null in the rows stored before).
    schema = json.loads(json.dumps(first.schema))
    schema["properties"]["event"]["enum"].append("identify")
    schema["properties"]["campaign"] = {"type": "string"}
    redeclare(web, schema=schema, columns={**WEB["contract"]["columns"], "campaign": "string"})
    second = web.contract()
    send_web(web, [{**visit(2, "identify"), "campaign": "fall"}])
    ingest.run_scheduled(spark, web)
    assert query(web, "SELECT change FROM contracts ORDER BY adopted_at") == [
        ("first batch",),
        ("compatible: a typed column of '/campaign' (string); the schema's rules",),
    ]
    assert {r["event_id"]: r["campaign"] for r in delta_rows(spark, web, "events")} == {
        f"{prefix}m0": None,
        f"{prefix}m2": "fall",
    }
    report = reconcile.run(web, "after-the-new-column", lambda: spark)  # the rows stored before still verify
    assert report is not None and report.status == "ok", report.findings()
    assert query(web, "SELECT contract_digest FROM ledger_batches ORDER BY batch_id") == [
        (first.digest,),
        (second.digest,),
    ]
    assert sorted(r["event_id"] for r in delta_rows(spark, web, "events")) == [f"{prefix}m0", f"{prefix}m2"]
    assert_offset_coverage(spark, web, 3)

    # Incompatible: the entity id moved. Refused before any work, by the job and by the CLI before Spark.
    schema["properties"]["anonymousId"] = {"type": "string", "minLength": 1}
    schema["required"].append("anonymousId")
    redeclare(web, schema=schema, entity_id="/anonymousId")
    send_web(web, [{**visit(3, "page"), "anonymousId": "a-1"}])
    message = (
        "pipeline 'web': the contract changed in a way the stored records cannot follow (entity_id moved from "
        "'/userId' to '/anonymousId'; the schema's rules). Put the contract back as it was, or declare the new "
        "shape as a new pipeline (another name and topic) and move its producers there"
    )
    with pytest.raises(ContractChanged) as refused:
        ingest.run_scheduled(spark, web)
    assert str(refused.value) == message
    assert query(web, "SELECT count(*) FROM ledger_batches") == [(2,)]
    assert query(web, "SELECT count(*) FROM contracts") == [(2,)]
    env = {**events.to_env(), "TIDEMARK_PIPELINES": str(web.pipelines_file), **NO_SPARK}
    cli = tidemark(["ingest", "--pipeline", "web"], env, tmp_path)
    assert (cli.returncode, one_line(cli)) == (2, f"tidemark ingest: {message}"), cli.stdout + cli.stderr

    # Back to the contract the stored records follow: the run goes on, and checks the waiting record with it.
    redeclare(web, schema=second.schema, entity_id="/userId")
    ingest.run_scheduled(spark, web)
    assert query(web, "SELECT count(*) FROM contracts") == [(2,)]
    assert_offset_coverage(spark, web, 4)


ORDERS = {
    "name": "orders",
    "contract": {
        "schema": {
            "type": "object",
            "required": ["order", "occurred_at", "type"],
            "properties": {
                "order": {
                    "type": "object",
                    "required": ["id", "customer"],
                    "properties": {
                        "id": {"type": "string", "minLength": 1},
                        "customer": {"type": "string", "minLength": 1},
                        "total": {"type": "number"},
                    },
                },
                "occurred_at": {"type": "string", "format": "date-time"},
                "type": {"type": "string", "enum": ["order.placed", "order.shipped"]},
            },
        },
        "event_id": "/order/id",
        "entity_id": "/order/customer",
        "event_time": "/occurred_at",
        "properties": "/order",
        "key_is_entity_id": False,
        "columns": {"order.total": "decimal(12,2)"},
    },
    "sessions": "off",
}


def test_a_pipeline_with_sessions_off_cuts_none_and_stays_exact_until_they_are_turned_on(
    spark, fresh: Settings, tmp_path: Path
) -> None:
    """Domain events: ids at nested pointers, no sessions in either sink, the ledger and reconcile as
    for any pipeline. Sessions turned on later cover every stored event (a rebuild); turned off
    again, the run is refused before work, since the stored sessions would go stale."""
    from confluent_kafka import Producer

    from spark_jobs.errors import SessionRulesChanged

    config = {"pipelines": [{**ORDERS, "topic": f"orders-{uuid.uuid4().hex[:8]}"}]}
    path = tmp_path / "pipelines.yaml"
    path.write_text(yaml.safe_dump(config))
    base = replace(fresh, pipelines_file=path)
    orders = base.for_pipeline(base.declared("orders"))
    migrate_pipelines(base)
    ensure_topic(orders, orders.topic, partitions=2)
    prefix = f"o{uuid.uuid4().hex[:6]}-"
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)

    def send_orders(first: int, count: int) -> None:
        producer = Producer(orders.kafka_client_config())
        for i in range(first, first + count):
            order: dict[str, Any] = {"id": f"{prefix}o{i // 2}", "customer": f"{prefix}c{i % 3}", "total": 10 + i}
            value = {"order": order, "occurred_at": (t + timedelta(minutes=i)).isoformat(),
                     "type": "order.placed" if i % 2 == 0 else "order.shipped"}  # fmt: skip
            producer.produce(orders.topic, key=order["id"].encode(), value=json.dumps(value).encode())
        assert producer.flush(30) == 0

    send_orders(0, 10)  # o0..o4, each placed and shipped: one event id twice
    ingest.run_scheduled(spark, orders)

    stored = {r["event_id"]: r for r in delta_rows(spark, orders, "events")}
    assert len(stored) == 5 and len(delta_rows(spark, orders, "duplicates")) == 5
    assert sorted(r["order_total"] for r in stored.values())[0] == Decimal("10.00")
    assert delta_rows(spark, orders, "sessions") == []
    assert query(orders, "SELECT count(*) FROM sessions") == [(0,)]
    assert query(orders, "SELECT gap_seconds, max_length_seconds, reason FROM session_rules") == [
        (None, None, "first batch")
    ]  # what the stored sessions follow: none
    assert query(orders, "SELECT session_gap_seconds, session_max_seconds FROM ledger_batches") == [(None, None)]
    assert_offset_coverage(spark, orders, 10)
    report = reconcile.run(orders, "orders-off", lambda: spark)
    assert report is not None and report.status == "ok", report.findings()

    # Sessions on: refused until the run rebuilds, which cuts the sessions of every stored event.
    on = replace(orders, session_rules=SessionRules(timedelta(minutes=30), timedelta(hours=24)))
    send_orders(10, 2)
    with pytest.raises(SessionRulesChanged, match="cut no sessions so far"):
        ingest.run_scheduled(spark, on)
    ingest.run_scheduled(spark, on, rebuild_sessions=True)
    assert_sessions_follow_events(spark, on)
    assert_settings_sinks_agree(spark, on, prefix)
    assert query(on, "SELECT gap_seconds, reason FROM session_rules ORDER BY changed_at") == [
        (None, "first batch"),
        (1800.0, "rebuild"),
    ]

    # Off again: the sessions stored would stop following the events. Refused before any work.
    send_orders(12, 2)
    with pytest.raises(SessionRulesChanged, match="sessions: off would leave them"):
        ingest.run_scheduled(spark, orders)
    assert query(orders, "SELECT count(*) FROM ledger_batches") == [(2,)]


def test_a_typed_column_the_table_holds_with_another_type_is_one_line_naming_it_before_any_write(spark, two) -> None:
    """A run with nothing new adds a new typed column to ``events`` (no batch records the contract); a later
    edit of its type is then compared with what the table holds, not only with the recorded contract."""
    from spark_jobs.errors import ContractChanged

    _, web = two
    prefix = f"k{uuid.uuid4().hex[:6]}-"
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    ensure_topic(web, web.topic, partitions=1)

    def visit(i: int, **more) -> dict:
        return {"messageId": f"{prefix}m{i}", "userId": f"{prefix}v", "timestamp": t.isoformat(), "event": "page",
                **more}  # fmt: skip

    send_web(web, [visit(0)])
    ingest.run_scheduled(spark, web)
    schema = json.loads(json.dumps(web.contract().schema))
    schema["properties"]["clicks"] = {"type": "integer"}
    redeclare(web, schema=schema, columns={**WEB["contract"]["columns"], "clicks": "int"})
    assert ingest.run_scheduled(spark, web) == []  # nothing new; events gets the column
    redeclare(web, schema=schema, columns={**WEB["contract"]["columns"], "clicks": "bigint"})
    send_web(web, [visit(1, clicks=5)])
    with pytest.raises(ContractChanged) as refused:
        ingest.run_scheduled(spark, web)
    assert str(refused.value) == (
        "pipeline 'web': contract.columns.clicks: events holds the column clicks as int, the contract declares "
        "bigint; a typed column keeps its type. Declare it int again, or declare the new type as a new pipeline "
        "(another name and topic)"
    )
    assert query(web, "SELECT count(*) FROM ledger_batches") == [(1,)]

    redeclare(web, schema=schema, columns={**WEB["contract"]["columns"], "clicks": "int"})
    [batch] = ingest.run_scheduled(spark, web)
    assert batch.accepted == 1
    assert {r["event_id"]: r["clicks"] for r in delta_rows(spark, web, "events")} == {
        f"{prefix}m0": None, f"{prefix}m1": 5
    }  # fmt: skip
