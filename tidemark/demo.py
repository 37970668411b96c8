"""``tidemark demo``: produce, ingest, produce more, ingest again, replay a range; show nothing changed.
Then a second pipeline, ``web``, with a contract of its own: its records, quarantine and sessions; and
a producer release its contract does not know yet, quarantined, then readmitted after a contract fix.
Last, an Avro pipeline, ``orders`` (``tidemark.demo_avro``): a schema evolution, and a record of a schema
the registry did not know, readmitted once it is registered."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from spark_jobs import db, ingest
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.planning import plan_backfill
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
from tidemark.demo_avro import avro_pipeline
from tidemark.pipeline_commands import sessions_table
from tidemark.producer import ProduceSpec, produce


def sink_fingerprint(spark, settings: Settings) -> dict[str, tuple]:  # SparkSession
    """Row count and an order-independent checksum of each sink table (Delta and PostgreSQL)."""
    fingerprint: dict[str, tuple] = {
        f"delta {name}": delta.fingerprint(spark, settings, name) for name in TABLE_SCHEMAS
    }
    with db.transaction(settings.pipeline_dsn) as cur:
        fingerprint["postgres sessions"] = postgres.sessions_summary(cur)
    return fingerprint


def fingerprint_table(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """Each sink's rows and checksum before and after the replay, and whether they are the same."""
    from tidemark.tables import aligned

    rows = [("sink", "rows", "checksum before the replay", "checksum after", "")]
    for name, (count, checksum) in after.items():
        was = before.get(name, (None, None))
        rows.append((name, f"{count:,}", str(was[1]), str(checksum), "same" if was == (count, checksum) else "CHANGED"))
    return aligned(rows, right={1})


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Produce, ingest, produce more, ingest again, replay a range with a backfill; show nothing changed."""
    from spark_jobs.offsets import latest_ranges
    from spark_jobs.spark import build_session

    run_id = f"demo{int(time.time())}-"
    spec = ProduceSpec(
        count=args.count,
        entities=50,
        skew=0.2,
        duplicate_rate=0.03,
        late_rate=0.05,
        malformed_rate=0.02,
        seed=1,
        id_prefix=run_id,
    )
    first = produce(settings, spec, partitions=3)
    print(
        f"1. produced {first.committed:,} events to {first.topic!r} "
        f"(duplicates {first.produced['duplicate']}, late {first.produced['late']}, "
        f"malformed {sum(n for k, n in first.produced.items() if k.startswith('malformed'))})"
    )
    # It reads what it produces (the count, half as many again, a second and an Avro pipeline's count
    # each) and replays the first run's ranges: about four times the count.
    spark = build_session(settings, "tidemark-demo", records=4 * args.count)
    print("2. scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, settings)).replace("\n", "\n   "))
    replay_ranges = latest_ranges(settings, settings.topic)
    second = produce(settings, ProduceSpec(**{**spec.__dict__, "seed": 2, "count": args.count // 2}), partitions=3)
    print(f"3. produced {second.committed:,} more events")
    print("4. scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, settings)).replace("\n", "\n   "))
    before = sink_fingerprint(spark, settings)
    plan = plan_backfill(settings, settings.topic, offsets={r.partition: (r.start, r.end) for r in replay_ranges})
    print(
        "5. backfill replay of the range of step 2:\n   " + ingest.describe(ingest.run_backfill(spark, settings, plan))
    )
    after = sink_fingerprint(spark, settings)
    print(
        f"6. sinks after the replay are {'IDENTICAL' if after == before else 'DIFFERENT'} (row counts and checksums):"
    )
    print("\n".join(f"   {line}" for line in fingerprint_table(before, after)))
    web = second_pipeline(spark, settings, run_id, args.count)
    readmit_after_a_fix(spark, web, run_id)
    orders_ok = avro_pipeline(spark, web, run_id, args.count)
    print(f"\nSessions of one entity: .venv/bin/tidemark sessions {run_id}entity-000000")
    print(
        f"  of web's: TIDEMARK_PIPELINES={web.pipelines_file} .venv/bin/tidemark sessions --pipeline web "
        f"{run_id}entity-000001"
    )
    print(
        f"Delta tables: {settings.lake_root}/{{events,duplicates,quarantine,sessions}}, "
        f"web's in {settings.lake_root}/web/"
    )
    print(f"PostgreSQL:   psql -h 127.0.0.1 -p {settings.postgres_port} -U tidemark tidemark -c 'TABLE ledger_batches'")
    print("Stop everything: make down")
    return 0 if after == before and orders_ok else 1


# The demo's second pipeline: Segment-style web events. Its sessions end after 6 s without a record, so
# records sent in waves a few seconds apart make several sessions per visitor within the demo.
WEB = {
    "name": "web",
    "contract": {
        "schema": {
            "type": "object",
            "required": ["messageId", "userId", "timestamp", "event"],
            "properties": {
                "messageId": {"type": "string", "minLength": 1},
                "userId": {"type": "string", "minLength": 1},
                "timestamp": {"type": "string", "format": "date-time"},
                "event": {"type": "string", "enum": ["Page Viewed", "Product Added", "Order Completed"]},
                "properties": {"type": "object", "properties": {"path": {"type": "string", "format": "uri"}}},
            },
        },
        "event_id": "/messageId",
        "entity_id": "/userId",
        "event_time": "/timestamp",
        "event_type": "/event",
        "properties": "/properties",
        "key_is_entity_id": False,
    },
    "sessions": {"gap_minutes": 0.1, "max_hours": 1},
}
WAVES, WAVE_SECONDS = 3, 8.0


def second_pipeline(spark, settings: Settings, run_id: str, count: int) -> Settings:  # SparkSession
    """Declare ``web`` beside the repository's pipelines (in a file of the demo's own), produce samples of its
    contract in waves, ingest and reconcile it, and show its quarantine and one visitor's sessions."""
    import yaml

    from spark_jobs import reconcile
    from spark_jobs.sinks.postgres import entity_sessions
    from spark_jobs.store import quarantine
    from tidemark.migrations import migrate_pipelines

    shipped = yaml.safe_load(settings.pipelines_file.read_text())["pipelines"]
    path = Path(settings.home) / "demo" / "pipelines.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {**WEB, "topic": f"{settings.topic}-web"}  # beside the events topic: a demo of another runs alone
    path.write_text(yaml.safe_dump({"pipelines": [*shipped, entry]}, sort_keys=False))
    declared = replace(settings, pipelines_file=path)
    migrate_pipelines(declared)
    web = declared.for_pipeline(declared.declared("web"))
    print(f"7. a second pipeline, 'web' (declared in {path}): its own contract, topic, tables, schema and lock")
    produced = 0
    for wave in range(WAVES):
        if wave:
            time.sleep(WAVE_SECONDS)  # longer than web's session gap: each wave opens new sessions
        spec = ProduceSpec(count=max(count // 10 // WAVES, 20), entities=5, duplicate_rate=0.03, late_rate=0.05,
                           malformed_rate=0.05, seed=10 + wave, id_prefix=run_id, contract=web.contract())  # fmt: skip
        produced += produce(web, spec, partitions=2).committed
    print(f"   produced {produced:,} Segment-style records in {WAVES} waves {WAVE_SECONDS:g} s apart")
    print("   scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, web)).replace("\n", "\n   "))
    report = reconcile.run(web, f"{run_id}web", lambda: spark)
    assert report is not None  # only a run without Spark at hand leaves the report to the Spark job
    print(f"   reconcile: {report.status.upper()}")
    late = late_record(spark, web)
    visitor = late["entity_id"] if late else f"{run_id}entity-000001"
    with db.transaction(web.pipeline_dsn) as cur:
        reasons = quarantine.totals(cur)
        rows = entity_sessions(cur, visitor)
    for total in reasons:
        print(f"   quarantined {total.records:,}: {total.reason}")
    assert web.session_rules is not None  # WEB cuts sessions
    print(f"   sessions of visitor {visitor} (a new one after {web.session_rules.gap.total_seconds():g} s idle):")
    print("\n".join(f"     {line}" for line in sessions_table(rows)))
    if late:
        joined = next(sid for sid, started, ended, _ in rows if started <= late["arrival_time"] <= ended)
        hours = (late["arrival_time"] - late["event_time"]).total_seconds() / 3600
        print(
            f"   a late record of this visitor: event time {late['event_time']:%Y-%m-%d %H:%M}, {hours:.0f} h before "
            f"it arrived; it joined {joined} by its arrival, so replaying it later gives the same session IDs"
        )
    return web


def late_record(spark, settings: Settings) -> dict | None:  # SparkSession
    """The first accepted record of ``settings``' pipeline whose event time is an hour or more before
    its arrival (the producer's late records), with UTC-aware times; None when there is none."""
    from datetime import UTC

    row = (
        spark.read.format("delta")
        .load(settings.table_path("events"))
        .where("event_time <= arrival_time - INTERVAL 1 HOUR")
        .orderBy("arrival_time", "partition", "offset")
        .select("entity_id", "event_time", "arrival_time")
        .first()
    )
    if row is None:
        return None
    # Spark hands back naive local times; PostgreSQL's sessions are aware (the session time zone is UTC).
    return {
        "entity_id": row["entity_id"],
        "event_time": row["event_time"].astimezone(UTC),
        "arrival_time": row["arrival_time"].astimezone(UTC),
    }


RELEASE_EVENT = "Checkout Started"  # what the web producer's next release sends, before web's contract knows it


def readmit_after_a_fix(spark, web: Settings, run_id: str) -> None:  # SparkSession
    """A producer release with an event type web's contract does not have: quarantined. The contract is
    fixed in the pipelines file; a dry run counts what would come back, and readmit brings it back."""
    import json
    from datetime import UTC, datetime

    import yaml
    from confluent_kafka import Producer

    from spark_jobs import readmit, reconcile

    producer = Producer(web.kafka_client_config())
    now = datetime.now(UTC).isoformat()
    for i in range(12):
        value = {"messageId": f"{run_id}release-{i}", "userId": f"{run_id}entity-{i % 4:06d}", "timestamp": now,
                 "event": RELEASE_EVENT, "properties": {"path": "https://shop.example/checkout"}}  # fmt: skip
        producer.produce(web.topic, key=b"web", value=json.dumps(value).encode())
    producer.flush(30)
    print(f"8. the web producer's new release sends {RELEASE_EVENT!r}, which web's contract does not know yet")
    print("   scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, web)).replace("\n", "\n   "))
    config = yaml.safe_load(web.pipelines_file.read_text())
    entry = next(p for p in config["pipelines"] if p["name"] == "web")
    entry["contract"]["schema"]["properties"]["event"]["enum"].append(RELEASE_EVENT)
    web.pipelines_file.write_text(yaml.safe_dump(config, sort_keys=False))
    print(f"   the contract is fixed ({RELEASE_EVENT!r} added to its enum in {web.pipelines_file.name}):")
    everything = readmit.Selection()
    print("   " + readmit.readmit(spark, web, everything, dry_run=True).describe().replace("\n", "\n   "))
    print("   " + readmit.readmit(spark, web, everything).describe().replace("\n", "\n   "))
    report = reconcile.run(web, f"{run_id}readmit", lambda: spark)
    assert report is not None  # only a run without Spark at hand leaves the report to the Spark job
    print(f"   reconcile after the readmit: {report.status.upper()}")
