"""``tidemark demo``: produce, ingest, produce more, ingest again, replay a range; show nothing changed."""

from __future__ import annotations

import argparse
import time

from spark_jobs import db, ingest
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.planning import plan_backfill
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
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
    spark = build_session(settings, "tidemark-demo")
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
    print(f"\nSessions of one entity: .venv/bin/tidemark sessions {run_id}entity-000000")
    print(f"Delta tables: {settings.lake_root}/{{events,duplicates,quarantine,sessions}}")
    print(f"PostgreSQL:   psql -h 127.0.0.1 -p {settings.postgres_port} -U tidemark tidemark -c 'TABLE ledger_batches'")
    print("Stop everything: make down")
    return 0 if after == before else 1
