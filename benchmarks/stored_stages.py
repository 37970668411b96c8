"""The stages that measure what a run costs against what is stored: a replay, an empty run, the PostgreSQL
sink's writes, and how a batch's cost grows with the stored events."""

from __future__ import annotations

import functools
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.context import BenchContext, Sink, ensure
from benchmarks.workloads import (
    EVENTS_PER_PREPOP_SESSION,
    TRIVIAL_APP,
    changed_rows,
    prepopulate,
    spark_submit,
)
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from spark_jobs.store.report import Report

from benchmarks.stages import ingested_sink

UPDATE_FRACTION = 0.10
COLD_EVENTS = 2_000


def stage_replay(ctx: BenchContext) -> None:
    """R: P1's range again as a backfill; Delta files rewritten and PostgreSQL rows changed must be 0."""
    from spark_jobs import db, ingest
    from spark_jobs.planning import plan_backfill
    from spark_jobs.sinks.delta import files_rewritten_since, table_versions
    from spark_jobs.store import ledger

    main = ctx.main
    s = ingested_sink(ctx).settings
    plan = plan_backfill(s, main.name, offsets={r.partition: (r.start, r.end) for r in main.ranges})
    m = ctx.record.measurement("R", "replay of P1's range (ingest.run_backfill)", main.committed)
    files_total, rows_total, summaries_equal = 0, 0, True
    per_rep = []
    for rep in range(ctx.options.replay_repeat):
        if rep:
            # Forget the previous replay so this one is a replay too, not a ledger no-op.
            with db.transaction(s.postgres_dsn) as cur:
                cur.execute(
                    "DELETE FROM ledger_batches WHERE pipeline = %s",
                    (ledger.pipeline_name(ledger.BACKFILL, main.name),),
                )
        versions = table_versions(ctx.spark, s)
        before = _postgres_sessions(s)
        result = ctx.record.measure(m, lambda: ingest.run_backfill(ctx.spark, s, plan))
        ensure(not result.skipped and result.read == main.committed, f"the replay did not re-read: {result}")
        files = files_rewritten_since(ctx.spark, s, versions)
        rows = result.sessions_written + result.sessions_deleted
        same = _postgres_sessions(s) == before
        files_total += files
        rows_total += rows
        summaries_equal &= same
        per_rep.append({"delta_files_rewritten": files, "postgres_rows_changed": rows, "postgres_unchanged": same})
        ctx.record.progress(f"R replay {rep + 1}: {files} Delta files rewritten, {rows} PostgreSQL rows changed")
    m.details = {
        "delta_files_rewritten": files_total,
        "postgres_rows_changed": rows_total if summaries_equal else max(rows_total, 1),
        "postgres_fingerprint_unchanged": summaries_equal,
        "repetitions": per_rep,
    }


def _postgres_sessions(settings: Settings) -> tuple[int, int]:
    """(rows, checksum) of the sink's PostgreSQL ``sessions``."""
    from spark_jobs import db
    from spark_jobs.sinks.postgres import sessions_summary

    with db.transaction(settings.postgres_dsn) as cur:
        return sessions_summary(cur)


def stage_empty(ctx: BenchContext) -> None:
    """E0 / E1 / E2, each a spark-submit of its own (a cold JVM, as a DAG's run is): a trivial job
    that starts a SparkSession and stops, a scheduled run with nothing new to read, and a scheduled
    run of :data:`COLD_EVENTS` new events into a lake that holds earlier ones."""
    from spark_jobs import ingest
    from spark_jobs.store.runs import unread_records

    def scheduled_run(settings: Settings) -> str:
        """A scheduled run submitted as a DAG's task submits it: for the records it will read."""
        return spark_submit(settings, ingest_app, ["scheduled"], records=unread_records(settings, settings.topic))

    settings = ingested_sink(ctx).settings
    app = ctx.work / "trivial_app.py"
    app.parent.mkdir(parents=True, exist_ok=True)
    app.write_text(TRIVIAL_APP)
    ingest_app = Path(ingest.__file__)
    o = ctx.options
    topic = f"bench-{ctx.run_id}-cold"
    cold = ctx.new_sink("cold", topic)
    ctx.produce(topic, COLD_EVENTS, o.entities, f"{ctx.run_id}-c0-", o.seed + 2)
    scheduled_run(cold.settings)  # the lake and its first events (not measured)
    e0 = ctx.record.measurement("E0", "trivial job (spark-submit)", 0)
    e0a = ctx.record.measurement("E0A", "trivial job, classes from tidemark's class archive", 0)
    e1 = ctx.record.measurement("E1", "empty scheduled run (spark-submit ingest.py)", 0)
    e2 = ctx.record.measurement("E2", "cold scheduled run of new events (spark-submit ingest.py)", COLD_EVENTS)
    plain = replace(settings, class_archive=False)  # Spark's own start: every class from its jar
    for rep in range(o.repeat):
        for measurement, submitted in ((e0, plain), (e0a, settings)):
            out = ctx.record.measure(measurement, functools.partial(spark_submit, submitted, app, []))
            ensure(out.strip().endswith("1"), f"the trivial job printed {out!r}")
        out = ctx.record.measure(e1, lambda: scheduled_run(settings))
        ensure("no new records" in out, f"the empty scheduled run processed something: {out!r}")
        ctx.produce(topic, COLD_EVENTS, o.entities, f"{ctx.run_id}-c{rep + 1}-", o.seed + 3 + rep)
        out = ctx.record.measure(e2, lambda: scheduled_run(cold.settings))
        ensure(f"read {COLD_EVENTS:,} " in out, f"the cold scheduled run did not read {COLD_EVENTS:,} records: {out!r}")
    ctx.discard(cold)


def stage_pg(ctx: BenchContext) -> None:
    """B3 against P2: COPY of the main sink's sessions into an empty sessions-like table, then the upsert
    path with the same rows: cold insert, a replay where nothing changes, and 10% of rows changed."""
    from spark_jobs import db
    from spark_jobs.contract import SESSION_COLUMNS
    from spark_jobs.sinks.postgres import copy_rows, rows_as_text, upsert_sessions

    sessions = ctx.spark.read.format("delta").load(ingested_sink(ctx).settings.table_path("sessions"))
    rows = rows_as_text(sessions, SESSION_COLUMNS)
    anchors = rows_as_text(
        sessions.groupBy("entity_id").agg({"started_at": "min"}).toDF("entity_id", "anchor"),
        ("entity_id", "anchor"),
    )
    changed = changed_rows(rows, UPDATE_FRACTION)
    n_changed = sum(1 for a, b in zip(rows, changed, strict=True) if a != b)
    n = len(rows)
    ensure(n > 0, "P1 produced no sessions to benchmark PostgreSQL with")
    record = ctx.record
    b3 = record.measurement("B3", "COPY into an empty sessions-like table", n, "rows")
    p2c = record.measurement("P2c", "upsert_sessions, cold insert", n, "rows")
    p2r = record.measurement("P2r", "upsert_sessions, replay (all conflict, none change)", n, "rows")
    p2u = record.measurement("P2u", f"upsert_sessions, {UPDATE_FRACTION:.0%} of rows changed", n, "rows")
    for m in (b3, p2c, p2r, p2u):
        m.details = {"anchors": len(anchors)}
    p2u.details["rows_changed"] = n_changed
    conn = db.connect(ctx.services.dsn(ctx.services.create_database("pg")))

    def execute(sql: str) -> None:
        with conn, conn.cursor() as cur:
            cur.execute(sql)

    def upsert(batch: list[tuple]) -> tuple[int, int]:
        with conn, conn.cursor() as cur:
            return upsert_sessions(cur, batch, anchors)

    def copy() -> None:
        with conn, conn.cursor() as cur:
            copy_rows(cur, "sessions_copy", SESSION_COLUMNS, rows)

    def written(r: tuple[int, int]) -> str:
        return f"written {r[0]:,}, deleted {r[1]:,}"

    try:
        execute("CREATE TABLE sessions_copy (LIKE sessions INCLUDING ALL)")
        for _ in range(ctx.options.pg_repeat):
            execute("TRUNCATE sessions_copy")
            record.measure(b3, copy)
            execute("TRUNCATE sessions")
            done = record.measure(p2c, lambda: upsert(rows), written)
            ensure(done == (n, 0), f"the cold upsert wrote {done}, expected ({n}, 0)")
            done = record.measure(p2r, lambda: upsert(rows), written)
            ensure(done == (0, 0), f"the replay upsert wrote {done}, expected (0, 0)")
            done = record.measure(p2u, lambda: upsert(changed), written)
            ensure(done == (n_changed, 0), f"the update upsert wrote {done}, expected ({n_changed}, 0)")
    finally:
        conn.close()


def stage_growth(ctx: BenchContext) -> None:
    """G1 / G10: ``--growth-events`` new events ingested into sinks already holding N and 10xN sessions;
    RC1 / RC10: a reconcile of each right after (writers blocked: how long it held the lake lock)."""
    from spark_jobs import ingest

    o = ctx.options
    entities = max(1, o.growth_events // EVENTS_PER_PREPOP_SESSION)
    prefix = f"{ctx.run_id}-g-"
    templates = {scale: _growth_template(ctx, scale, entities, prefix) for scale in (1, 10)}
    ms = {}
    for scale, (_, _, sessions) in templates.items():
        name = "N" if scale == 1 else "10xN"
        ms[scale] = ctx.record.measurement(
            f"G{scale}", f"{o.growth_events:,} new events, sink with {name}={sessions:,} sessions", o.growth_events
        )
    rc = {
        scale: ctx.record.measurement(
            f"RC{scale}", f"reconcile after G{scale}: its new ranges and their entities' sessions", o.growth_events
        )
        for scale in templates
    }
    for rep in range(o.repeat):
        for scale, (lake, database, stored) in templates.items():
            topic = f"bench-{ctx.run_id}-g{scale}-{rep}"
            report = ctx.produce(topic, o.growth_events, entities, prefix, o.seed + 1)
            ensure(report.committed == o.growth_events, "growth events were not all produced")
            sink = ctx.new_sink(f"g{scale}_{rep}", topic, template=database, lake_from=lake)
            results = ctx.record.measure(
                ms[scale],
                functools.partial(ingest.run_scheduled, ctx.spark, sink.settings),
                lambda rs: f"{sum(r.sessions_written for r in rs):,} sessions written",
            )
            read = sum(r.read for r in results)
            ensure(read == o.growth_events, f"the growth run read {read} of {o.growth_events}")
            ms[scale].details = {
                "stored_sessions": stored,
                "stored_events": stored * EVENTS_PER_PREPOP_SESSION,
                "entities": entities,
                "sessions_written": sum(r.sessions_written for r in results),
                "sessions_deleted": sum(r.sessions_deleted for r in results),
            }
            # RC: reconcile the sink after that ingest (its new ranges, the sessions of their entities).
            checked = ctx.record.measure(
                rc[scale],
                functools.partial(_reconcile, ctx, sink, f"bench-rc{scale}-{rep}"),
                lambda rep_: f"{rep_.status}, lake lock held {rep_.snapshot_seconds:.2f} s",
            )
            ensure(checked.ok, f"reconcile of the growth sink found something:\n{checked.summary()}")
            rc[scale].details = {
                "lock_seconds": rc[scale].details.get("lock_seconds", []) + [round(checked.snapshot_seconds, 3)],
                "ranges_checked": len(checked.checks),
                "entities_checked": checked.entities_checked,
            }
            ctx.discard(sink)


def _reconcile(ctx: BenchContext, sink: Sink, run_id: str) -> Report:
    """A reconcile run of ``sink`` with the run's Spark session."""
    from spark_jobs import reconcile

    report = reconcile.run(sink.settings, run_id, lambda: ctx.spark)
    assert report is not None  # only a run without Spark at hand leaves the report to the Spark job
    return report


def _growth_template(ctx: BenchContext, scale: int, entities: int, prefix: str) -> tuple[Path, str, int]:
    """A lake and a database holding ``scale`` x N sessions of ``entities`` (not measured)."""
    o = ctx.options
    per_entity = max(1, round(o.growth_sessions * scale / entities))
    started = time.perf_counter()
    sink = ctx.new_sink(f"growth{scale}_template", f"bench-{ctx.run_id}-prepop")
    sessions = prepopulate(ctx.spark, sink.settings, entities, per_entity, prefix, o.partitions)
    ctx.record.progress(
        f"growth sink {scale}xN: {sessions:,} sessions, {sessions * EVENTS_PER_PREPOP_SESSION:,} events "
        f"written directly in {time.perf_counter() - started:.1f} s (not measured)"
    )
    return Path(sink.settings.lake_root), sink.database, sessions
